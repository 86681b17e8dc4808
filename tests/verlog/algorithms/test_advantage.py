"""Tests of verlog.algorithms.dual_gae: hand-computed cases, verl's GAE, and a plain nested-loop reference."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from verlog.algorithms.dual_gae import (
    advantage_metrics,
    dual_discount_gae,
    masked_whiten,
    reference_dual_discount_gae,
    turn_level_advantages,
    value_loss,
    value_loss_weights,
)
from verlog.errors import AdvantageInputError

reference_gae = reference_dual_discount_gae

VERLOG = {"token_gamma": 1.0, "token_lam": 1.0, "step_gamma": 0.9, "step_lam": 0.5}


# ------------------------------------------------------------------ hand-computed: two turns of three tokens
V = [[0.5, 0.6, 0.7, 0.0], [0.8, 0.9, 1.0, 0.0]]  # one padding column
R = [[0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0]]
M = [[1, 1, 1, 0], [1, 1, 1, 0]]


def _run(rows, next_row, next_value, terminated, **discounts):
    vals = torch.tensor([V[r] for r in rows])
    rew = torch.tensor([R[r] for r in rows])
    mask = torch.tensor([M[r] for r in rows])
    return dual_discount_gae(
        rew,
        vals,
        mask,
        torch.tensor(next_row),
        torch.tensor(next_value),
        torch.tensor(terminated),
        **(discounts or VERLOG),
    )


def numpy_gae(rewards, values, mask, next_row, next_value, terminated, tg, tl, sg, sl):
    """:func:`dual_discount_gae` on numpy arrays, with the discounts in :func:`reference_gae`'s order."""
    tensors = (torch.from_numpy(x) for x in (rewards, values, mask, next_row, next_value, terminated))
    return dual_discount_gae(*tensors, token_gamma=tg, token_lam=tl, step_gamma=sg, step_lam=sl)


def test_two_turns_with_termination():
    adv, ret = _run([0, 1], [1, -1], [0.0, 123.0], [False, True])
    # turn 1: deltas 0.1, 0.1, 1 - 1.0 = 0 -> A = 0.2, 0.1, 0; turn 0 last: 0.9 * 0.8 - 0.7 + 0.9 * 0.5 * 0.2 = 0.11
    expected = torch.tensor([[0.31, 0.21, 0.11, 0.0], [0.2, 0.1, 0.0, 0.0]])
    torch.testing.assert_close(adv, expected, atol=1e-6, rtol=0)
    torch.testing.assert_close(ret, torch.tensor([[0.81, 0.81, 0.81, 0.0], [1.0, 1.0, 1.0, 0.0]]), atol=1e-6, rtol=0)


def test_two_turns_with_time_limit_bootstrap_and_shuffled_rows():
    # rows in reverse order; the episode is truncated after turn 1 with V(s_2) = 2.0
    adv, ret = _run([1, 0], [-1, 0], [2.0, 0.0], [False, False])
    # turn 1 last: 1 + 0.9 * 2.0 - 1.0 = 1.8; turn 0 last: 0.02 + 0.45 * 2.0 = 0.92
    expected = torch.tensor([[2.0, 1.9, 1.8, 0.0], [1.12, 1.02, 0.92, 0.0]])
    torch.testing.assert_close(adv, expected, atol=1e-6, rtol=0)
    torch.testing.assert_close(ret[1, :3], torch.tensor([1.62, 1.62, 1.62]), atol=1e-6, rtol=0)


def test_batch_boundary_bootstraps_without_lambda_tail():
    # only turn 0 is in this batch; its next turn's V(s_1) = 0.8 comes from the bootstrap pass
    adv, _ = _run([0], [-1], [0.8], [False])
    torch.testing.assert_close(adv, torch.tensor([[0.22, 0.12, 0.02, 0.0]]), atol=1e-6, rtol=0)


def test_token_discounts_inside_a_turn():
    d = {"token_gamma": 0.5, "token_lam": 0.5, "step_gamma": 0.9, "step_lam": 0.5}
    adv, _ = _run([0, 1], [1, -1], [0.0, 0.0], [False, True], **d)
    # turn 1: j2 = 0; j1 = 0.5 * 1.0 - 0.9 = -0.4; j0 = 0.5 * 0.9 - 0.8 + 0.25 * -0.4 = -0.45
    # turn 0: j2 = 0.02 + 0.45 * -0.45 = -0.1825; j1 = 0.35 - 0.6 + 0.25 * -0.1825; j0 = 0.3 - 0.5 + 0.25 * j1
    j1 = 0.35 - 0.6 + 0.25 * -0.1825
    expected = torch.tensor([[-0.2 + 0.25 * j1, j1, -0.1825, 0.0], [-0.45, -0.4, 0.0, 0.0]])
    torch.testing.assert_close(adv, expected, atol=1e-6, rtol=0)


