"""GRPO and GiGPO (verlog/algorithms/group_advantage.py) against a plain-Python reference and hand-computed cases."""

from __future__ import annotations

import math
import random

import pytest
import torch

from verlog.algorithms.group_advantage import (
    check_whole_episodes,
    gigpo_advantages,
    group_advantages,
    group_normalize,
    grpo_advantages,
    index_of,
    returns_to_go,
    spread_untrained_rows,
)
from verlog.errors import AdvantageInputError

EPS = 1e-6


# ---------------------------------------------------------------------------------------------- plain reference
def _norm(values: list[float], norm: str) -> list[float]:
    """Plain normalisation of one group: singleton -> 0, unbiased std."""
    n = len(values)
    if n == 1:
        return [0.0]
    mean = sum(values) / n
    if norm == "mean":
        return [v - mean for v in values]
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return [(v - mean) / (std + EPS) for v in values]


def _normalize_by_key(values: list[float], keys: list, norm: str) -> list[float]:
    out = [0.0] * len(values)
    for key in set(keys):
        idx = [i for i, k in enumerate(keys) if k == key]
        for i, v in zip(idx, _norm([values[i] for i in idx], norm)):
            out[i] = v
    return out


def _reference(rows: list[dict], estimator: str, norm: str, gamma: float, omega: float) -> list[float]:
    """rows: dicts with ep, turn, group, obs, reward. One advantage per row, by nested loops."""
    episodes = sorted({r["ep"] for r in rows})
    ret = {e: sum(r["reward"] for r in rows if r["ep"] == e) for e in episodes}
    group_of = {r["ep"]: r["group"] for r in rows}
    ep_adv = dict(zip(episodes, _normalize_by_key([ret[e] for e in episodes], [group_of[e] for e in episodes], norm)))
    if estimator == "grpo":
        return [ep_adv[r["ep"]] for r in rows]
    to_go = []
    for r in rows:
        later = [q for q in rows if q["ep"] == r["ep"] and q["turn"] >= r["turn"]]
        to_go.append(sum(gamma ** (q["turn"] - r["turn"]) * q["reward"] for q in later))
    step = _normalize_by_key(to_go, [(r["group"], r["obs"]) for r in rows], norm)
    return [ep_adv[r["ep"]] + omega * s for r, s in zip(rows, step)]


def _random_rows(rng: random.Random) -> list[dict]:
    rows = []
    for g in range(rng.randint(1, 4)):
        for k in range(rng.randint(1, 4)):
            length = rng.randint(1, 5)
            for t in range(length):
                rows.append(
                    {
                        "ep": f"g{g}e{k}",
                        "turn": t,
                        "group": f"g{g}",
                        "obs": f"o{rng.randint(0, 2)}",  # few texts: anchor groups form, also across groups
                        "reward": rng.choice([0.0, 0.0, 1.0, -0.5, rng.random()]),
                        "ended": t == length - 1,
                    }
                )
    rng.shuffle(rows)  # verl's balancing reorders rows
    return rows


def _run(rows: list[dict], estimator: str, norm: str, gamma: float, omega: float) -> torch.Tensor:
    b = len(rows)
    r_max = 4
    rewards = torch.zeros(b, r_max)
    mask = torch.zeros(b, r_max)
    for i, r in enumerate(rows):
        length = 1 + i % r_max
        mask[i, :length] = 1
        rewards[i, length - 1] = r["reward"]
    out = group_advantages(
        estimator,
        rewards,
        mask,
        [r["ep"] for r in rows],
        [r["turn"] for r in rows],
        [r["ended"] for r in rows],
        [r["group"] for r in rows],
        [r["obs"] for r in rows],
        [True] * b,
        norm=norm,
        gamma=gamma,
        omega=omega,
    )
    assert torch.equal(out.advantages, out.row_advantages[:, None] * mask)
    return out.row_advantages


@pytest.mark.parametrize("estimator", ["grpo", "gigpo"])
@pytest.mark.parametrize("norm", ["mean_std", "mean"])
def test_matches_plain_reference_on_random_batches(estimator, norm):
    rng = random.Random(7)
    for _ in range(60):
        rows = _random_rows(rng)
        gamma, omega = rng.choice([0.95, 1.0, 0.5]), rng.choice([1.0, 0.5, 0.0])
        got = _run(rows, estimator, norm, gamma, omega)
        want = torch.tensor(_reference(rows, estimator, norm, gamma, omega), dtype=torch.float32)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------------- hand-computed
