"""Group advantage estimators over per-turn rows: GRPO and GiGPO (no critic).

Both compare episodes of one task: the rollout runs env slots in groups of ``K`` that reset to the same seed, so the
``K`` episodes of a group start from the same state (docs/algorithms.md, "Group estimators"). Names used below:

- row ``i``: one agent turn (``B`` rows); ``r_i`` its reward (the sum of its token rewards over the response mask:
  the env reward, plus the KL penalty when it is in the reward);
- episode ``e``: its rows are turns ``0 .. L_e - 1``, all in the batch, the last one ended by the env (termination or
  its time limit); ``G_e = sum_t r_{e,t}`` its return;
- group ``g``: the episodes that started from the same seed in the same iteration;
- GRPO: ``A_i = norm_g(G_e)``, the same for every response token of every turn of episode ``e``;
- GiGPO: ``A_i = norm_g(G_e) + omega * norm_{g,o}(R_{e,t})`` with ``R_{e,t} = sum_{k >= t} gamma^(k-t) r_{e,k}`` (the
  discounted return from turn ``t`` on) normalised within the *anchor group* ``(g, o)``: the turns of group ``g``'s
  episodes whose observation text ``o`` is identical;
- ``norm`` over a group ``S`` of values ``x``: ``(x - mean_S) / (std_S + eps)`` (``mean_std``, unbiased std) or
  ``x - mean_S`` (``mean``). A group of one gets 0: there is nothing to compare it with.

Everything here is a pure function of tensors (and lists of keys); nothing loops over rows in Python except turning
string keys into indices.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import torch

from verlog.errors import AdvantageInputError

GROUP_ADVANTAGES = ("grpo", "gigpo")
"""What :func:`group_advantages` computes (``algorithm.estimator`` is checked against verlog/algorithms/estimators.py's
registry, whose ``grpo`` and ``gigpo`` entries call it)."""
GROUP_NORMS = ("mean_std", "mean")
"""``algorithm.group_norm``: ``(x - mean) / (std + eps)`` or ``x - mean`` within each group."""
DEFAULT_EPS = 1e-6


def index_of(keys: Sequence[Hashable]) -> torch.Tensor:
    """Dense indices of hashable keys, in order of first appearance.

    Args:
        keys: ``n`` keys (strings, tuples, ...).

    Returns:
        ``[n]`` long tensor: equal keys get equal indices ``0 .. (distinct keys - 1)``.
    """
    seen: dict[Hashable, int] = {}
    return torch.tensor([seen.setdefault(k, len(seen)) for k in keys], dtype=torch.long)


def group_normalize(
    x: torch.Tensor, group: torch.Tensor, norm: str = "mean_std", eps: float = DEFAULT_EPS
) -> torch.Tensor:
    """Each value normalised within its group.

    Args:
        x: ``[n]`` values (any float dtype; computed in float64).
        group: ``[n]`` long group index of each value (any non-negative integers).
        norm: ``"mean_std"``: ``(x - mean_g) / (std_g + eps)`` with the unbiased standard deviation;
            ``"mean"``: ``x - mean_g``.
        eps: added to the standard deviation.

    Returns:
        ``[n]`` float32. A group of one value gives 0; a group of equal values gives 0.
    """
    if norm not in GROUP_NORMS:
        raise ValueError(f"norm must be one of {GROUP_NORMS}, got {norm!r}")
    if x.dim() != 1 or group.shape != x.shape:
        raise AdvantageInputError(
            f"x and group must be [n] tensors of one length, got {tuple(x.shape)} and {tuple(group.shape)}"
        )
    if x.numel() == 0:
        return torch.zeros(0, dtype=torch.float32)
    xd = x.to(torch.float64)
    _, g = torch.unique(group, return_inverse=True)
    k = int(g.max()) + 1
    count = torch.zeros(k, dtype=torch.float64).index_add_(0, g, torch.ones_like(xd))
    mean = torch.zeros(k, dtype=torch.float64).index_add_(0, g, xd) / count
    centred = xd - mean[g]
    if norm == "mean":
        return centred.float()
    sq = torch.zeros(k, dtype=torch.float64).index_add_(0, g, centred * centred)
    std = torch.sqrt(sq / (count - 1).clamp(min=1))
    return (centred / (std[g] + eps)).float()


def row_rewards(token_rewards: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Each row's reward: its token rewards summed over the response mask.

    Args:
        token_rewards: ``[B, R]`` rewards per response token (env reward on the last token, KL penalties).
        response_mask: ``[B, R]`` 1 on response tokens.

    Returns:
        ``[B]`` float64.
    """
    if token_rewards.shape != response_mask.shape or token_rewards.dim() != 2:
        raise AdvantageInputError(
            f"token_rewards {tuple(token_rewards.shape)} and response_mask {tuple(response_mask.shape)} must be the "
            "same [B, R] shape"
        )
    return (token_rewards.to(torch.float64) * response_mask.to(torch.float64)).sum(dim=1)


