"""The advantage estimators (``algorithm.estimator``), one registry entry each.

Like verl's ``register_adv_est`` (verl/trainer/ppo/core_algos.py), an estimator is a compute function registered
under its name with :func:`register_estimator`; unlike verl's, the entry (:class:`Estimator`) also declares what the
rest of verlog needs to know about it, so that nothing else names estimators:

- ``needs_critic``: whether verl builds and trains a critic (``verlog.trainer.config``: ``critic.enable=False`` and
  ``trainer.critic_warmup=0`` without one; verl then never calls ``_compute_values``, so no bootstrap values);
- ``grouping``: how the rollout must group its slots (:class:`Grouping`): persistent slots whose episodes span
  iterations, or group rollouts of whole episodes, ``rollout.group_size >= 2`` slots on one seed;
- ``checks``: the config problems it adds (:func:`verlog.config.checks.check_sizes` calls them);
- ``compute``: :class:`Rows` (one batch's tensors and row columns) and the typed ``algorithm`` section ->
  :class:`Estimate` (advantages, returns, metrics);
- ``metrics``: the names it logs (docs/metrics.md lists each; a test compares them);
- ``tapes``: whether the iteration's sampled episodes are taped (``tapes/train.jsonl``).

The trainer's advantage step (``verlog.trainer.advantage_step``) turns verl's DataProto into :class:`Rows`, calls the
entry's ``compute`` and writes the result back. Adding an estimator is one more :func:`register_estimator` here plus
its tests (docs/algorithms.md, "Adding an estimator").

Layer: with the config (tests/test_import_layers.py): the checks before a launch ask this registry, so it imports only
the plain modules and :mod:`verlog.config.schema` / :mod:`verlog.config.problems`.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from verlog.algorithms.dual_gae import (
    advantage_metrics,
    dual_discount_gae,
    link_turns,
    masked_whiten,
    turn_level_advantages,
)
from verlog.algorithms.group_advantage import group_advantages
from verlog.config.problems import Problem
from verlog.config.registry import Registry
from verlog.config.schema import AlgorithmConfig, TrainConfig
from verlog.errors import AdvantageInputError


class Grouping(enum.Enum):
    """How an estimator needs the rollout's env slots grouped (docs/algorithms.md)."""

    SLOTS = "slots"
    """Persistent slots: fixed-turn batches, episodes span iterations (env state and memory stay in the slot) and a
    row whose episode goes on past the batch bootstraps from ``V(s_T)``; ``rollout.group_size`` 1."""
    GROUPS = "groups"
    """Group rollouts: ``rollout.group_size >= 2`` slots reset to one seed, whole episodes per iteration, slots idle
    after their episode ends (rows outside the loss); rows carry ``group_id``, ``anchor`` and ``trained``."""


@dataclass(frozen=True)
class Rows:
    """One batch of per-turn rows, in the batch's order (verl's balancing may have reordered them).

    Attributes:
        token_rewards: ``[B, R]`` rewards per response token (the env reward on the last one, KL penalties).
        response_mask: ``[B, R]`` 1 on response tokens (all 0 on a row outside the loss).
        episode_id: ``B`` episode ids (strings).
        turn_index: ``B`` turn indices in their episodes.
        terminated, truncated: ``B`` flags: the episode ended at this row (truly / by a time limit or an env failure).
        values: ``[B, R]`` critic values (``values[:, 0]`` is ``V(s_t)``); None without a critic.
        next_values: ``[B]`` ``V(s_{t+1})`` of rows whose episode goes on past the batch (0 elsewhere); None: all 0.
        group_id, anchor, trained: ``B`` each, group rollouts only (else None): the row's group (episodes of one
            seed), the observation text it started from (GiGPO's anchor state), whether it is inside the loss.
        trace_weights: ``[B]`` V-trace's ``c = min(1, rho)`` of each row's turn
            (:func:`verlog.algorithms.dual_gae.turn_trace_weights`), read by ``dual_gae`` with
            ``algorithm.turn_trace=vtrace``;
            None: all 1.
    """

    token_rewards: torch.Tensor
    response_mask: torch.Tensor
    episode_id: Sequence[str]
    turn_index: Sequence[int]
    terminated: Sequence[bool] | np.ndarray
    truncated: Sequence[bool] | np.ndarray
    values: torch.Tensor | None = None
    next_values: torch.Tensor | None = None
    group_id: Sequence[Hashable] | np.ndarray | None = None
    anchor: Sequence[str] | np.ndarray | None = None
    trained: Sequence[bool] | np.ndarray | None = None
    trace_weights: torch.Tensor | None = None

    def __len__(self) -> int:
        return int(self.token_rewards.shape[0])


