"""The advantage step of an iteration and the run-level hooks that act on the rows it trains, as pure functions.

verl's ``fit`` calls ``compute_advantage(batch, ...)`` once per iteration; :class:`verlog.trainer.ppo.VerlogPPOTrainer`
swaps in its own, which is these functions wired together:

1. :func:`advantage_step`: the batch (verl's DataProto, its rows carrying ``episode_id`` / ``turn_index``) and the typed
   settings -> the batch with ``advantages`` and ``returns``, and the step's ``adv/`` metrics. It hands the batch's
   rows (:func:`rows_of`) to :func:`verlog.rollout.iteration.estimate_advantages` (the estimator's registry entry;
   stops on a non-finite reward or advantage, naming the env, episode and turn), and with group rollouts deals the
   untrained rows over the PPO mini-batches.
2. :func:`record_tapes`: the sampled episodes' turns into ``tapes/train.jsonl``, each row matched to its
   :class:`~verlog.rollout.batch.TurnRow` of the iteration's rollout (passed in) by (episode id, turn index), then
   :func:`verlog.rollout.iteration.record_iteration_tapes`.
3. :func:`update_curriculum`: multi-task training's curriculum rewarded with the advantages the policy loss uses, and
   the ``curriculum/`` and ``family/`` metrics.

Nothing here keeps state between calls; the trainer hands each one what it needs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch
from verl import DataProto

from verlog.algorithms.dual_gae import turn_trace_weights
from verlog.algorithms.estimators import Grouping, Rows, get_estimator
from verlog.algorithms.group_advantage import spread_untrained_rows
from verlog.config.schema import AlgorithmConfig, TrainConfig
from verlog.rollout.iteration import TAPE_TENSORS, estimate_advantages, record_iteration_tapes


@dataclass(frozen=True)
class BatchLayout:
    """How verl cuts the batch for the PPO update (read from verl's config: ``verl:`` overrides count).

    Attributes:
        ranks: data-parallel ranks (``trainer.n_gpus_per_node x trainer.nnodes``).
        mini_batch_rows: rows of one global mini-batch (``actor_rollout_ref.actor.ppo_mini_batch_size``).
        shuffle: verl shuffles the rows before cutting mini-batches (``actor_rollout_ref.actor.shuffle``).
    """

    ranks: int
    mini_batch_rows: int
    shuffle: bool = False


class AdvantageStep(NamedTuple):
    """What :func:`advantage_step` returns."""

    batch: DataProto
    """The batch with ``advantages`` and ``returns`` (reordered within ranks with group rollouts)."""
    metrics: dict[str, float]
    """The estimator's ``adv/`` metrics of the step."""
    raw_advantages: torch.Tensor
    """``[B, R]`` advantages before whitening or the turn level, in the batch's (final) row order."""


def row_keys(data: DataProto) -> list[tuple[str, int]]:
    """Each row's (episode id, turn index), in the batch's order."""
    columns = data.non_tensor_batch
    return [(str(e), int(t)) for e, t in zip(columns["episode_id"], columns["turn_index"])]


def trace_weights_of(data: DataProto) -> torch.Tensor:
    """``[B]`` V-trace's ``c = min(1, rho)`` of each row (:func:`verlog.algorithms.dual_gae.turn_trace_weights`), from
    the batch's ``old_log_probs`` and ``rollout_log_probs``; all 1 when either is missing. A row gets 1 when its
    generation failed (the ``generation_failed`` column, when there is one) or its rollout log-probs are unknown
    (``TurnBatch.to_tensors`` leaves them all 0 on the row's response tokens)."""
    tensors = data.batch
    present = tensors.keys()
    if "old_log_probs" not in present or "rollout_log_probs" not in present:
        return torch.ones(len(data))
    mask = tensors["response_mask"].bool()
    rollout = tensors["rollout_log_probs"]
    known = ((rollout != 0) & mask).any(1)
    failed = data.non_tensor_batch.get("generation_failed")
    if failed is not None:
        known &= ~torch.as_tensor(np.asarray(failed, dtype=bool), device=known.device)
    return turn_trace_weights(tensors["old_log_probs"], rollout, mask, known=known)


def rows_of(data: DataProto, algorithm: AlgorithmConfig | None = None) -> Rows:
    """The estimators' view of a batch: its tensors and row columns (:class:`verlog.algorithms.estimators.Rows`); with
    ``algorithm.turn_trace=vtrace`` also each row's trace weight (:func:`trace_weights_of`)."""
    columns, tensors = data.non_tensor_batch, data.batch
    present = tensors.keys()
    vtrace = algorithm is not None and algorithm.turn_trace == "vtrace"
    return Rows(
        token_rewards=tensors["token_level_rewards"],
        response_mask=tensors["response_mask"],
        episode_id=[str(e) for e in columns["episode_id"]],
        turn_index=[int(t) for t in columns["turn_index"]],
        terminated=columns["terminated"],
        truncated=columns["truncated"],
        values=tensors["values"] if "values" in present else None,
        next_values=tensors["next_values"] if "next_values" in present else None,
        group_id=columns.get("group_id"),
        anchor=columns.get("anchor"),
        trained=columns.get("trained"),
        trace_weights=trace_weights_of(data) if vtrace else None,
    )


def advantage_step(data: DataProto, settings: TrainConfig, layout: BatchLayout) -> AdvantageStep:
    """The advantages of one iteration's batch, by ``settings.algorithm.estimator``'s registry entry.

    ``data`` needs ``token_level_rewards`` and ``response_mask`` (plus ``values`` and, for bootstrap rows,
    ``next_values`` with a critic) and the row columns ``episode_id``, ``turn_index``, ``terminated``, ``truncated``
    (plus ``group_id``, ``anchor``, ``trained`` with group rollouts). Rows may come in any order.

    Returns:
        :class:`AdvantageStep`: ``data`` itself with ``advantages`` and ``returns`` set; with group rollouts and verl
        not shuffling, its rows reordered within each rank's chunk so that every mini-batch holds trained rows
        (:func:`verlog.algorithms.group_advantage.spread_untrained_rows`).

    Raises:
        VerlogError: a non-finite reward or advantage; group estimators on rows without group ids.
    """
    estimator = get_estimator(settings.algorithm.estimator)
    estimate = estimate_advantages(rows_of(data, settings.algorithm), settings.algorithm, settings.env.id)
    data.batch["advantages"] = estimate.advantages
    data.batch["returns"] = estimate.returns
    raw = estimate.raw
    if estimator.grouping is Grouping.GROUPS and not layout.shuffle:
        trained = data.non_tensor_batch["trained"].astype(bool).tolist()
        order = spread_untrained_rows(trained, layout.ranks, layout.mini_batch_rows)
        if order is not None and order != list(range(len(data))):
            data.reorder(torch.tensor(order, dtype=torch.long))
            raw = raw[order]
    return AdvantageStep(data, dict(estimate.metrics), raw)


# ---------------------------------------------------------------------------------------------- run-level hooks
def record_tapes(
    tapes: Any,
    data: DataProto,
    rollout_rows: Sequence[Any],
    raw_advantages: torch.Tensor | None,
    entropys: torch.Tensor | None,
    step: int,
) -> int:
    """The iteration's sampled episodes into ``tapes/train.jsonl`` (:class:`verlog.tapes.recorders.TrainingTapes`).

    Args:
        tapes: the run's :class:`~verlog.tapes.recorders.TrainingTapes`, or None (no tapes).
        data: the trained batch after :func:`advantage_step`.
        rollout_rows: the :class:`~verlog.rollout.batch.TurnRow` objects of this iteration's rollout, any order;
            each row of ``data`` is matched to its own by (episode id, turn index).
        raw_advantages: ``[B, R]`` advantages before whitening, in ``data``'s order (or None).
        entropys: ``[B, R]`` the actor's per-token entropies in ``data``'s order (verl computes them with the old
            log-probs), or None; ignored when their shape is not the response mask's.
        step: the iteration (metrics.jsonl's ``step``); the critic warm-up (step 0) writes no tape.

    Returns:
        Turns written (0 without tapes, at step 0, or when no taped episode has a row here).

    Raises:
        TapeRowsError: a row of ``data`` is not among ``rollout_rows`` (the batch is not this rollout's): its tapes
            would be lost.
    """
    from verlog.tapes.recorders import TapeRowsError

    if tapes is None or step < 1:
        return 0
    by_key = {(r.episode_id, r.turn_index): r for r in rollout_rows}
    keys = row_keys(data)
    missing = [k for k in keys if k not in by_key]
    if missing:
        episode, turn = missing[0]
        raise TapeRowsError(
            f"the tapes of iteration {step}: {len(missing)} of the trained batch's {len(keys)} rows are not in this "
            f"iteration's rollout ({len(by_key)} rows; first missing: episode {episode} turn {turn}): the batch and "
            "the rollout record disagree, a verlog bug; set tapes.episodes_per_iteration=0 to train without tapes"
        )
    present = data.batch.keys()
    tensors = {name: data.batch[name] if name in present else None for name in TAPE_TENSORS}
    return record_iteration_tapes(tapes, [by_key[k] for k in keys], tensors, raw_advantages, entropys, step)


def update_curriculum(curriculum: Any, data: DataProto, episodes: Sequence[Any], step: int) -> dict[str, float]:
    """Multi-task training: the curriculum's arm rewards from the advantages the policy loss uses (whatever the
    estimator: the mean ``|A|`` of each task family's trained rows, docs/curriculum.md), then its metrics.

    Args:
        curriculum: the run's :class:`verlog.algorithms.curriculum.TaskCurriculum`, or None (one task).
        data: the trained batch after :func:`advantage_step` (rows with a ``task`` column in multi-task training).
        episodes: the episodes that ended during this iteration's rollout (each with its ``task``).
        step: the iteration; not during the critic warm-up (step 0: no iteration yet, and an untrained critic's
            advantages say nothing about the tasks).

    Returns:
        The ``curriculum/`` and ``family/`` metrics (docs/metrics.md), or {} when there is nothing to update.
    """
    from verlog.algorithms.curriculum import curriculum_metrics, family_abs_advantage

    columns = data.non_tensor_batch
    if curriculum is None or "task" not in columns or step < 1:
        return {}
    trained = columns["trained"].astype(bool) if "trained" in columns else None
    tasks = [str(t) for t in columns["task"]]
    curriculum.update(
        family_abs_advantage(data.batch["advantages"], tasks, data.batch["response_mask"], trained=trained)
    )
    rows = [t for i, t in enumerate(tasks) if trained is None or trained[i]]
    return curriculum_metrics(curriculum, episodes, rows)
