"""The env slots of a training rollout: the env pool, a memory per slot, each slot's running episode, the multi-task
draws of the next episodes, and their checkpoint (:meth:`RolloutSlots.state_dict`).

This is the state a rollout keeps from one collect to the next; *how* a collect advances it (lockstep, pipelined
slot groups, group rollouts of whole episodes) is a collector's business (:mod:`verlog.rollout.collectors`).

Envs: an ``envs.pool.EnvPool`` (batched ``reset``/``step`` with auto-reset and ``final_observation``/``final_info``,
``instruction(slot)``, ``slot_states()``/``restore_slots()``), in-process or with subprocess or Ray workers
(:func:`make_env_pool`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from envs.multitask import TASK_OPTION
from envs.registry import resolve_env_factory
from verlog.algorithms.curriculum import TaskCurriculum
from verlog.errors import VerlogError
from verlog.prompting.memory import SlidingMemory
from verlog.rollout.stepper import EpisodeStepper, SlotEpisode

STATE_FORMAT = "verlog.rollout/1"
"""The format of :meth:`RolloutSlots.state_dict` (``verlog_rollout.pkl`` in a checkpoint); unchanged since the
rollout had one class, so earlier runs' checkpoints load."""


class RolloutStateError(VerlogError, ValueError):
    """A rollout checkpoint does not fit this rollout (other format, number of slots or env ids)."""


def make_env_pool(
    env_id: str,
    num_slots: int,
    *,
    env_kwargs: dict[str, Any] | None = None,
    in_process: bool = True,
    num_workers: int | None = None,
    seed: int = 0,
    step_timeout: float | None = 60.0,
    keep_images: bool = False,
    backend: str | None = None,
    ray_options: Any = None,
) -> Any:
    """An ``envs.pool.EnvPool`` of ``num_slots`` envs of ``env_id`` (a registered id or ``"module:attr"``);
    ``keep_images`` sends observation images back from the workers (tape frames). ``backend`` (``subprocess``,
    ``ray``, ``in_process``) chooses where the workers run; None leaves it to ``in_process``. ``ray_options``: the
    Ray workers' resources (``envs.pool_ray.RayWorkerOptions`` or a dict of its fields)."""
    from envs.pool import EnvPool, pool_backend

    chosen = pool_backend(backend, in_process if backend is None else False)
    return EnvPool(
        resolve_env_factory(env_id),
        num_envs=num_slots,
        env_kwargs=dict(env_kwargs or {}),
        backend=chosen,
        num_workers=num_workers,
        seed=seed,
        step_timeout=None if chosen == "in_process" else step_timeout,
        keep_images=keep_images,
        ray_options=ray_options,
    )


