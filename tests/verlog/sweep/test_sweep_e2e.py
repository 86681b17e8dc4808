"""End to end: a tiny sweep through Ray Tune (two real ``verlog train`` trials of 1 iteration on toy/delayed, one
after the other, each evaluated and checkpointed at its end), the sweep killed (SIGKILL) once the first trial has
finished, then resumed: the finished trial is neither rerun nor touched, the other one runs to its end, nothing of
the killed sweep is left running; a third run has nothing left to do; ``verlog sweep report`` writes its report.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

# two trials of about 2 minutes each on an idle 2-core machine (mostly verl's start-up: one iteration is enough for
# what the sweep is checked for), plus Ray and Tune starting three times
pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(3600)]


def _space(model: Path, ray_dir: Path) -> dict:
    return {
        "name": "e2e",
        "base": {
            "env": "toy_delayed",
            "model.path": str(model),
            "model.build_tiny": False,
            "hardware.ray.temp_dir": str(ray_dir),
            "iterations": 1,
            "rollout.num_slots": 4,
            "rollout.turns_per_slot": 4,
            "rollout.max_prompt_tokens": 512,
            "rollout.max_response_tokens": 16,
            "algorithm.critic_warmup": 0,
            "evaluation.every": 1,
            "evaluation.before_train": False,
            "evaluation.episodes": 4,
            "checkpoint.save_freq": 1,
        },
        "params": {"algorithm.actor_lr": [1.0e-4, 1.0e-3]},
        "sampling": {"method": "grid"},
        "objective": {"metric": "eval/progression"},
    }


def _sweep_command(space: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "verlog", "sweep", str(space), "--out", str(out)]


def _attempts(out: Path, trial: str) -> int:
    return len(json.loads((out / "trials" / trial / "trial.json").read_text())["attempts"])


def _processes_using(path: Path) -> list[str]:
    import psutil

    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmdline = " ".join(proc.info.get("cmdline") or [])
        if str(path) in cmdline and proc.info["pid"] != os.getpid():
            found.append(f"{proc.info['pid']}: {cmdline[:200]}")
    return found


def test_a_tiny_sweep_resumes_after_a_kill_without_rerunning_a_finished_trial(tiny_model: Path, tmp_path: Path):
    space = tmp_path / "space.yaml"
    ray_dir = Path(tempfile.mkdtemp(prefix="verlog-sweep-", dir="/tmp"))  # short: Ray's socket paths hold <= 107 bytes
    space.write_text(yaml.safe_dump(_space(tiny_model, ray_dir), sort_keys=False))
    out = tmp_path / "sweep"
    done = out / "trials" / "000" / "result.json"
    with open(tmp_path / "first.log", "w") as log:
        first = subprocess.Popen(_sweep_command(space, out), cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.time() + 1500
        while not done.is_file() and first.poll() is None and time.time() < deadline:
            time.sleep(2)
        if done.is_file():
            time.sleep(15)  # trial 001 is starting (Tune runs one trial at a time here)
        os.kill(first.pid, signal.SIGKILL)
        first.wait()
    assert done.is_file(), (tmp_path / "first.log").read_text()[-4000:]
    assert json.loads(done.read_text())["status"] == "finished"
    deadline = time.time() + 120
    while _processes_using(out) and time.time() < deadline:  # the trial's verlog train dies with the sweep
        time.sleep(2)
    assert not _processes_using(out), _processes_using(out)

    finished = out / "trials" / "000" / "run" / "metrics.jsonl"
    before = (finished.stat().st_mtime_ns, (out / "trials" / "000" / "train.log").read_text())
    second = subprocess.run(_sweep_command(space, out), cwd=tmp_path, capture_output=True, text=True, timeout=1800)
    assert second.returncode == 0, (second.stdout + second.stderr)[-4000:]
    assert "[sweep] resuming" in second.stdout and "1 finished" in second.stdout
    assert (finished.stat().st_mtime_ns, (out / "trials" / "000" / "train.log").read_text()) == before
    assert _attempts(out, "000") == 1
    assert json.loads((out / "trials" / "001" / "result.json").read_text())["status"] == "finished"
    records = [json.loads(line) for line in (out / "trials" / "001" / "run" / "metrics.jsonl").read_text().splitlines()]
    assert max(r["step"] for r in records) == 1 and any("eval/progression" in r for r in records)
    summary = (out / "summary.md").read_text()
    assert "| 000 | 0.0001 | finished |" in summary and "| 001 | 0.001 | finished |" in summary
    assert (out / "tune").is_dir()  # Tune's experiment: what the resume restored

    third = subprocess.run(_sweep_command(space, out), cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert third.returncode == 0, (third.stdout + third.stderr)[-4000:]
    assert "started" not in third.stdout  # nothing left to run
    assert (_attempts(out, "000"), (finished.stat().st_mtime_ns)) == (1, before[0])

    report = subprocess.run(
        [sys.executable, "-m", "verlog", "sweep", "report", str(out)], capture_output=True, text=True, timeout=300
    )
    assert report.returncode == 0, report.stderr[-3000:]
    text = (out / "report" / "report.md").read_text()
    assert "2 trials (2 finished); 2 with an outcome" in text and "### algorithm.actor_lr" in text
