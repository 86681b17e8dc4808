"""algorithm.turn_trace=vtrace: the dual-discount GAE with each turn's part in earlier turns' advantages cut by
``c = min(1, rho)`` (docs/algorithms.md, "V-trace across turns"): bit for bit the full trace at c = 1, a hand case,
c = 0 as a cut, the weights from log-probs, and the advantage step's rows and metrics."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from test_advantage import BATCH_AND_DISCOUNTS, random_batch

from verlog.algorithms import estimators
from verlog.algorithms.dual_gae import dual_discount_gae, reference_dual_discount_gae, turn_trace_weights
from verlog.algorithms.estimators import Rows
from verlog.config.schema import AlgorithmConfig, EnvConfig, TrainConfig
from verlog.errors import AdvantageInputError

DISCOUNTS = {"token_gamma": 1.0, "token_lam": 1.0, "step_gamma": 0.9, "step_lam": 0.5}


def _gae(batch, trace=None, **discounts):
    rewards, values, mask, next_row, next_value, terminated = (torch.as_tensor(x) for x in batch)
    return dual_discount_gae(
        rewards, values, mask, next_row, next_value, terminated, **(discounts or DISCOUNTS), trace_weights=trace
    )


# ------------------------------------------------------------------ (a) c = 1 is the full trace, bit for bit
@settings(max_examples=60, deadline=None)
@given(**BATCH_AND_DISCOUNTS)
def test_unit_trace_weights_are_the_full_trace_bit_for_bit(seed, episodes, width, holes, tg, tl, sg, sl):
    batch = random_batch(seed, episodes, width, holes)  # episodes over several rows, shuffled, bootstrap values
    d = {"token_gamma": tg, "token_lam": tl, "step_gamma": sg, "step_lam": sl}
    full_adv, full_ret = _gae(batch, None, **d)
    ones = torch.ones(len(batch[0]))
    for trace in (ones, ones.double(), ones.tolist()):
        adv, ret = _gae(batch, trace, **d)
        assert torch.equal(adv, full_adv) and torch.equal(ret, full_ret)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), episodes=st.integers(1, 8), width=st.integers(1, 9), holes=st.booleans())
def test_trace_weights_match_the_nested_loop_reference(seed, episodes, width, holes):
    batch = random_batch(seed, episodes, width, holes)
    rng = np.random.default_rng(seed)
    c = np.where(rng.random(len(batch[0])) < 0.3, 1.0, rng.random(len(batch[0]))).astype(np.float32)
    c[rng.random(len(c)) < 0.1] = 0.0
    adv, ret = _gae(batch, torch.from_numpy(c), token_gamma=0.97, token_lam=0.9, step_gamma=0.99, step_lam=0.95)
    ref_adv, ref_ret = reference_dual_discount_gae(*batch, 0.97, 0.9, 0.99, 0.95, trace_weights=c)
    np.testing.assert_allclose(adv.numpy(), ref_adv * batch[2], atol=2e-5, rtol=1e-5)
    np.testing.assert_allclose(ret.numpy(), ref_ret, atol=2e-5, rtol=1e-5)


# ------------------------------------------------------------------ (b) three turns by hand, c = (1, 0.5, 1)
V3 = [[0.5, 0.6], [0.2, 0.4], [0.4, 0.5]]
R3 = [[0.0, 0.0], [0.0, 0.0], [0.0, 1.0]]


def _three_turns(order, trace):
    """Turns 0, 1, 2 of one episode (terminated at 2) as the rows ``order``; ``trace``: c of turns 0, 1, 2."""
    where = {t: i for i, t in enumerate(order)}
    next_row = [where[t + 1] if t < 2 else -1 for t in order]
    return _gae(
        (
            torch.tensor([R3[t] for t in order]),
            torch.tensor([V3[t] for t in order]),
            torch.ones(3, 2, dtype=torch.long),
            torch.tensor(next_row),
            torch.zeros(3),
            torch.tensor([t == 2 for t in order]),
        ),
        None if trace is None else torch.tensor([trace[t] for t in order]),
    )


@pytest.mark.parametrize("order", [(0, 1, 2), (2, 0, 1)])
def test_three_turns_by_hand(order):
    # turn 2: delta = 0.5 - 0.4 = 0.1, 1 + 0 - 0.5 = 0.5 -> A = 0.6, 0.5
    # turn 1: last delta = 0.9 * V(2,0) - 0.4 = -0.04; A = -0.04 + 0.45 * c2 (1) * 0.6 = 0.23; first 0.2 + 0.23 = 0.43
    # turn 0: last delta = 0.9 * V(1,0) - 0.6 = -0.42; A = -0.42 + 0.45 * c1 (0.5) * 0.43 = -0.32325;
    #         first 0.1 - 0.32325 = -0.22325 (the full trace: -0.2265 and -0.1265)
    expected = {0: [-0.22325, -0.32325], 1: [0.43, 0.23], 2: [0.6, 0.5]}
    full = {**expected, 0: [-0.1265, -0.2265]}
    adv, ret = _three_turns(order, (1.0, 0.5, 1.0))
    full_adv, _ = _three_turns(order, None)
    for i, t in enumerate(order):
        torch.testing.assert_close(adv[i], torch.tensor(expected[t]), atol=1e-6, rtol=0)
        torch.testing.assert_close(ret[i], torch.tensor(expected[t]) + torch.tensor(V3[t]), atol=1e-6, rtol=0)
        torch.testing.assert_close(full_adv[i], torch.tensor(full[t]), atol=1e-6, rtol=0)
    # the first turn's own weight never matters: nothing flows into it from before
    assert torch.equal(_three_turns(order, (0.0, 0.5, 1.0))[0], adv)


# ------------------------------------------------------------------ (c) c = 0 stops the trace
def _chain(seed: int, turns: int = 5, width: int = 4):
    """One episode of ``turns`` rows in order, bootstrapped after its last turn."""
    gen = torch.Generator().manual_seed(seed)
    mask = (torch.arange(width)[None, :] < torch.randint(1, width + 1, (turns,), generator=gen)[:, None]).long()
    rewards = torch.randn(turns, width, generator=gen) * mask
    values = torch.randn(turns, width, generator=gen)
    next_row = torch.tensor([t + 1 if t < turns - 1 else -1 for t in range(turns)])
    next_value = torch.zeros(turns)
    next_value[-1] = 0.7
    return rewards, values, mask, next_row, next_value, torch.zeros(turns, dtype=torch.bool)


@pytest.mark.parametrize("seed", range(5))
def test_a_zero_weight_stops_later_td_errors_at_that_turn(seed):
    rewards, values, mask, next_row, next_value, terminated = batch = _chain(seed)
    c = torch.tensor([1.0, 0.8, 0.0, 0.6, 1.0])  # turn 2 is far off-policy
    adv, _ = _gae(batch, c)
    # turns 0 and 1 see turn 2 only through its value V(s_2): as if the batch ended after turn 1 and bootstrapped
    cut_row, cut_value = next_row.clone(), next_value.clone()
    cut_row[1], cut_value[1] = -1, values[2, 0]
    cut, _ = _gae((rewards, values, mask, cut_row, cut_value, terminated), c)
    torch.testing.assert_close(adv[:2], cut[:2], atol=1e-6, rtol=0)
    # other rewards and values of turns 2.. do not reach turns 0 and 1 at all
    later_rewards, later_values = rewards.clone(), values.clone()
    later_rewards[2:] += 5.0 * mask[2:]
    later_values[2:, 1:] -= 3.0
    later_values[3:, 0] += 2.0
    moved, _ = _gae((later_rewards, later_values, mask, next_row, next_value, terminated), c)
    assert torch.equal(moved[:2], adv[:2]) and not torch.equal(moved[2:], adv[2:])
    # turn 2 itself and the turns after it keep their trace
    full, _ = _gae(batch, None)
    torch.testing.assert_close(adv[2:], _gae(batch, torch.tensor([1.0, 1.0, 1.0, 0.6, 1.0]))[0][2:], atol=0, rtol=0)
    assert not torch.allclose(adv[:2], full[:2])


@pytest.mark.parametrize(
    ("trace", "message"),
    [
        ([1.0, 1.5, 1.0, 1.0, 1.0], r"trace_weights\[1\] = 1.5 is not in \[0, 1\]"),
        ([1.0, 1.0, float("nan"), 1.0, 1.0], r"trace_weights\[2\] = nan"),
        ([1.0, -0.1, 1.0, 1.0, 1.0], "pass min"),
        ([1, 1, 1, 1, 1], "must be a float tensor"),
        ([1.0, 1.0], r"trace_weights must have shape \[B\] = \[5\]"),
    ],
)
def test_bad_trace_weights_are_refused(trace, message):
    with pytest.raises(AdvantageInputError, match=message):
        _gae(_chain(0), torch.tensor(trace))


# ------------------------------------------------------------------ the weights from log-probs
def test_trace_weights_from_log_probs():
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0], [0, 0, 0], [1, 1, 0]])
    old = torch.tensor(
        [
            [-1.0, -2.0, float("-inf")],  # padding may hold anything
            [-0.5, -0.5, -0.5],
            [-3.0, 0.0, 0.0],
            [-1.0, -1.0, -1.0],
            [-1.0, -1.0, 0.0],
        ]
    )
    rollout = torch.tensor(
        [[-1.5, -2.5, 0.0], [-0.1, -0.2, -0.3], [-1.0, 0.0, 0.0], [0.0, 0.0, 0.0], [-9.0, -9.0, 0.0]]
    )
    c = turn_trace_weights(old, rollout, mask)
    expected = [1.0, float(np.exp(-0.9)), float(np.exp(-2.0)), 1.0, 1.0]  # rho = e^1, e^-0.9, e^-2, (no tokens), e^16
    torch.testing.assert_close(c, torch.tensor(expected), atol=1e-7, rtol=1e-6)
    assert c.dtype == torch.float32
    known = torch.tensor([True, False, True, True, True])
    assert turn_trace_weights(old, rollout, mask, known=known)[1] == 1.0
    with pytest.raises(AdvantageInputError, match="must share one"):
        turn_trace_weights(old[:, :2], rollout, mask)


# ------------------------------------------------------------------ the estimator and the advantage step
def _rows(trace=None) -> Rows:
    rewards, values, mask, _, next_value, _ = _chain(3)
    return Rows(
        token_rewards=rewards,
        response_mask=mask,
        episode_id=["e"] * 5,
        turn_index=list(range(5)),
        terminated=np.zeros(5, dtype=bool),
        truncated=np.zeros(5, dtype=bool),
        values=values,
        next_values=next_value,
        trace_weights=trace,
    )


def test_dual_gae_uses_the_trace_weights_with_vtrace_only():
    full = estimators.dual_gae(_rows(), AlgorithmConfig())
    vtrace = AlgorithmConfig(turn_trace="vtrace")
    unit = estimators.dual_gae(_rows(), vtrace)  # no weights: all 1
    assert torch.equal(unit.raw, full.raw) and torch.equal(unit.returns, full.returns)
    assert torch.equal(unit.advantages, full.advantages)
    assert unit.metrics["adv/trace_weight_mean"] == unit.metrics["adv/trace_weight_min"] == 1.0
    assert not {"adv/trace_weight_mean", "adv/trace_weight_min"} & set(full.metrics)
    c = torch.tensor([1.0, 0.5, 0.25, 1.0, 1.0])
    cut = estimators.dual_gae(_rows(c), vtrace)
    raw, _ = _gae(_chain(3), c, token_gamma=1.0, token_lam=1.0, step_gamma=0.99, step_lam=0.95)
    assert torch.equal(cut.raw, raw)
    assert cut.metrics["adv/trace_weight_mean"] == pytest.approx(0.75) and cut.metrics["adv/trace_weight_min"] == 0.25
    assert torch.equal(estimators.dual_gae(_rows(c), AlgorithmConfig()).raw, full.raw)  # full ignores them
    assert set(cut.metrics) == set(estimators.get_estimator("dual_gae").metrics)


def _data(rollout_log_probs: bool = True, failed: list[bool] | None = None):
    from verl import DataProto

    rewards, values, mask, _, next_value, _ = _chain(3)
    old = torch.full(mask.shape, -1.0)
    rollout = torch.full(mask.shape, -1.0)
    rollout[1] = -0.5  # rho = exp(-0.5 * tokens of row 1)
    rollout[2] = 0.0  # unknown: to_tensors leaves 0 where no log-probs came back
    rollout[3] = -0.1
    tensors = {
        "token_level_rewards": rewards,
        "response_mask": mask,
        "values": values,
        "next_values": next_value,
        "old_log_probs": old,
    }
    if rollout_log_probs:
        tensors["rollout_log_probs"] = rollout * mask
    non_tensors = {
        "episode_id": np.array(["e"] * 5, dtype=object),
        "turn_index": np.arange(5),
        "terminated": np.zeros(5, dtype=bool),
        "truncated": np.zeros(5, dtype=bool),
    }
    if failed is not None:
        non_tensors["generation_failed"] = np.array(failed)
    return DataProto.from_dict(tensors=tensors, non_tensors=non_tensors), mask


def test_rows_of_reads_the_trace_weights_with_vtrace():
    from verlog.trainer.advantage_step import rows_of

    data, mask = _data()
    vtrace = AlgorithmConfig(turn_trace="vtrace")
    assert rows_of(data).trace_weights is None and rows_of(data, AlgorithmConfig()).trace_weights is None
    c = rows_of(data, vtrace).trace_weights
    tokens = mask.sum(1).double()
    expected = [1.0, float(torch.exp(-0.5 * tokens[1])), 1.0, float(torch.exp(-0.9 * tokens[3])), 1.0]
    torch.testing.assert_close(c, torch.tensor(expected, dtype=torch.float32))
    data, _ = _data(failed=[False, True, False, False, False])
    assert rows_of(data, vtrace).trace_weights.tolist() == [1.0, 1.0, 1.0, pytest.approx(expected[3]), 1.0]
    data, _ = _data(rollout_log_probs=False)
    assert torch.equal(rows_of(data, vtrace).trace_weights, torch.ones(5))


def test_the_advantage_step_logs_the_trace_weights():
    from verlog.trainer.advantage_step import BatchLayout, advantage_step

    settings_ = TrainConfig(env=EnvConfig(id="toy/delayed"), algorithm=AlgorithmConfig(turn_trace="vtrace"))
    data, mask = _data()
    step = advantage_step(data, settings_, BatchLayout(1, 5))
    tokens = mask.sum(1).double()
    c = [1.0, float(torch.exp(-0.5 * tokens[1])), 1.0, float(torch.exp(-0.9 * tokens[3])), 1.0]
    assert step.metrics["adv/trace_weight_mean"] == pytest.approx(sum(c) / 5)
    assert step.metrics["adv/trace_weight_min"] == pytest.approx(min(c))
    full_data, _ = _data()
    full = advantage_step(full_data, TrainConfig(env=EnvConfig(id="toy/delayed")), BatchLayout(1, 5))
    assert "adv/trace_weight_mean" not in full.metrics and not torch.equal(step.raw_advantages, full.raw_advantages)
