"""verlog.algorithms.curriculum: the task-family bandit (uniform, weighted, SEC), its state and its metrics."""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

from verlog.algorithms.curriculum import (
    SEC_ALPHA,
    SEC_TAU,
    CurriculumConfig,
    CurriculumSettingsError,
    CurriculumStateError,
    TaskCurriculum,
    boltzmann,
    check_curriculum_settings,
    curriculum_metrics,
    family_abs_advantage,
    update_q,
)
from verlog.errors import VerlogError

FAMILIES = ["goto", "pickup", "open"]


def test_abs_advantage_per_row_and_per_token() -> None:
    # per row (GRPO-style): mean |A| of each family's rows
    rewards = family_abs_advantage([1.0, -3.0, 0.5, -0.5], ["a", "a", "b", "b"])
    assert rewards == pytest.approx({"a": 2.0, "b": 0.5})
    # per token with a mask: a row's value is the mean over its masked tokens; each row weighs the same
    adv = torch.tensor([[1.0, -1.0, 9.0], [2.0, 0.0, 0.0], [4.0, 4.0, 4.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 0, 0]])
    rewards = family_abs_advantage(adv, ["a", "a", "b"], mask)
    assert rewards == pytest.approx({"a": (1.0 + 2.0) / 2})
    assert "b" not in rewards  # no counted entry: its Q is not updated
    # untrained rows are left out
    assert family_abs_advantage([1.0, 5.0], ["a", "a"], trained=[True, False]) == pytest.approx({"a": 1.0})


def test_abs_advantage_ignores_values_outside_the_mask() -> None:
    adv = np.array([[1.0, np.nan], [2.0, 1e9]])
    mask = np.array([[1, 0], [1, 0]])
    assert family_abs_advantage(adv, ["a", "a"], mask) == pytest.approx({"a": 1.5})


def test_abs_advantage_bad_inputs_are_named_errors() -> None:
    with pytest.raises(CurriculumStateError, match="2 family labels for 3 rows"):
        family_abs_advantage([1.0, 2.0, 3.0], ["a", "b"])
    with pytest.raises(CurriculumStateError, match="mask has shape"):
        family_abs_advantage(np.zeros((2, 3)), ["a", "b"], np.ones((2, 2)))


def test_td0_update_only_families_with_rows() -> None:
    q = update_q({"a": 1.0, "b": 2.0}, {"a": 3.0}, alpha=0.5)
    assert q == {"a": 2.0, "b": 2.0}
    with pytest.raises(CurriculumStateError, match="not a task family"):
        update_q({"a": 0.0}, {"c": 1.0}, alpha=0.5)


def test_boltzmann_is_softmax_and_stable() -> None:
    q = np.array([0.0, 1.0, 2.0])
    expected = np.exp(q) / np.exp(q).sum()
    assert boltzmann(q, 1.0) == pytest.approx(expected)
    big = boltzmann([1000.0, 1001.0], 1.0)  # exp(1000) would overflow without the shift
    assert np.isfinite(big).all() and big.sum() == pytest.approx(1.0)
    assert boltzmann([0.0, 0.0, 0.0], 0.3) == pytest.approx([1 / 3] * 3)


def test_tau_to_zero_is_greedy_and_tau_zero_splits_ties() -> None:
    q = [0.1, 0.5, 0.3]
    assert boltzmann(q, 1e-6) == pytest.approx([0.0, 1.0, 0.0])
    assert boltzmann(q, 0.0).tolist() == [0.0, 1.0, 0.0]
    assert boltzmann([0.5, 0.1, 0.5], 0.0).tolist() == [0.5, 0.0, 0.5]
    assert boltzmann([0.5, 0.1, 0.5], 1e-9) == pytest.approx([0.5, 0.0, 0.5])


def test_a_family_with_larger_advantages_gains_probability() -> None:
    cur = TaskCurriculum(FAMILIES, CurriculumConfig(kind="sec"))
    assert cur.probabilities() == pytest.approx(dict.fromkeys(FAMILIES, 1 / 3))  # Q starts at 0: uniform
    rng = np.random.default_rng(0)
    for _ in range(5):
        rows = ["goto"] * 8 + ["pickup"] * 8 + ["open"] * 8
        adv = np.concatenate([rng.normal(0, 0.1, 8), rng.normal(0, 1.0, 8), rng.normal(0, 0.1, 8)])
        cur.update(family_abs_advantage(adv, rows))
    probs = cur.probabilities()
    assert probs["pickup"] > 0.45 and probs["pickup"] > probs["goto"] and probs["pickup"] > probs["open"]
    draws = cur.draw_many(2000)
    assert draws.count("pickup") / 2000 == pytest.approx(probs["pickup"], abs=0.04)