# ------------------------------------------------------------------ random batches against the reference
def random_batch(seed: int, episodes: int, width: int, holes: bool):
    """Episodes split into turns (rows), some terminated, some truncated or cut by the batch, rows shuffled."""
    rng = np.random.default_rng(seed)
    rows = []  # (length, terminated, next_value)
    links = []
    for _ in range(episodes):
        turns = int(rng.integers(1, 6))
        end = rng.choice(["terminated", "truncated", "batch"])
        start = len(rows)
        for t in range(turns):
            last = t == turns - 1
            rows.append(
                (
                    int(rng.integers(1, width + 1)),
                    last and end == "terminated",
                    float(rng.normal()) if last and end != "terminated" else float("nan"),
                )
            )
            links.append(start + t + 1 if not last else -1)
    if rng.random() < 0.5:  # a padding row with no response tokens
        rows.append((0, False, float("nan")))
        links.append(-1)
    batch = len(rows)
    perm = rng.permutation(batch)
    where = np.empty(batch, dtype=np.int64)
    where[perm] = np.arange(batch)  # old index -> new index
    rewards = np.zeros((batch, width), dtype=np.float32)
    values = rng.normal(size=(batch, width)).astype(np.float32)
    mask = np.zeros((batch, width), dtype=np.int64)
    next_row = np.full(batch, -1, dtype=np.int64)
    next_value = np.full(batch, np.nan, dtype=np.float32)
    terminated = np.zeros(batch, dtype=bool)
    for old, (length, term, nv) in enumerate(rows):
        i = where[old]
        mask[i, :length] = 1
        if holes and length > 2:
            mask[i, rng.integers(1, length - 1)] = 0  # a non-response token inside the turn
        valid = np.nonzero(mask[i])[0]
        if len(valid):
            rewards[i, valid] = rng.normal(size=len(valid)) * (rng.random(len(valid)) < 0.3)
        terminated[i] = term
        next_value[i] = nv if not np.isnan(nv) else (0.0 if term or links[old] >= 0 else float("nan"))
        next_row[i] = where[links[old]] if links[old] >= 0 else -1
    next_value = np.nan_to_num(next_value, nan=0.0)
    return rewards, values, mask, next_row, next_value, terminated


BATCH_AND_DISCOUNTS = {
    "seed": st.integers(0, 2**31 - 1),
    "episodes": st.integers(1, 8),
    "width": st.integers(1, 9),
    "holes": st.booleans(),
    "tg": st.sampled_from([1.0, 0.97, 0.5]),
    "tl": st.sampled_from([1.0, 0.9, 0.0]),
    "sg": st.sampled_from([0.99, 0.5, 1.0]),
    "sl": st.sampled_from([0.95, 1.0, 0.0]),
}
"""Hypothesis strategies of a :func:`random_batch` (seed, episodes, width, holes) and the four discounts."""


@settings(max_examples=60, deadline=None)
@given(**BATCH_AND_DISCOUNTS)
def test_matches_nested_loop_reference(seed, episodes, width, holes, tg, tl, sg, sl):
    rewards, values, mask, next_row, next_value, terminated = random_batch(seed, episodes, width, holes)
    adv, ret = numpy_gae(rewards, values, mask, next_row, next_value, terminated, tg, tl, sg, sl)
    ref_adv, ref_ret = reference_gae(rewards, values, mask, next_row, next_value, terminated, tg, tl, sg, sl)
    np.testing.assert_allclose(adv.numpy(), ref_adv * mask, atol=2e-5, rtol=1e-5)
    np.testing.assert_allclose(ret.numpy(), ref_ret, atol=2e-5, rtol=1e-5)


