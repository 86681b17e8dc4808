"""The estimator registry (verlog/algorithms/estimators.py) without verl: each entry's declarations, its config checks
as verlog.config.checks reports them, its compute function against the library functions it wraps, and the example of
docs/algorithms.md, "Adding an estimator" (registered on the spot, then checked, mapped onto verl's keys and run)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch

from verlog.algorithms import estimators
from verlog.algorithms.dual_gae import dual_discount_gae, masked_whiten, turn_level_advantages
from verlog.algorithms.estimators import REGISTRY, Estimate, Grouping, Rows, get_estimator, register_estimator
from verlog.algorithms.group_advantage import group_advantages
from verlog.config.checks import TrainConfigError, check_config, check_sizes
from verlog.config.schema import AlgorithmConfig, TrainConfig

DOC = Path(__file__).resolve().parents[3] / "docs" / "algorithms.md"


def test_the_three_entries_and_what_they_declare():
    assert tuple(REGISTRY) == estimators.estimator_names() == ("dual_gae", "grpo", "gigpo")
    dual, grpo, gigpo = (get_estimator(n) for n in ("dual_gae", "grpo", "gigpo"))
    assert dual.needs_critic and dual.grouping is Grouping.SLOTS and dual.tapes
    for entry in (grpo, gigpo):
        assert not entry.needs_critic and entry.grouping is Grouping.GROUPS and entry.tapes
        assert entry.checks is estimators.group_rollout_problems
    assert dual.checks is estimators.slot_rollout_problems
    assert set(grpo.metrics) < set(gigpo.metrics) and "adv/anchor_groups" in gigpo.metrics
    assert {"adv/linked_rows", "adv/bootstrap_rows", "adv/next_value_mean"} <= set(dual.metrics)
    assert estimators.choices_meaning() == "dual_gae: critic; grpo, gigpo: groups"


def test_unknown_and_duplicate_names_are_refused():
    with pytest.raises(ValueError, match="no advantage estimator 'ppo'; registered: dual_gae, grpo, gigpo"):
        get_estimator("ppo")
    with pytest.raises(ValueError, match="'grpo' is registered already"):
        register_estimator(
            "grpo",
            needs_critic=False,
            grouping=Grouping.GROUPS,
            checks=estimators.group_rollout_problems,
            metrics=(),
        )(estimators.grpo)
    assert REGISTRY["grpo"].compute is estimators.grpo


def _cfg(estimator: str = "dual_gae", **rollout: int) -> TrainConfig:
    cfg = TrainConfig(algorithm=AlgorithmConfig(estimator=estimator))
    for key, value in rollout.items():
        setattr(cfg.rollout, key, value)
    return cfg


def test_the_config_messages_come_from_the_registry_unchanged():
    with pytest.raises(TrainConfigError) as err:
        check_config(_cfg("gae"))
    assert str(err.value) == (
        "algorithm.estimator: 'gae' is not one of dual_gae, grpo, gigpo (dual_gae: critic; grpo, gigpo: groups). "
        "Did you mean algorithm.estimator=dual_gae?"
    )
    (slots,) = check_sizes(_cfg("dual_gae", group_size=4))
    assert slots.key == "rollout.group_size" and slots.message == (
        "4 groups slots for the group estimators, but algorithm.estimator=dual_gae: set algorithm.estimator=grpo or "
        "gigpo, or rollout.group_size=1"
    )
    cfg = _cfg("gigpo", group_size=3, num_slots=4)
    cfg.algorithm.warmup_rollout_multiplier = 2
    cfg.algorithm.mini_batches = 8
    cfg.rollout.turns_per_slot = 8
    cfg.env.kwargs = {"max_steps": 9}
    problems = check_sizes(cfg)
    assert [p.key for p in problems] == [
        "rollout.group_size",
        "algorithm.warmup_rollout_multiplier",
        "rollout.num_slots",
        "env.kwargs.max_steps",
    ]
    assert problems == estimators.group_rollout_problems(cfg)
    assert check_sizes(_cfg("grpo", group_size=2, num_slots=4)) == []
    assert check_sizes(_cfg("dual_gae")) == []


def _rows(b: int = 6, r: int = 4, seed: int = 0) -> Rows:
    gen = torch.Generator().manual_seed(seed)
    mask = (torch.arange(r)[None, :] < torch.tensor([4, 2, 3, 1, 4, 2])[:, None]).long()
    return Rows(
        token_rewards=torch.randn(b, r, generator=gen) * mask,
        response_mask=mask,
        episode_id=["a", "a", "b", "c", "c", "d"],
        turn_index=[0, 1, 0, 4, 5, 0],
        terminated=np.array([False, True, False, False, False, True]),
        truncated=np.array([False, False, False, False, True, False]),
        values=torch.randn(b, r, generator=gen),
        next_values=torch.tensor([0.0, 0.0, 0.7, 0.0, -0.2, 0.0]),
    )


@pytest.mark.parametrize(("level", "whiten"), [("token", True), ("turn", False), ("turn", True)])
def test_dual_gae_is_the_library_gae_then_the_turn_level_then_whitening(level, whiten):
    rows = _rows()
    alg = AlgorithmConfig(step_gamma=0.9, step_lam=0.8, advantage_level=level, whiten_advantages=whiten)
    out = estimators.dual_gae(rows, alg)
    raw, returns = dual_discount_gae(
        rows.token_rewards,
        rows.values,
        rows.response_mask,
        [1, -1, -1, 4, -1, -1],
        rows.next_values,
        rows.terminated,
        token_gamma=1.0,
        token_lam=1.0,
        step_gamma=0.9,
        step_lam=0.8,
    )
    expect = turn_level_advantages(raw, rows.response_mask) if level == "turn" else raw
    expect = masked_whiten(expect, rows.response_mask) if whiten else expect
    assert torch.equal(out.raw, raw) and torch.equal(out.returns, returns) and torch.equal(out.advantages, expect)
    trace = {"adv/trace_weight_mean", "adv/trace_weight_min"}  # algorithm.turn_trace=vtrace only
    assert set(out.metrics) == set(get_estimator("dual_gae").metrics) - trace
    assert out.metrics["adv/linked_rows"] == 2 and out.metrics["adv/bootstrap_rows"] == 2  # b, and a time limit


def test_dual_gae_needs_values():
    rows = _rows()
    rows = Rows(**{**rows.__dict__, "values": None})
    with pytest.raises(Exception, match="needs the critic's values"):
        estimators.dual_gae(rows, AlgorithmConfig())


@pytest.mark.parametrize("name", ["grpo", "gigpo"])
def test_the_group_entries_are_the_library_group_advantages(name):
    base = _rows()
    rows = Rows(
        **{
            **base.__dict__,
            "values": None,
            "next_values": None,
            "episode_id": ["a", "a", "b", "c", "d", "e"],
            "turn_index": [0, 1, 0, 0, 0, 0],
            "terminated": np.array([False, True, True, True, False, True]),
            "truncated": np.zeros(6, dtype=bool),
            "group_id": np.array(["g", "g", "g", "h", "h", "h"], dtype=object),
            "anchor": np.array(["x", "y", "x", "x", "z", "x"], dtype=object),
            "trained": np.array([True, True, True, True, False, True]),
        }
    )
    rows = Rows(**{**rows.__dict__, "token_rewards": rows.token_rewards * torch.tensor(rows.trained)[:, None]})
    rows.response_mask[4] = 0  # d was cut by the batch's end: outside the loss
    alg = AlgorithmConfig(estimator=name, group_norm="mean_std", gigpo_step_gamma=0.5, gigpo_omega=0.3)
    out = REGISTRY[name].compute(rows, alg)
    expect = group_advantages(
        name,
        rows.token_rewards,
        rows.response_mask,
        rows.episode_id,
        rows.turn_index,
        rows.terminated.tolist(),
        rows.group_id.tolist(),
        rows.anchor.tolist(),
        rows.trained.tolist(),
        norm="mean_std",
        gamma=0.5,
        omega=0.3,
    )
    assert torch.equal(out.advantages, expect.advantages) and torch.equal(out.returns, expect.advantages)
    assert out.raw is out.advantages and out.metrics == expect.metrics
    assert set(out.metrics) == set(REGISTRY[name].metrics)


def _doc_example() -> str:
    section = DOC.read_text(encoding="utf-8").split("## 7. Adding an estimator", 1)[1]
    (code,) = re.findall(r"```python\n(.*?)```", section, re.S)
    return code


def test_the_example_of_adding_an_estimator(monkeypatch):
    from verlog.trainer.config import verl_overrides

    monkeypatch.setattr(estimators, "REGISTRY", REGISTRY.copy())  # the example's entry lives for this test only
    namespace: dict = {}
    exec(compile(_doc_example(), str(DOC), "exec"), namespace)
    entry = get_estimator("reinforce")
    assert estimators.estimator_names()[-1] == "reinforce"
    assert estimators.choices_meaning() == "dual_gae: critic; grpo, gigpo, reinforce: groups"
    # the config: its checks, and verl's keys without a critic
    cfg = _cfg("reinforce", group_size=2, num_slots=4)
    assert check_config(cfg) is cfg
    with pytest.raises(TrainConfigError, match=r"algorithm\.estimator=reinforce compares the episodes of a group"):
        check_config(_cfg("reinforce", group_size=1))
    assert "critic.enable=False" in verl_overrides(cfg)
    # its advantages: episode returns minus their mean, on every response token; untrained rows get 0
    rows = Rows(
        token_rewards=torch.tensor([[0.0, 1.0], [2.0, 0.0], [0.0, 0.0], [3.0, 0.0]]),
        response_mask=torch.tensor([[1, 1], [1, 0], [0, 0], [1, 0]]),
        episode_id=["a", "a", "idle", "b"],
        turn_index=[0, 1, 1, 0],
        terminated=np.array([False, True, False, True]),
        truncated=np.zeros(4, dtype=bool),
        group_id=np.array(["g"] * 4, dtype=object),
        anchor=np.array(["x", "y", "", "x"], dtype=object),
        trained=np.array([True, True, False, True]),
    )
    out = entry.compute(rows, AlgorithmConfig(estimator="reinforce"))
    assert isinstance(out, Estimate)
    # returns: a = 3, b = 3 -> advantages 0; shift b's reward to see the baseline at work
    assert torch.equal(out.advantages, torch.zeros(4, 2))
    rows.token_rewards[3, 0] = 5.0
    out = entry.compute(rows, AlgorithmConfig(estimator="reinforce"))
    assert out.advantages.tolist() == [[-1.0, -1.0], [-1.0, 0.0], [0.0, 0.0], [1.0, 0.0]]
    assert out.metrics == {"adv/mean": pytest.approx(-1 / 3)}