def returns_to_go(
    rewards: torch.Tensor, episode: torch.Tensor, turn: torch.Tensor, gamma: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Discounted return from each turn to the end of its episode, and each row's undiscounted episode return.

    Args:
        rewards: ``[n]`` reward of each row (one turn).
        episode: ``[n]`` long episode index of each row (``0 .. E - 1``).
        turn: ``[n]`` long turn index in its episode; an episode's rows are turns ``0 .. L_e - 1`` (checked by
            :func:`check_whole_episodes`).
        gamma: discount between turns, in ``[0, 1]``.

    Returns:
        ``([n] R_{e,t} = sum_{k >= t} gamma^(k-t) r_{e,k}, [n] G_e = sum_k r_{e,k})``, float64.
    """
    n = rewards.numel()
    if n == 0:
        empty = torch.zeros(0, dtype=torch.float64)
        return empty, empty
    num_episodes = int(episode.max()) + 1
    length = int(turn.max()) + 1
    dense = torch.zeros(num_episodes, length + 1, dtype=torch.float64)
    dense[episode, turn] = rewards.to(torch.float64)
    for t in range(length - 1, -1, -1):  # turns beyond an episode's end hold 0, so they add nothing
        dense[:, t] += gamma * dense[:, t + 1]
    totals = torch.zeros(num_episodes, dtype=torch.float64).index_add_(0, episode, rewards.to(torch.float64))
    return dense[episode, turn], totals[episode]


def check_whole_episodes(
    episode_ids: Sequence[Hashable], turn_index: Sequence[int], ended: Sequence[bool]
) -> torch.Tensor:
    """Check that every episode is whole: turns ``0 .. L - 1`` each once, only the last one ended.

    A group estimator needs each episode's full return: an episode cut by the batch boundary would be trained with a
    made-up one, so it is an error here (the rollout leaves such rows out of training).

    Args:
        episode_ids: ``n`` episode keys.
        turn_index: ``n`` turn indices.
        ended: ``n`` flags: the episode ended at this turn (terminated or truncated by the env).

    Returns:
        ``[n]`` long episode index (:func:`index_of` of ``episode_ids``).

    Raises:
        AdvantageInputError: naming the episode and what is wrong with it.
    """
    if not len(episode_ids) == len(turn_index) == len(ended):
        raise AdvantageInputError(
            f"episode_ids, turn_index and ended differ in length: {len(episode_ids)}, {len(turn_index)}, {len(ended)}"
        )
    turns: dict[Hashable, list[tuple[int, bool]]] = {}
    for e, t, d in zip(episode_ids, turn_index, ended):
        turns.setdefault(e, []).append((int(t), bool(d)))
    for e, items in turns.items():
        items.sort()
        got = [t for t, _ in items]
        if got != list(range(len(items))):
            raise AdvantageInputError(
                f"episode {e!r} has turns {got[:8]}{'...' if len(got) > 8 else ''}, not 0 .. {len(items) - 1} each "
                "once: a group estimator needs every turn of an episode in one batch"
            )
        ends = [t for t, d in items if d]
        if ends != [len(items) - 1]:
            where = f"ends at turns {ends}" if ends else "does not end in the batch"
            raise AdvantageInputError(
                f"episode {e!r} {where}: a group estimator needs whole episodes (its return would be made up); its "
                "rows must be left out of training"
            )
    return index_of(list(episode_ids))


def _episode_group(episode: torch.Tensor, group: torch.Tensor) -> torch.Tensor:
    """``[E]`` group of each episode; every row of an episode must carry the same group."""
    num_episodes = int(episode.max()) + 1
    eg = torch.full((num_episodes,), -1, dtype=torch.long)
    eg[episode] = group
    if not torch.equal(eg[episode], group):
        bad = int(episode[eg[episode] != group][0])
        raise AdvantageInputError(f"the rows of episode {bad} carry different group ids")
    return eg


def grpo_advantages(
    rewards: torch.Tensor,
    episode: torch.Tensor,
    group: torch.Tensor,
    norm: str = "mean_std",
    eps: float = DEFAULT_EPS,
) -> torch.Tensor:
    """GRPO over episodes: each row gets its episode's return normalised within the episode's group.

    Args:
        rewards: ``[n]`` reward of each row.
        episode: ``[n]`` long episode index of each row (``0 .. E - 1``; whole episodes).
        group: ``[n]`` long group index of each row (the same for all rows of an episode).
        norm, eps: see :func:`group_normalize`.

    Returns:
        ``[n]`` float32: ``norm_g(G_e)`` of the row's episode.
    """
    if rewards.numel() == 0:
        return torch.zeros(0, dtype=torch.float32)
    num_episodes = int(episode.max()) + 1
    totals = torch.zeros(num_episodes, dtype=torch.float64).index_add_(0, episode, rewards.to(torch.float64))
    per_episode = group_normalize(totals, _episode_group(episode, group), norm, eps)
    return per_episode[episode]


@dataclass
class GiGPOAdvantages:
    """GiGPO's per-row advantages (``[n]`` float32 each) and anchor-group statistics."""

    advantages: torch.Tensor
    episode_advantages: torch.Tensor
    step_advantages: torch.Tensor
    step_returns: torch.Tensor
    anchor_groups: int
    rows_in_shared_anchor_groups: int


