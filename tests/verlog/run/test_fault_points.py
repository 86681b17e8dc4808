"""verlog.run.fault_points: nothing happens without VERLOG_FAULT_HOOK; with it, the named function is called at each
point (in a real process, as `verlog train` runs it); a bad hook name is a named error."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from verlog.run.fault_points import HOOK_ENV, FaultHookError, _hook, reached


def test_without_a_hook_a_point_does_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(HOOK_ENV, raising=False)
    reached("checkpoint", 4, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_the_hook_named_is_called_with_the_point(tmp_path: Path) -> None:
    (tmp_path / "my_hook.py").write_text(
        textwrap.dedent(
            """
            def seen(where, step, run_folder):
                (run_folder / f"{where}-{step}").write_text("")
            """
        )
    )
    script = "from verlog.run.fault_points import reached\nimport sys\nreached('rollout', 3, sys.argv[1])\n"
    env = {**os.environ, HOOK_ENV: "my_hook:seen", "PYTHONPATH": str(tmp_path)}
    run = tmp_path / "run"
    run.mkdir()
    subprocess.run([sys.executable, "-c", script, str(run)], env=env, check=True)
    assert [p.name for p in run.iterdir()] == ["rollout-3"]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no_such_hook_module:f", "No module named 'no_such_hook_module'"),
        ("os:no_such_function", "has no attribute 'no_such_function'"),
        ("os", "names no function"),
        ("os:sep", "names no function"),
    ],
)
def test_a_bad_hook_is_a_named_error(spec: str, message: str) -> None:
    with pytest.raises(FaultHookError, match=message):
        _hook(spec)
