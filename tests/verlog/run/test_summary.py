"""The console's engine-gap warning (verlog/run/summary.py, docs/metrics.md "When the engine and the actor
disagree"): one line when vLLM and the actor disagree on rows of the current weights, nothing otherwise."""

from __future__ import annotations

import math

import pytest

from verlog.run.summary import ENGINE_GAP_KEY, ENGINE_GAP_WARN, engine_gap_warning


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
