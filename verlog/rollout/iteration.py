"""One training iteration without verl: collect -> advantages -> tapes and logs.

The pieces, each what one of the trainer's seams calls (:mod:`verlog.trainer`) and what :func:`run_iteration` calls
in that order (``bench/soak.py`` runs it, with made-up critic values and no model):

1. :func:`collect_iteration`: the rollout's rows of one iteration as a :class:`RolloutRecord` (the rows, their
   metrics and timing, and the iteration's line of ``rollout.jsonl``); the trainer's rollout seam
   (``VerlogAgentLoopManager.collect_record``).
2. :func:`estimate_advantages`: the rows' advantages by ``algorithm.estimator``'s registry entry
   (:mod:`verlog.algorithms.estimators`), stopping on a non-finite reward or advantage; the trainer's advantage step
   (:func:`verlog.trainer.advantage_step.advantage_step`) calls it on the rows of verl's batch
   (:func:`~verlog.trainer.advantage_step.rows_of`), :func:`run_iteration` on the rows of the
   :class:`~verlog.rollout.batch.TurnBatch` (:func:`rows_of_batch`).
3. :func:`record_iteration_tapes`: the sampled episodes' turns into ``tapes/train.jsonl``.
4. :func:`append_iteration_logs`: the iteration's line of ``metrics.jsonl`` and of ``rollout.jsonl``.

Between 1 and 2 the trainer runs what needs the model (verl's log-probs, values, balancing), so it cannot call
:func:`run_iteration` itself; docs/design.md, "One iteration", says where each piece sits in verl's ``fit``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from verlog.algorithms.estimators import Estimate, Grouping, Rows, get_estimator
from verlog.config.schema import AlgorithmConfig
from verlog.errors import VerlogError
from verlog.rollout.batch import TurnBatch, TurnRow
from verlog.rollout.manager import RolloutManager
from verlog.run.files import append_jsonl
from verlog.run.folder import RunFolder


@dataclass
class RolloutRecord:
    """One iteration's rollout: its number (verl's ``global_steps``; -1 until it is handed out), the rows and finished
    episodes, the metrics, its line of ``rollout.jsonl`` (the episodes at its start, their seeds, the finished ones)
    and the seconds collecting took."""

    step: int
    batch: TurnBatch
    metrics: dict[str, float] = field(default_factory=dict)
    log: dict[str, Any] = field(default_factory=dict)
    elapsed: float = 0.0


def rollout_log(batch: TurnBatch, start_episodes: list[tuple[str, int]]) -> dict[str, Any]:
    """The iteration's line of ``rollout.jsonl`` (without its ``step``)."""
    return {
        "start_episodes": start_episodes,
        "rows": len(batch),
        # every episode with a row in this batch -> the env seed it was reset with (training layouts)
        "episode_seeds": {r.episode_id: r.seed for r in batch.rows if not r.idle},
        "finished_episodes": [
            {"id": e.episode_id, "seed": e.seed, "success": e.success, "return": e.ret, "length": e.length}
            for e in batch.episodes
        ],
    }


def collect_iteration(rollout: RolloutManager, turns_per_slot: int) -> RolloutRecord:
    """One iteration of rollout (``num_slots x turns_per_slot`` rows) as a :class:`RolloutRecord`; its metrics are
    the batch's stats and the collector's timing."""
    start_episodes = rollout.current_episodes()
    start = time.perf_counter()
    batch = rollout.collect(turns_per_slot)
    elapsed = time.perf_counter() - start
    metrics = {**batch.metrics(), **batch.timing}
    return RolloutRecord(-1, batch, metrics, rollout_log(batch, start_episodes), elapsed)


