"""The console's engine-gap warning (verlog/run/summary.py, docs/metrics.md "When the engine and the actor
disagree"): one line when vLLM and the actor disagree on rows of the current weights, nothing otherwise."""

from __future__ import annotations

import math

import pytest

from verlog.run.summary import ENGINE_GAP_KEY, ENGINE_GAP_WARN, EngineGapWarner, engine_gap_warning


@pytest.mark.parametrize("gap", [0.0, 0.0055, 0.15, ENGINE_GAP_WARN, math.nan, None, True, "0.9"])
def test_no_warning_for_small_missing_or_malformed_gaps(gap: object) -> None:
    metrics = {} if gap is None else {ENGINE_GAP_KEY: gap}
    assert engine_gap_warning(3, metrics) is None


def test_a_large_gap_names_the_iteration_the_gap_and_where_to_look() -> None:
    # the measured case: the rollout's vLLM normalised images with noise, gap 0.98 before any update
    line = engine_gap_warning(1, {ENGINE_GAP_KEY: 0.9775, "env/success_rate": 0.05})
    assert line is not None and "\n" not in line
    assert line.startswith("[verlog] warning: at iteration 1 ")
    assert "0.98 apart" in line and ENGINE_GAP_KEY in line and "docs/metrics.md" in line


def test_the_run_warns_once_and_not_for_rows_of_older_weights() -> None:
    large, small = {ENGINE_GAP_KEY: 0.9}, {ENGINE_GAP_KEY: 0.01}
    warner = EngineGapWarner(older_rows=False)
    assert warner.check(1, small) is None and not warner.warned
    first = warner.check(2, large)
    assert first is not None and "at iteration 2 " in first
    assert warner.check(3, large) is None  # once a run
    ahead = EngineGapWarner(older_rows=True)  # one_step_off / in_flight: a gap is expected there
    assert ahead.check(1, large) is None and not ahead.warned
