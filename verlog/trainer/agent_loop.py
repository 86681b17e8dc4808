"""verl's rollout seam: an AgentLoopManager that runs verlog's RolloutManager instead of agent-loop workers.

verl's legacy trainer builds ``actor_rollout_ref.rollout.agent.agent_loop_manager_class`` in ``init_workers`` and
calls its ``generate_sequences(batch)`` once per iteration. This subclass starts no agent-loop worker actors; the
trainer attaches a :class:`~verlog.rollout.manager.RolloutManager` (generating through verl's vLLM server client,
token in, token out), and ``generate_sequences`` returns its ``num_slots x turns_per_slot`` per-turn rows in the
layout verl's PPO step expects. It keeps the iteration's rollout
(:class:`~verlog.rollout.iteration.RolloutRecord`, from :func:`~verlog.rollout.iteration.collect_iteration`: the
:class:`~verlog.rollout.batch.TurnBatch` and its metrics) under the iteration's number, which verl's ``fit`` puts in
the batch's ``meta_info["global_steps"]``; the trainer asks for it by that number (:meth:`rollout_at`).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
from verl import DataProto
from verl.experimental.agent_loop import AgentLoopManager
from verl.utils.model import compute_position_id_with_mask

from verlog.errors import VerlogError
from verlog.rollout.batch import TurnBatch
from verlog.rollout.iteration import RolloutRecord, collect_iteration
from verlog.rollout.manager import RolloutManager
from verlog.run.fault_points import reached
from verlog.trainer.async_rollout import RolloutAhead
from verlog.trainer.vision_rows import image_row_metrics, vision_columns


def version_metrics(batch: TurnBatch) -> dict[str, float]:
    """How many policy versions wrote the batch's turns (rows with known versions; none when no row has any):
    ``async/turn_versions_mean`` (versions per turn), ``async/turns_multi_version`` (share of turns written by 2+
    versions: cut by an in-flight weight update), ``async/tokens_per_version`` (tokens per (turn, version))."""
    segments = [r.policy_versions for r in batch.rows if not r.idle and r.policy_versions]
    if not segments:
        return {}
    counts = [len({v for v, _ in seg}) for seg in segments]
    pieces = [n for seg in segments for _, n in seg]
    return {
        "async/turn_versions_mean": float(np.mean(counts)),
        "async/turns_multi_version": float(np.mean([c > 1 for c in counts])),
        "async/tokens_per_version": float(np.mean(pieces)),
    }


class VerlogAgentLoopManager(AgentLoopManager):
    """Per-turn rows from verlog's rollout manager, in the shape of verl's agent-loop output."""

    async def _init_agent_loop_workers(self) -> None:
        self.agent_loop_workers = []  # generation goes straight to the vLLM servers through llm_client
        self.rollout: RolloutManager | None = None
        self.turns_per_slot = 0
        self.last_rollout: RolloutRecord | None = None
        self.ahead: RolloutAhead | None = None

    def attach(self, rollout: RolloutManager, turns_per_slot: int, ahead_capacity: int = 0) -> None:
        """Give the manager the rollout it runs each iteration; ``ahead_capacity`` > 0 collects that many
        iterations ahead in a driver thread (``rollout.async_mode`` one_step_off / in_flight:
        :class:`~verlog.trainer.async_rollout.RolloutAhead`)."""
        self.rollout = rollout
        self.turns_per_slot = turns_per_slot
        self.ahead = RolloutAhead(self.collect_record, ahead_capacity) if ahead_capacity > 0 else None

    def collect_record(self) -> RolloutRecord:
        """One iteration of rollout as a :class:`RolloutRecord` (its ``step`` is set when it is handed out)."""
        if self.rollout is None:
            raise VerlogError("VerlogAgentLoopManager has no rollout attached: the verlog trainer attaches one")
        return collect_iteration(self.rollout, self.turns_per_slot)

    def generate_sequences(self, prompts: DataProto) -> DataProto:  # type: ignore[override]
        """One iteration of rollout: ``len(prompts)`` rows (the trainer's tick batch fixes the size); collected
        now, or handed over from the driver thread that collected it while verl trained."""
        if self.rollout is None:
            raise VerlogError("VerlogAgentLoopManager has no rollout attached: the verlog trainer attaches one")
        expected = self.rollout.num_slots * self.turns_per_slot
        if len(prompts) != expected:
            raise VerlogError(f"the trainer asked for {len(prompts)} rows, the rollout gives {expected}")
        step = int(prompts.meta_info.get("global_steps", -1))  # verl's fit sets it (verlog/trainer/seams.py)
        reached("rollout", step, os.path.dirname(str(self.config.trainer.default_local_dir)))  # tests' kill point
        if self.ahead is None:
            record = self.collect_record()
            elapsed = record.elapsed
        else:
            last = step >= int(self.config.trainer.total_training_steps)  # nothing to collect ahead for
            record, overlap = self.ahead.hand_off(start_next=not last)
            record.metrics.update({**overlap, **version_metrics(record.batch)})
            elapsed = overlap["async/wait_s"]  # verl's "gen" time: what the trainer waited for
        record.step = step
        if getattr(self.rollout, "processor", None) is not None:  # a vision-language model's rollout
            record.metrics.update(image_row_metrics(record.batch.rows))
        self.last_rollout = record
        return self.to_dataproto(record.batch, elapsed)

    def rollout_at(self, step: int) -> RolloutRecord | None:
        """The rollout of iteration ``step``, or None when the latest rollout is another iteration's (the critic
        warm-up's rollout is collected outside this manager and never recorded)."""
        record = self.last_rollout
        return record if record is not None and record.step == step else None

    def to_dataproto(self, batch: TurnBatch, elapsed: float = 0.0) -> DataProto:
        """verl's layout: prompts/responses/masks/ids/positions/log-probs/rm_scores plus verlog's row columns
        (``non_tensor_batch``, ``[B]`` each; they follow the rows through verl's reordering): episode_id,
        turn_index, slot, terminated, truncated, bootstrap_prompt_ids (the prompt of ``s_{t+1}`` as a token-id
        list, or None: what the trainer's value step reads) and bootstrap_images (its images), generation_failed,
        policy_version (the oldest policy version among the row's tokens, -1 when unknown), task in multi-task
        training and, for group rollouts, group_id, anchor, trained. On the vision-language path (the rollout has a
        processor: a VLM, images or not), ``multi_modal_inputs`` holds each row's vision inputs (``{}`` without
        images) and ``position_ids`` are ``[B, 4, L]``
        (:mod:`verlog.trainer.vision_rows`).
        """
        rollout_config = self.config.actor_rollout_ref.rollout
        pad = self.rollout.tokenizer.pad_token_id
        laid_out = batch.to_tensors(pad, int(rollout_config.prompt_length), int(rollout_config.response_length))
        tensors = {k: laid_out[k] for k in ("prompts", "responses", "response_mask", "input_ids", "attention_mask")}
        tensors["position_ids"] = compute_position_id_with_mask(laid_out["attention_mask"])
        tensors["rollout_log_probs"] = laid_out["rollout_log_probs"]
        tensors["rm_scores"] = laid_out["rm_scores"]
        rows = batch.rows
        non_tensors = {
            "episode_id": np.array([r.episode_id for r in rows], dtype=object),
            "turn_index": np.array([r.turn_index for r in rows], dtype=np.int64),
            "slot": np.array([r.slot for r in rows], dtype=np.int64),
            "terminated": np.array([r.terminated for r in rows], dtype=bool),
            "truncated": np.array([r.truncated for r in rows], dtype=bool),
            "bootstrap_prompt_ids": _object_column([r.bootstrap_prompt_ids for r in rows]),
            "bootstrap_images": _object_column([list(r.bootstrap_images) for r in rows], by_item=True),
            "generation_failed": np.array([r.generation_failed for r in rows], dtype=bool),
            "policy_version": np.array(
                [-1 if r.oldest_version is None else r.oldest_version for r in rows], dtype=np.int64
            ),
            "multi_modal_inputs": np.array([{} for _ in rows], dtype=object),
        }
        if getattr(self.rollout, "processor", None) is not None:
            positions, column = vision_columns(
                self.rollout.processor, rows, laid_out["input_ids"], laid_out["attention_mask"]
            )
            tensors["position_ids"], non_tensors["multi_modal_inputs"] = positions, column
        if any(r.task for r in rows):  # multi-task training: each row's task family (the curriculum's arms)
            non_tensors["task"] = np.array([r.task for r in rows], dtype=object)
        if batch.group_size is not None:  # group rollouts: what GRPO / GiGPO group by, and which rows they train
            non_tensors["group_id"] = np.array([r.group_id for r in rows], dtype=object)
            non_tensors["anchor"] = np.array([r.anchor for r in rows], dtype=object)
            non_tensors["trained"] = np.array([r.trained for r in rows], dtype=bool)
        meta = {"timing": {"agent_loop/generate_sequences/mean": elapsed}, "reward_extra_keys": []}
        return DataProto.from_dict(tensors=tensors, non_tensors=non_tensors, meta_info=meta)


def _object_column(values: list[Any], by_item: bool = False) -> np.ndarray:
    """A ``[B]`` object array holding ``values`` as they are (``np.array`` would make equal-length lists 2-D);
    ``by_item`` sets them one by one (lists of arrays, which numpy would try to stack)."""
    column = np.empty(len(values), dtype=object)
    if by_item:
        for i, value in enumerate(values):
            column[i] = value
    else:
        column[:] = values
    return column