@dataclass(frozen=True)
class Estimate:
    """What an estimator computes for a batch of :class:`Rows`.

    Attributes:
        advantages: ``[B, R]`` what the policy loss uses (0 outside the response mask).
        returns: ``[B, R]`` the critic's targets (without a critic: the advantages, as verl's GRPO sets them, for
            verl's metrics only).
        metrics: ``adv/...`` diagnostics, each name declared in the entry's ``metrics``.
        raw_advantages: ``[B, R]`` before any batch-level transform (whitening, turn level), what the tapes record
            and the non-finite check looks at; None: the same as ``advantages``.
    """

    advantages: torch.Tensor
    returns: torch.Tensor
    metrics: dict[str, float] = field(default_factory=dict)
    raw_advantages: torch.Tensor | None = None

    @property
    def raw(self) -> torch.Tensor:
        """:attr:`raw_advantages`, or :attr:`advantages` when the estimator transforms nothing."""
        return self.advantages if self.raw_advantages is None else self.raw_advantages


Compute = Callable[[Rows, AlgorithmConfig], Estimate]
Checks = Callable[[TrainConfig], list[Problem]]


@dataclass(frozen=True)
class Estimator:
    """One registry entry: an estimator and everything verlog needs to know about it (module docstring)."""

    name: str
    needs_critic: bool
    grouping: Grouping
    compute: Compute
    checks: Checks
    metrics: tuple[str, ...]
    tapes: bool = True


REGISTRY: Registry[Estimator] = Registry("advantage estimator")
"""Estimator name -> entry, in registration order (the order ``algorithm.estimator``'s choices are listed in)."""


def register_estimator(
    name: str,
    *,
    needs_critic: bool,
    grouping: Grouping,
    checks: Checks,
    metrics: Iterable[str],
    tapes: bool = True,
) -> Callable[[Compute], Compute]:
    """Register the decorated compute function as the estimator ``name`` (see :class:`Estimator` for the rest).

    Raises:
        ValueError: ``name`` is registered already.
    """

    def register(compute: Compute) -> Compute:
        REGISTRY.add(
            name,
            Estimator(
                name=name,
                needs_critic=needs_critic,
                grouping=grouping,
                compute=compute,
                checks=checks,
                metrics=tuple(metrics),
                tapes=tapes,
            ),
        )
        return compute

    return register


def get_estimator(name: str) -> Estimator:
    """The entry of ``algorithm.estimator`` ``name`` (ValueError when none: :meth:`Registry.entry`)."""
    return REGISTRY.entry(name)


def estimator_names() -> tuple[str, ...]:
    """The registered names, in registration order."""
    return tuple(REGISTRY)


def _names(grouping: Grouping) -> list[str]:
    return [name for name, e in REGISTRY.items() if e.grouping is grouping]


def choices_meaning() -> str:
    """What the choices of ``algorithm.estimator`` mean, for its config message
    (``dual_gae: critic; grpo, gigpo: groups``): the estimators with a critic, then the critic-free ones by grouping."""
    parts = {"critic": [n for n, e in REGISTRY.items() if e.needs_critic]}
    for grouping, label in ((Grouping.GROUPS, "groups"), (Grouping.SLOTS, "slots")):
        parts[label] = [n for n in _names(grouping) if not REGISTRY[n].needs_critic]
    return "; ".join(f"{', '.join(names)}: {label}" for label, names in parts.items() if names)


# ------------------------------------------------------------------------------------------------ config checks
def slot_rollout_problems(cfg: TrainConfig) -> list[Problem]:
    """The checks of an estimator on persistent slots: slots are not grouped (``rollout.group_size`` 1)."""
    k = cfg.rollout.group_size
    if k != 1:
        return [
            Problem(
                "rollout.group_size",
                f"{k} groups slots for the group estimators, but algorithm.estimator={cfg.algorithm.estimator}: set "
                f"algorithm.estimator={' or '.join(_names(Grouping.GROUPS))}, or rollout.group_size=1",
            )
        ]
    return []