def gigpo_advantages(
    rewards: torch.Tensor,
    episode: torch.Tensor,
    turn: torch.Tensor,
    group: torch.Tensor,
    anchor: torch.Tensor,
    *,
    gamma: float,
    omega: float,
    norm: str = "mean_std",
    eps: float = DEFAULT_EPS,
) -> GiGPOAdvantages:
    """GiGPO: GRPO's episode-level advantage plus ``omega`` times the step-level advantage of anchor-state groups.

    Args:
        rewards: ``[n]`` reward of each row.
        episode: ``[n]`` long episode index (whole episodes, turns ``0 .. L_e - 1``).
        turn: ``[n]`` long turn index of each row in its episode.
        group: ``[n]`` long group index (episodes of one seed), the same for all rows of an episode.
        anchor: ``[n]`` long index of the row's observation text (equal text, equal index); rows of one group with
            equal ``anchor`` form an anchor group. Rows of different groups never share one.
        gamma: discount of the step-level return ``R_{e,t}``.
        omega: weight of the step-level advantage.
        norm, eps: see :func:`group_normalize` (used at both levels).

    Returns:
        :class:`GiGPOAdvantages`: ``advantages = episode_advantages + omega * step_advantages``.
    """
    n = rewards.numel()
    if n == 0:
        z = torch.zeros(0, dtype=torch.float32)
        return GiGPOAdvantages(z, z, z, z.double(), 0, 0)
    step_returns, _ = returns_to_go(rewards, episode, turn, gamma)
    episode_adv = grpo_advantages(rewards, episode, group, norm, eps)
    anchor_key = index_of(list(zip(group.tolist(), anchor.tolist())))
    step_adv = group_normalize(step_returns, anchor_key, norm, eps)
    sizes = torch.bincount(anchor_key)
    return GiGPOAdvantages(
        advantages=episode_adv + float(omega) * step_adv,
        episode_advantages=episode_adv,
        step_advantages=step_adv,
        step_returns=step_returns,
        anchor_groups=int(sizes.numel()),
        rows_in_shared_anchor_groups=int((sizes[anchor_key] > 1).sum()),
    )


