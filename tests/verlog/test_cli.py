"""The installed ``verlog`` console command and README's two commands."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import verlog
from verlog.cli import SUBCOMMANDS, main

ROOT = Path(__file__).resolve().parents[2]
VERLOG_BIN = Path(sys.executable).parent / "verlog"


def test_version_from_installed_entry_point() -> None:
    assert VERLOG_BIN.exists(), f"{VERLOG_BIN} missing: install the project (make install)"
    out = subprocess.run([str(VERLOG_BIN), "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == f"verlog {verlog.__version__}"


def test_help_lists_every_subcommand() -> None:
    out = subprocess.run([str(VERLOG_BIN), "--help"], capture_output=True, text=True, check=True)
    for name in SUBCOMMANDS:
        assert name in out.stdout


def test_python_dash_m_is_the_same_command() -> None:
    out = subprocess.run([sys.executable, "-m", "verlog", "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == f"verlog {verlog.__version__}"


def test_unknown_subcommand_fails_with_usage(capsys) -> None:
    try:
        main(["no-such-command"])
    except SystemExit as exc:
        assert exc.code == 2
    assert "invalid choice" in capsys.readouterr().err


def _readme_commands() -> list[str]:
    """The commands in README's first shell block (the quick start)."""
    text = (ROOT / "README.md").read_text()
    block = re.search(r"```(?:bash|sh)\n(.*?)```", text, re.S)
    assert block, "README.md needs a ```bash block with the quick-start commands"
    return [line.strip() for line in block.group(1).splitlines() if line.strip() and not line.startswith("#")]


def test_readme_two_commands_are_make_run_and_make_test() -> None:
    commands = _readme_commands()
    assert commands == ["make run", "make test"], commands
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^run: ", makefile, re.M) and re.search(r"^test: ", makefile, re.M)
    assert "recipes/cpu/quickstart.sh" in makefile
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^\s*make test\b", ci, re.M), ".ci/run must call README's test command"


def test_envs_subcommand_lists_the_builtin_ids(capsys) -> None:
    assert main(["envs"]) == 0
    ids = capsys.readouterr().out.split()
    for env_id in ("babyai/goto", "babyai/pick_up_seq_go_to", "crafter/default", "babaisai/two_room-goto_win"):
        assert env_id in ids
    assert main(["envs", "--prefix", "crafter/"]) == 0
    assert capsys.readouterr().out.split() == ["crafter/default"]


def test_tiny_model_subcommand_writes_a_loadable_folder(tmp_path: Path) -> None:
    from transformers import AutoConfig

    assert main(["tiny-model", str(tmp_path / "m"), "--hidden-size", "96", "--num-heads", "3"]) == 0
    config = AutoConfig.from_pretrained(tmp_path / "m")
    assert (config.hidden_size, config.num_attention_heads) == (96, 3)
