"""One trial of a sweep: ``verlog train`` (then, optionally, ``verlog eval``) in a subprocess, watched and reported.

:func:`run_trial` is what a Ray Tune worker runs for a trial (verlog/sweep/runner.py); it knows nothing of Tune but
the ``report`` function it is given. Each trial's ``verlog train`` starts its own Ray cluster for verl, so it must be
a process of its own, started through :mod:`verlog.sweep.launch` (it dies with the worker) in a session of its own
(so that stopping it reaches its whole process group), with the environment of the ``verlog sweep`` command (a Ray
worker's has ``OMP_NUM_THREADS=1`` and Ray's own variables, which would slow or misdirect verl's cluster).

A trial that has a final result (finished, or stopped by the scheduler: :data:`verlog.sweep.folder.FINAL_STATUSES`)
is never run again: :func:`run_trial` returns its result at once. Otherwise it continues from the run's last
checkpoint when there is one (``checkpoint.resume=auto``) and starts afresh (``--overwrite``) when there is none.
While ``verlog train`` runs, each new metrics.jsonl record is reported (for the scheduler, with the objective's
metric), and trial.json's attempt is marked alive, so that a killed sweep still knows how long the trial ran.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verlog.errors import VerlogError
from verlog.run.files import parse_lines
from verlog.run.folder import RunFolder
from verlog.sweep.folder import FINAL_STATUSES, read_json, starts_fresh, write_json

REPORTED_KEYS = (
    "env/return_mean",
    "env/success_rate",
    "rollout/valid_action_ratio",
    "eval/success",
    "eval/return",
    "eval/valid_action_rate",
)
"""Metrics passed on to Ray Tune's result store with each iteration (besides the objective and scheduler metrics)."""
STOP_GRACE_S = 30.0
"""Seconds a stopped ``verlog train`` gets to shut its Ray cluster down after SIGINT before it is killed."""
POLL_S = 2.0
STOPPED_NOTE = "stopped early by the scheduler"


class TrialFailedError(VerlogError, RuntimeError):
    """``verlog train`` or ``verlog eval`` of a trial ended with a non-zero exit code; the message names its log."""


@dataclass(frozen=True)
class TrialJob:
    """Everything a worker needs to run one trial (picklable: Tune ships it to the worker)."""

    id: str
    folder: str
    train_args: tuple[str, ...]
    eval_args: tuple[str, ...] | None
    objective: str
    scheduler_metric: str | None
    cwd: str
    env: dict[str, str]
    trainer: tuple[str, ...] = ("-m", "verlog.train")
    """What ``python`` runs to train (its arguments before the overrides)."""

    @property
    def run_dir(self) -> Path:
        return Path(self.folder) / "run"


def launched(command: list[str]) -> list[str]:
    """``command`` run through :mod:`verlog.sweep.launch`, bound to the life of this process."""
    return [sys.executable, "-m", "verlog.sweep.launch", str(os.getpid()), "--", *command]


def train_command(job: TrialJob) -> list[str]:
    """``python -m verlog.train`` for ``job``: resumed from its last checkpoint when there is one, else a fresh run
    that first removes what an earlier, killed attempt left in its output folder (``--overwrite``)."""
    command = [sys.executable, *job.trainer, *job.train_args]
    return [*command, "--overwrite"] if starts_fresh(job.run_dir) else command


def eval_command(job: TrialJob) -> list[str] | None:
    """``python -m verlog eval --run RUN_DIR`` of the trained model (its last checkpoint, with the settings it trained
    with), or None without an eval: section."""
    if job.eval_args is None:
        return None
    return [sys.executable, "-m", "verlog", "eval", *job.eval_args]


def reported(record: dict[str, Any], job: TrialJob) -> dict[str, Any] | None:
    """What one metrics.jsonl record reports to Tune: ``iteration`` (its step) and the objective's, the scheduler's
    and :data:`REPORTED_KEYS`' values it holds; None when a scheduler is used and the record lacks its metric (Tune
    requires the scheduler's metric in every result)."""
    if job.scheduler_metric is not None and not isinstance(record.get(job.scheduler_metric), (int, float)):
        return None
    keys = {job.objective, *REPORTED_KEYS} | ({job.scheduler_metric} if job.scheduler_metric else set())
    out: dict[str, Any] = {"iteration": int(record.get("step", 0))}
    for key in sorted(keys):
        value = record.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[key] = float(value)
    return out


