"""The bootstrap diagnosis (verlog/sweep/analysis.py): hand cases, and every number against a bootstrap written out as
plain loops over the same random draws."""

from __future__ import annotations

import math

import numpy as np
import pytest

from verlog.sweep.analysis import (
    UNSET,
    DiagnosisError,
    Levels,
    diagnose,
    level_means,
    levels_of,
    recommend,
    resample_weights,
    seed_noise,
)
from verlog.sweep.space import Param
from verlog.sweep.space_file import parse_space


def _levels(key: str, labels: list[str], index: list[int]) -> Levels:
    return Levels(key, tuple(labels), tuple(index), tuple(labels))


def test_level_means_weigh_each_trial_and_leave_absent_levels_undefined() -> None:
    outcomes = np.array([[1.0, 2.0, 3.0, 4.0]])
    index = np.array([[0, 0, 1, 1]])
    assert level_means(outcomes, index, 3)[0, :2].tolist() == [1.5, 3.5]
    assert math.isnan(level_means(outcomes, index, 3)[0, 2])
    weights = np.array([[3.0, 1.0, 0.0, 2.0]])  # trial 0 drawn three times, trial 2 not at all
    assert level_means(outcomes, index, 3, weights)[0, :2].tolist() == [(3 * 1 + 2) / 4, 4.0]


def test_resample_weights_count_the_drawn_configurations() -> None:
    groups = [7, 7, 9, 4]  # configurations 7 (two seeds), 9, 4
    weights = resample_weights(groups, 50, np.random.default_rng(1))
    idx = np.random.default_rng(1).integers(0, 3, size=(50, 3))  # the same draws, over the 3 configurations
    for b in range(50):
        counts = [int(np.sum(idx[b] == j)) for j in range(3)]  # 7 -> 0, 9 -> 1, 4 -> 2 (first appearance)
        assert weights[b].tolist() == [counts[0], counts[0], counts[1], counts[2]]