class RolloutSlots:
    """The env slots, their memories and episodes, kept across collects.

    Args:
        pool: the env pool (``num_envs`` slots).
        tokenizer: the policy's tokenizer (chat template, decode, ``eos_token_id``).
        max_prompt_tokens: the prompt budget (the memory drops old turns to fit).
        memory_factory: builds one memory per slot (default: ``SlidingMemory()``, Verlog's n = 1).
        seed: seed of the first episodes (slot i gets ``seed + i``; later episodes draw from the pool's streams).
        run_id: prefix of the episode ids.
        curriculum: multi-task training (the pool's envs are ``envs.multitask.MultiTaskEnv``): draws the task family
            of every new episode; its state goes into :meth:`state_dict`. None: one task.
        persistent: episodes persist across collects and a row whose episode goes on bootstraps (every collector
            but the grouped one, whose collects play whole episodes and have no critic).
    """

    def __init__(
        self,
        pool: Any,
        tokenizer: Any,
        *,
        max_prompt_tokens: int,
        memory_factory: Callable[[], SlidingMemory] | None = None,
        seed: int = 0,
        run_id: str = "run",
        curriculum: TaskCurriculum | None = None,
        persistent: bool = True,
    ) -> None:
        if max_prompt_tokens < 1:
            raise ValueError(f"max_prompt_tokens must be >= 1, got {max_prompt_tokens}")
        self.pool = pool
        self.tokenizer = tokenizer
        self.seed = seed
        self.run_id = run_id
        self.curriculum = curriculum
        self.persistent = persistent
        self.num_slots = int(pool.num_envs)
        factory = memory_factory or SlidingMemory
        self.stepper = EpisodeStepper(
            pool,
            tokenizer,
            [factory() for _ in range(self.num_slots)],
            max_prompt_tokens=max_prompt_tokens,
            run_id=run_id,
            bootstrap_prompts=persistent,
        )
        self.started = False
        """Whether the slots hold episodes (reset once, or restored from a checkpoint)."""
        self.group_iteration = 0
        """Group rollouts done (the next one's seeds are ``group_seed(seed + g, this)``, verlog.rollout.collectors)."""

    @property
    def memories(self) -> list[SlidingMemory]:
        """Each slot's memory."""
        return self.stepper.memories

    def start(self) -> None:
        """Reset every slot (slot i with seed ``seed + i``) and open its first episode (multi-task: each slot's
        task drawn by the curriculum, and the task of its next episode drawn ahead)."""
        if self.curriculum is None:
            self.stepper.reset(self.seed)
        else:
            self.stepper.reset(self.seed, options=[{TASK_OPTION: t} for t in self.curriculum.draw_many(self.num_slots)])
            for slot in range(self.num_slots):
                self.draw_next_task(slot)
        self.started = True

    def draw_next_task(self, slot: int) -> None:
        """Multi-task: draw the task of ``slot``'s next episode now (the pool auto-resets inside its step, so the
        choice is made one episode ahead, with probabilities at most one episode old)."""
        if self.curriculum is not None:
            self.pool.set_next_options(slot, {TASK_OPTION: self.curriculum.draw()})

    def current_episodes(self) -> list[tuple[str, int]]:
        """``(episode id, turn index)`` of every slot's running episode."""
        return [(ep.episode_id, ep.turn) for ep in self.stepper.episodes]

    def close(self) -> None:
        """Close the env pool (idempotent)."""
        close = getattr(self.pool, "close", None)
        if close is not None:
            close()

    # ------------------------------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """Every slot's env state, memory and episode book-keeping (picklable; goes into the checkpoint)."""
        return {
            "format": STATE_FORMAT,
            "num_slots": self.num_slots,
            "env_ids": list(getattr(self.pool, "env_ids", None) or []),
            "started": self.started,
            "env_states": self.pool.slot_states() if self.started else None,
            "memories": [m.state_dict() for m in self.memories],
            "episodes": [ep.state() for ep in self.stepper.episodes],
            "group_iteration": self.group_iteration,
            "curriculum": None if self.curriculum is None else self.curriculum.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`: the slots continue the same episodes."""
        self._check_fits(state)
        if self.curriculum is not None:
            self.curriculum.load_state_dict(state.get("curriculum"))
        if state["started"]:
            self.pool.restore_slots(state["env_states"])
        for memory, mstate in zip(self.memories, state["memories"]):
            memory.load_state_dict(mstate)
        self.stepper.episodes = [SlotEpisode(**ep) for ep in state["episodes"]]
        self.stepper.open = [bool(state["started"]) and self.persistent] * self.num_slots
        self.group_iteration = int(state.get("group_iteration", 0))
        self.started = bool(state["started"])

    def _check_fits(self, state: dict[str, Any]) -> None:
        """Raise :class:`RolloutStateError` when ``state`` was written by another kind of run."""
        if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
            raise RolloutStateError(f"not a rollout state of format {STATE_FORMAT!r}")
        if state["num_slots"] != self.num_slots:
            raise RolloutStateError(
                f"the checkpoint has {state['num_slots']} env slots, this run {self.num_slots}: resume with the same "
                "rollout.num_slots"
            )
        saved_curriculum = state.get("curriculum")
        if (saved_curriculum is None) != (self.curriculum is None):
            raise RolloutStateError(
                "the checkpoint was written by a "
                + ("multi-task" if saved_curriculum is not None else "single-task")
                + " run and this run is "
                + ("multi-task" if self.curriculum is not None else "single-task")
                + ": resume with the same env.tasks, or start a new run (checkpoint.resume=disable)"
            )
        saved_ids, ids = state.get("env_ids"), list(getattr(self.pool, "env_ids", None) or [])
        if saved_ids and ids and saved_ids != ids:
            slot = next(i for i, (a, b) in enumerate(zip(saved_ids, ids)) if a != b)
            raise RolloutStateError(
                f"the checkpoint's env slots hold {saved_ids[slot]!r} (slot {slot}), this run's {ids[slot]!r}: resume "
                f"with env.id={saved_ids[slot]} (and the same env settings), or start a new run (a new output_dir, or "
                "checkpoint.resume=disable)"
            )
