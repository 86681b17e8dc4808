"""``verlog train`` in a child process, for the end-to-end tests: the command, one run to its end with its output
beside the run folder, and what the run wrote (metrics.jsonl's records)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def train_command(out: Path, model: Path, *overrides: str, flags: tuple[str, ...] = ()) -> list[str]:
    """``python -m verlog.train [flags] output_dir=OUT model.path=MODEL overrides...`` (this interpreter)."""
    return [sys.executable, "-m", "verlog.train", *flags, f"output_dir={out}", f"model.path={model}", *overrides]


def run_train(
    out: Path,
    model: Path,
    *overrides: str,
    timeout: float,
    env: Mapping[str, str] | None = None,
    flags: tuple[str, ...] = (),
) -> subprocess.CompletedProcess:
    """One training run to its end from the repository root; its stdout and stderr go to ``<out>.log`` beside the run
    folder, and a run that fails fails the test with the end of its output.

    Args:
        env: the process's whole environment (None: this one's).
        flags: ``verlog train``'s own flags, before the overrides.
    """
    args = train_command(out, model, *overrides, flags=flags)
    proc = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    (out.parent / f"{out.name}.log").write_text(proc.stdout + proc.stderr)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    return proc


def read_records(path: Path) -> list[dict]:
    """Every record of a JSON-lines file (a bad line fails the test: a finished run writes whole lines)."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def iteration_records(run: Path) -> list[dict]:
    """The PPO iterations' records of a run's metrics.jsonl (not the evaluation before training, at step 0)."""
    return [r for r in read_records(run / "metrics.jsonl") if "training/global_step" in r]


def with_pythonpath(folder: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment with ``folder`` first on PYTHONPATH (test envs and hooks a run imports by name)."""
    paths = os.pathsep.join(p for p in (str(folder), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": paths, **(extra or {})}
