"""Statistics of an evaluation: BALROG's progression mean and standard error, and bootstrap confidence intervals.

BALROG (docs/evaluation.md, "Numbers") reports, per environment, the mean progression over all its episodes, the
*population* standard deviation (divide by N) and the standard error ``sd / sqrt(N)`` (0 when N <= 1); across
environments, the unweighted mean of the per-environment means and ``sqrt(sum SE_e^2) / E``. :func:`balrog_mean_se`
and :func:`balrog_overall` compute exactly that.

For comparisons (is the trained model better than the one it started from?) :func:`bootstrap_mean_ci` and
:func:`bootstrap_diff_ci` give percentile-bootstrap intervals, reproducible from their ``seed``; both are
:func:`bootstrap_ci`, the one percentile bootstrap, which takes any statistic of resampled episodes (the Crafter
score of verlog/reports/learning). The resampling is
written so that a plain loop with ``numpy.random.default_rng(seed)`` drawing the same index arrays gives the same
numbers (tests/verlog/eval/test_stats.py does exactly that).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from verlog.errors import VerlogError


class EvalStatsError(VerlogError, ValueError):
    """Statistics asked of samples that cannot give them (empty, mismatched lengths, bad confidence)."""


@dataclass(frozen=True)
class MeanSE:
    """A sample mean with BALROG's spread: population standard deviation and ``sd / sqrt(n)``."""

    mean: float
    sd: float
    se: float
    n: int


@dataclass(frozen=True)
class Interval:
    """A point estimate with a two-sided confidence interval ``[low, high]``."""

    estimate: float
    low: float
    high: float
    confidence: float
    n_resamples: int

    def scaled(self, factor: float) -> Interval:
        """The same interval with every number multiplied by ``factor`` (e.g. 100 for percent)."""
        return Interval(
            self.estimate * factor, self.low * factor, self.high * factor, self.confidence, self.n_resamples
        )

    def as_dict(self) -> dict[str, float]:
        return asdict(self)

    def percent(self) -> str:
        """A rate as ``12.5% [8.0, 17.5]``."""
        return f"{100 * self.estimate:.1f}% [{100 * self.low:.1f}, {100 * self.high:.1f}]"

    def points(self) -> str:
        """A difference of rates as ``+4.5 points [-2.0, +11.0]``."""
        return f"{100 * self.estimate:+.1f} points [{100 * self.low:+.1f}, {100 * self.high:+.1f}]"

    def number(self) -> str:
        """A mean as ``1.407 [1.219, 1.606]``."""
        return f"{self.estimate:.3f} [{self.low:.3f}, {self.high:.3f}]"

    def difference(self) -> str:
        """A difference of means as ``+1.234 [+0.946, +1.516]``."""
        return f"{self.estimate:+.3f} [{self.low:+.3f}, {self.high:+.3f}]"


def _as_array(values: Sequence[float] | np.ndarray, name: str) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64).reshape(-1)
    if arr.size == 0:
        raise EvalStatsError(f"{name} is empty: statistics need at least one episode")
    if not np.all(np.isfinite(arr)):
        raise EvalStatsError(f"{name} holds a non-finite value ({arr[~np.isfinite(arr)][0]}): fix the episode records")
    return arr


def balrog_mean_se(values: Sequence[float] | np.ndarray) -> MeanSE:
    """Mean, population standard deviation (divide by N) and standard error ``sd / sqrt(N)`` (0 if N <= 1)."""
    arr = _as_array(values, "values")
    n = int(arr.size)
    mean = float(arr.mean())
    sd = float(math.sqrt(((arr - mean) ** 2).sum() / n))
    se = sd / math.sqrt(n) if n > 1 else 0.0
    return MeanSE(mean=mean, sd=sd, se=se, n=n)


def balrog_overall(env_means: Sequence[float], env_ses: Sequence[float]) -> tuple[float, float]:
    """BALROG's overall score: (unweighted mean of the per-env means, ``sqrt(sum of SE^2) / number of envs``).

    Give the means and SEs in the unit you want back (BALROG uses percent).
    """
    if len(env_means) != len(env_ses):
        raise EvalStatsError(f"{len(env_means)} env means but {len(env_ses)} standard errors: give one of each per env")
    if not env_means:
        raise EvalStatsError("no environments to average: evaluate at least one task")
    k = len(env_means)
    return float(sum(env_means) / k), float(math.sqrt(sum(se * se for se in env_ses)) / k)