def test_a_decisive_key_against_a_key_that_does_nothing() -> None:
    outcomes = [1.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    decisive = _levels("a", ["x", "y"], [0, 0, 0, 1, 1, 1])
    noise = _levels("b", ["u", "v"], [0, 1, 0, 1, 0, 1])
    d = diagnose(outcomes, [noise, decisive], n_resamples=2000, n_permutations=1000, seed=0)
    assert [e.key for e in d.effects] == ["a", "b"]  # the larger spread first
    a = d.effect("a")
    assert a.recommended == "x"
    x, y = a.level("x"), a.level("y")
    assert (x.n, x.mean, x.mean_low, x.mean_high) == (3, 1.0, 1.0, 1.0)
    assert (y.mean, y.diff, y.diff_low, y.diff_high) == (0.0, -1.0, -1.0, -1.0)
    assert (a.spread, a.spread_low, a.spread_high) == (1.0, 1.0, 1.0)
    # x loses only the resamples that drew none of its three trials: (1/2)^6 of them
    assert x.p_best == pytest.approx(1 - 0.5**6, abs=0.01) and x.p_best + y.p_best == pytest.approx(1.0)
    assert x.top_share == pytest.approx(x.p_best)
    # 2 of the 20 ways to split six outcomes in three and three separate the 1s from the 0s
    assert a.p_value == pytest.approx(0.1, abs=0.03)
    b = d.effect("b")
    assert b.spread == pytest.approx(1 / 3) and b.p_value == 1.0
    assert 0.3 < b.level("u").p_best < 0.95


def _plain_diagnosis(outcomes, labels, groups, b_count, p_count, seed, maximize, confidence):
    """The diagnosis written out as loops over the same draws: per resample, the multiset of trials."""
    y = [float(v) for v in outcomes]
    n = len(y)
    rng = np.random.default_rng(seed)
    distinct = list(dict.fromkeys(groups))
    idx = rng.integers(0, len(distinct), size=(b_count, len(distinct)))
    perms = [rng.permutation(n) for _ in range(p_count)]
    sign = 1 if maximize else -1
    levels = sorted(set(labels))
    means = {lv: [] for lv in levels}
    best = {lv: 0.0 for lv in levels}
    top = {lv: 0.0 for lv in levels}
    spreads = []
    for b in range(b_count):
        drawn = [i for j in idx[b] for i in range(n) if groups[i] == distinct[j]]
        row = {}
        for lv in levels:
            values = [y[i] for i in drawn if labels[i] == lv]
            row[lv] = sum(values) / len(values) if values else None
            means[lv].append(row[lv])
        present = {lv: m for lv, m in row.items() if m is not None}
        top_mean = max(sign * v for v in present.values())
        winners = [lv for lv, m in present.items() if math.isclose(sign * m, top_mean, rel_tol=0, abs_tol=1e-12)]
        for lv in winners:
            best[lv] += 1 / len(winners) / b_count
        top_value = max(sign * y[i] for i in drawn)
        top_trials = sorted({i for i in drawn if sign * y[i] == top_value})
        for i in top_trials:
            top[labels[i]] += 1 / len(top_trials) / b_count
        if len(present) >= 2:
            spreads.append(max(present.values()) - min(present.values()))

    def spread_of(values):
        groups_means = [
            sum(v for v, lv in zip(values, labels) if lv == L) / labels.count(L) for L in levels if L in labels
        ]
        return max(groups_means) - min(groups_means)

    observed = spread_of(y)
    hits = sum(spread_of([y[i] for i in perm]) >= observed - 1e-12 for perm in perms)
    alpha = 1 - confidence

    def interval(samples):
        samples = [s for s in samples if s is not None]
        return tuple(np.quantile(samples, [alpha / 2, 1 - alpha / 2]))

    return {
        "means": {lv: interval(means[lv]) for lv in levels},
        "best": best,
        "top": top,
        "spread": interval(spreads),
        "p": (1 + hits) / (1 + p_count),
    }


@pytest.mark.parametrize(("maximize", "with_seeds"), [(True, False), (False, True)])
def test_every_number_matches_a_plain_bootstrap(maximize: bool, with_seeds: bool) -> None:
    rng = np.random.default_rng(5)
    n = 18
    labels = [["lo", "mid", "hi"][i % 3] for i in range(n)]
    outcomes = [round(0.2 * (i % 3) + float(rng.normal(0, 0.3)), 2) for i in range(n)]
    outcomes[4] = outcomes[7]  # a tie at the top of some resamples
    groups = [i // 2 for i in range(n)] if with_seeds else list(range(n))
    if with_seeds:
        labels = [labels[2 * (i // 2)] for i in range(n)]  # the two seeds of a configuration share its settings
    order = ["lo", "mid", "hi"]
    lv = Levels("k", tuple(order), tuple(order.index(x) for x in labels), tuple(order))
    d = diagnose(outcomes, [lv], groups=groups, maximize=maximize, n_resamples=300, n_permutations=200, seed=11)
    plain = _plain_diagnosis(outcomes, labels, groups, 300, 200, 11, maximize, 0.95)
    effect = d.effect("k")
    for s in effect.levels:
        assert (s.mean_low, s.mean_high) == pytest.approx(plain["means"][s.label])
        assert s.p_best == pytest.approx(plain["best"][s.label])
        assert s.top_share == pytest.approx(plain["top"][s.label])
        assert s.n == labels.count(s.label)
    assert (effect.spread_low, effect.spread_high) == pytest.approx(plain["spread"])
    assert effect.p_value == pytest.approx(plain["p"])
    assert effect.recommended == max(order, key=lambda L: plain["best"][L])


def test_ties_share_the_win() -> None:
    d = diagnose([0.5] * 6, [_levels("a", ["x", "y", "z"], [0, 1, 2, 0, 1, 2])], n_resamples=500, seed=0)
    effect = d.effect("a")
    # every present level ties in every resample: each wins a third, less the resamples that miss it
    assert sum(s.p_best for s in effect.levels) == pytest.approx(1.0)
    assert [s.p_best for s in effect.levels] == pytest.approx([1 / 3] * 3, abs=0.03)
    assert effect.recommended == max(effect.levels, key=lambda s: s.p_best).label
    assert effect.spread == 0.0 and effect.p_value == 1.0


def test_minimising_recommends_the_lowest_level() -> None:
    lv = _levels("a", ["x", "y"], [0, 0, 0, 1, 1, 1])
    d = diagnose([3.0, 3.2, 2.9, 1.0, 1.1, 0.9], [lv], maximize=False, n_resamples=500, seed=0)
    assert d.effect("a").recommended == "y"
    assert d.effect("a").level("x").diff == pytest.approx(3.0333 - 1.0, abs=1e-3)


def test_the_unset_level_of_a_conditional_key_is_never_recommended() -> None:
    lv = Levels("c", ("1", "2", UNSET), (0, 1, 2, 2, 0, 1), (1, 2, None))
    d = diagnose([0.1, 0.2, 0.9, 0.9, 0.1, 0.3], [lv], n_resamples=500, seed=0)
    effect = d.effect("c")
    assert effect.level(UNSET).p_best > 0.5  # the unset trials do best...
    assert effect.recommended == "2"  # ...but the recommendation is a value to set


def test_levels_of_choices_ranges_and_unset_trials() -> None:
    choice = Param("a", "choice", values=("x", "y", "z"))
    lv = levels_of(choice, ["z", "x", "z", None])
    assert lv.labels == ("x", "z", UNSET) and lv.index == (1, 0, 1, 2) and lv.values == ("x", "z", None)
    log = Param("lr", "loguniform", low=1e-4, high=1e-2)
    lv = levels_of(log, [1e-4, 2e-4, 1e-3, 2e-3, 5e-3, 1e-2])
    assert lv.labels == ("[0.0001, 0.000464)", "[0.000464, 0.00215)", "[0.00215, 0.01]")  # equal in log space
    assert lv.index == (0, 0, 1, 1, 2, 2)
    assert lv.values == (0.00015, 0.0015, 0.0075)  # each bin's median trial value
    few = levels_of(Param("t", "uniform", low=0.0, high=1.0), [0.5, 0.25, 0.5])
    assert few.labels == ("0.25", "0.5") and few.index == (1, 0, 1)  # fewer distinct values than bins: as they are
    ints = levels_of(Param("w", "int", low=0, high=9), [3, 1, 3, 7, 9])
    assert ints.labels == ("1", "3", "7", "9")
    many = levels_of(Param("w", "int", low=0, high=9), [0, 1, 2, 3, 4, 5, 6, 9])
    assert many.labels == ("[0, 3)", "[3, 6)", "[6, 9]") and many.values == (1, 4, 8)  # medians, as integers
    grid = levels_of(Param("g", "uniform", low=0.0, high=1.0, points=5), [0.0, 0.25, 0.5, 0.75, 1.0, 0.5])
    assert grid.labels == ("0.0", "0.25", "0.5", "0.75", "1.0")  # a grid's points stay levels
    drawn = levels_of(Param("g", "uniform", low=0.0, high=1.0, points=5), [i / 10 for i in range(11)])
    assert len(drawn.labels) == 3  # the same key sampled at random: binned


def test_recommend_sets_a_conditional_key_only_where_its_condition_holds() -> None:
    space = parse_space(
        {
            "params": {
                "algorithm.estimator": ["dual_gae", "gigpo"],
                "algorithm.gigpo_omega": {"choice": [0.5, 1.0], "when": {"algorithm.estimator": "gigpo"}},
            },
            "sampling": {"trials": 2},
        }
    )
    trials = [
        ({"algorithm.estimator": "dual_gae"}, 0.9),
        ({"algorithm.estimator": "dual_gae"}, 0.8),
        ({"algorithm.estimator": "gigpo", "algorithm.gigpo_omega": 1.0}, 0.4),
        ({"algorithm.estimator": "gigpo", "algorithm.gigpo_omega": 0.5}, 0.2),
    ]
    levels = [levels_of(p, [t.get(p.key) for t, _ in trials]) for p in space.params]
    d = diagnose([o for _, o in trials], levels, n_resamples=500, seed=0)
    assert recommend(space.params, d) == {"algorithm.estimator": "dual_gae"}
    flipped = diagnose([0.1, 0.2, 0.9, 0.5], levels, n_resamples=500, seed=0)
    assert recommend(space.params, flipped) == {"algorithm.estimator": "gigpo", "algorithm.gigpo_omega": 1.0}


def test_seed_noise_against_hand_numbers() -> None:
    # configuration 0: 0.2, 0.4 (variance 0.02); configuration 1: 0.6, 0.8 (0.02); configuration 2 has one seed
    noise = seed_noise([0.2, 0.4, 0.6, 0.8, 0.5], [0, 0, 1, 1, 2])
    assert noise is not None and noise.configs == 2
    assert noise.within_sd == pytest.approx(math.sqrt(0.02))
    assert noise.between_sd == pytest.approx(np.std([0.3, 0.7], ddof=1))
    assert seed_noise([0.1, 0.2], [0, 1]) is None


def test_bad_inputs_are_named() -> None:
    lv = _levels("a", ["x"], [0])
    with pytest.raises(DiagnosisError, match="1 trial"):
        diagnose([0.5], [lv])
    with pytest.raises(DiagnosisError, match="not a finite number"):
        diagnose([0.5, math.nan], [_levels("a", ["x"], [0, 0])])
    with pytest.raises(DiagnosisError, match="3 level indices for 2 outcomes"):
        diagnose([0.5, 0.6], [_levels("a", ["x"], [0, 0, 0])])
    with pytest.raises(DiagnosisError, match="confidence"):
        diagnose([0.5, 0.6], [_levels("a", ["x"], [0, 0])], confidence=1.5)