def test_sec_greedy_with_tau_zero_draws_only_the_best() -> None:
    cur = TaskCurriculum(FAMILIES, CurriculumConfig(kind="sec", tau=0.0))
    cur.update({"open": 1.0})
    assert set(cur.draw_many(50)) == {"open"}


def test_uniform_stays_uniform_whatever_the_advantages() -> None:
    cur = TaskCurriculum(FAMILIES, CurriculumConfig(kind="uniform"), seed=3)
    cur.update({"goto": 5.0, "pickup": 0.0})
    assert cur.q["goto"] == pytest.approx(2.5)  # Q is tracked (and logged) under every kind
    assert cur.probabilities() == pytest.approx(dict.fromkeys(FAMILIES, 1 / 3))
    draws = cur.draw_many(3000)
    for family in FAMILIES:
        assert draws.count(family) / 3000 == pytest.approx(1 / 3, abs=0.04)


def test_weighted_follows_the_weights() -> None:
    weights = {"goto": 1.0, "pickup": 3.0, "open": 0.0}
    cur = TaskCurriculum(FAMILIES, CurriculumConfig(kind="weighted"), seed=1, weights=weights)
    cur.update({"open": 10.0})
    assert cur.probabilities() == pytest.approx({"goto": 0.25, "pickup": 0.75, "open": 0.0})
    draws = cur.draw_many(4000)
    assert "open" not in draws
    assert draws.count("pickup") / 4000 == pytest.approx(0.75, abs=0.03)
    assert cur.draws["pickup"] == draws.count("pickup")


def test_resume_gives_the_same_draws() -> None:
    settings = CurriculumConfig(kind="sec", alpha=0.5, tau=0.5)
    run = TaskCurriculum(FAMILIES, settings, seed=7)
    run.draw_many(5)
    run.update({"goto": 0.2, "open": 1.0})
    saved = pickle.loads(pickle.dumps(run.state_dict()))  # as a checkpoint would keep it
    expected = [run.draw() for _ in range(20)]
    run.update({"pickup": 2.0})
    expected += run.draw_many(20)

    resumed = TaskCurriculum(FAMILIES, settings, seed=999)  # another seed: the state decides
    resumed.load_state_dict(saved)
    got = [resumed.draw() for _ in range(20)]
    resumed.update({"pickup": 2.0})
    got += resumed.draw_many(20)
    assert got == expected
    assert resumed.state_dict() == run.state_dict()


def test_a_state_of_other_families_or_kind_is_refused() -> None:
    state = TaskCurriculum(FAMILIES, CurriculumConfig(kind="sec")).state_dict()
    other = TaskCurriculum(["goto", "pickup"], CurriculumConfig(kind="sec"))
    with pytest.raises(CurriculumStateError, match=r"same env\.tasks"):
        other.load_state_dict(state)
    uniform = TaskCurriculum(FAMILIES, CurriculumConfig(kind="uniform"))
    with pytest.raises(CurriculumStateError, match=r"curriculum\.kind=sec"):
        uniform.load_state_dict(state)
    with pytest.raises(CurriculumStateError, match="not a curriculum state"):
        uniform.load_state_dict({"q": {}})
    with pytest.raises(CurriculumStateError, match=r"lacks \['rng'\]"):
        uniform.load_state_dict({k: v for k, v in state.items() if k != "rng"})


def test_bad_settings_give_one_named_error_listing_every_problem() -> None:
    bad = CurriculumConfig(kind="secc", alpha=1.5, tau=-1.0)
    with pytest.raises(CurriculumSettingsError) as info:
        check_curriculum_settings(bad, FAMILIES, {"goto": 1.0})
    text = str(info.value)
    assert isinstance(info.value, VerlogError)
    assert "4 problem(s)" in text
    assert "did you mean 'sec'" in text
    assert "curriculum.alpha is 1.5" in text and "(0, 1]" in text
    assert "curriculum.tau is -1.0" in text
    assert "curriculum.kind=weighted, or drop the weights" in text


