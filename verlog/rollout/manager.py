"""RolloutManager: the training rollout as one object, the env slots (:class:`~verlog.rollout.slots.RolloutSlots`)
and the collector that advances them (:mod:`verlog.rollout.collectors`: lockstep, pipelined slot groups, or group
rollouts of whole episodes).

Each :meth:`RolloutManager.collect` returns a :class:`~verlog.rollout.batch.TurnBatch` of ``num_slots x
turns_per_slot`` per-turn rows carrying its own timing (``batch.timing``); the manager keeps no result of a call.
:meth:`RolloutManager.state_dict` is the slots' checkpoint (the format of every earlier verlog run).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from verlog.algorithms.curriculum import TaskCurriculum
from verlog.prompting.memory import SlidingMemory
from verlog.prompting.sampling import SamplingConfig
from verlog.rollout.batch import TurnBatch
from verlog.rollout.collectors import (
    PIPELINE_MIN_ENV_SHARE,
    Collector,
    GroupRolloutError,
    PipelinedCollector,
    choose_collector,
    group_seed,
    overlap_seconds,
    pipeline_slot_groups,
)
from verlog.rollout.generator import Generator
from verlog.rollout.slots import STATE_FORMAT, RolloutSlots, RolloutStateError, make_env_pool
from verlog.rollout.stepper import GeneratorPolicy

__all__ = [  # the collectors' and the slots' names, importable from here as before they had modules of their own
    "PIPELINE_MIN_ENV_SHARE",
    "STATE_FORMAT",
    "GroupRolloutError",
    "RolloutManager",
    "RolloutStateError",
    "group_seed",
    "make_env_pool",
    "overlap_seconds",
    "pipeline_slot_groups",
]


class RolloutManager:
    """Owns the env slots and their collector; turns the slots into :class:`TurnBatch` rows.

    Args:
        pool: the env pool (``num_envs`` slots).
        tokenizer: the policy's tokenizer (chat template, decode, ``eos_token_id``).
        generator: completes token prompts (see :mod:`verlog.rollout.generator`).
        sampling: sampling settings of training rollouts.
        max_prompt_tokens: the prompt budget (the memory drops old turns to fit).
        memory_factory: builds one memory per slot (default: ``SlidingMemory()``, Verlog's n = 1).
        seed: seed of the first episodes (slot i gets ``seed + i``; later episodes draw from the pool's streams).
        run_id: prefix of the episode ids.
        generation_retries: retries of a failed generation before the turn falls back to an empty response.
        group_size: None (episodes persist across iterations, for dual GAE) or ``K``: group rollouts of whole
            episodes (:class:`~verlog.rollout.collectors.GroupedCollector`).
        curriculum: multi-task training: draws the task family of every new episode (:class:`RolloutSlots`).
        pipeline_groups: None or 1: lockstep turns; ``G >= 2``: ``G`` slot groups pipelined
            (:class:`~verlog.rollout.collectors.PipelinedCollector`), at most ``num_slots``; not with ``group_size``.
        processor: the vision-language model's processor when prompts carry images (the trainer builds the rows'
            ``multi_modal_inputs`` with it), else None.
    """

    def __init__(
        self,
        pool: Any,
        tokenizer: Any,
        generator: Generator,
        sampling: SamplingConfig,
        *,
        max_prompt_tokens: int,
        memory_factory: Callable[[], SlidingMemory] | None = None,
        seed: int = 0,
        run_id: str = "run",
        generation_retries: int = 1,
        group_size: int | None = None,
        curriculum: TaskCurriculum | None = None,
        pipeline_groups: int | None = None,
        processor: Any = None,
    ) -> None:
        self.slots = RolloutSlots(
            pool,
            tokenizer,
            max_prompt_tokens=max_prompt_tokens,
            memory_factory=memory_factory,
            seed=seed,
            run_id=run_id,
            curriculum=curriculum,
            persistent=group_size is None,  # group rollouts play whole episodes: nothing persists or bootstraps
        )
        if generation_retries < 0:
            raise ValueError(f"generation_retries must be >= 0, got {generation_retries}")
        self.pool = pool
        self.tokenizer = tokenizer
        self.generator = generator
        self.processor = processor
        self.num_slots = self.slots.num_slots
        self.curriculum = curriculum
        self.policy = GeneratorPolicy(generator, tokenizer, sampling, retries=generation_retries)
        self.collector: Collector = choose_collector(
            self.slots, self.policy, group_size=group_size, pipeline_groups=pipeline_groups
        )

    @property
    def memories(self) -> list[SlidingMemory]:
        """Each slot's memory."""
        return self.slots.memories

    @property
    def slot_groups(self) -> list[list[int]]:
        """The slot groups of the pipeline (one group of every slot otherwise)."""
        return self.collector.slot_groups

    @property
    def pipeline_groups(self) -> int | None:
        """The number of pipelined slot groups, None when the rollout is not pipelined."""
        groups = len(self.collector.slot_groups)
        return groups if groups >= 2 else None

    @property
    def pipeline_min_env_share(self) -> float:
        """The pipeline's :meth:`~verlog.rollout.collectors.PipelinedCollector.pays` threshold (0: pipeline every
        collect); setting it on a rollout that is not pipelined changes nothing."""
        collector = self.collector
        return collector.min_env_share if isinstance(collector, PipelinedCollector) else PIPELINE_MIN_ENV_SHARE

    @pipeline_min_env_share.setter
    def pipeline_min_env_share(self, share: float) -> None:
        if isinstance(self.collector, PipelinedCollector):
            self.collector.min_env_share = share

    def start(self) -> None:
        """Reset every slot and open its first episode (:meth:`RolloutSlots.start`; the first collect does it)."""
        self.slots.start()

    def current_episodes(self) -> list[tuple[str, int]]:
        """``(episode id, turn index)`` of every slot's running episode."""
        return self.slots.current_episodes()

    def collect(self, turns_per_slot: int) -> TurnBatch:
        """Advance every slot ``turns_per_slot`` turns; returns ``num_slots * turns_per_slot`` rows (slot-major
        within each turn: row ``t * num_slots + slot``) with the collect's timing in ``batch.timing``."""
        return self.collector.collect(turns_per_slot)

    def close(self) -> None:
        """Stop the collector's threads and close the env pool (idempotent; the run's end)."""
        self.collector.close()
        self.slots.close()

    def state_dict(self) -> dict[str, Any]:
        """Every slot's env state, memory and episode book-keeping (picklable; goes into the checkpoint)."""
        return self.slots.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`: the slots continue the same episodes."""
        self.slots.load_state_dict(state)