# ---------------------------------------------------------------------------------------------- advantages
def check_finite(x: torch.Tensor, keys: Sequence[tuple[str, int]], what: str, env_id: Any) -> None:
    """Stop the iteration on a NaN or infinite entry of ``x`` (``[B, R]``), naming the env, the episode and the turn.

    Raises:
        VerlogError: one line with up to 5 of the rows.
    """
    bad = (~torch.isfinite(x.float())).any(dim=1)
    if bool(bad.any()):
        rows = torch.nonzero(bad).squeeze(1).tolist()
        where = ", ".join(f"episode {keys[i][0]} turn {keys[i][1]}" for i in rows[:5])
        raise VerlogError(
            f"a non-finite {what} in {len(rows)} row(s) of env {env_id!r}: {where}; an env must "
            "return finite float rewards (check its step() for NaN or inf)"
        )


def estimate_advantages(rows: Rows, algorithm: AlgorithmConfig, env_id: Any) -> Estimate:
    """The advantages of one iteration's rows (any order) by ``algorithm.estimator``'s registry entry.

    Raises:
        VerlogError: a group estimator on rows without group ids; a non-finite reward or advantage.
    """
    estimator = get_estimator(algorithm.estimator)
    if estimator.grouping is Grouping.GROUPS and rows.group_id is None:
        raise VerlogError(
            f"algorithm.estimator={estimator.name} needs group rollouts (rows with group ids): the rollout "
            "was built without rollout.group_size"
        )
    keys = [(str(episode), int(turn)) for episode, turn in zip(rows.episode_id, rows.turn_index)]
    check_finite(rows.token_rewards, keys, "reward", env_id)
    estimate = estimator.compute(rows, algorithm)
    what = "advantage (the critic's values or the bootstrap values)" if estimator.needs_critic else "advantage"
    check_finite(estimate.raw, keys, what, env_id)
    return estimate


def rows_of_batch(
    batch: TurnBatch,
    tensors: Mapping[str, torch.Tensor],
    values: torch.Tensor | None = None,
    next_values: torch.Tensor | None = None,
) -> Rows:
    """The estimators' view of a rollout batch in its own order: ``tensors`` from
    :meth:`~verlog.rollout.batch.TurnBatch.to_tensors` (``rm_scores`` as the token rewards), the rows' columns, and
    the critic's ``values`` (``[B, R]``) and ``next_values`` (``[B]``) when there are any."""
    rows = batch.rows
    groups = batch.group_size is not None
    return Rows(
        token_rewards=tensors["rm_scores"],
        response_mask=tensors["response_mask"],
        episode_id=[r.episode_id for r in rows],
        turn_index=[r.turn_index for r in rows],
        terminated=[r.terminated for r in rows],
        truncated=[r.truncated for r in rows],
        values=values,
        next_values=next_values,
        group_id=[r.group_id for r in rows] if groups else None,
        anchor=[r.anchor for r in rows] if groups else None,
        trained=[r.trained for r in rows] if groups else None,
    )


# ---------------------------------------------------------------------------------------------- tapes and logs
TAPE_TENSORS = (
    "values",
    "advantages",
    "returns",
    "response_mask",
    "old_log_probs",
    "ref_log_prob",
    "token_level_rewards",
    "next_values",
)
"""The batch's tensors a training tape reads (absent ones are written as None)."""


def record_iteration_tapes(
    tapes: Any,
    rows: Sequence[TurnRow],
    tensors: Mapping[str, torch.Tensor | None],
    raw_advantages: torch.Tensor | None,
    entropys: torch.Tensor | None,
    step: int,
) -> int:
    """The iteration's sampled episodes into ``tapes/train.jsonl``
    (:func:`verlog.tapes.recorders.record_training_tapes`: a failure is printed, training goes on).

    Args:
        tapes: the run's :class:`~verlog.tapes.recorders.TrainingTapes`, or None (no tapes).
        rows: the :class:`~verlog.rollout.batch.TurnRow` of each row of ``tensors``, in their order.
        tensors: ``[B, R]`` (``next_values``: ``[B]``) tensors by name, those of :data:`TAPE_TENSORS` read
            (``response_mask`` required; absent ones written as None).
        raw_advantages: ``[B, R]`` advantages before whitening (or None).
        entropys: ``[B, R]`` per-token entropies of the actor, or None; ignored when their shape is not the
            response mask's.
        step: the iteration (metrics.jsonl's ``step``); the critic warm-up (step 0) writes no tape.

    Returns:
        Turns written (0 without tapes, at step 0, or when no taped episode has a row here).
    """
    from verlog.tapes.recorders import record_training_tapes

    if tapes is None or step < 1:
        return 0
    if entropys is not None and entropys.shape != tensors["response_mask"].shape:
        entropys = None
    taped = {name: tensors.get(name) for name in TAPE_TENSORS}
    taped["advantages_raw"] = raw_advantages
    taped["entropys"] = entropys
    return record_training_tapes(tapes, rows, taped, step)


