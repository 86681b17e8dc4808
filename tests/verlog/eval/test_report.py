"""Summary numbers (BALROG's layout), the results table, episode-record files and run comparisons."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from verlog.eval.report import (
    append_episode_record,
    compare_records,
    format_table,
    read_episode_records,
    summarize,
    write_summary,
)
from verlog.eval.runner import EpisodeRecord
from verlog.eval.stats import bootstrap_diff_ci


def _rec(env_id: str, index: int, progression: float, *, steps: int = 10, valid: int = 10, ret: float = 0.0):
    return EpisodeRecord(
        env_id=env_id,
        episode_index=index,
        seed=index,
        episode_return=ret,
        num_steps=steps,
        success=progression == 1.0,
        progression=progression,
        valid_actions=valid,
        input_tokens=100,
        output_tokens=20,
        env_stats={"achievements": {"collect_wood": np.int64(2)}},
    )


RECORDS = [
    _rec("babyai/goto", 0, 1.0, ret=0.9),
    _rec("babyai/goto", 1, 0.0, valid=5),
    _rec("babyai/pickup", 0, 1.0, ret=0.5, steps=30, valid=30),
    _rec("babyai/pickup", 1, 1.0, ret=0.7),
    _rec("crafter/default", 0, 2 / 22, steps=100, valid=90, ret=2.0),
    _rec("crafter/default", 1, 4 / 22, steps=100, valid=100, ret=4.0),
]


def test_summary_follows_balrog() -> None:
    s = summarize(RECORDS, n_resamples=500)
    baby, craft = s["environments"]["babyai"], s["environments"]["crafter"]
    # babyai pools its 4 episodes: progressions 1, 0, 1, 1 -> mean 75%, population sd sqrt(3/16), SE sd / 2
    assert baby["progression_percentage"] == pytest.approx(75.0)
    assert baby["progression_sd"] == pytest.approx(100 * math.sqrt(3 / 16))
    assert baby["standard_error"] == pytest.approx(100 * math.sqrt(3 / 16) / 2)
    assert baby["tasks"]["goto"]["progression_percentage"] == pytest.approx(50.0)
    assert baby["tasks"]["goto"]["standard_error"] == pytest.approx(50.0 / math.sqrt(2))
    assert baby["tasks"]["pickup"]["standard_error"] == 0.0
    assert baby["success_rate"] == 0.75 and baby["episodes"] == 4
    assert baby["valid_action_rate"] == pytest.approx((10 + 5 + 30 + 10) / (10 + 10 + 30 + 10))
    assert baby["average_steps"] == pytest.approx(15.0)
    assert baby["mean_return"] == pytest.approx((0.9 + 0.5 + 0.7) / 4)
    assert craft["progression_percentage"] == pytest.approx(100 * 3 / 22)
    # overall: unweighted mean of env means; sqrt(sum SE^2) / number of envs
    assert s["average_progress"] == pytest.approx((75.0 + 100 * 3 / 22) / 2)
    assert s["standard_error"] == pytest.approx(math.hypot(baby["standard_error"], craft["standard_error"]) / 2)
    assert s["episodes"] == 6 and s["confidence"] == 0.95
    lo, hi = baby["success_rate_ci"]
    assert 0.0 <= lo <= 0.75 <= hi <= 1.0
    lo, hi = baby["progression_ci"]
    assert 0.0 <= lo <= 75.0 <= hi <= 100.0


def test_table_lists_tasks_envs_and_overall() -> None:
    table = format_table(summarize(RECORDS, n_resamples=200))
    lines = table.splitlines()
    assert any(line.startswith("babyai/goto ") and "50.0 +- 35.4" in line for line in lines)
    assert any(line.startswith("babyai (all tasks)") for line in lines)
    assert any(line.startswith("crafter/default") for line in lines)
    assert not any(line.startswith("crafter (all tasks)") for line in lines)  # one task: no pooled row
    assert lines[-1].startswith("overall (BALROG")


def test_records_and_summary_files_round_trip(tmp_path: Path) -> None:
    for rec in RECORDS:
        append_episode_record(tmp_path / "episodes.jsonl", rec)
    back = read_episode_records(tmp_path)
    assert [r.to_dict() for r in back] == json.loads(json.dumps([r.to_dict() for r in RECORDS], default=int))
    assert back[0].env == "babyai" and back[0].task == "goto"
    path = write_summary(tmp_path, summarize(back, n_resamples=100))
    assert json.loads(path.read_text())["environments"]["babyai"]["episodes"] == 4
    (tmp_path / "bad.jsonl").write_text('{"env_id": "x"}\n')
    with pytest.raises(ValueError, match=r"bad\.jsonl:1"):
        read_episode_records(tmp_path / "bad.jsonl")


def test_compare_records_pairs_same_episodes() -> None:
    base = [_rec("babyai/goto", i, float(i % 3 == 0)) for i in range(30)]
    better = [_rec("babyai/goto", i, float(i % 3 != 1)) for i in range(30)]
    interval, paired = compare_records(better, base, "success", n_resamples=1000)
    assert paired
    tv = [float(i % 3 != 1) for i in range(30)]
    bv = [float(i % 3 == 0) for i in range(30)]
    assert interval == bootstrap_diff_ci(tv, bv, paired=True, n_resamples=1000)
    assert interval.estimate == pytest.approx(20 / 30 - 10 / 30) and interval.low > 0
    other_seeds = [_rec("babyai/goto", i + 100, 1.0) for i in range(10)]
    _, paired = compare_records(other_seeds, base, "progression", n_resamples=100)
    assert not paired
    with pytest.raises(ValueError, match="metric"):
        compare_records(better, base, "speed")