def _check_bootstrap_args(confidence: float, n_resamples: int) -> None:
    if not 0 < confidence < 1:
        raise EvalStatsError(f"confidence must be in (0, 1), e.g. 0.95; got {confidence}")
    if n_resamples < 1:
        raise EvalStatsError(f"n_resamples must be >= 1 (10000 is usual), got {n_resamples}")


def _percentile_interval(estimate: float, resampled: np.ndarray, confidence: float) -> Interval:
    alpha = 1.0 - confidence
    low, high = np.quantile(resampled, [alpha / 2, 1 - alpha / 2])
    return Interval(float(estimate), float(low), float(high), confidence, int(resampled.size))


def bootstrap_ci(
    statistic: Callable[[np.ndarray], np.ndarray],
    n: int,
    *,
    estimate: float | None = None,
    confidence: float = 0.95,
    n_resamples: int = 10_000,
    seed: int = 0,
) -> Interval:
    """Percentile-bootstrap interval of a statistic of ``n`` episodes.

    Args:
        statistic: the statistic of the episodes an index array picks: given ``idx`` of shape ``(n,)`` (every
            episode once) it returns a scalar, given ``(n_resamples, n)`` one value per row, shape
            ``(n_resamples,)`` (e.g. ``lambda idx: values[idx].mean(axis=-1)``).
        n: how many episodes (>= 1).
        estimate: the point estimate (default: ``statistic(arange(n))``).

    Resampling: ``idx = default_rng(seed).integers(0, n, size=(n_resamples, n))``; the interval is the
    ``(1 - confidence) / 2`` and ``1 - (1 - confidence) / 2`` quantiles (numpy's default linear rule) of
    ``statistic(idx)``.
    """
    _check_bootstrap_args(confidence, n_resamples)
    if n < 1:
        raise EvalStatsError("no episodes to resample: give at least one")
    idx = np.random.default_rng(seed).integers(0, n, size=(n_resamples, n))
    if estimate is None:
        estimate = float(statistic(np.arange(n)))
    return _percentile_interval(estimate, np.asarray(statistic(idx)), confidence)


def bootstrap_mean_ci(
    values: Sequence[float] | np.ndarray, *, confidence: float = 0.95, n_resamples: int = 10_000, seed: int = 0
) -> Interval:
    """Percentile-bootstrap interval of a mean (:func:`bootstrap_ci` of ``values[idx].mean(axis=-1)``)."""
    _check_bootstrap_args(confidence, n_resamples)
    arr = _as_array(values, "values")
    return bootstrap_ci(
        lambda idx: arr[idx].mean(axis=-1),
        arr.size,
        estimate=arr.mean(),
        confidence=confidence,
        n_resamples=n_resamples,
        seed=seed,
    )


def bootstrap_diff_ci(
    treatment: Sequence[float] | np.ndarray,
    baseline: Sequence[float] | np.ndarray,
    *,
    paired: bool = False,
    confidence: float = 0.95,
    n_resamples: int = 10_000,
    seed: int = 0,
) -> Interval:
    """Percentile-bootstrap interval of ``mean(treatment) - mean(baseline)``.

    Unpaired (two independent samples): ``rng = default_rng(seed)``; first ``ia = rng.integers(0, n_t, (B, n_t))``,
    then ``ib = rng.integers(0, n_b, (B, n_b))``; resampled differences ``t[ia].mean(1) - b[ib].mean(1)``.
    Paired (``paired=True``; same episodes, e.g. the same env seeds evaluated with two models, element i of both
    samples belonging together): one ``idx = rng.integers(0, n, (B, n))`` for both, differences
    ``(t - b)[idx].mean(1)``. Pairing removes the spread between seeds and gives a narrower, still valid interval.
    """
    _check_bootstrap_args(confidence, n_resamples)
    t = _as_array(treatment, "treatment")
    b = _as_array(baseline, "baseline")
    rng = np.random.default_rng(seed)
    estimate = t.mean() - b.mean()
    if paired:
        if t.size != b.size:
            raise EvalStatsError(
                f"a paired bootstrap needs samples of equal length (same episodes), got {t.size} and {b.size}; "
                "pass paired=False for independent samples"
            )
        d = t - b
        return bootstrap_ci(
            lambda idx: d[idx].mean(axis=-1),
            d.size,
            estimate=estimate,
            confidence=confidence,
            n_resamples=n_resamples,
            seed=seed,
        )
    ia = rng.integers(0, t.size, size=(n_resamples, t.size))
    ib = rng.integers(0, b.size, size=(n_resamples, b.size))
    return _percentile_interval(estimate, t[ia].mean(axis=1) - b[ib].mean(axis=1), confidence)
