"""The kill tests' fault hook (verlog.run.fault_points): ``VERLOG_FAULT_HOOK=pause_hook:pause`` with this folder on
``PYTHONPATH`` and ``VERLOG_TEST_PAUSE=<where>:<iteration>`` (``rollout:4``, ``checkpoint:4``) holds a run at that
point: it writes ``<run_folder>/paused-<where>-<step>`` and waits until the test writes ``continue-<where>-<step>``
there (or kills the run, the usual end)."""

from __future__ import annotations

import os
import time
from pathlib import Path

PAUSE_ENV = "VERLOG_TEST_PAUSE"


def pause(where: str, step: int, run_folder: Path) -> None:
    if os.environ.get(PAUSE_ENV) != f"{where}:{step}":
        return
    (run_folder / f"paused-{where}-{step}").write_text(str(os.getpid()))
    while not (run_folder / f"continue-{where}-{step}").exists():
        time.sleep(0.2)