def spread_untrained_rows(trained: Sequence[bool], ranks: int, mini_batch_rows: int) -> list[int] | None:
    """An order of the rows in which every PPO mini-batch holds trained rows, each rank keeping its rows.

    verl hands rank ``r`` the ``r``-th contiguous chunk of the batch and each rank cuts its chunk into contiguous
    mini-batches (no shuffling); a mini-batch whose rows are all outside the loss (idle or unfinished rows, response
    mask 0) would divide by zero tokens. This permutes rows *within* each rank's chunk only (verl's balancing across
    ranks stays) and deals each rank's trained rows round-robin over its mini-batches, continuing the count from one
    rank to the next.

    Args:
        trained: ``B`` flags, True for rows inside the loss.
        ranks: data-parallel ranks.
        mini_batch_rows: rows of one global mini-batch (all ranks together).

    Returns:
        A permutation of ``range(B)`` (new position -> old row), or None when the sizes do not split evenly (verl
        would refuse such a batch anyway).

    Raises:
        AdvantageInputError: a mini-batch would have no trained row at all (fewer trained rows than mini-batches).
    """
    b = len(trained)
    if ranks < 1 or mini_batch_rows < 1 or b % ranks or mini_batch_rows % ranks:
        return None
    chunk, per_rank = b // ranks, mini_batch_rows // ranks
    if chunk % per_rank:
        return None
    minis = chunk // per_rank
    total = sum(bool(x) for x in trained)
    if total < minis:
        raise AdvantageInputError(
            f"only {total} of {b} rows are trained, fewer than the {minis} mini-batches: a mini-batch would hold no "
            "trained row (its loss would divide by zero); episodes must end within rollout.turns_per_slot"
        )
    order: list[int] = []
    offset = 0
    for r in range(ranks):
        rows = range(r * chunk, (r + 1) * chunk)
        real = [i for i in rows if trained[i]]
        idle = [i for i in rows if not trained[i]]
        cells: list[list[int]] = [[] for _ in range(minis)]
        for j, i in enumerate(real):
            cells[(offset + j) % minis].append(i)
        offset = (offset + len(real)) % minis
        for cell in cells:
            while len(cell) < per_rank:
                cell.append(idle.pop())
            order.extend(sorted(cell))
    return order


@dataclass
class GroupAdvantageResult:
    """What :func:`group_advantages` returns: ``[B, R]`` token advantages and metrics (``adv/...``)."""

    advantages: torch.Tensor
    row_advantages: torch.Tensor
    metrics: dict[str, float]


