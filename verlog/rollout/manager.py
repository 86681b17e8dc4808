"""RolloutManager: N env slots advancing in lockstep, a memory per slot, fixed-turn batches of per-turn rows.

Each :meth:`RolloutManager.collect` call advances every slot ``T`` turns with the episode stepper
(:class:`verlog.rollout.stepper.EpisodeStepper`, the loop evaluation, demos and ``verlog play`` use too): build each
slot's prompt from its memory, generate all ``N`` responses in one batch, step all ``N`` envs with the model's text,
record one row per slot. Episodes persist across calls (the envs and memories keep their state), so long episodes span
several PPO iterations; the last row of an unfinished episode carries the prompt of the next state as its *bootstrap
prompt*.

Failures never lose the batch: a request whose generation fails is retried ``generation_retries`` times, then the
slot's turn is recorded with a bare end-of-turn response (an invalid action: the env runs its default action; the
row counts in ``rollout/generation_failures``); an env that crashes ends its episode as truncated (the env pool
restarts it) and the row carries ``env_error``.

Envs: an ``envs.pool.EnvPool`` (batched ``reset``/``step`` with auto-reset and ``final_observation``/``final_info``,
``instruction(slot)``, ``slot_states()``/``restore_slots()``), in-process or with subprocess workers.

Group rollouts (``group_size=K``, for the group estimators GRPO and GiGPO): every :meth:`RolloutManager.collect`
plays *whole episodes*. It resets every slot at its start, the ``K`` slots of a group to one seed (a new seed per
group and iteration); a slot whose episode ends stops there (its later turns in the batch are *idle rows*: no model
call, outside the loss) and starts its next episode only at the next iteration. An episode still running after
``turns_per_slot`` turns has all its rows left out of the loss (``trained=False``): its return is unknown, and a
group estimator must not train on a made-up one. :meth:`RolloutManager.check_step_limit` refuses an env whose step
limit lies beyond ``turns_per_slot``, so with the envs' time limits that never happens (docs/algorithms.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from envs.multitask import TASK_OPTION
from envs.registry import resolve_env_factory
from verlog.curriculum import TaskCurriculum
from verlog.errors import VerlogError
from verlog.memory import SlidingMemory
from verlog.rollout.batch import TurnBatch, TurnRow
from verlog.rollout.generator import Generator
from verlog.rollout.stepper import EpisodeStepper, GeneratorPolicy, SlotEpisode, Stepped
from verlog.sampling import SamplingConfig

STATE_FORMAT = "verlog.rollout/1"
GROUP_SEED_END = 2**31 - 1
"""Group seeds after the first iteration are drawn from ``[0, GROUP_SEED_END)``, like the env pool's own seed streams
(evaluation seeds from ``2**31`` up are never met)."""


class RolloutStateError(VerlogError, ValueError):
    """A rollout checkpoint does not fit this manager (other format, number of slots or env ids)."""


class GroupRolloutError(VerlogError, ValueError):
    """Group rollouts cannot run with these settings (group size, or an env step limit beyond the batch)."""


def group_seed(first_seed: int, iteration: int) -> int:
    """The seed a group's episodes reset with in ``iteration`` (0-based): ``first_seed`` in iteration 0, then the
    ``iteration``-th draw of ``numpy.random.default_rng(first_seed)`` in ``[0, GROUP_SEED_END)``: the same stream an
    env pool slot started with ``first_seed`` draws its later episodes' seeds from (``envs.pool``), so evaluation's
    seed-overlap check, which follows slot ``i``'s stream from ``seed + i``, covers group ``i`` too."""
    import numpy as np

    if iteration == 0:
        return int(first_seed)
    return int(np.random.default_rng(int(first_seed)).integers(0, GROUP_SEED_END, size=iteration)[-1])


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
) -> Any:
    """An ``envs.pool.EnvPool`` of ``num_slots`` envs of ``env_id`` (a registered id or ``"module:attr"``);
    ``keep_images`` sends observation images back from the workers (tape frames)."""
    from envs.pool import EnvPool

    return EnvPool(
        resolve_env_factory(env_id),
        num_envs=num_slots,
        env_kwargs=dict(env_kwargs or {}),
        in_process=in_process,
        num_workers=num_workers,
        seed=seed,
        step_timeout=None if in_process else step_timeout,
        keep_images=keep_images,
    )


