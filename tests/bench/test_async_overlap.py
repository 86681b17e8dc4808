"""bench/async_overlap.py's reading of run folders and its report (loaded by file path; the runs themselves are the
benchmark, not a test)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench_script import load

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    return load("async_overlap")


def _run(folder: Path, steps: list[float], returns: list[float]) -> Path:
    folder.mkdir(parents=True)
    lines = [{"step": 0, "eval/return": 0.1}]  # the evaluation before training: not an iteration
    for i, (step_s, ret) in enumerate(zip(steps, returns), start=1):
        lines.append(
            {
                "step": i,
                "training/global_step": i,
                "timing_s/step": step_s,
                "timing_s/gen": 0.5,
                "timing_s/rollout_generate": 0.4,
                "timing_s/rollout_env": 1.0,
                "env/episodes": 16.0,
                "env/return_mean": ret,
            }
        )
    (folder / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return folder


def test_speed_is_the_median_step_after_the_first(bench, tmp_path):
    run = _run(tmp_path / "r", [30.0, 4.0, 6.0, 5.0], [0.3, 0.4, 0.5, 0.6])
    assert bench.seconds_per_iteration(run) == 5.0  # the first iteration (start-up) is left out
    phases = bench.phase_times(run)
    assert phases == {"generate_s": 0.4, "env_s": 1.0, "step_s": 5.0, "train_s": 4.5}


def test_episodes_to_reach_uses_a_running_mean(bench, tmp_path):
    run = _run(tmp_path / "r", [1.0] * 6, [0.2, 0.95, 0.5, 0.9, 0.95, 0.95])
    curve = bench.curve(run)
    assert curve["episodes"] == [16.0, 32.0, 48.0, 64.0, 80.0, 96.0]
    assert curve["wall_s"] == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    # one lucky iteration (0.95 at iteration 2) is not enough: the mean of 3 first reaches 0.9 at iteration 6
    assert bench.episodes_to_reach(curve, 0.9) == 96.0
    assert bench.episodes_to_reach(curve, 0.99) is None


def test_report_tables(bench):
    results = {
        "when": "2026-12-04",
        "threshold": 0.9,
        "speed": {
            "step_delay_s": 0.1,
            "workers": 2,
            "baseline": {"train_s": 3.0},
            "runs": {
                "slow/off": {
                    "seconds_per_iteration": 8.0,
                    "speedup_vs_off": 1.0,
                    "generate_s": 1.0,
                    "env_s": 3.0,
                    "async/overlap_ratio": 0.0,
                    "async/lag_mean": 0.0,
                },
                "slow/one_step_off": {
                    "seconds_per_iteration": 5.0,
                    "speedup_vs_off": 1.6,
                    "generate_s": 1.0,
                    "env_s": 3.0,
                    "async/overlap_ratio": 0.5,
                    "async/lag_mean": 1.0,
                },
            },
        },
        "parity": {"off/s0": {"final_eval_return": 0.8, "episodes_to_threshold": None}},
    }
    md = bench.render(results)
    assert "| slow | one_step_off | 5.00 | 1.60x |" in md
    assert "| off | s0 | 0.800 | not reached |" in md