# ------------------------------------------------------------------ against verl's own GAE
@pytest.mark.parametrize("gamma,lam", [(0.99, 0.95), (1.0, 1.0), (0.9, 0.0)])
def test_equals_verl_gae_on_turns_laid_end_to_end(gamma, lam):
    from verl.trainer.ppo.core_algos import compute_gae_advantage_return

    rng = np.random.default_rng(7)
    episodes, width = 6, 5
    flat_rows, turn_rows = [], []  # verl: one row per episode; ours: one row per turn
    for _ in range(episodes):
        turns = []
        for _ in range(int(rng.integers(1, 5))):
            length = int(rng.integers(1, width + 1))
            gap = int(rng.integers(0, 3))  # observation tokens between turns: masked out in verl's row
            turns.append((rng.normal(size=length), rng.normal(size=length) * (rng.random(length) < 0.4), gap))
        flat_rows.append(turns)
    seq_len = max(sum(len(v) + g for v, _, g in turns) for turns in flat_rows)
    fv, fr, fm = (np.zeros((episodes, seq_len), dtype=np.float32) for _ in range(3))
    for e, turns in enumerate(flat_rows):
        pos = 0
        for vals, rews, gap in turns:
            n = len(vals)
            fv[e, pos : pos + n], fr[e, pos : pos + n], fm[e, pos : pos + n] = vals, rews, 1
            fv[e, pos + n : pos + n + gap] = rng.normal(size=gap)  # values on masked tokens must not matter
            pos += n + gap
            turn_rows.append((e, vals, rews, pos - n - gap))
    batch = len(turn_rows)
    tv, tr, tm = (np.zeros((batch, width), dtype=np.float32) for _ in range(3))
    next_row = np.full(batch, -1)
    terminated = np.zeros(batch, dtype=bool)
    for i, (e, vals, rews, _) in enumerate(turn_rows):
        tv[i, : len(vals)], tr[i, : len(vals)], tm[i, : len(vals)] = vals, rews, 1
        if i + 1 < batch and turn_rows[i + 1][0] == e:
            next_row[i] = i + 1
        else:
            terminated[i] = True  # verl's sequence ends with next value 0
    verl_adv, verl_ret = compute_gae_advantage_return(
        torch.from_numpy(fr), torch.from_numpy(fv), torch.from_numpy(fm), gamma=gamma, lam=lam
    )
    adv, ret = numpy_gae(tr, tv, tm, next_row, np.zeros(batch, np.float32), terminated, gamma, lam, gamma, lam)
    ours_whitened = masked_whiten(adv, torch.from_numpy(tm))
    for i, (e, vals, _, start) in enumerate(turn_rows):
        n = len(vals)
        torch.testing.assert_close(ret[i, :n], verl_ret[e, start : start + n], atol=1e-5, rtol=0)
        torch.testing.assert_close(ours_whitened[i, :n], verl_adv[e, start : start + n], atol=1e-5, rtol=0)


def test_masked_whiten_matches_verl():
    from verl.utils.torch_functional import masked_whiten as verl_whiten

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(5, 7, generator=gen) * 3 + 1
    mask = (torch.rand(5, 7, generator=gen) < 0.6).long()
    for shift in (True, False):
        torch.testing.assert_close(
            masked_whiten(x, mask, shift_mean=shift), verl_whiten(x, mask, shift_mean=shift) * mask, atol=1e-6, rtol=0
        )
    with pytest.raises(AdvantageInputError, match="at least 2"):
        masked_whiten(x, torch.zeros_like(mask))


# ------------------------------------------------------------------ properties and dtypes
def test_values_on_masked_positions_do_not_change_advantages():
    rewards, values, mask, next_row, next_value, terminated = random_batch(3, 6, 6, holes=True)
    args = (torch.from_numpy(next_row), torch.from_numpy(next_value), torch.from_numpy(terminated))
    adv1, _ = dual_discount_gae(
        torch.from_numpy(rewards), torch.from_numpy(values), torch.from_numpy(mask), *args, **VERLOG
    )
    noisy = values + (1 - mask) * 100.0
    adv2, _ = dual_discount_gae(
        torch.from_numpy(rewards), torch.from_numpy(noisy), torch.from_numpy(mask), *args, **VERLOG
    )
    torch.testing.assert_close(adv1, adv2)
    assert bool((adv1[torch.from_numpy(mask) == 0] == 0).all())