class MetricsTail:
    """The complete records appended to a metrics.jsonl since the last :meth:`read` (a partial last line waits for
    its newline; a whole line that is not JSON raises :class:`verlog.run.files.JsonLinesError` naming it)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.lines = 0  # whole lines read so far

    def read(self) -> list[dict[str, Any]]:
        if not self.path.is_file():
            return []
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read()
        end = data.rfind(b"\n") + 1
        whole = data[: max(end - 1, 0)]  # the complete lines, without the last newline
        records = parse_lines(whole, self.path, first_number=self.lines + 1) if end else []
        self.offset += end
        self.lines += data[:end].count(b"\n")
        return [record for _number, record in records if isinstance(record, dict)]


def _update_attempt(trial_file: Path, **fields: Any) -> None:
    info = read_json(trial_file) or {}
    attempts = info.setdefault("attempts", [])
    if attempts:
        attempts[-1].update(fields)
    write_json(trial_file, info)


def _stop(proc: subprocess.Popen) -> None:
    """Stop ``proc`` and its process group: SIGINT (verlog train shuts its Ray cluster down), then SIGKILL."""
    if proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGINT, STOP_GRACE_S), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _run(command: list[str], job: TrialJob, log: Path, report: Callable[[dict[str, Any]], None] | None) -> int:
    """Run ``command`` (through the launch shim, in its own session, output appended to ``log``); report each new
    metrics record while it runs; its exit code. Any exception (Tune's stop arrives as SystemExit from ``report``)
    stops the process first."""
    trial_file = Path(job.folder) / "trial.json"
    tail = MetricsTail(RunFolder(job.run_dir).metrics)
    with open(log, "a", encoding="utf-8") as out:
        out.write(f"\n[sweep] {time.strftime('%Y-%m-%d %H:%M:%S')} $ {' '.join(command)}\n")
        out.flush()
        proc = subprocess.Popen(
            launched(command),
            cwd=job.cwd,
            env=job.env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            while True:
                code = proc.poll()
                for record in tail.read() if report is not None else []:
                    result = reported(record, job)
                    if result is not None:
                        report(result)
                _update_attempt(trial_file, seen=time.time())
                if code is not None:
                    return code
                time.sleep(POLL_S)
        finally:
            _stop(proc)


def run_trial(job: TrialJob, report: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """Run one trial to its end (see the module docstring) and return its result (also written to result.json).

    Raises:
        TrialFailedError: verlog train or verlog eval ended with a non-zero exit code (result.json says failed).
    """
    folder = Path(job.folder)
    result_file = folder / "result.json"
    done = read_json(result_file)
    if isinstance(done, dict) and done.get("status") in FINAL_STATUSES:
        return done
    trial_file = folder / "trial.json"
    info = read_json(trial_file) or {}
    info.setdefault("attempts", []).append({"started": time.time()})
    write_json(trial_file, info)
    command = train_command(job)
    try:
        code = _run(command, job, folder / "train.log", report)
        if code == 0 and (evaluate := eval_command(job)) is not None:
            code = _run(evaluate, job, folder / "eval.log", None)
            log_name = "eval.log"
        else:
            log_name = "train.log"
    except SystemExit:  # Tune stopped the trial (its scheduler), from inside report()
        _update_attempt(trial_file, ended=time.time())
        write_json(result_file, {"status": "stopped", "note": STOPPED_NOTE})
        raise
    _update_attempt(trial_file, ended=time.time(), exit_code=code)
    if code != 0:
        note = f"exit code {code}: see {folder / log_name}"
        write_json(result_file, {"status": "failed", "exit_code": code, "note": note})
        raise TrialFailedError(f"trial {job.id}: {note}")
    result = {"status": "finished", "exit_code": 0, "note": ""}
    write_json(result_file, result)
    return result
