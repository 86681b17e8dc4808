"""The quiet console (verlog.console), the line per iteration, the trackers' places, and the run folder as a model."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from verlog.run.summary import duration, iteration_line

REPO = Path(__file__).resolve().parents[2]

CHILD = textwrap.dedent(
    """
    import os, subprocess, sys, warnings
    from verlog.console import QuietConsole, say

    with QuietConsole(sys.argv[1], verbose=sys.argv[2] == "1", title="test") as console:
        say("[verlog] mine")
        print("python print")
        os.write(1, b"raw fd 1\\n")
        os.write(2, b"raw fd 2\\n")
        subprocess.run([sys.executable, "-c", "print('child process')"], check=True)
        warnings.warn_explicit("act on me", UserWarning, os.path.join(os.getcwd(), "verlog", "x.py"), 1)
        warnings.warn_explicit("not mine", UserWarning, "/site-packages/other/y.py", 1)
        warnings.warn_explicit("deprecated", FutureWarning, os.path.join(os.getcwd(), "verlog", "z.py"), 1)
        say("[verlog] error line", err=True)
    print("after the console")
    """
)


def _run_child(tmp_path: Path, verbose: bool) -> tuple[subprocess.CompletedProcess, Path]:
    log = tmp_path / "logs" / "run.log"
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(log), "1" if verbose else "0"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return proc, log


def test_quiet_console_keeps_only_verlogs_lines_on_the_terminal(tmp_path):
    proc, log = _run_child(tmp_path, verbose=False)
    assert proc.stdout.splitlines() == ["[verlog] mine", "after the console"]
    assert proc.stderr.splitlines() == ["[verlog] warning: act on me", "[verlog] error line"]
    text = log.read_text()
    for line in (
        "===== ",
        "[verlog] mine",
        "python print",
        "raw fd 1",
        "raw fd 2",
        "child process",
        "not mine",
        "deprecated",
    ):
        assert line in text, line
    assert text.index("[verlog] mine") < text.index("python print") < text.index("child process")
    assert "after the console" not in text


def test_verbose_console_shows_everything_and_writes_no_log(tmp_path):
    proc, log = _run_child(tmp_path, verbose=True)
    for line in ("[verlog] mine", "python print", "raw fd 1", "child process", "after the console"):
        assert line in proc.stdout, line
    assert "raw fd 2" in proc.stderr and "not mine" in proc.stderr
    assert not log.exists()


def test_the_tail_of_the_log_for_a_failed_command(tmp_path):
    from verlog.console import QuietConsole

    log = tmp_path / "x.log"
    log.write_text("".join(f"line {i}\n" for i in range(100)))
    assert QuietConsole(log).tail(3) == ["line 97", "line 98", "line 99"]
    assert QuietConsole(tmp_path / "missing.log").tail() == []


def test_the_line_per_iteration():
    metrics = {
        "env/return_mean": 0.41234,
        "env/success_rate": 0.25,
        "rollout/valid_action_ratio": 0.99,
        "critic/vf_explained_var": float("nan"),  # not a number yet: left out
        "timing_s/step": 4.87,
    }
    line = iteration_line(3, 20, metrics, 75.0, 3725.0)
    assert line == (
        "[verlog] iteration 3/20 | return 0.412, success 0.25, valid 0.99, 4.9 s/it, elapsed 1m15s, ETA 1h02m"
    )
    assert iteration_line(1, 1, {}, 5, 0) == "[verlog] iteration 1/1 | elapsed 5 s, ETA 0 s"
    assert [duration(s) for s in (0, 59.4, 60, 3599, 3600)] == ["0 s", "59 s", "1m00s", "59m59s", "1h00m"]


def test_trackers_write_inside_the_run_and_wandb_goes_offline_without_a_key(tmp_path, monkeypatch):
    from verlog.config.trackers import TRACKER_PACKAGES, missing_tracker_packages, tracker_environment

    for name in ("TENSORBOARD_DIR", "WANDB_DIR", "WANDB_MODE", "WANDB_API_KEY", "WANDB_CONSOLE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    env, lines = tracker_environment(["console", "tensorboard", "wandb"], tmp_path / "run")
    assert env["TENSORBOARD_DIR"] == str(tmp_path / "run" / "tensorboard")
    assert env["WANDB_DIR"] == str(tmp_path / "run") and env["WANDB_MODE"] == "offline"
    assert env["WANDB_CONSOLE"] == "off"
    assert any(line.startswith("wandb: offline") and "wandb sync" in line for line in lines)
    monkeypatch.setenv("WANDB_API_KEY", "k")  # a logged-in user: wandb's own mode (online)
    env, _ = tracker_environment(["wandb"], tmp_path / "run")
    assert "WANDB_MODE" not in env
    assert tracker_environment(["console"], tmp_path / "run") == ({}, [])
    assert missing_tracker_packages(["console", "tensorboard", "wandb"]) == []
    monkeypatch.setitem(TRACKER_PACKAGES, "clearml", ("verlog_no_such_module", "clearml"))
    assert missing_tracker_packages(["clearml"]) == [
        "logger clearml: its package is not installed: pip install clearml, or drop clearml from logger"
    ]


def test_a_run_folder_without_a_checkpoint_is_one_clear_error(tmp_path):
    from verlog.trainer.checkpoint_model import CheckpointModelError, checkpoint_actor, trained_model_folder

    run = tmp_path / "run"
    (run / "checkpoints" / "global_step_2" / "actor").mkdir(parents=True)  # a checkpoint never committed
    with pytest.raises(CheckpointModelError, match="no complete checkpoint"):
        trained_model_folder(run)
    (run / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("2")
    assert checkpoint_actor(run) == run / "checkpoints" / "global_step_2" / "actor"
    with pytest.raises(CheckpointModelError, match="neither Hugging Face weights nor FSDP shards"):
        trained_model_folder(run / "checkpoints")
    assert trained_model_folder(tmp_path) is None  # not a run: a Hugging Face folder, checked by the caller


def test_eval_refuses_to_write_into_a_training_run(tmp_path, tiny_model):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "verlog",
            "eval",
            "--model",
            str(tiny_model),
            "--tasks",
            "babyai/goto",
            "--out",
            str(run),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert "is a training run's folder (it holds metrics.jsonl)" in proc.stderr and "final_eval" in proc.stderr
    assert "Traceback" not in proc.stderr and list(run.iterdir()) == [run / "metrics.jsonl"]


def test_an_error_during_the_run_names_the_log(tmp_path, monkeypatch, capsys):
    """A fault raised inside the quiet console: the command's one error line ends with the log's path."""
    import verlog.trainer.runner
    from verlog.commands.train import main
    from verlog.errors import RunFault

    def failing(cfg):
        os.write(1, b"a worker's line\n")  # what Ray forwards lands on descriptor 1
        raise RunFault("the env worker died")

    monkeypatch.setattr(verlog.trainer.runner, "train", failing)
    out = tmp_path / "run"
    assert main(["env=toy_delayed", "checkpoint.resume=disable", f"output_dir={out}"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("verlog train: error: the env worker died; ")
    assert err[0].endswith(f"(full log: {out / 'logs' / 'train.log'})")
    assert "a worker's line" in (out / "logs" / "train.log").read_text()