def group_advantages(
    estimator: str,
    token_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    episode_ids: Sequence[Hashable],
    turn_index: Sequence[int],
    ended: Sequence[bool],
    group_ids: Sequence[Hashable],
    observations: Sequence[str],
    trained: Sequence[bool],
    *,
    norm: str = "mean_std",
    gamma: float = 0.95,
    omega: float = 1.0,
    eps: float = DEFAULT_EPS,
) -> GroupAdvantageResult:
    """GRPO or GiGPO token advantages of a batch of per-turn rows (the trainer's entry point).

    Args:
        estimator: ``"grpo"`` or ``"gigpo"``.
        token_rewards: ``[B, R]`` token rewards (env reward on each row's last response token, KL penalties).
        response_mask: ``[B, R]`` 1 on response tokens (0 on every token of an untrained row).
        episode_ids, turn_index, ended: ``B`` episode keys, turn indices and end flags (terminated or truncated).
        group_ids: ``B`` group keys (episodes started from one seed in one iteration share one).
        observations: ``B`` observation texts each turn started from (GiGPO's anchor states; unused by GRPO).
        trained: ``B`` flags; False rows (idle slots, episodes unfinished at the batch's end) get advantage 0 and
            are not part of any group.
        norm, eps: group normalisation (:func:`group_normalize`).
        gamma, omega: GiGPO's step-level discount and weight.

    Returns:
        :class:`GroupAdvantageResult`: ``advantages[i, j] = A_i * response_mask[i, j]``.
    """
    if estimator not in GROUP_ADVANTAGES:
        raise ValueError(f"estimator must be one of {GROUP_ADVANTAGES}, got {estimator!r}")
    b = token_rewards.shape[0]
    for name, seq in (
        ("episode_ids", episode_ids),
        ("turn_index", turn_index),
        ("ended", ended),
        ("group_ids", group_ids),
        ("observations", observations),
        ("trained", trained),
    ):
        if len(seq) != b:
            raise AdvantageInputError(f"{name} has {len(seq)} entries for {b} rows")
    mask = response_mask.to(torch.float64)
    keep = [i for i in range(b) if trained[i]]
    row_adv = torch.zeros(b, dtype=torch.float32)
    metrics: dict[str, float] = {"adv/trained_rows": float(len(keep)), "adv/untrained_rows": float(b - len(keep))}
    if keep:
        untrained_tokens = mask[[i for i in range(b) if not trained[i]]].sum() if len(keep) < b else 0.0
        if float(untrained_tokens) != 0.0:
            raise AdvantageInputError("untrained rows must have an all-zero response mask")
        adv = _trained_row_advantages(
            estimator,
            row_rewards(token_rewards, response_mask)[keep],
            [episode_ids[i] for i in keep],
            [int(turn_index[i]) for i in keep],
            [bool(ended[i]) for i in keep],
            [group_ids[i] for i in keep],
            [observations[i] for i in keep],
            metrics,
            norm=norm,
            gamma=gamma,
            omega=omega,
            eps=eps,
        )
        row_adv[keep] = adv
        metrics["adv/mean"] = float(adv.mean())
        metrics["adv/std"] = float(adv.std()) if len(keep) > 1 else 0.0
    advantages = (row_adv.to(torch.float64)[:, None] * mask).to(torch.float32)
    return GroupAdvantageResult(advantages=advantages, row_advantages=row_adv, metrics=metrics)


def _trained_row_advantages(
    estimator: str,
    rewards: torch.Tensor,
    episode_ids: list[Hashable],
    turn_index: list[int],
    ended: list[bool],
    group_ids: list[Hashable],
    observations: list[str],
    metrics: dict[str, float],
    *,
    norm: str,
    gamma: float,
    omega: float,
    eps: float,
) -> torch.Tensor:
    """``[K]`` advantages of the K trained rows (their rewards and keys given in row order) by ``estimator``; adds
    the group counts, and GiGPO's episode, step and anchor metrics, to ``metrics``."""
    episode = check_whole_episodes(episode_ids, turn_index, ended)
    turn = torch.tensor(turn_index, dtype=torch.long)
    group = index_of(group_ids)
    episode_group = _episode_group(episode, group)
    sizes = torch.bincount(episode_group)
    metrics["adv/groups"] = float(sizes.numel())
    metrics["adv/episodes"] = float(episode_group.numel())
    metrics["adv/singleton_groups"] = float((sizes == 1).sum())
    if estimator == "grpo":
        return grpo_advantages(rewards, episode, group, norm, eps)
    out = gigpo_advantages(
        rewards, episode, turn, group, index_of(observations), gamma=gamma, omega=omega, norm=norm, eps=eps
    )
    metrics["adv/episode_mean_abs"] = float(out.episode_advantages.abs().mean())
    metrics["adv/step_mean_abs"] = float(out.step_advantages.abs().mean())
    metrics["adv/anchor_groups"] = float(out.anchor_groups)
    metrics["adv/anchor_shared_ratio"] = out.rows_in_shared_anchor_groups / len(episode_ids)
    return out.advantages
