"""`verlog play`: the interactive loop fed from stdin, on real envs."""

from __future__ import annotations

import argparse
import io
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import ClassVar

import pytest

import envs
from verlog import cli
from verlog.commands import play
from verlog.commands.common import UsageError

TESTS_ENVS = Path(__file__).resolve().parents[1] / "envs"
sys.path.insert(0, str(TESTS_ENVS))
import faulty_envs  # noqa: E402  (the test envs live beside the env tests)

faulty_envs.register_test_envs()


def _play(env_id: str, lines: list[str], **kwargs) -> str:
    out = io.StringIO()
    code = play.play(envs.make(env_id), io.StringIO("".join(f"{x}\n" for x in lines)), out, **kwargs)
    assert code == 0
    return out.getvalue()


def test_instruction_observation_actions_by_name_and_number() -> None:
    out = _play("test/frozen_lake", ["right", "2", "1", ":q"], seed=0)
    assert out.startswith("=== Instruction ===\nCross the frozen lake")
    assert out.count("=== Instruction ===") == 1
    assert "--- Episode 1, step 0 ---\nYou stand on row 0, column 0 of the frozen lake." in out
    assert "-> right | reward 0 | terminated False | truncated False | progression 0.00" in out
    assert "--- Episode 1, step 2 ---\nYou stand on row 0, column 2 of the frozen lake." in out  # "2" is right
    assert "--- Episode 1, step 3 ---\nYou stand on row 1, column 2 of the frozen lake." in out  # "1" is down
    assert out.rstrip().endswith("bye")


def test_episode_end_is_summarised_and_next_episode_starts() -> None:
    path = ["right", "right", "down", "down", "down", "right"]
    out = _play("test/frozen_lake", [*path, "down", "right", ":q"], seed=0)
    assert "-> right | reward 1 | terminated True | truncated False | progression 1.00" in out
    assert "=== Episode 1 over after 6 steps: success, return 1 ===" in out
    assert "--- Episode 2, step 0 ---\nYou stand on row 0, column 0" in out
    assert "=== Episode 2 over after 2 steps: no success, return 0 ===" in out  # (1, 1) is a hole
    assert "--- Episode 3, step 0 ---" in out


def test_help_info_invalid_and_commands() -> None:
    out = _play("test/frozen_lake", [":help", "fly away", ":info", "9", ":bogus", "", ":reset", ":q"], seed=0)
    assert "Actions (type the name or its number):\n  0: left\n  1: down\n  2: right\n  3: up" in out
    assert "-> left (not a valid action: executed 'left') | reward 0" in out
    assert "  raw_action: 'fly away'" in out and "  action_valid: False" in out
    assert "no action number 9: there are 4 (0-3)" in out
    assert "unknown command ':bogus'" in out
    assert "(new episode)" in out


def test_typed_help_lists_the_actions_and_is_not_played(capsys: pytest.CaptureFixture, monkeypatch) -> None:
    """issue 37: `help` typed as a person would was sent to the env as a move (BabyAI executed 'go forward' for it);
    `help` and `?` print the actions and the commands, and the episode stays at step 0."""
    monkeypatch.setattr(sys, "stdin", io.StringIO("help\n?\n:q\n"))
    assert cli.main(["play", "babyai/goto", "--seed", "0"]) == 0
    out = capsys.readouterr().out
    listing = "Actions (type the name or its number):\n  0: turn left\n  1: turn right\n  2: go forward"
    assert out.count(listing) == 2 and out.count("Commands: :help  :info  :reset  :q (quit)") == 2
    assert "->" not in out and "step 1" not in out  # nothing was played
    out = _play("test/frozen_lake", ["help", "right", ":q"], seed=0)  # and the game goes on after it
    assert "Actions (type the name or its number):" in out and "-> right | reward 0" in out
    assert "not a valid action" not in out


def test_every_id_verlog_envs_lists_plays_as_listed(capsys: pytest.CaptureFixture, monkeypatch) -> None:
    """issue 37: `verlog envs` listed `multitask` and `slow`, which no command can build without keyword arguments.
    Every id it lists now resolves, builds and resets as `verlog play ID` builds it, and is one task of `verlog eval
    --tasks ID`; the wrappers are named apart (stderr), each with what it needs, and play with it."""
    from envs.registry import NEEDS_ARGUMENTS
    from verlog.commands.common import build_env, check_env_id
    from verlog.eval.protocol import expand_tasks

    assert cli.main(["envs"]) == 0
    captured = capsys.readouterr()
    listed = captured.out.split()
    assert len(listed) > 40 and "babyai/goto" in listed and "crafter/default" in listed
    assert not set(NEEDS_ARGUMENTS) & set(listed)
    for env_id in listed:
        check_env_id(env_id)
        env = build_env(env_id, {}, "--env-arg")  # what `verlog play ID` does before the first prompt
        env.close()
        assert expand_tasks([env_id]) == [env_id], env_id
    assert captured.err.startswith("verlog envs: not listed above, as they build only with keyword arguments: ")
    assert "slow needs inner, the env it slows down: verlog play slow --env-arg inner=babyai/goto" in captured.err
    assert captured.err.count("\n") == 1
    monkeypatch.setattr(sys, "stdin", io.StringIO(":q\n"))
    assert cli.main(["play", "slow", "--env-arg", "inner=babyai/goto", "--env-arg", "step_delay_s=0"]) == 0
    monkeypatch.setattr(sys, "stdin", io.StringIO(":q\n"))
    assert cli.main(["play", "multitask", "--env-arg", "tasks={'goto': 'babyai/goto'}"]) == 0
    assert capsys.readouterr().out.count("=== Instruction ===") == 2