def group_rollout_problems(cfg: TrainConfig) -> list[Problem]:
    """The checks of a critic-free estimator on group rollouts (docs/algorithms.md, "Group estimators"): groups of
    at least 2 slots that divide the slots, no critic warm-up rollout, first turns that fill every mini-batch, and
    episodes that end within an iteration."""
    alg, ro = cfg.algorithm, cfg.rollout
    estimator, k, slots = alg.estimator, ro.group_size, ro.num_slots
    problems = []
    if k < 2 or slots % k:
        problems.append(
            Problem(
                "rollout.group_size",
                f"algorithm.estimator={estimator} compares the episodes of a group: rollout.group_size ({k}) must be "
                f">= 2 and divide rollout.num_slots ({slots}), e.g. rollout.group_size=4 with num_slots a multiple "
                "of 4",
            )
        )
    if alg.warmup_rollout_multiplier > 1:
        problems.append(
            Problem(
                "algorithm.warmup_rollout_multiplier",
                f"algorithm.estimator={estimator} trains no critic, so the critic warm-up rollout "
                f"(algorithm.warmup_rollout_multiplier={alg.warmup_rollout_multiplier}) has nothing to train: set it "
                "to 1",
            )
        )
    if slots < alg.mini_batches:
        problems.append(
            Problem(
                "rollout.num_slots",
                f"with algorithm.estimator={estimator} a slot's rows after its episode ended are left out of the "
                f"loss; the first turns of the {slots} slots must fill the {alg.mini_batches} mini-batches: raise "
                "rollout.num_slots or lower algorithm.mini_batches",
            )
        )
    limit = step_limit_problem(cfg, cfg.env.kwargs.get("max_steps"), "env.kwargs.max_steps")
    return problems if limit is None else [*problems, limit]


def step_limit_problem(cfg: TrainConfig, limit: Any, source: str) -> Problem | None:
    """The group estimators' rule that an episode ends within its iteration: a step limit ``limit`` (read from
    ``source``: ``env.kwargs.max_steps``, or the env's own ``max_steps``, which the preflight reads from the built
    env) above ``rollout.turns_per_slot`` is a problem; None when it is not (or ``limit`` is no integer)."""
    turns = cfg.rollout.turns_per_slot
    if not isinstance(limit, int) or isinstance(limit, bool) or limit <= turns:
        return None
    return Problem(
        source if source.startswith("env.") else "rollout.turns_per_slot",
        f"algorithm.estimator={cfg.algorithm.estimator} plays whole episodes per iteration, but {source}={limit} lets "
        f"an episode run past rollout.turns_per_slot={turns}: set rollout.turns_per_slot={limit} or "
        f"env.kwargs.max_steps={turns}",
    )


# ------------------------------------------------------------------------------------------------ the estimators
DUAL_GAE_METRICS = (
    "adv/mean",
    "adv/std",
    "adv/max",
    "adv/min",
    "adv/turn_mean",
    "adv/linked_rows",
    "adv/bootstrap_rows",
    "adv/next_value_mean",
    "adv/trace_weight_mean",
    "adv/trace_weight_min",
)
GROUP_METRICS = (
    "adv/trained_rows",
    "adv/untrained_rows",
    "adv/groups",
    "adv/episodes",
    "adv/singleton_groups",
    "adv/mean",
    "adv/std",
)
GIGPO_METRICS = (
    *GROUP_METRICS,
    "adv/episode_mean_abs",
    "adv/step_mean_abs",
    "adv/anchor_groups",
    "adv/anchor_shared_ratio",
)


