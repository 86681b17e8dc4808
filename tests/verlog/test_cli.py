"""The installed ``verlog`` console command and README's two commands."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

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


# ------------------------------------------------------------------------------------------------ bad inputs (issue 15)
def test_envs_prefix_without_a_match_is_an_error(capsys) -> None:
    assert main(["envs", "--prefix", "nope"]) == 2
    err = capsys.readouterr().err
    assert "verlog envs: error: no env id starts with 'nope'; the families are babaisai/, babyai/" in err
    assert "--import MODULE" in err


@pytest.mark.parametrize(
    "args",
    [
        ["envs"],
        ["play", "babyai/goto"],
        ["demos", "babyai/goto", "--episodes", "1", "--out", "unused"],
        ["eval", "--model", "unused", "--tasks", "babyai/goto", "--out", "unused"],
        ["tiny-model", "unused"],
        ["train", "--dry-run"],
    ],
    ids=lambda args: args[0],
)
def test_every_env_command_takes_import_and_names_a_missing_module(args, capsys, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main([*args, "--import", "no_such_mod"]) == 2
    err = capsys.readouterr().err
    assert f"verlog {args[0]}: error: --import: no module named 'no_such_mod': there is no no_such_mod.py" in err
    assert "Traceback" not in err and not (tmp_path / "unused").exists()


def test_tiny_model_refuses_a_non_empty_empty_or_file_target(tmp_path: Path, capsys) -> None:
    target = tmp_path / "m"
    assert main(["tiny-model", str(target)]) == 0
    before = (target / "config.json").stat().st_mtime_ns
    assert main(["tiny-model", str(target), "--hidden-size", "96", "--num-heads", "3"]) == 2
    err = capsys.readouterr().err
    assert f"OUT '{target}' is not empty" in err and "pass --force" in err
    assert (target / "config.json").stat().st_mtime_ns == before  # untouched
    assert main(["tiny-model", ""]) == 2 and "OUT is empty" in capsys.readouterr().err
    (tmp_path / "f").write_text("x")
    assert main(["tiny-model", str(tmp_path / "f")]) == 2 and "is a file" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:  # argparse's type check: exit 2 as well
        main(["tiny-model", str(target), "--num-layers", "0"])
    assert exit_info.value.code == 2
    assert "argument --num-layers: '0' is not an integer >= 1" in capsys.readouterr().err
    assert main(["tiny-model", str(target), "--hidden-size", "96", "--num-heads", "3", "--force"]) == 0
    from transformers import AutoConfig

    assert AutoConfig.from_pretrained(target).hidden_size == 96


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["play", "babyai/goto", "--seed", "-1"], "argument --seed: -1 is not a seed"),
        (["eval", "--model", "m", "--tasks", "babyai/goto", "--out", "o", "--seeds", "1,x"], "'x' in '1,x' is not"),
        (["demos", "babyai/goto", "--episodes", "1", "--out", "f"], "--out 'f' is a file, not a folder"),
        (["envs", "--prefix", "nope"], "no env id starts with 'nope'"),
    ],
    ids=["play", "eval", "demos", "envs"],
)
def test_console_script_bad_inputs_exit_2_without_traceback(args, message, tmp_path: Path) -> None:
    (tmp_path / "f").write_text("a file")
    proc = subprocess.run([str(VERLOG_BIN), *args], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and f"verlog {args[0]}: error: " in proc.stderr
    assert "Traceback" not in proc.stderr