def test_record_into_a_folder_that_cannot_be_written_is_refused(tmp_path: Path, capsys, monkeypatch) -> None:
    """issue 37: `--record` into an unwritable folder ended in a traceback (PermissionError) after the env was
    built; it is one line naming the folder and the fix, exit code 2, before anything is built or written."""
    import os

    monkeypatch.chdir(tmp_path)
    (tmp_path / "a_file").write_text("x")
    targets = {"a_file/rec": f"{tmp_path / 'a_file'} is a file, not a folder"}
    if os.geteuid() != 0:  # a folder without write permission (root may write into any folder of a file system)
        (tmp_path / "read_only").mkdir(mode=0o555)
        targets["read_only/rec"] = f"{tmp_path / 'read_only'} is not writable"
    elif Path("/sys").is_dir():  # for root: sysfs, where mkdir is not permitted
        targets["/sys/verlog-play-record"] = "(Operation not permitted: /sys/verlog-play-record)"
    before = sorted(p.name for p in tmp_path.iterdir())
    for target, why in targets.items():
        assert cli.main(["play", "babyai/goto", "--record", target]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"verlog play: error: --record '{target}' cannot be written"), err
        assert why in err
        assert err.endswith("; give a folder you can write to (tapes go to DIR/tapes/play.jsonl)\n")
        assert err.count("\n") == 1 and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_end_of_input_and_episode_limit_stop_the_loop() -> None:
    assert _play("test/corridor", ["right"], seed=1).rstrip().endswith("(end of input) bye")
    out = _play("test/corridor", ["right"] * 30, seed=1, episodes=1)
    assert out.count("over after") == 1 and "--- Episode 2" not in out


def test_run_parses_arguments_and_env_args(capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    parser = argparse.ArgumentParser()
    play.add_arguments(parser)
    monkeypatch.setattr(sys, "stdin", io.StringIO("left\n:q\n"))
    args = parser.parse_args(["test/corridor", "--seed", "3", "--env-arg", "length=3", "--env-arg", "max_steps=1"])
    assert play.run(args) == 0
    out = capsys.readouterr().out
    assert "the goal is cell 2." in out and "truncated True" in out
    assert play.parse_env_args(["a=1", "b=lenient", "c=[1, 2]"]) == {"a": 1, "b": "lenient", "c": [1, 2]}
    with pytest.raises(UsageError, match="KEY=VALUE"):
        play.parse_env_args(["oops"])
    assert cli.main(["play", "test/coridor"]) == 2
    assert "Did you mean test/corridor" in capsys.readouterr().err


def test_registered_as_a_cli_subcommand() -> None:
    assert cli.SUBCOMMANDS["play"][0] == "verlog.commands.play"


def _babyai_goto() -> bool:
    try:
        return "babyai/goto" in envs.list_envs()
    except Exception:
        return False


@pytest.mark.skipif(not _babyai_goto(), reason="babyai/goto is not registered yet")
def test_verlog_play_babyai_in_a_subprocess() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "verlog", "play", "babyai/goto", "--seed", "0"],
        input=":help\ngo forward\nturn left\n:q\n",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Your goal is to go to" in proc.stdout
    assert "-> go forward |" in proc.stdout and "-> turn left |" in proc.stdout
    assert "--- Episode 1, step 2 ---" in proc.stdout