@register_estimator(
    "dual_gae",
    needs_critic=True,
    grouping=Grouping.SLOTS,
    checks=slot_rollout_problems,
    metrics=DUAL_GAE_METRICS,
)
def dual_gae(rows: Rows, alg: AlgorithmConfig) -> Estimate:
    """Dual-discount GAE over the rows, linked by (episode id, turn index) in any order (docs/algorithms.md, sections
    1-3), then turn-level advantages (``advantage_level=turn``) and masked whitening (``whiten_advantages``). With
    ``turn_trace=vtrace`` the trace across turns is cut by ``rows.trace_weights`` (all 1 when None)."""
    if rows.values is None:
        raise AdvantageInputError("dual_gae needs the critic's values of the rows")
    ended = np.logical_or(rows.terminated, rows.truncated)
    next_row = link_turns(rows.episode_id, rows.turn_index, ended)
    mask = rows.response_mask
    next_values = rows.next_values if rows.next_values is not None else torch.zeros(len(rows))
    terminated = np.asarray(rows.terminated).astype(bool)
    trace = None
    if alg.turn_trace == "vtrace":
        trace = rows.trace_weights if rows.trace_weights is not None else torch.ones(len(rows))
    raw, returns = dual_discount_gae(
        rows.token_rewards,
        rows.values,
        mask,
        next_row,
        next_values,
        torch.as_tensor(terminated),
        token_gamma=alg.token_gamma,
        token_lam=alg.token_lam,
        step_gamma=alg.step_gamma,
        step_lam=alg.step_lam,
        trace_weights=trace,
    )
    advantages = raw
    if alg.advantage_level == "turn":
        advantages = turn_level_advantages(advantages, mask)
    if alg.whiten_advantages:
        advantages = masked_whiten(advantages, mask)
    # the library's diagnostics of the raw advantages (its critic/* entries are verl's own metrics already)
    stats = advantage_metrics(raw, returns, rows.values, mask) if bool(mask.any()) else {}
    metrics = {
        **{k: v for k, v in stats.items() if k.startswith("adv/")},
        "adv/linked_rows": float(sum(r >= 0 for r in next_row)),
        "adv/bootstrap_rows": float(sum(1 for i, r in enumerate(next_row) if r < 0 and not terminated[i])),
        "adv/next_value_mean": float(next_values.float().mean()),
    }
    if trace is not None:
        metrics.update(trace_weight_metrics(trace, mask))
    return Estimate(advantages=advantages, returns=returns, metrics=metrics, raw_advantages=raw)


def trace_weight_metrics(trace_weights: torch.Tensor, response_mask: torch.Tensor) -> dict[str, float]:
    """``adv/trace_weight_mean`` and ``adv/trace_weight_min``: V-trace's ``c`` (``[B]``) over the rows with response
    tokens (``response_mask`` ``[B, R]``; all rows when none has any)."""
    c = trace_weights.detach().float().cpu()
    rows = response_mask.detach().cpu().bool().any(1)
    if bool(rows.any()):
        c = c[rows]
    if c.numel() == 0:
        return {}
    return {"adv/trace_weight_mean": float(c.mean()), "adv/trace_weight_min": float(c.min())}


def _as_list(x: Any) -> list[Any]:
    return x.tolist() if isinstance(x, np.ndarray) else list(x)


def _group_estimate(kind: str, rows: Rows, alg: AlgorithmConfig) -> Estimate:
    """:func:`verlog.algorithms.group_advantage.group_advantages` of ``kind`` over the rows: each row's advantage on all
    its response tokens, no whitening; untrained rows get 0."""
    if rows.group_id is None or rows.anchor is None or rows.trained is None:
        raise AdvantageInputError(f"{kind} needs group rollouts: rows with group_id, anchor and trained")
    out = group_advantages(
        kind,
        rows.token_rewards,
        rows.response_mask,
        list(rows.episode_id),
        list(rows.turn_index),
        np.logical_or(rows.terminated, rows.truncated).tolist(),
        _as_list(rows.group_id),
        _as_list(rows.anchor),
        np.asarray(rows.trained).astype(bool).tolist(),
        norm=alg.group_norm,
        gamma=alg.gigpo_step_gamma,
        omega=alg.gigpo_omega,
    )
    # no critic: verl's metrics read returns; set as verl's GRPO does
    return Estimate(advantages=out.advantages, returns=out.advantages.clone(), metrics=dict(out.metrics))


_GROUP_ESTIMATOR: dict[str, Any] = {
    "needs_critic": False,
    "grouping": Grouping.GROUPS,
    "checks": group_rollout_problems,
    "tapes": True,
}
"""What every group estimator declares: no critic, group rollouts (checked), and tapes like dual GAE's (their turns
with ``value`` None: there is no critic)."""


@register_estimator("grpo", metrics=GROUP_METRICS, **_GROUP_ESTIMATOR)
def grpo(rows: Rows, alg: AlgorithmConfig) -> Estimate:
    """GRPO over whole episodes: each episode's return normalised within its group (docs/algorithms.md, section 6)."""
    return _group_estimate("grpo", rows, alg)


@register_estimator("gigpo", metrics=GIGPO_METRICS, **_GROUP_ESTIMATOR)
def gigpo(rows: Rows, alg: AlgorithmConfig) -> Estimate:
    """GiGPO: GRPO's episode-level advantage plus ``gigpo_omega`` times the step-level one of anchor-state groups."""
    return _group_estimate("gigpo", rows, alg)
