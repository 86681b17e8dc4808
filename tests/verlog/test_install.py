"""A non-editable install works away from the source tree: its configs ship inside the package (issues 14, 25).

The package alone is built and installed (``pip install --no-deps --target``, a copy of the sources so the checkout
stays clean); its dependencies come from the test's own environment. Then, from an unrelated folder, with the
install first on the path: where its configs are (site-packages/verlog/configs, from the repository's configs/),
``verlog envs``, ``verlog train --dry-run``, and a config folder of one's own that adds an env config to the built-in
groups. About 20-60 s.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _run(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{args}: {proc.stderr[-3000:]}"
    return proc


@pytest.mark.slow
def test_non_editable_install_finds_its_configs(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for name in ("setup.py", "README.md"):
        shutil.copy(REPO / name, src / name)
    for folder in ("verlog", "envs", "configs"):  # configs/: the top level of the repository (setup.py maps it)
        shutil.copytree(REPO / folder, src / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    site = tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-compile"]
    _run([*pip, "--disable-pip-version-check", "--target", str(site), str(src)], tmp_path, dict(os.environ))
    shutil.rmtree(src)  # nothing may come from the sources any more
    assert (site / "verlog" / "configs" / "train.yaml").is_file()
    assert (site / "verlog" / "configs" / "env" / "babyai_goto.yaml").is_file()

    elsewhere = tmp_path / "elsewhere"
    own = elsewhere / "my_configs" / "env"
    own.mkdir(parents=True)
    (own / "mine.yaml").write_text("name: mine\nid: toy/delayed\nkwargs:\n  length: 3\n  parse_mode: lenient\n")
    env = {**os.environ, "PYTHONPATH": str(site), "PYTHONNOUSERSITE": "1"}
    where = _run(
        [sys.executable, "-c", "import verlog, envs; print(verlog.__file__); print(envs.__file__)"], elsewhere, env
    )
    assert all(Path(line).is_relative_to(site) for line in where.stdout.split()), where.stdout
    found = [sys.executable, "-c", "from verlog.config.compose import DEFAULT_CONFIG_DIR as d; print(d)"]
    assert Path(_run(found, elsewhere, env).stdout.strip()) == site / "verlog" / "configs"

    listed = _run([sys.executable, "-m", "verlog", "envs"], elsewhere, env).stdout
    assert "babyai/goto" in listed and "toy/delayed" in listed
    dry = _run([sys.executable, "-m", "verlog", "train", "--dry-run", "iterations=2"], elsewhere, env).stdout
    assert "# verlog train --dry-run: nothing was started" in dry and "id: babyai/goto" in dry
    mine = [sys.executable, "-m", "verlog.train", "--config-dir", "my_configs", "env=mine", "--dry-run"]
    dry = _run(mine, elsewhere, env).stdout
    assert "id: toy/delayed" in dry and "parse_mode: lenient" in dry
    assert "trainer.device=cpu" in dry and "name: tiny" in dry  # verlog's hardware and model groups still apply
    assert sorted(p.name for p in elsewhere.iterdir()) == ["my_configs"]  # a dry run writes nothing
