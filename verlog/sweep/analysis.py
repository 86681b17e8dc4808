"""The statistical diagnosis of a sweep: which hyperparameters change the outcome, which values are best, and a
configuration that is best across resamples of the trials rather than the single luckiest trial. Pure numpy.

Each swept key splits the trials into levels: its values (a choice; a range whose trials hold few distinct values,
such as a grid's points or a short integer range), or else :data:`RANGE_BINS` equal-width bins over the range (in log
space for a log-uniform range); a conditional key also has the level :data:`UNSET` (trials where it was not set).

The bootstrap resamples configurations, each with all its trials (a configuration run with several seeds is one
draw, so its seeds are never split): with ``G`` configurations, ``idx = default_rng(seed).integers(0, G, size=(B,
G))`` draws ``B`` resamples with replacement (one index array for every key, so each resample is one alternative
sweep); a trial then weighs as often as its configuration was drawn. Without repeated configurations this is the plain
bootstrap of the trials. In each resample, per key:

- the mean outcome of each level (undefined when the resample holds none of its trials);
- which level has the best mean (ties share the win): over the resamples, P(best) of each level;
- which level holds the resample's best trial (ties share it): the "top trial" share, the question the single best
  trial answers, for contrast;
- the spread, the best level mean minus the worst: how much the key moves the outcome.

Intervals are the percentile intervals of those resampled numbers (as :mod:`verlog.eval.stats`). The spread of a key
that does nothing is not 0 (level means differ by chance), so a permutation test gives the chance of a spread at
least as large when the outcomes are shuffled across trials (``p``, with ``(1 + hits) / (1 + permutations)``).

The robust recommendation: for each key, the level that is best in the most resamples (a conditional key only where
its condition holds under the recommended values of the others, and never :data:`UNSET`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from verlog.errors import VerlogError
from verlog.sweep.space import Param, format_value

UNSET = "(unset)"
"""The level of a conditional key in trials where its condition did not hold."""
RANGE_BINS = 3
"""Bins of a range sampled at random (fewer when the trials hold fewer distinct values)."""
MAX_INTEGER_LEVELS = 6
"""An integer range whose trials hold at most this many distinct values keeps one level per value."""


class DiagnosisError(VerlogError, ValueError):
    """Outcomes and levels that cannot be diagnosed (too few trials, mismatched lengths, bad settings)."""


@dataclass(frozen=True)
class Levels:
    """How one key splits the trials: ``labels`` (one per level, in display order), ``index`` (each trial's level)
    and ``values`` (each level's representative value: the value itself, or a bin's median trial value)."""

    key: str
    labels: tuple[str, ...]
    index: tuple[int, ...]
    values: tuple[Any, ...]


@dataclass(frozen=True)
class LevelStats:
    """One level of one key: its trials, mean outcome with its interval, the difference from the key's recommended
    level with its interval, P(best) and the share of resamples whose top trial it holds."""

    label: str
    value: Any
    n: int
    mean: float
    mean_low: float
    mean_high: float
    diff: float
    diff_low: float
    diff_high: float
    p_best: float
    top_share: float


@dataclass(frozen=True)
class KeyEffect:
    """What one key does: its levels, the spread of their means with its interval and permutation p, its
    recommended level (the one best in most resamples)."""

    key: str
    levels: tuple[LevelStats, ...]
    spread: float
    spread_low: float
    spread_high: float
    p_value: float
    recommended: str

    def level(self, label: str) -> LevelStats:
        return next(s for s in self.levels if s.label == label)


@dataclass(frozen=True)
class Diagnosis:
    """A sweep's diagnosis: one :class:`KeyEffect` per key (most influential first), the settings it was made with."""

    effects: tuple[KeyEffect, ...]
    n_trials: int
    maximize: bool
    n_resamples: int
    n_permutations: int
    confidence: float
    seed: int

    def effect(self, key: str) -> KeyEffect:
        return next(e for e in self.effects if e.key == key)


# ------------------------------------------------------------------------------------------------ levels
def levels_of(param: Param, values: Sequence[Any], bins: int = RANGE_BINS) -> Levels:
    """The levels ``param`` splits trials into, given each trial's value (``None``: the key was not set)."""
    present = [v for v in values if v is not None]
    exact = param.kind == "choice" or len(set(present)) <= max(bins, param.points or 0)
    if exact or (param.kind == "int" and len(set(present)) <= MAX_INTEGER_LEVELS):
        order = list(param.values) if param.kind == "choice" else sorted(set(present))
        seen = [v for v in order if v in present]
        labels = [format_value(v) for v in seen]
        index = [seen.index(v) if v is not None else -1 for v in values]
        reps: list[Any] = list(seen)
    else:
        log = param.kind == "loguniform"
        edges = np.linspace(*(np.log([param.low, param.high]) if log else [param.low, param.high]), bins + 1)
        scaled = [None if v is None else (math.log(v) if log else float(v)) for v in values]
        raw = [None if s is None else min(int(np.searchsorted(edges, s, side="right")) - 1, bins - 1) for s in scaled]
        used = sorted({b for b in raw if b is not None})
        shown = np.exp(edges) if log else edges
        labels = [f"[{shown[b]:.3g}, {shown[b + 1]:.3g}{']' if b == bins - 1 else ')'}" for b in used]
        index = [-1 if b is None else used.index(b) for b in raw]
        medians = [float(np.median([v for v, b in zip(values, raw) if b == u])) for u in used]
        reps = [round(m) if param.kind == "int" else float(f"{m:.3g}") for m in medians]
    if any(i < 0 for i in index):
        labels.append(UNSET)
        reps.append(None)
        index = [len(labels) - 1 if i < 0 else i for i in index]
    return Levels(param.key, tuple(labels), tuple(index), tuple(reps))


# ------------------------------------------------------------------------------------------------ bootstrap
def level_means(
    outcomes: np.ndarray, index: np.ndarray, n_levels: int, weights: np.ndarray | None = None
) -> np.ndarray:
    """Weighted mean outcome of each level in each row: ``outcomes``, ``index`` (each trial's level) and ``weights``
    (how often each trial counts; default 1) of shape (rows, n); result shape (rows, n_levels), NaN where a row gives
    a level no weight."""
    w = np.ones_like(outcomes) if weights is None else weights
    means = np.full((outcomes.shape[0], n_levels), np.nan)
    for level in range(n_levels):
        mask = np.where(index == level, w, 0.0)
        count = mask.sum(axis=1)
        np.divide((mask * outcomes).sum(axis=1), count, out=means[:, level], where=count > 0)
    return means


def resample_weights(groups: Sequence[int], n_resamples: int, rng: np.random.Generator) -> np.ndarray:
    """How often each trial counts in each of ``n_resamples`` resamples of the configurations, shape (B, n):
    ``idx = rng.integers(0, G, size=(B, G))`` over the ``G`` distinct values of ``groups`` (in order of first
    appearance), each trial weighing as often as its configuration was drawn."""
    distinct = list(dict.fromkeys(int(g) for g in groups))
    position = np.asarray([distinct.index(int(g)) for g in groups])
    idx = rng.integers(0, len(distinct), size=(n_resamples, len(distinct)))
    counts = np.zeros((n_resamples, len(distinct)))
    np.add.at(counts, (np.arange(n_resamples)[:, None], idx), 1.0)
    return counts[:, position]


def win_shares(scores: np.ndarray) -> np.ndarray:
    """Per row of ``scores`` (rows, k; NaN = absent), 1 for the largest entry, shared equally among ties, 0 else."""
    best = np.nanmax(scores, axis=1, keepdims=True)
    wins = np.isclose(scores, best, rtol=0.0, atol=1e-12) & ~np.isnan(scores)
    return wins / wins.sum(axis=1, keepdims=True)


def spreads(means: np.ndarray) -> np.ndarray:
    """Per row, the largest level mean minus the smallest (NaN for a row with fewer than two levels present)."""
    present = (~np.isnan(means)).sum(axis=1)
    with np.errstate(invalid="ignore"):
        out = np.nanmax(means, axis=1) - np.nanmin(means, axis=1)
    return np.where(present >= 2, out, np.nan)


def _interval(samples: np.ndarray, confidence: float) -> tuple[float, float]:
    finite = samples[np.isfinite(samples)]
    if finite.size == 0:
        return math.nan, math.nan
    alpha = 1.0 - confidence
    low, high = np.quantile(finite, [alpha / 2, 1 - alpha / 2])
    return float(low), float(high)


def diagnose(
    outcomes: Sequence[float],
    levels: Sequence[Levels],
    *,
    groups: Sequence[int] | None = None,
    maximize: bool = True,
    n_resamples: int = 2000,
    n_permutations: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> Diagnosis:
    """The diagnosis of trials with ``outcomes`` split by each key's ``levels`` (see the module docstring);
    ``groups`` numbers each trial's configuration (default: every trial its own)."""
    y = np.asarray(outcomes, dtype=np.float64)
    n = y.size
    if n < 2:
        raise DiagnosisError(f"{n} trial(s) with an outcome: a diagnosis needs at least 2 (run more trials)")
    if not np.all(np.isfinite(y)):
        raise DiagnosisError("an outcome is not a finite number: leave out trials without an outcome")
    if not 0 < confidence < 1:
        raise DiagnosisError(f"confidence must be in (0, 1), e.g. 0.95; got {confidence}")
    if n_resamples < 1 or n_permutations < 0:
        raise DiagnosisError(f"n_resamples must be >= 1 and n_permutations >= 0, got {n_resamples}, {n_permutations}")
    for lv in levels:
        if len(lv.index) != n:
            raise DiagnosisError(f"{lv.key}: {len(lv.index)} level indices for {n} outcomes: give one per trial")
    if groups is not None and len(groups) != n:
        raise DiagnosisError(f"{len(groups)} configuration numbers for {n} outcomes: give one per trial")
    sign = 1.0 if maximize else -1.0
    rng = np.random.default_rng(seed)
    weights = resample_weights(range(n) if groups is None else groups, n_resamples, rng)
    perm = np.stack([rng.permutation(n) for _ in range(n_permutations)]) if n_permutations else np.empty((0, n), int)
    drawn = np.where(weights > 0, sign * y[None, :], np.nan)
    top = np.nan_to_num(win_shares(drawn))  # (B, n): each drawn trial's share of the resample's best outcome
    effects = [_effect(y, lv, weights, top, perm, sign, confidence) for lv in levels]
    effects.sort(key=lambda e: (-(e.spread if math.isfinite(e.spread) else -1.0), e.key))
    return Diagnosis(tuple(effects), n, maximize, n_resamples, n_permutations, confidence, seed)


def _effect(
    y: np.ndarray,
    lv: Levels,
    weights: np.ndarray,
    top: np.ndarray,
    perm: np.ndarray,
    sign: float,
    confidence: float,
) -> KeyEffect:
    k = len(lv.labels)
    g = np.asarray(lv.index)
    observed = level_means(y[None, :], g[None, :], k)[0]
    boot = level_means(np.broadcast_to(y, weights.shape), np.broadcast_to(g, weights.shape), k, weights)
    p_best = win_shares(sign * boot).mean(axis=0)
    top_share = np.stack([top[:, g == level].sum(axis=1) for level in range(k)], axis=1).mean(axis=0)
    candidates = [i for i in range(k) if lv.labels[i] != UNSET] or list(range(k))
    rec = max(candidates, key=lambda i: (p_best[i], sign * observed[i]))
    spread_obs = float(spreads(observed[None, :])[0])
    spread_low, spread_high = _interval(spreads(boot), confidence)
    if perm.shape[0] and math.isfinite(spread_obs):
        null = spreads(level_means(y[perm], np.broadcast_to(g, perm.shape), k))
        p_value = float((1 + np.sum(null >= spread_obs - 1e-12)) / (1 + perm.shape[0]))
    else:
        p_value = math.nan
    stats = []
    for i in range(k):
        low, high = _interval(boot[:, i], confidence)
        d_low, d_high = _interval(boot[:, i] - boot[:, rec], confidence)
        stats.append(
            LevelStats(
                label=lv.labels[i],
                value=lv.values[i],
                n=int(np.sum(g == i)),
                mean=float(observed[i]),
                mean_low=low,
                mean_high=high,
                diff=float(observed[i] - observed[rec]),
                diff_low=d_low,
                diff_high=d_high,
                p_best=float(p_best[i]),
                top_share=float(top_share[i]),
            )
        )
    return KeyEffect(lv.key, tuple(stats), spread_obs, spread_low, spread_high, p_value, lv.labels[rec])


# ------------------------------------------------------------------------------------------------ recommendation
def recommend(params: Sequence[Param], diagnosis: Diagnosis) -> dict[str, Any]:
    """The robust configuration: each key's recommended level's value, in the order of ``params`` (which puts a key
    after those its condition names); a conditional key only where its condition holds under the others' values."""
    chosen: dict[str, Any] = {}
    for p in params:
        if not p.active(chosen):
            continue
        effect = diagnosis.effect(p.key)
        chosen[p.key] = effect.level(effect.recommended).value
    return chosen


def best_trial(outcomes: Sequence[float], maximize: bool = True) -> int:
    """Index of the single best trial (the first of ties)."""
    y = np.asarray(outcomes, dtype=np.float64)
    return int(np.argmax(y) if maximize else np.argmin(y))


@dataclass(frozen=True)
class SeedNoise:
    """Repeated configurations: the spread of outcomes between seeds of one configuration against the spread of
    the configurations' means."""

    configs: int
    within_sd: float
    between_sd: float


def seed_noise(outcomes: Sequence[float], configs: Sequence[int]) -> SeedNoise | None:
    """Pooled standard deviation between seeds of one configuration (``ddof=1``, over configurations with at least
    two outcomes), and the standard deviation of those configurations' means; None when no configuration repeats."""
    groups: dict[int, list[float]] = {}
    for value, config in zip(outcomes, configs):
        groups.setdefault(int(config), []).append(float(value))
    repeated = [np.asarray(v) for v in groups.values() if len(v) >= 2]
    if not repeated:
        return None
    dof = sum(v.size - 1 for v in repeated)
    within = math.sqrt(sum(float(((v - v.mean()) ** 2).sum()) for v in repeated) / dof)
    means = np.asarray([v.mean() for v in repeated])
    between = float(means.std(ddof=1)) if means.size >= 2 else math.nan
    return SeedNoise(len(repeated), within, between)


def levels_for_trials(params: Sequence[Param], trial_params: Sequence[Mapping[str, Any]]) -> list[Levels]:
    """The :class:`Levels` of each key of ``params`` over trials whose keys were ``trial_params``."""
    return [levels_of(p, [tp.get(p.key) for tp in trial_params]) for p in params]