def test_group_normalize_by_hand():
    x = torch.tensor([1.0, 2.0, 3.0, 5.0, 7.0, 4.0])
    g = torch.tensor([0, 0, 0, 1, 1, 2])
    # group 0: mean 2, std 1; group 1: mean 6, std sqrt(2); group 2: a singleton
    want = torch.tensor([-1.0, 0.0, 1.0, -1 / math.sqrt(2), 1 / math.sqrt(2), 0.0])
    torch.testing.assert_close(group_normalize(x, g), want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(group_normalize(x, g, "mean"), torch.tensor([-1.0, 0.0, 1.0, -1.0, 1.0, 0.0]))


def test_all_equal_returns_and_singletons_give_zero():
    assert torch.equal(group_normalize(torch.full((4,), 0.7), torch.zeros(4, dtype=torch.long)), torch.zeros(4))
    assert torch.equal(group_normalize(torch.tensor([3.0]), torch.tensor([0])), torch.zeros(1))
    # GRPO: a group whose episodes all returned the same gets 0 on every row
    rewards = torch.tensor([0.0, 1.0, 0.0, 1.0])
    episode = torch.tensor([0, 0, 1, 1])
    assert torch.equal(grpo_advantages(rewards, episode, torch.tensor([0, 0, 0, 0])), torch.zeros(4))
    # one episode per group: nothing to compare, 0
    assert torch.equal(grpo_advantages(rewards, episode, torch.tensor([0, 0, 1, 1])), torch.zeros(4))


def test_grpo_by_hand():
    # group A: episodes of returns 1 (2 rows), 0 (1 row); group B: returns 2, 0, 1
    rewards = torch.tensor([0.0, 1.0, 0.0, 2.0, 0.0, 0.5, 0.5])
    episode = torch.tensor([0, 0, 1, 2, 3, 4, 4])
    group = torch.tensor([0, 0, 0, 1, 1, 1, 1])
    a = 1 / math.sqrt(2)  # group A: mean 0.5, std sqrt(0.5)
    want = torch.tensor([a, a, -a, 1.0, -1.0, 0.0, 0.0])  # group B: mean 1, std 1
    torch.testing.assert_close(grpo_advantages(rewards, episode, group), want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(
        grpo_advantages(rewards, episode, group, norm="mean"), torch.tensor([0.5, 0.5, -0.5, 1.0, -1.0, 0.0, 0.0])
    )


def test_gigpo_groups_identical_observations_only_by_hand():
    """Two episodes of one group. Both start in "room"; episode 0 then sees "door", episode 1 "wall" and then
    "room" again. Rewards: episode 0 gets 1 at its turn 1; episode 1 nothing."""
    gamma = 0.5
    rows = [  # (episode, turn, observation, reward)
        (0, 0, "room", 0.0),
        (0, 1, "door", 1.0),
        (1, 0, "room", 0.0),
        (1, 1, "wall", 0.0),
        (1, 2, "room", 0.0),
    ]
    rewards = torch.tensor([r[3] for r in rows])
    episode = torch.tensor([r[0] for r in rows])
    turn = torch.tensor([r[1] for r in rows])
    anchor = index_of([r[2] for r in rows])
    out = gigpo_advantages(
        rewards, episode, turn, torch.zeros(5, dtype=torch.long), anchor, gamma=gamma, omega=0.5, norm="mean"
    )
    # returns to go: ep 0: 0.5, 1; ep 1: 0, 0, 0
    torch.testing.assert_close(out.step_returns, torch.tensor([0.5, 1.0, 0.0, 0.0, 0.0], dtype=torch.float64))
    # episode level ("mean"): returns 1 and 0 -> +0.5, -0.5
    torch.testing.assert_close(out.episode_advantages, torch.tensor([0.5, 0.5, -0.5, -0.5, -0.5]))
    # anchor "room": {0.5 (ep 0 turn 0), 0 (ep 1 turn 0), 0 (ep 1 turn 2)}, mean 1/6; "door", "wall": singletons
    room = 1 / 6
    torch.testing.assert_close(out.step_advantages, torch.tensor([0.5 - room, 0.0, -room, 0.0, -room]))
    torch.testing.assert_close(out.advantages, out.episode_advantages + 0.5 * out.step_advantages)
    assert out.anchor_groups == 3 and out.rows_in_shared_anchor_groups == 3


def test_gigpo_identical_text_in_different_groups_is_not_one_anchor_group():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0])
    episode = torch.tensor([0, 1, 2, 3])
    group = torch.tensor([0, 0, 1, 1])
    same_text = torch.zeros(4, dtype=torch.long)
    out = gigpo_advantages(rewards, episode, torch.zeros(4, dtype=torch.long), group, same_text, gamma=1.0, omega=1.0)
    assert out.anchor_groups == 2
    # within each group the two rows compare with each other only: +-1/sqrt(2) (std of {0, 1} is sqrt(0.5))
    a = 1 / math.sqrt(2)
    torch.testing.assert_close(out.step_advantages, torch.tensor([a, -a, -a, a]), rtol=1e-5, atol=1e-5)


