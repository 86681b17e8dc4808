"""bench/soak.py (issue 24): the training rollout with faulty envs mixed in loses no row, recovers from every injected
fault and leaves no process behind.

The short soak runs the real script (``--quick``: 40 iterations of BabyAI, BabaIsAI and Crafter with 2 subprocess
workers each, faults that raise, exit and hang) in a subprocess, as a user runs it, and reads its JSON. Its memory
bound, 10% growth of the main process's RSS over the 30 iterations after warm-up, is explained in the script
(``QUICK``): the bounded prompt caches still fill then (about 0.3 MiB per iteration, 2% in 30), while keeping each
iteration's rows and tensors would add about 25%.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest
from bench_script import load

from verlog.rollout.batch import TurnRow

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "soak.py"
MARK = "VERLOG_SOAK_TEST_MARK"


soak = load("soak")


def _processes_with(marker: str) -> list[int]:
    """Processes whose environment holds ``MARK=marker`` (the soak and everything it started)."""
    found = []
    for process in psutil.process_iter():
        try:
            if process.environ().get(MARK) == marker:
                found.append(process.pid)
        except psutil.Error:
            continue
    return found


@pytest.mark.slow
def test_quick_soak_loses_no_row_recovers_every_fault_and_leaves_no_process(tmp_path: Path) -> None:
    marker = uuid.uuid4().hex
    out, figures = tmp_path / "soak", tmp_path / "soak.json"
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--out", str(out), "--json", str(figures)],
        cwd=REPO,
        env={**os.environ, MARK: marker},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    result = json.loads(figures.read_text())
    assert result["problems"] == []
    injected = dict.fromkeys(soak.FAULT_KINDS, 0)
    for name, game in result["games"].items():
        assert game["rows"] == game["rows_expected"] == 40 * 4 * 4, name
        assert game["rows_lost"] == game["slot_breaks"] == game["short_batches"] == 0, name
        assert game["faults_recovered"] == game["faults_injected"], name
        assert game["faults_unrecovered"] == game["faults_due_not_seen"] == 0, name
        assert game["unexpected_env_errors"] == 0, game["unexpected_examples"]
        assert game["log_lines"] == {
            "metrics.jsonl": 40,
            "rollout.jsonl rows": game["rows_expected"],
            "tape turns": game["tape_turns_written"],
        }
        for kind, count in game["faults_injected"].items():
            injected[kind] += count
    assert all(count >= 1 for count in injected.values()), injected  # every kind of fault happened and was survived
    assert sum(game["worker_restarts"] for game in result["games"].values()) >= injected["exit"] + injected["hang"]
    memory = result["memory"]
    assert memory["main_growth_pct"] < 10.0 and memory["long_lived_workers_growth_pct"] < 10.0, memory
    assert len(memory["long_lived_pids"]) >= 3  # each game's clean worker lived through the whole soak
    assert memory["open_fds"][1] <= memory["open_fds"][0]
    assert result["children_left"] == 0
    deadline = time.monotonic() + 20  # the resource tracker ends when it reads its pipe's end
    while _processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _processes_with(marker) == []


def _row(slot: int, episode: str, turn: int, ended: bool = False) -> TurnRow:
    return TurnRow(slot, episode, turn, [1], [2], None, truncated=ended)


def test_row_ledger_counts_lost_and_repeated_turns() -> None:
    ledger = soak.RowLedger()
    ledger.add([_row(0, "a", 0), _row(1, "b", 5)])
    ledger.add([_row(0, "a", 1, ended=True), _row(1, "b", 6)])
    ledger.add([_row(0, "c", 0), _row(1, "b", 7)])  # a new episode after the end; the next turn
    assert (ledger.rows, ledger.breaks) == (6, 0)
    ledger.add([_row(0, "c", 2), _row(1, "b", 7)])  # slot 0 skipped turn 1, slot 1 repeated turn 7
    ledger.add([_row(0, "c", 3), _row(1, "d", 0)])  # slot 1's episode b never ended
    assert (ledger.rows, ledger.breaks) == (10, 3)


def test_fault_positions_are_seeded_and_follow_the_rates() -> None:
    rates = {"raise": 0.02, "exit": 0.01, "hang": 0.01}
    draws = [soak.fault_at("babyai:0", seed, turn, rates) for seed in range(200) for turn in range(100)]
    assert draws == [soak.fault_at("babyai:0", seed, turn, rates) for seed in range(200) for turn in range(100)]
    counts = {kind: draws.count(kind) for kind in soak.FAULT_KINDS}
    assert 300 <= counts["raise"] <= 500 and 130 <= counts["exit"] <= 270 and 130 <= counts["hang"] <= 270, counts
    assert soak.fault_at("babyai:0", 1, 2, {}) is None