class RolloutManager:
    """Owns the env slots and their memories; turns them into :class:`TurnBatch` rows.

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
            episodes, slots ``K g .. K g + K - 1`` resetting to one seed (see the module docstring); group ``g``'s
            seeds are :func:`group_seed` ``(seed + g, iteration)``.
        curriculum: multi-task training (the pool's envs are ``envs.multitask.MultiTaskEnv``): draws the task family
            of every new episode (a group's, in group rollouts) one episode ahead, through the pool's
            ``set_next_options``; its state goes into :meth:`state_dict`. None: one task.
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
    ) -> None:
        if max_prompt_tokens < 1:
            raise ValueError(f"max_prompt_tokens must be >= 1, got {max_prompt_tokens}")
        if generation_retries < 0:
            raise ValueError(f"generation_retries must be >= 0, got {generation_retries}")
        self.pool = pool
        self.tokenizer = tokenizer
        self.generator = generator
        self.sampling = sampling
        self.max_prompt_tokens = max_prompt_tokens
        self.seed = seed
        self.run_id = run_id
        self.generation_retries = generation_retries
        self.num_slots = int(pool.num_envs)
        if group_size is not None and (group_size < 1 or self.num_slots % group_size):
            raise GroupRolloutError(
                f"group_size must be >= 1 and divide the {self.num_slots} env slots, got {group_size}"
            )
        self.group_size = group_size
        self.curriculum = curriculum
        self._group_iteration = 0  # group rollouts done (the next one's seeds are group_seed(seed + g, this))
        self._step_limit_checked = False
        factory = memory_factory or SlidingMemory
        self.stepper = EpisodeStepper(
            pool,
            tokenizer,
            [factory() for _ in range(self.num_slots)],
            max_prompt_tokens=max_prompt_tokens,
            run_id=run_id,
            bootstrap_prompts=group_size is None,  # group estimators have no critic: nothing bootstraps
        )
        self.policy = GeneratorPolicy(generator, tokenizer, sampling, retries=generation_retries)
        self._started = False
        self._t_generate = self._t_env = 0.0  # seconds of generation and env steps in the running collect
        self.last_timing: dict[str, float] = {}

    @property
    def memories(self) -> list[SlidingMemory]:
        """Each slot's memory."""
        return self.stepper.memories

    # ------------------------------------------------------------------------------------------ episodes
    def start(self) -> None:
        """Reset every slot (slot i with seed ``seed + i``) and open its first episode (multi-task: each slot's
        task drawn by the curriculum, and the task of its next episode drawn ahead)."""
        if self.curriculum is None:
            self.stepper.reset(self.seed)
        else:
            self.stepper.reset(self.seed, options=[{TASK_OPTION: t} for t in self.curriculum.draw_many(self.num_slots)])
            for slot in range(self.num_slots):
                self._draw_next_task(slot)
        self._started = True

    def _draw_next_task(self, slot: int) -> None:
        """Multi-task: draw the task of ``slot``'s next episode now (the pool auto-resets inside its step, so the
        choice is made one episode ahead, with probabilities at most one episode old)."""
        if self.curriculum is not None:
            self.pool.set_next_options(slot, {TASK_OPTION: self.curriculum.draw()})

    def current_episodes(self) -> list[tuple[str, int]]:
        """``(episode id, turn index)`` of every slot's running episode."""
        return [(ep.episode_id, ep.turn) for ep in self.stepper.episodes]

    # ------------------------------------------------------------------------------------------ rollout
    def _step(self, batch: TurnBatch, slots: list[int] | None = None) -> list[Stepped]:
        """One turn of ``slots`` through the stepper; adds the finished episodes, retries and timings to ``batch``."""
        retries = self.policy.retries_used
        turns = self.stepper.step(self.policy, slots, continue_episodes=self.group_size is None)
        batch.generation_retries += self.policy.retries_used - retries
        batch.episodes.extend(t.episode for t in turns if t.episode is not None)
        if self.group_size is None:  # the ended episodes' slots started the episode drawn ahead: draw the next one
            for t in turns:
                if t.episode is not None:
                    self._draw_next_task(t.row.slot)
        if turns:
            self._t_generate += turns[0].generate_s
            self._t_env += turns[0].env_s
        return turns

    def collect(self, turns_per_slot: int) -> TurnBatch:
        """Advance every slot ``turns_per_slot`` turns; returns ``num_slots * turns_per_slot`` rows (slot-major
        within each turn: row ``t * num_slots + slot``)."""
        if turns_per_slot < 1:
            raise ValueError(f"turns_per_slot must be >= 1, got {turns_per_slot}")
        self._t_generate = self._t_env = 0.0
        if self.group_size is not None:
            return self._collect_groups(turns_per_slot)
        if not self._started:
            self.start()
        batch = TurnBatch()
        for _ in range(turns_per_slot):
            batch.rows.extend(t.row for t in self._step(batch))
        batch.link_rows()
        for s in range(self.num_slots):  # the slot's last row: bootstrap from the prompt its episode continues with
            last = batch.rows[len(batch.rows) - self.num_slots + s]
            if not (last.terminated or last.truncated):
                last.bootstrap_prompt_ids = self.stepper.bootstrap_prompt(s)
        self.last_timing = {"timing_s/rollout_generate": self._t_generate, "timing_s/rollout_env": self._t_env}
        return batch

    # ------------------------------------------------------------------------------------------ group rollouts
    def group_seeds(self, iteration: int) -> list[int]:
        """The seed of each slot's episode in group rollout ``iteration`` (equal within a group)."""
        k = int(self.group_size or 1)
        seeds = [group_seed(self.seed + g, iteration) for g in range(self.num_slots // k)]
        return [seeds[s // k] for s in range(self.num_slots)]

    def check_step_limit(self, turns_per_slot: int) -> None:
        """Refuse group rollouts whose env can run longer than ``turns_per_slot`` (its ``max_steps``): such an
        episode would not end within the iteration, and its rows would never be trained."""
        try:
            limit = self.pool.get_attr(0, "max_steps")
        except Exception:  # an env without a step limit: unfinished episodes are left out and counted
            return
        if isinstance(limit, int) and limit > turns_per_slot:
            raise GroupRolloutError(
                f"group rollouts play whole episodes, but the env's step limit ({limit} steps) is above "
                f"rollout.turns_per_slot={turns_per_slot}: set rollout.turns_per_slot={limit} or lower the limit "
                f"(env.kwargs.max_steps={turns_per_slot})"
            )

    def _collect_groups(self, turns_per_slot: int) -> TurnBatch:
        """One iteration of whole episodes: reset every slot to its group's seed, play until each episode ends or
        ``turns_per_slot`` turns pass; rows ``t * num_slots + slot`` as in :meth:`collect` (idle rows fill the turns
        after a slot's episode ended)."""
        n, k, it = self.num_slots, int(self.group_size or 1), self._group_iteration
        group_ids = [f"{self.run_id}-i{it}-g{s // k}" for s in range(n)]
        options = None
        if self.curriculum is not None:  # one task per group: its episodes start from the same state
            tasks = self.curriculum.draw_many(n // k)
            options = [{TASK_OPTION: tasks[s // k]} for s in range(n)]
        anchors = [str(obs.text) for obs, _info in self.stepper.reset(self.group_seeds(it), options=options)]
        self._started = True
        if not self._step_limit_checked:  # after the reset: some envs set their limit there
            self.check_step_limit(turns_per_slot)
            self._step_limit_checked = True
        batch = TurnBatch(group_size=k)
        eos = self.tokenizer.eos_token_id
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else eos
        episode_of = [ep.episode_id for ep in self.stepper.episodes]
        for t in range(turns_per_slot):
            live = [s for s in range(n) if self.stepper.open[s]]  # an ended episode waits for the next reset
            rows: dict[int, TurnRow] = {}
            if live:
                for turn in self._step(batch, live):
                    s = turn.row.slot
                    rows[s] = turn.row
                    turn.row.group_id, turn.row.anchor = group_ids[s], anchors[s]
                    if turn.next_observation is not None:
                        anchors[s] = str(turn.next_observation.text)
            for s in range(n):
                batch.rows.append(rows.get(s) or self._idle_row(s, t, episode_of[s], group_ids[s], pad, eos))
        unfinished = {episode_of[s] for s in range(n) if self.stepper.open[s]}
        for row in batch.rows:
            if row.episode_id in unfinished:
                row.trained = False
        batch.link_rows()
        self._group_iteration += 1
        self.last_timing = {"timing_s/rollout_generate": self._t_generate, "timing_s/rollout_env": self._t_env}
        return batch

    def _idle_row(self, slot: int, turn: int, episode_id: str, group_id: str, pad: int, eos: int) -> TurnRow:
        """A placeholder for turn ``turn`` of a slot whose episode already ended (outside the loss)."""
        return TurnRow(
            slot=slot,
            episode_id=f"{episode_id}-idle",
            turn_index=turn,
            prompt_ids=[pad],
            response_ids=[eos],
            response_logprobs=None,
            group_id=group_id,
            trained=False,
            idle=True,
        )

    # ------------------------------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """Every slot's env state, memory and episode book-keeping (picklable; goes into the checkpoint)."""
        return {
            "format": STATE_FORMAT,
            "num_slots": self.num_slots,
            "env_ids": list(getattr(self.pool, "env_ids", None) or []),
            "started": self._started,
            "env_states": self.pool.slot_states() if self._started else None,
            "memories": [m.state_dict() for m in self.memories],
            "episodes": [ep.state() for ep in self.stepper.episodes],
            "group_iteration": self._group_iteration,
            "curriculum": None if self.curriculum is None else self.curriculum.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`: the slots continue the same episodes."""
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
        if self.curriculum is not None:
            self.curriculum.load_state_dict(saved_curriculum)
        if state["started"]:
            self.pool.restore_slots(state["env_states"])
        for memory, mstate in zip(self.memories, state["memories"]):
            memory.load_state_dict(mstate)
        self.stepper.episodes = [SlotEpisode(**ep) for ep in state["episodes"]]
        self.stepper.open = [bool(state["started"]) and self.group_size is None] * self.num_slots
        self._group_iteration = int(state.get("group_iteration", 0))
        self._started = bool(state["started"])
