"""Crafter's own measures of a learning run's evaluations: each achievement's unlock rate and the Crafter score, with
bootstrap intervals, and the score's difference to the start model paired by seed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from verlog.eval import EpisodeRecord, Interval, bootstrap_mean_ci
from verlog.eval.stats import bootstrap_ci
from verlog.reports.evaluation import Evaluation


@dataclass(frozen=True)
class CrafterMeasures:
    """Crafter's own measures of one evaluation (from each episode's final ``achievements`` counts).

    ``unlock``: achievement -> share of episodes that unlocked it at least once (95% bootstrap interval over episodes);
    ``score``: the Crafter score in percent, ``exp(mean_i ln(1 + s_i)) - 1`` over the achievements' unlock rates
    ``s_i`` in percent (the geometric mean the Crafter paper defines), with its bootstrap interval."""

    unlock: dict[str, Interval]
    score: Interval


def _unlocked(records: Sequence[EpisodeRecord], names: Sequence[str]) -> np.ndarray:
    """``[episodes, achievements]`` 1.0 where the episode unlocked the achievement."""
    rows = []
    for r in records:
        got = r.env_stats.get("achievements") or {}
        rows.append([1.0 if float(got.get(name, 0)) > 0 else 0.0 for name in names])
    return np.asarray(rows, dtype=np.float64).reshape(len(records), len(names))


def crafter_score(rates_percent: np.ndarray) -> np.ndarray:
    """The Crafter score of unlock rates in percent (last axis: the achievements)."""
    return np.exp(np.log1p(rates_percent).mean(axis=-1)) - 1.0


def achievement_names(evals: Sequence[Evaluation]) -> list[str]:
    """Every achievement named in the evaluations' records, sorted (empty: not a Crafter run)."""
    names: set[str] = set()
    for e in evals:
        for r in e.records:
            names.update((r.env_stats.get("achievements") or {}).keys())
    return sorted(names)


def crafter_measures(
    result: Evaluation, names: Sequence[str], *, n_resamples: int = 10_000, seed: int = 0
) -> CrafterMeasures:
    """:class:`CrafterMeasures` of one evaluation over the achievements ``names``."""
    unlocked = _unlocked(result.records, names)
    kw = {"n_resamples": n_resamples, "seed": seed}
    unlock = {name: bootstrap_mean_ci(unlocked[:, i], **kw) for i, name in enumerate(names)}
    score = bootstrap_ci(
        lambda idx: crafter_score(100.0 * unlocked[idx].mean(axis=-2)),  # idx (B, n) -> (B,); (n,) -> a scalar
        len(unlocked),
        estimate=float(crafter_score(100.0 * unlocked.mean(axis=0))),
        **kw,
    )
    return CrafterMeasures(unlock, score)


def crafter_score_diff(
    a: Evaluation, b: Evaluation, names: Sequence[str], *, n_resamples: int = 10_000, seed: int = 0
) -> Interval | None:
    """Crafter score of ``a`` minus ``b``, paired by seed (the seeds both played; None when they share none)."""
    by_seed_a = {r.seed: r for r in a.records}
    by_seed_b = {r.seed: r for r in b.records}
    common = sorted(set(by_seed_a) & set(by_seed_b))
    if not common:
        return None
    ua = _unlocked([by_seed_a[k] for k in common], names)
    ub = _unlocked([by_seed_b[k] for k in common], names)
    return bootstrap_ci(
        lambda idx: crafter_score(100.0 * ua[idx].mean(axis=-2)) - crafter_score(100.0 * ub[idx].mean(axis=-2)),
        len(common),  # one index array for both models: paired by seed
        estimate=float(crafter_score(100.0 * ua.mean(axis=0)) - crafter_score(100.0 * ub.mean(axis=0))),
        n_resamples=n_resamples,
        seed=seed,
    )


def crafter_results(
    evals: dict[str, Evaluation], start_label: str, *, n_resamples: int, seed: int
) -> dict[str, dict[str, Any]]:
    """:class:`LearningResults`' ``crafter`` and ``crafter_diffs`` (both empty when no record has achievements)."""
    names = achievement_names(list(evals.values()))
    if not names:
        return {"crafter": {}, "crafter_diffs": {}}
    kw = {"n_resamples": n_resamples, "seed": seed}
    measures = {m: crafter_measures(e, names, **kw) for m, e in evals.items()}
    diffs = {}
    start = evals.get(start_label)
    for m, e in evals.items():
        diff = None if m == start_label or start is None else crafter_score_diff(e, start, names, **kw)
        if diff is not None:
            diffs[m] = diff
    return {"crafter": measures, "crafter_diffs": diffs}