def test_bad_weights_are_named() -> None:
    with pytest.raises(CurriculumSettingsError, match="no weights are given"):
        check_curriculum_settings(CurriculumConfig(kind="weighted"), FAMILIES)
    weights = {"goto": 1.0, "pickpu": 1.0, "open": -2.0}
    with pytest.raises(CurriculumSettingsError) as info:
        TaskCurriculum(FAMILIES, CurriculumConfig(kind="weighted"), weights=weights)
    text = str(info.value)
    assert "did you mean 'pickup'" in text
    assert "no curriculum weight for ['pickup']" in text
    assert "not finite numbers >= 0" in text
    zeros = dict.fromkeys(FAMILIES, 0.0)
    with pytest.raises(CurriculumSettingsError, match="every curriculum weight is 0"):
        check_curriculum_settings(CurriculumConfig(kind="weighted"), FAMILIES, zeros)
    with pytest.raises(CurriculumSettingsError, match="listed more than once"):
        check_curriculum_settings(CurriculumConfig(), ["goto", "goto"])
    with pytest.raises(CurriculumSettingsError, match="no task families"):
        check_curriculum_settings(CurriculumConfig(), [])


@dataclass
class _Episode:
    task: str
    ret: float
    success: bool


def test_metrics_per_family() -> None:
    cur = TaskCurriculum(FAMILIES, CurriculumConfig(kind="sec"))
    cur.update({"goto": 1.0})
    episodes = [_Episode("goto", 1.0, True), _Episode("goto", 0.0, False), _Episode("open", 0.5, True)]
    rows = ["goto"] * 6 + ["open"] * 2
    m = curriculum_metrics(cur, episodes, rows)
    assert m["curriculum/goto/q"] == pytest.approx(0.5)
    assert m["curriculum/goto/reward"] == pytest.approx(1.0)
    assert "curriculum/open/reward" not in m
    assert sum(m[f"curriculum/{f}/prob"] for f in FAMILIES) == pytest.approx(1.0)
    assert m["family/goto/episodes"] == 2.0 and m["family/goto/success_rate"] == 0.5
    assert m["family/goto/return_mean"] == 0.5
    assert m["family/goto/row_share"] == 0.75 and m["family/pickup/row_share"] == 0.0
    assert m["family/pickup/episodes"] == 0.0 and "family/pickup/success_rate" not in m
    with pytest.raises(CurriculumStateError, match="not a task family"):
        curriculum_metrics(cur, [_Episode("goot", 0.0, False)], [])


def test_the_docs_list_every_metric_and_the_defaults() -> None:
    doc = (Path(__file__).resolve().parents[3] / "docs" / "curriculum.md").read_text()
    cur = TaskCurriculum(["x"], CurriculumConfig(kind="sec"))
    cur.update({"x": 1.0})
    for name in curriculum_metrics(cur, [_Episode("x", 1.0, True)], ["x"]):
        assert f"`{name.replace('/x/', '/<f>/')}`" in doc, f"docs/curriculum.md does not list {name}"
    assert f"alpha = {SEC_ALPHA}" in doc and f"tau = {SEC_TAU}" in doc


def test_draws_and_updates_in_two_threads_never_mix_two_q_versions() -> None:
    """Under async rollout the collector's thread draws while the trainer's thread updates Q (docs/async.md). A
    draw that read Q once per family could mix two versions, and numpy then refuses probabilities that do not sum to
    1 (the code before the lock failed here within 3,000 updates). Thread switches every microsecond."""
    import sys
    import threading

    families = [f"f{i}" for i in range(6)]
    cur = TaskCurriculum(families, CurriculumConfig(kind="sec", tau=0.05, alpha=1.0), seed=3)
    errors: list[Exception] = []
    batches: list[list[str]] = []
    stop = threading.Event()

    def trainer() -> None:
        rng = np.random.default_rng(0)
        for version in range(3000):
            cur.update({f: float(rng.uniform(0, 50)) for f in families})  # large swings between versions
            if version % 100 == 0:
                state = cur.state_dict()
                assert set(state["draws"]) == set(families)  # a snapshot taken while the other thread draws
        stop.set()

    def collector() -> None:
        while not stop.is_set():
            try:
                batches.append(cur.draw_many(4))
            except Exception as exc:  # any failure of a draw is the finding
                errors.append(exc)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=trainer), threading.Thread(target=collector)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)
    finally:
        sys.setswitchinterval(interval)
    assert not errors, errors[:3]
    assert len(batches) > 50 and sum(cur.draws.values()) == 4 * len(batches)


def test_a_curriculum_pickles_and_its_copy_draws_the_same() -> None:
    cur = TaskCurriculum(FAMILIES, CurriculumConfig(kind="sec"), seed=5)
    cur.update(dict.fromkeys(FAMILIES, 1.0))
    copy = pickle.loads(pickle.dumps(cur))
    assert copy.draw_many(20) == cur.draw_many(20)
    copy.update(dict.fromkeys(FAMILIES, 2.0))  # its own lock
