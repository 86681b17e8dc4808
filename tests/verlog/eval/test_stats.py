"""BALROG's mean and standard error on hand examples; bootstrap intervals against a plainly written bootstrap."""

from __future__ import annotations

import math

import numpy as np
import pytest

from verlog.eval.stats import (
    EvalStatsError,
    balrog_mean_se,
    balrog_overall,
    bootstrap_diff_ci,
    bootstrap_mean_ci,
)


def _plain_quantile(sorted_values: list[float], q: float) -> float:
    """numpy's default ("linear") quantile, written out: interpolate at position q * (n - 1)."""
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (pos - lo) * (sorted_values[hi] - sorted_values[lo])


def _plain_percentile_ci(resampled_means: list[float], confidence: float) -> tuple[float, float]:
    ordered = sorted(resampled_means)
    alpha = 1 - confidence
    return _plain_quantile(ordered, alpha / 2), _plain_quantile(ordered, 1 - alpha / 2)


def test_balrog_se_hand_example() -> None:
    # progressions 0.2, 0.4, 0.9: mean 0.5; deviations -0.3, -0.1, 0.4; population variance (0.09+0.01+0.16)/3.
    got = balrog_mean_se([0.2, 0.4, 0.9])
    sd = math.sqrt(0.26 / 3)
    assert got.n == 3
    assert got.mean == pytest.approx(0.5)
    assert got.sd == pytest.approx(sd)  # divides by N, not N - 1
    assert got.se == pytest.approx(sd / math.sqrt(3))
    assert got.sd != pytest.approx(float(np.std([0.2, 0.4, 0.9], ddof=1)))
    # binary outcomes 1, 0, 0, 1: sd 0.5, se 0.25
    coin = balrog_mean_se([1, 0, 0, 1])
    assert (coin.mean, coin.sd, coin.se) == pytest.approx((0.5, 0.5, 0.25))


def test_balrog_se_is_zero_for_one_episode() -> None:
    one = balrog_mean_se([0.7])
    assert (one.mean, one.sd, one.se, one.n) == (0.7, 0.0, 0.0, 1)


def test_balrog_overall_hand_example() -> None:
    # two envs at 50% +- 3 and 20% +- 4 (percent): mean 35, sqrt(9 + 16) / 2 = 2.5
    assert balrog_overall([50.0, 20.0], [3.0, 4.0]) == pytest.approx((35.0, 2.5))
    assert balrog_overall([10.0], [1.5]) == pytest.approx((10.0, 1.5))
    with pytest.raises(EvalStatsError, match="one of each"):
        balrog_overall([1.0, 2.0], [1.0])


SAMPLE = [0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.5, 0.25, 1.0, 0.0]


def test_bootstrap_mean_matches_plain_bootstrap() -> None:
    seed, n_resamples, confidence = 123, 2000, 0.95
    got = bootstrap_mean_ci(SAMPLE, confidence=confidence, n_resamples=n_resamples, seed=seed)

    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(SAMPLE), size=(n_resamples, len(SAMPLE)))
    means = [sum(SAMPLE[int(i)] for i in row) / len(SAMPLE) for row in draws]
    low, high = _plain_percentile_ci(means, confidence)

    assert got.estimate == pytest.approx(sum(SAMPLE) / len(SAMPLE))
    assert got.low == pytest.approx(low, abs=1e-12)
    assert got.high == pytest.approx(high, abs=1e-12)
    assert got.low < got.estimate < got.high
    assert (got.confidence, got.n_resamples) == (confidence, n_resamples)
    # same seed, same interval; another seed, (slightly) another one
    assert bootstrap_mean_ci(SAMPLE, n_resamples=n_resamples, seed=seed) == got
    assert bootstrap_mean_ci(SAMPLE, n_resamples=n_resamples, seed=seed + 1) != got


def test_bootstrap_mean_width_matches_normal_approximation() -> None:
    # 400 coin flips with p = 0.3: the 95% interval is about mean +- 1.96 * sqrt(p (1 - p) / n)
    values = np.random.default_rng(5).random(400) < 0.3
    got = bootstrap_mean_ci(values.astype(float), n_resamples=4000, seed=0)
    p = values.mean()
    half = 1.96 * math.sqrt(p * (1 - p) / values.size)
    assert got.high - got.low == pytest.approx(2 * half, rel=0.1)
    assert got.low == pytest.approx(p - half, abs=0.01)


def test_bootstrap_diff_unpaired_matches_plain_bootstrap() -> None:
    treatment = [1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0]
    baseline = [0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0]
    seed, n_resamples = 7, 1500
    got = bootstrap_diff_ci(treatment, baseline, n_resamples=n_resamples, seed=seed)

    rng = np.random.default_rng(seed)
    ia = rng.integers(0, len(treatment), size=(n_resamples, len(treatment)))
    ib = rng.integers(0, len(baseline), size=(n_resamples, len(baseline)))
    diffs = [
        sum(treatment[int(i)] for i in ra) / len(treatment) - sum(baseline[int(j)] for j in rb) / len(baseline)
        for ra, rb in zip(ia, ib)
    ]
    low, high = _plain_percentile_ci(diffs, 0.95)
    assert got.estimate == pytest.approx(6 / 8 - 3 / 11)
    assert (got.low, got.high) == pytest.approx((low, high), abs=1e-12)


def test_bootstrap_diff_paired_matches_plain_bootstrap_and_is_narrower() -> None:
    rng = np.random.default_rng(11)
    baseline = (rng.random(60) < 0.4).astype(float)
    # the treatment solves what the baseline solved, plus some more: strongly correlated outcomes
    treatment = np.maximum(baseline, (rng.random(60) < 0.3).astype(float))
    seed, n_resamples = 3, 3000
    paired = bootstrap_diff_ci(treatment, baseline, paired=True, n_resamples=n_resamples, seed=seed)

    draws = np.random.default_rng(seed).integers(0, 60, size=(n_resamples, 60))
    diffs = [sum(treatment[int(i)] - baseline[int(i)] for i in row) / 60 for row in draws]
    low, high = _plain_percentile_ci(diffs, 0.95)
    assert (paired.low, paired.high) == pytest.approx((low, high), abs=1e-12)
    assert paired.low > 0  # the improvement is real and pairing shows it
    unpaired = bootstrap_diff_ci(treatment, baseline, n_resamples=n_resamples, seed=seed)
    assert paired.high - paired.low < unpaired.high - unpaired.low


def test_bootstrap_rejects_bad_input() -> None:
    with pytest.raises(EvalStatsError, match="empty"):
        bootstrap_mean_ci([])
    with pytest.raises(EvalStatsError, match="confidence"):
        bootstrap_mean_ci([1.0], confidence=95)
    with pytest.raises(EvalStatsError, match="n_resamples"):
        bootstrap_mean_ci([1.0], n_resamples=0)
    with pytest.raises(EvalStatsError, match="equal length"):
        bootstrap_diff_ci([1.0, 0.0], [1.0], paired=True)
    with pytest.raises(EvalStatsError, match="non-finite"):
        balrog_mean_se([0.5, float("nan")])
