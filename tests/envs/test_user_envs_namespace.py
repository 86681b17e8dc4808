"""A user's own ``envs/`` folder extends verlog's ``envs`` package (issue 25): ``--import envs.my_env`` finds its
``my_env.py`` while ``import envs`` stays verlog's, in the command (``python -m verlog``, the ``verlog`` script), in
env-pool workers and in ``envs.import_modules``; an import that fails names the real cause."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

import envs
from envs.errors import EnvImportError
from envs.registry import IMPORTS_ENV_VAR

MY_ENV = '''
"""A user's env: mine/short, the delayed-reward toy game in 2 turns."""
import envs
from envs.toy import DelayedRewardEnv


def make_short(**kwargs):
    return DelayedRewardEnv(length=2, **kwargs)


envs.register("mine/short", make_short)
'''


def _user_folder(root: Path, *, init: bool = False) -> Path:
    """``root`` with ``envs/my_env.py`` (and an ``envs/__init__.py`` that must never run, if ``init``)."""
    (root / "envs").mkdir(parents=True)
    (root / "envs" / "my_env.py").write_text(textwrap.dedent(MY_ENV))
    if init:
        (root / "envs" / "__init__.py").write_text("raise RuntimeError('the user folder envs/__init__.py ran')\n")
    return root


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in (IMPORTS_ENV_VAR, "PYTHONPATH")}
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("init", [False, True], ids=["folder", "with-init"])
def test_python_m_verlog_envs_imports_a_module_of_the_users_envs_folder(tmp_path: Path, init: bool) -> None:
    # python -m puts the current folder first on sys.path: its envs/ must not stand in for verlog's package
    folder = _user_folder(tmp_path, init=init)
    proc = _run([sys.executable, "-m", "verlog", "envs", "--import", "envs.my_env"], folder)
    assert proc.returncode == 0, proc.stderr
    listed = proc.stdout.split()
    assert "mine/short" in listed and "toy/delayed" in listed and "babyai/goto" in listed


def test_the_verlog_command_imports_it_too(tmp_path: Path) -> None:
    # the console script does not have the current folder on sys.path: --import appends it
    script = Path(sys.executable).with_name("verlog")
    if not script.is_file():
        pytest.skip(f"no verlog script next to {sys.executable}")
    proc = _run([str(script), "envs", "--import", "envs.my_env", "--prefix", "mine/"], _user_folder(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["mine/short"]


def test_a_module_that_raises_on_import_is_named_with_its_exception(tmp_path: Path) -> None:
    folder = _user_folder(tmp_path)
    (folder / "envs" / "broken.py").write_text("x = 1\nraise RuntimeError('boom')\n")
    proc = _run([sys.executable, "-m", "verlog", "envs", "--import", "envs.broken"], folder)
    assert proc.returncode == 2
    broken = folder / "envs" / "broken.py"
    assert f"--import: importing 'envs.broken' failed: RuntimeError: boom (at {broken}:2)" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_spawned_pool_workers_build_an_env_of_the_users_envs_folder(tmp_path: Path) -> None:
    # a worker starts with the parent's sys.path, which holds the user's folder; a script from elsewhere, as the
    # verlog script is (its own folder first on the path)
    folder = _user_folder(tmp_path / "user")
    script = tmp_path / "scripts" / "run_pool.py"
    script.parent.mkdir()
    script.write_text(
        textwrap.dedent(
            """
            if __name__ == "__main__":
                import envs
                from envs.pool import EnvPool

                envs.import_modules(["envs.my_env"])
                with EnvPool("mine/short", num_envs=2, num_workers=1) as pool:
                    pool.reset(seeds=0)
                    results = pool.step(["go forward", "go forward"])
                    results = pool.step(["go forward", "turn left"])
                print([r[1] for r in results], [r[2] for r in results])
            """
        )
    )
    proc = _run([sys.executable, str(script)], folder)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[1.0, 0.5] [True, True]"


# ------------------------------------------------------------------------------------- in this process
@pytest.fixture
def user_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The current folder, with envs/my_env.py; sys.path, envs.__path__ and the recorded imports restored after."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(envs, "__path__", list(envs.__path__))
    monkeypatch.setenv(IMPORTS_ENV_VAR, "")
    yield _user_folder(tmp_path)
    for name in [m for m in sys.modules if m.startswith("envs.") and m.split(".")[1] in ("my_env", "uses_helpers")]:
        del sys.modules[name]


def test_import_modules_takes_in_the_users_envs_folder(user_folder: Path) -> None:
    (module,) = envs.import_modules(["envs.my_env"])
    assert module.__file__ == str(user_folder / "envs" / "my_env.py")
    assert envs.__path__[0] == str(Path(envs.__file__).parent)  # verlog's own modules come first
    assert str(user_folder / "envs") in envs.__path__
    assert envs.make("mine/short").reset(seed=0)[0].text
    assert os.environ[IMPORTS_ENV_VAR] == "envs.my_env"


def test_errors_name_the_folders_searched_and_the_real_cause(user_folder: Path) -> None:
    mine = str(user_folder / "envs")
    with pytest.raises(EnvImportError) as missing:
        envs.import_modules(["envs.not_there"])
    message = str(missing.value)
    assert message.startswith(
        "no module named 'envs.not_there': no module not_there (not_there.py or not_there/) in any envs/ folder on "
        f"the path (searched: {Path(envs.__file__).parent}, "  # verlog's own first, then every envs/ on the path
    )
    assert f", {mine}" in message and message.endswith(
        "; run from the folder that holds envs/not_there.py, or add that folder to PYTHONPATH"
    )
    (user_folder / "envs" / "uses_helpers.py").write_text("import envs.helpers_xyz\n")
    with pytest.raises(
        EnvImportError,
        match=r"it imports 'envs\.helpers_xyz', which is not found \(at .*uses_helpers\.py:1\): no module helpers_xyz",
    ):
        envs.import_modules(["envs.uses_helpers"])
    # a module of the user's under a name verlog's own envs take: not silently verlog's
    (user_folder / "envs" / "toy.py").write_text("x = 1\n")
    with pytest.raises(EnvImportError, match=r"'envs\.toy' is .*envs/toy\.py, which comes first on the path, not your"):
        envs.import_modules(["envs.toy"])
    assert os.environ[IMPORTS_ENV_VAR] == ""