def plain_value(value: Any) -> Any:
    """A metric's value as JSON holds it: tensors and numpy scalars as Python numbers (or lists), others as text."""
    if isinstance(value, torch.Tensor):
        return value.item() if value.numel() == 1 else value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (int, float, str, bool)) or value is None:
        return value
    return str(value)


def append_iteration_logs(
    output_dir: str | Path, step: int, metrics: Mapping[str, Any], rollout: Mapping[str, Any] | None = None
) -> None:
    """The iteration's line of ``metrics.jsonl`` (``metrics``, values made plain) and, when given, its ``rollout``
    line of ``rollout.jsonl`` (a :class:`RolloutRecord`'s ``log``); one write per line, so a kill tears at most
    one."""
    folder = RunFolder(output_dir)
    append_jsonl(folder.metrics, [{"step": step, **{key: plain_value(v) for key, v in metrics.items()}}])
    if rollout is not None:
        append_jsonl(folder.rollout_log, [{"step": step, **rollout}])


# ---------------------------------------------------------------------------------------------- the iteration
Critic = Callable[[TurnBatch, Mapping[str, torch.Tensor], int], "tuple[torch.Tensor | None, torch.Tensor | None]"]
"""``(batch, tensors, step) -> (values [B, R], next_values [B])``: the critic's values of a batch's rows (either
may be None)."""


@dataclass
class Iteration:
    """What :func:`run_iteration` did: the rollout, its tensors, the estimate and the tape turns written."""

    record: RolloutRecord
    tensors: dict[str, Any]
    estimate: Estimate
    taped_turns: int


def run_iteration(
    rollout: RolloutManager,
    turns_per_slot: int,
    step: int,
    *,
    algorithm: AlgorithmConfig,
    env_id: Any,
    max_prompt_tokens: int,
    max_response_tokens: int,
    output_dir: str | Path,
    critic: Critic | None = None,
    tapes: Any = None,
) -> Iteration:
    """One training iteration without the model's update: :func:`collect_iteration`, the rows as tensors (the
    trainer's layout: :meth:`~verlog.rollout.batch.TurnBatch.to_tensors`), ``critic``'s values,
    :func:`estimate_advantages`, :func:`record_iteration_tapes`, :func:`append_iteration_logs` (the rollout's
    metrics, then the estimate's).

    Raises:
        VerlogError: from :func:`estimate_advantages` (then nothing of the iteration is logged).
    """
    record = collect_iteration(rollout, turns_per_slot)
    record.step = step
    batch = record.batch
    tensors = batch.to_tensors(rollout.tokenizer.pad_token_id, max_prompt_tokens, max_response_tokens)
    values, next_values = critic(batch, tensors, step) if critic is not None else (None, None)
    estimate = estimate_advantages(rows_of_batch(batch, tensors, values, next_values), algorithm, env_id)
    trained = {
        "response_mask": tensors["response_mask"],
        "values": values,
        "advantages": estimate.advantages,
        "returns": estimate.returns,
        "token_level_rewards": tensors["rm_scores"],
        "next_values": next_values,
    }
    taped = 0
    if tapes is not None and tapes.enabled and get_estimator(algorithm.estimator).tapes:  # as the trainer does
        taped = record_iteration_tapes(tapes, batch.rows, trained, estimate.raw, None, step)
        record.log["taped_turns"] = taped
    append_iteration_logs(output_dir, step, {**record.metrics, **estimate.metrics}, record.log)
    return Iteration(record, tensors, estimate, taped)