def test_returns_to_go_by_hand():
    rewards = torch.tensor([1.0, 2.0, 4.0, 3.0])
    episode = torch.tensor([1, 1, 1, 0])
    turn = torch.tensor([2, 0, 1, 0])
    to_go, total = returns_to_go(rewards, episode, turn, 0.5)
    torch.testing.assert_close(to_go, torch.tensor([1.0, 2 + 0.5 * 4 + 0.25 * 1, 4 + 0.5, 3.0], dtype=torch.float64))
    torch.testing.assert_close(total, torch.tensor([7.0, 7.0, 7.0, 3.0], dtype=torch.float64))


# ---------------------------------------------------------------------------------------------- input checks
def test_whole_episodes_are_required():
    assert check_whole_episodes(["a", "b", "a"], [0, 0, 1], [False, True, True]).tolist() == [0, 1, 0]
    with pytest.raises(AdvantageInputError, match="does not end in the batch"):
        check_whole_episodes(["a", "a"], [0, 1], [False, False])  # cut by the batch boundary
    with pytest.raises(AdvantageInputError, match=r"not 0 \.\. 1"):
        check_whole_episodes(["a", "a"], [1, 2], [False, True])  # began in an earlier batch
    with pytest.raises(AdvantageInputError, match="ends at turns"):
        check_whole_episodes(["a", "a"], [0, 1], [True, True])
    with pytest.raises(AdvantageInputError, match="different group"):
        grpo_advantages(torch.ones(2), torch.tensor([0, 0]), torch.tensor([0, 1]))


def test_untrained_rows_get_zero_and_stay_out_of_groups():
    mask = torch.tensor([[1, 1], [1, 0], [0, 0], [0, 0]])
    rewards = torch.tensor([[0.0, 1.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]])
    out = group_advantages(
        "grpo",
        rewards,
        mask,
        ["a", "b", "c", "d"],
        [0, 0, 0, 0],
        [True, True, False, False],  # c, d: unfinished (c idle-like, d cut by the batch end)
        ["g", "g", "g", "g"],
        ["x"] * 4,
        [True, True, False, False],
        norm="mean",
    )
    torch.testing.assert_close(out.row_advantages, torch.tensor([0.5, -0.5, 0.0, 0.0]))
    assert out.metrics["adv/trained_rows"] == 2 and out.metrics["adv/episodes"] == 2
    # an untrained row must be outside the loss (all-zero mask)
    with pytest.raises(AdvantageInputError, match="all-zero response mask"):
        group_advantages(
            "grpo", rewards, torch.ones(4, 2), ["a", "b", "c", "d"], [0] * 4, [True, True, False, False],
            ["g"] * 4, ["x"] * 4, [True, True, False, False],
        )  # fmt: skip


def test_spread_untrained_rows_keeps_ranks_and_fills_every_mini_batch():
    rng = random.Random(3)
    for _ in range(200):
        ranks = rng.choice([1, 2, 4])
        per_rank_mini = rng.randint(1, 4)
        minis = rng.randint(1, 4)
        b = ranks * per_rank_mini * minis
        trained = [rng.random() < rng.choice([0.1, 0.5, 0.9]) for _ in range(b)]
        if sum(trained) < minis:
            with pytest.raises(AdvantageInputError, match="mini-batches"):
                spread_untrained_rows(trained, ranks, ranks * per_rank_mini)
            continue
        order = spread_untrained_rows(trained, ranks, ranks * per_rank_mini)
        assert sorted(order) == list(range(b))
        chunk = b // ranks
        assert all(order[p] // chunk == p // chunk for p in range(b))  # each row stays on its rank
        for m in range(minis):  # global mini-batch m: the m-th slice of every rank's chunk
            rows = [order[r * chunk + m * per_rank_mini + j] for r in range(ranks) for j in range(per_rank_mini)]
            assert any(trained[i] for i in rows)
    assert spread_untrained_rows([True] * 6, 4, 4) is None  # does not split: left to verl