def test_bf16_inputs_accumulate_in_fp32():
    rewards, values, mask, next_row, next_value, terminated = random_batch(5, 5, 8, holes=False)
    args = (torch.from_numpy(next_row), torch.from_numpy(next_value), torch.from_numpy(terminated))
    v16 = torch.from_numpy(values).bfloat16()
    adv, ret = dual_discount_gae(
        torch.from_numpy(rewards).bfloat16(), v16, torch.from_numpy(mask).bool(), *args, **VERLOG
    )
    assert adv.dtype == torch.float32 and ret.dtype == torch.float32
    ref, _ = reference_gae(
        torch.from_numpy(rewards).bfloat16().float().numpy(),
        v16.float().numpy(),
        mask,
        next_row,
        next_value,
        terminated,
        1.0,
        1.0,
        0.9,
        0.5,
    )
    np.testing.assert_allclose(adv.numpy(), ref * mask, atol=1e-5)


def test_long_episode_chain_is_exact():
    # 300 turns of one token in shuffled rows: many pointer-jumping rounds
    turns = 300
    rng = np.random.default_rng(1)
    perm = rng.permutation(turns)
    values = rng.normal(size=(turns, 1)).astype(np.float32)
    rewards = rng.normal(size=(turns, 1)).astype(np.float32)
    next_row = np.full(turns, -1)
    for t in range(turns - 1):
        next_row[perm[t]] = perm[t + 1]
    terminated = np.zeros(turns, dtype=bool)
    terminated[perm[-1]] = True
    mask = np.ones((turns, 1), dtype=np.int64)
    adv, _ = numpy_gae(rewards, values, mask, next_row, np.zeros(turns, np.float32), terminated, 1.0, 1.0, 0.99, 0.95)
    ref, _ = reference_gae(rewards, values, mask, next_row, np.zeros(turns), terminated, 1.0, 1.0, 0.99, 0.95)
    np.testing.assert_allclose(adv.numpy(), ref, atol=1e-4, rtol=1e-5)


def test_empty_batch():
    z = torch.zeros(0, 4)
    adv, ret = dual_discount_gae(
        z, z, z, torch.zeros(0, dtype=torch.long), torch.zeros(0), torch.zeros(0, dtype=torch.bool), **VERLOG
    )
    assert adv.shape == (0, 4) and ret.shape == (0, 4)


# ------------------------------------------------------------------ errors
def _bad(rows: int = 2, tokens: int = 3, **overrides):
    """``dual_discount_gae`` on ``rows`` rows of ``tokens`` tokens (two linked rows unless overridden), with
    ``overrides`` of its arguments (inputs or discounts)."""
    args = {
        "token_rewards": torch.zeros(rows, tokens),
        "values": torch.zeros(rows, tokens),
        "response_mask": torch.ones(rows, tokens),
        "next_row": torch.tensor([1, -1]),
        "next_value": torch.zeros(rows),
        "terminated": torch.tensor([False, True]),
        **VERLOG,
    }
    args.update(overrides)
    return dual_discount_gae(**args)


@pytest.mark.parametrize(
    "overrides,message",
    [
        ({"values": torch.zeros(2, 4)}, "token_rewards shape"),
        ({"response_mask": torch.ones(2, 4)}, "response_mask must have shape"),
        ({"response_mask": torch.full((2, 3), 2.0)}, "only 0 and 1"),
        ({"next_row": torch.tensor([1])}, r"next_row must have shape \[B\] = \[2\]"),
        ({"next_row": torch.tensor([1.0, -1.0])}, "integer"),
        ({"next_row": torch.tensor([2, -1])}, r"next_row\[0\] = 2"),
        ({"next_row": torch.tensor([0, -1])}, r"next_row\[0\] = 0"),
        ({"next_row": torch.tensor([1, 0]), "terminated": torch.tensor([False, False])}, "cycle"),
        ({"terminated": torch.tensor([True, True])}, "row 0 is terminated but has next_row = 1"),
        (
            {
                "token_rewards": torch.tensor([[0.0, 0.0, 0.0], [0.0, 0.0, 1.0]]),
                "response_mask": torch.tensor([[1, 1, 1], [1, 1, 0]]),
            },
            r"token_rewards\[1, 2\]",
        ),
        ({"response_mask": torch.tensor([[1, 1, 1], [0, 0, 0]])}, "no response tokens but is linked"),
        ({"next_value": torch.tensor([0.0, float("nan")]), "terminated": torch.tensor([False, False])}, "non-finite"),
        (  # two rows pointing at one row
            {
                "rows": 3,
                "tokens": 2,
                "next_row": torch.tensor([2, 2, -1]),
                "terminated": torch.tensor([False, False, True]),
            },
            "next_row of 2 rows",
        ),
        ({"step_lam": 1.5}, "step_lam must be in"),  # a discount out of range
    ],
)
def test_input_errors_name_the_problem(overrides, message):
    with pytest.raises(AdvantageInputError, match=message):
        _bad(**overrides)