# ------------------------------------------------------------------------------------------------ bad inputs (issue 15)
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--seed", "-1"], "argument --seed: -1 is not a seed: seeds are integers in [0, 4294967295]"),
        (["--episodes", "0"], "argument --episodes: '0' is not an integer >= 1"),
    ],
    ids=["seed", "episodes"],
)
def test_bad_numbers_are_refused_by_the_parser(args: list[str], message: str, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["play", "test/corridor", *args])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_bad_env_args_and_imports_are_named_errors(capsys, tmp_path: Path, monkeypatch) -> None:
    assert cli.main(["play", "test/corridor", "--env-arg", "bogus=1"]) == 2
    err = capsys.readouterr().err
    assert "verlog play: error: env 'test/corridor' takes no keyword argument 'bogus' (from --env-arg: bogus=1)" in err
    assert "It takes: length, max_steps, parse_mode" in err
    assert cli.main(["play", "test/corridor", "--env-arg", "lenght=3"]) == 2
    assert "Did you mean 'length'?" in capsys.readouterr().err
    assert cli.main(["play", "test/corridor", "--env-arg", "length=0"]) == 2  # the factory itself refuses
    assert "building env 'test/corridor' with --env-arg {'length': 0} and resetting it failed" in (
        capsys.readouterr().err
    )
    monkeypatch.chdir(tmp_path)
    assert cli.main(["play", "test/corridor", "--import", "no_such_mod"]) == 2
    assert "--import: no module named 'no_such_mod'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("action", "reason"),
    [
        ("nanreward", "EnvOutputError: the env's step() returned a non-finite reward (nan)"),
        ("crash", "RuntimeError: injected crash"),
        ("hang", "TimeoutError: the env's step() ran longer than --step-timeout=0.5 s: it hangs"),
    ],
)
def test_an_env_that_fails_or_hangs_ends_the_game_with_one_line(action, reason, capsys, monkeypatch) -> None:
    """A NaN reward and a crash were tracebacks (the one-slot pool could not rebuild the env), a hang hung."""
    import bad_envs

    class Everything(faulty_envs.FaultyCorridor, bad_envs.BadOutputCorridor):
        base_actions: ClassVar[list[str]] = ["left", "right", "nanreward", "crash", "hang"]

    monkeypatch.setattr(sys, "stdin", io.StringIO(f"left\n{action}\nleft\n:q\n"))
    envs.register("test/everything_fails", Everything, overwrite=True)
    started = time.monotonic()
    assert cli.main(["play", "test/everything_fails", "--seed", "0", "--step-timeout", "0.5"]) == play.EXIT_ENV_FAILED
    captured = capsys.readouterr()
    assert captured.err == (
        f"verlog play: error: the env failed at step 2 of episode 1 (action {action!r}), so the game ends: "
        f"{reason}{'; rewards must be finite numbers' if action == 'nanreward' else ''}\n"
    )
    assert "-> left |" in captured.out and time.monotonic() - started < 60


def _broken_env(**kwargs):
    raise RuntimeError("the factory's own bug")


def test_env_arg_values_must_fit_the_envs_annotations(capsys) -> None:
    """``binary_reward=maybe`` was passed on as the text 'maybe', which is true; an env failing with no arguments
    given was reported as 'check --env-arg'."""
    assert play.parse_env_args(["a=true", "b=False", "c=null", "d=maybe"]) == {"a": True, "b": False, "c": None,
                                                                              "d": "maybe"}  # fmt: skip
    assert cli.main(["play", "test/corridor", "--env-arg", "binary_reward=maybe"]) == 2
    assert capsys.readouterr().err == (
        "verlog play: error: env 'test/corridor' takes binary_reward: bool, but --env-arg gives "
        "binary_reward='maybe' (str): write true or false (binary_reward=true or binary_reward=false)\n"
    )
    assert cli.main(["play", "test/corridor", "--env-arg", "max_steps=ten"]) == 2
    assert "takes max_steps: int | None, but --env-arg gives max_steps='ten' (str): write an integer or null" in (
        capsys.readouterr().err
    )
    envs.register("test/broken", _broken_env, overwrite=True)
    assert cli.main(["play", "test/broken"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "verlog play: error: env 'test/broken' failed on its own while it was built and reset with no keyword "
        "arguments (--env-arg gives none): RuntimeError: the factory's own bug (at "
    )
    assert "this is the env's own error, not a setting" in err and "check --env-arg" not in err


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_in_play_exits_without_a_traceback() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "verlog", "play", "babyai/goto", "--seed", "0"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # a test run started in the background (`nohup make test &`) ignores SIGINT, and a child inherits that:
        # Python then installs no KeyboardInterrupt handler and Ctrl-C would never arrive
        preexec_fn=_default_sigint,
    )
    try:
        seen = ""
        while "action> " not in seen:  # the prompt is printed without a newline: read byte by byte
            char = proc.stdout.read(1)
            assert char, proc.stderr.read()
            seen += char
        proc.send_signal(signal.SIGINT)
        # the signal may land on another thread of the process, so the main thread's blocked read of stdin only
        # returns when stdin closes (communicate closes it), and Python then raises the pending KeyboardInterrupt.
        # Give the signal time to be taken first: an EOF seen before it would end the game normally (exit 0).
        time.sleep(2)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130 and "verlog play: interrupted" in err and "Traceback" not in err