# ------------------------------------------------------------------ value loss
@pytest.mark.parametrize("mode", ["token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean"])
def test_value_loss_equals_verl_with_unit_weight(mode):
    from verl.trainer.ppo.core_algos import compute_value_loss

    gen = torch.Generator().manual_seed(2)
    v, old, ret = (torch.randn(4, 6, generator=gen) for _ in range(3))
    mask = torch.tensor([[1] * 6, [1] * 3 + [0] * 3, [1] + [0] * 5, [1] * 5 + [0]])
    ours = value_loss(v, old, ret, mask, cliprange_value=0.2, loss_agg_mode=mode)
    theirs = compute_value_loss(v, ret, old, mask, cliprange_value=0.2, loss_agg_mode=mode)
    torch.testing.assert_close(ours[0], theirs[0])
    torch.testing.assert_close(ours[1], torch.as_tensor(theirs[1]))


def test_value_loss_first_position_weight():
    v = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]], requires_grad=True)
    ret = torch.tensor([[3.0, 1.0, 1.0, 0.0], [2.0, 1.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    w = value_loss_weights(mask, 4.0)
    assert w.tolist() == [[4.0, 1.0, 1.0, 0.0], [4.0, 1.0, 0.0, 0.0]]
    loss, clipfrac = value_loss(v, v.detach(), ret, mask, cliprange_value=10.0, first_position_weight=4.0)
    # squared errors 4 and 1 on first positions, 0 elsewhere: 0.5 * (4*4 + 4*1) / (4+1+1+4+1)
    torch.testing.assert_close(loss, torch.tensor(0.5 * 20.0 / 11.0))
    assert float(clipfrac) == 0.0
    loss.backward()
    assert v.grad[0, 0] != 0 and v.grad[0, 3] == 0


def test_value_loss_clips_and_rejects_bad_mode():
    v = torch.tensor([[2.0, 0.0]])
    old = torch.zeros(1, 2)
    ret = torch.tensor([[0.0, 0.0]])
    loss, clipfrac = value_loss(v, old, ret, torch.ones(1, 2), cliprange_value=0.5)
    torch.testing.assert_close(loss, torch.tensor(0.5 * 4.0 / 2))  # max(4, 0.25) = 4 on the first position
    torch.testing.assert_close(clipfrac, torch.tensor(0.0))
    ret = torch.tensor([[3.0, 0.0]])  # now the clipped prediction (0.5) is further from the target: 6.25 > 1
    loss, clipfrac = value_loss(v, old, ret, torch.ones(1, 2), cliprange_value=0.5)
    torch.testing.assert_close(loss, torch.tensor(0.5 * 6.25 / 2))
    torch.testing.assert_close(clipfrac, torch.tensor(0.5))
    with pytest.raises(AdvantageInputError, match="loss_agg_mode 'mean'"):
        value_loss(v, old, ret, torch.ones(1, 2), cliprange_value=0.5, loss_agg_mode="mean")


def test_advantage_metrics():
    adv = torch.tensor([[1.0, 3.0, 0.0], [-2.0, 0.0, 0.0]])
    values = torch.tensor([[0.0, 1.0, 9.0], [1.0, 9.0, 9.0]])
    returns = adv + values
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    m = advantage_metrics(adv, returns, values, mask)
    assert m["adv/mean"] == pytest.approx(2.0 / 3) and m["adv/max"] == 3.0 and m["adv/min"] == -2.0
    assert m["adv/turn_mean"] == pytest.approx(-0.5)  # first tokens: 1 and -2
    assert m["critic/values/mean"] == pytest.approx(2.0 / 3)
    assert advantage_metrics(adv, values, values, mask)["critic/vf_explained_var"] == pytest.approx(1.0)
    with pytest.raises(AdvantageInputError, match="at least one response token"):
        advantage_metrics(adv, returns, values, torch.zeros_like(mask))


@pytest.mark.parametrize("block", [3, 64])
@pytest.mark.parametrize("holes", [False, True])
def test_long_responses_across_scan_blocks(monkeypatch, block, holes):
    import verlog.algorithms.dual_gae as advantage

    monkeypatch.setattr(advantage, "_SCAN_BLOCK", block)
    rewards, values, mask, next_row, next_value, terminated = random_batch(11, 6, 150, holes)
    tensors = [torch.from_numpy(x) for x in (rewards, values, mask, next_row, next_value, terminated)]
    adv, ret = dual_discount_gae(*tensors, token_gamma=0.99, token_lam=0.9, step_gamma=0.95, step_lam=0.8)
    ref_adv, ref_ret = reference_gae(rewards, values, mask, next_row, next_value, terminated, 0.99, 0.9, 0.95, 0.8)
    np.testing.assert_allclose(adv.numpy(), ref_adv * mask, atol=5e-5, rtol=1e-5)
    np.testing.assert_allclose(ret.numpy(), ref_ret, atol=5e-5, rtol=1e-5)


def test_mask_dtypes_agree():
    rewards, values, mask, next_row, next_value, terminated = random_batch(4, 5, 12, holes=False)
    rows = (torch.from_numpy(next_row), torch.from_numpy(next_value), torch.from_numpy(terminated))
    results = [
        dual_discount_gae(torch.from_numpy(rewards), torch.from_numpy(values), m, *rows, **VERLOG)[0]
        for m in (torch.from_numpy(mask), torch.from_numpy(mask).bool(), torch.from_numpy(mask).float())
    ]
    torch.testing.assert_close(results[0], results[1])
    torch.testing.assert_close(results[0], results[2])
    near = torch.from_numpy(mask).float() * 0.5  # in [0, 1] but not a mask
    with pytest.raises(AdvantageInputError, match="only 0 and 1"):
        dual_discount_gae(torch.from_numpy(rewards) * 0, torch.from_numpy(values), near, *rows, **VERLOG)


# ------------------------------------------------------------------ turn-level advantages
@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), episodes=st.integers(1, 6), width=st.integers(1, 7), holes=st.booleans())
def test_turn_level_advantage_is_the_first_positions_on_every_token(seed, episodes, width, holes):
    rewards, values, mask, next_row, next_value, terminated = random_batch(seed, episodes, width, holes)
    ref_adv, _ = reference_gae(rewards, values, mask, next_row, next_value, terminated, 1.0, 1.0, 0.99, 0.95)
    out = turn_level_advantages(torch.from_numpy(ref_adv).float(), torch.from_numpy(mask))
    expected = np.zeros_like(ref_adv)
    for t in range(mask.shape[0]):
        tokens = np.flatnonzero(mask[t])
        if len(tokens):
            expected[t, tokens] = ref_adv[t, tokens[0]]
    np.testing.assert_allclose(out.numpy(), expected, atol=1e-6)


def test_turn_level_advantage_with_unit_token_discounts_is_gae_over_turns():
    # one episode of three turns of 2-4 tokens, terminated; the reward on each turn's last token
    lengths, turn_rewards, v_state = [2, 4, 3], [0.0, 0.5, 1.0], [0.3, 0.6, 0.2]
    width = max(lengths) + 1
    rew, vals, mask = torch.zeros(3, width), torch.rand(3, width), torch.zeros(3, width)
    for t, n in enumerate(lengths):
        mask[t, :n] = 1
        rew[t, n - 1] = turn_rewards[t]
        vals[t, 0] = v_state[t]
    vals = vals * mask
    adv, _ = dual_discount_gae(rew, vals, mask, [1, 2, -1], [0.0, 0.0, 0.0], [False, False, True], **VERLOG)
    turn = turn_level_advantages(adv, mask)
    g, lam = VERLOG["step_gamma"], VERLOG["step_lam"]
    expected, running = [0.0] * 3, 0.0
    for t in reversed(range(3)):  # ordinary GAE over turns: one reward and one value V(s_t) per turn
        v_next = v_state[t + 1] if t < 2 else 0.0
        running = turn_rewards[t] + g * v_next - v_state[t] + g * lam * running
        expected[t] = running
    for t, n in enumerate(lengths):
        assert torch.allclose(turn[t, :n], torch.full((n,), expected[t]), atol=1e-5)
        assert torch.all(turn[t, n:] == 0)


def test_turn_level_advantage_rejects_mismatched_shapes():
    with pytest.raises(AdvantageInputError, match="must both be"):
        turn_level_advantages(torch.zeros(2, 3), torch.ones(2, 4))
