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

Pipeline (``pipeline_groups=G >= 2``, ``rollout.async_mode=pipeline``): the slots form ``G`` groups (contiguous
blocks; in a subprocess pool, a share of every worker's slots each: :func:`pipeline_slot_groups`), and while one
group generates,
the env half of the group before it (its env step, then its next prompts) runs in one background thread:
``gen(g0, t) | env(g0, t) ∥ gen(g1, t) | env(g1, t) ∥ gen(g0, t + 1) ...``. Only that thread uses the pool during a
collect; the rows, episodes and checkpoints are the lockstep ones (the same policy answers every turn
from the same prompt: zero staleness), only the generation batches are smaller; multi-task draws follow the groups'
order, which is the slots' order with contiguous groups (in a subprocess pool the tasks drawn are then the lockstep
ones in another order). ``last_timing`` then adds
``timing_s/rollout_overlap``: the seconds the env thread worked (env steps and the next prompts) while the main
thread generated; ``timing_s/rollout_env`` stays the seconds of the env steps alone, as in lockstep.

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

import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass, field
from typing import Any

from envs.multitask import TASK_OPTION
from envs.registry import resolve_env_factory
from verlog.curriculum import TaskCurriculum
from verlog.errors import VerlogError
from verlog.memory import SlidingMemory
from verlog.rollout.batch import EpisodeStats, TurnBatch, TurnRow
from verlog.rollout.generator import Generator
from verlog.rollout.stepper import Answer, EpisodeStepper, GeneratorPolicy, PolicyInput, SlotEpisode, Stepped
from verlog.sampling import SamplingConfig

STATE_FORMAT = "verlog.rollout/1"
PIPELINE_MIN_ENV_SHARE = 0.1
"""A pipelined rollout (``pipeline_groups``) falls back to lockstep for a collect when the previous collect's env
steps took less than this share of its generation time (:meth:`RolloutManager.pipeline_pays`)."""
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


def pipeline_slot_groups(num_slots: int, groups: int, slot_workers: Sequence[int] | None = None) -> list[list[int]]:
    """The slot groups of a pipelined rollout, as even as possible: ``groups`` contiguous blocks of slots; with
    ``slot_workers`` (each slot's worker in a subprocess pool), every worker's slots are cut into ``groups`` blocks and
    group ``g`` takes block ``g`` of every worker. A worker steps its slots one after the other, so a group that held
    whole workers would keep the other workers idle while it steps; spread over all workers, one group's env half
    takes about ``1 / groups`` of a lockstep turn's env time, which is what the other group's generation can hide."""
    if not 1 <= groups <= num_slots:
        raise ValueError(f"pipeline groups must be between 1 and the {num_slots} env slots, got {groups}")
    if slot_workers is None:
        return [list(range(g * num_slots // groups, (g + 1) * num_slots // groups)) for g in range(groups)]
    # each slot's place in its worker's block (0 .. 1), then the worker: cut into even contiguous chunks, every group
    # gets about the same share of every worker
    blocks: dict[int, list[int]] = {}
    for s in range(num_slots):
        blocks.setdefault(int(slot_workers[s]), []).append(s)
    order = sorted(
        range(num_slots),
        key=lambda s: (blocks[slot_workers[s]].index(s) / len(blocks[slot_workers[s]]), slot_workers[s]),
    )
    return [sorted(order[g * num_slots // groups : (g + 1) * num_slots // groups]) for g in range(groups)]


def overlap_seconds(first: Sequence[tuple[float, float]], second: Sequence[tuple[float, float]]) -> float:
    """Total time two sets of ``(start, end)`` spans overlap; the spans within each set do not overlap each other."""
    a, b = sorted(first), sorted(second)
    i = j = 0
    total = 0.0
    while i < len(a) and j < len(b):
        total += max(0.0, min(a[i][1], b[j][1]) - max(a[i][0], b[j][0]))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


@dataclass
class _GroupTurn:
    """One slot group's env half of turn ``turn`` (run in the env thread): its turns, and either the group's next
    inputs or, after the batch's last turn, the bootstrap prompts of its slots whose episode goes on (none of the
    first then)."""

    turn: int
    turns: list[Stepped]
    next_inputs: list[PolicyInput] = field(default_factory=list)
    bootstrap: dict[int, list[int]] = field(default_factory=dict)
    span: tuple[float, float] = (0.0, 0.0)


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
        pipeline_groups: None or 1: lockstep turns; ``G >= 2``: the pipeline (see the module docstring), ``G`` slot
            groups (:attr:`slot_groups`), at most ``num_slots``; not with ``group_size`` (group rollouts run in
            lockstep). :meth:`close` stops its env thread.
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
        if pipeline_groups is not None and not 1 <= pipeline_groups <= self.num_slots:
            raise ValueError(
                f"pipeline_groups must be between 1 and the {self.num_slots} env slots (rollout.num_slots), got "
                f"{pipeline_groups}"
            )
        if pipeline_groups is not None and pipeline_groups >= 2 and group_size is not None:
            raise GroupRolloutError(
                f"group rollouts (group_size={group_size}, the estimators grpo and gigpo) play whole episodes in "
                f"lockstep and cannot be pipelined (pipeline_groups={pipeline_groups}): set rollout.async_mode=off, "
                "or use algorithm.estimator=dual_gae"
            )
        self.pipeline_groups = pipeline_groups if pipeline_groups is not None and pipeline_groups >= 2 else None
        self.slot_groups: list[list[int]] = [list(range(self.num_slots))]
        """The slot groups of the pipeline (one group of every slot in lockstep)."""
        if self.pipeline_groups is not None:
            workers = None
            if not getattr(pool, "in_process", True) and hasattr(pool, "worker_of"):
                workers = [pool.worker_of(s) for s in range(self.num_slots)]
            self.slot_groups = pipeline_slot_groups(self.num_slots, self.pipeline_groups, workers)
        self._executor: ThreadPoolExecutor | None = None  # the pipeline's env thread (started on first use)
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
        self.pipeline_min_env_share = PIPELINE_MIN_ENV_SHARE
        """:meth:`pipeline_pays`'s threshold (0: pipeline every collect)."""

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
        within each turn: row ``t * num_slots + slot``), pipelined with ``pipeline_groups`` (the same rows)."""
        if turns_per_slot < 1:
            raise ValueError(f"turns_per_slot must be >= 1, got {turns_per_slot}")
        self._t_generate = self._t_env = 0.0
        if self.group_size is not None:
            return self._collect_groups(turns_per_slot)
        if not self._started:
            self.start()
        pipelined = self.pipeline_groups is not None and self.pipeline_pays()
        if pipelined:
            batch = self._collect_pipeline(turns_per_slot)
        else:
            batch = TurnBatch()
            for _ in range(turns_per_slot):
                batch.rows.extend(t.row for t in self._step(batch))
            batch.link_rows()
            for s in range(self.num_slots):  # the slot's last row: bootstrap from the prompt its episode goes on with
                last = batch.rows[len(batch.rows) - self.num_slots + s]
                if not (last.terminated or last.truncated):
                    last.bootstrap_prompt_ids = self.stepper.bootstrap_prompt(s)
            self.last_timing = {"timing_s/rollout_generate": self._t_generate, "timing_s/rollout_env": self._t_env}
        if self.pipeline_groups is not None:
            self.last_timing.setdefault("timing_s/rollout_overlap", 0.0)
            self.last_timing["rollout/pipelined"] = float(pipelined)
        return batch

    def pipeline_pays(self) -> bool:
        """Whether the next collect is pipelined: always the first; then only while the last collect's env steps
        took at least :attr:`pipeline_min_env_share` of its generation time. Pipelining hides env time behind
        generation, but generates in smaller batches, which costs more per turn; with envs that answer at once it
        only costs. Pipelined or not, the rows are the same (module docstring), so the choice can change from one
        collect to the next."""
        generate = self.last_timing.get("timing_s/rollout_generate")
        env = self.last_timing.get("timing_s/rollout_env")
        if generate is None or env is None or generate <= 0:
            return True
        return env >= self.pipeline_min_env_share * generate

    # ------------------------------------------------------------------------------------------ pipeline
    def _collect_pipeline(self, turns_per_slot: int) -> TurnBatch:
        """:meth:`collect` with the slot groups pipelined: group ``g``'s generation of turn ``t`` runs while the env
        thread does the env half of the group before; the same rows, episodes and bootstrap prompts as lockstep."""
        n, groups = self.num_slots, self.slot_groups
        batch = TurnBatch()
        rows: list[TurnRow | None] = [None] * (n * turns_per_slot)
        bootstrap: dict[int, list[int]] = {}
        generate_spans: list[tuple[float, float]] = []
        env_spans: list[tuple[float, float]] = []
        inputs = [self.stepper.prepare(slots) for slots in groups]  # the env thread is idle: nothing else uses the pool
        executor = self._env_executor()
        pending: dict[int, Future[_GroupTurn]] = {}  # group -> its env half in the env thread (submission order)
        ended: list[tuple[int, int, EpisodeStats]] = []  # (turn, slot, episode): lockstep's order is turn, then slot

        def take(job: _GroupTurn) -> list[PolicyInput]:
            """Record a finished env half (in submission order, the order lockstep records the slots in)."""
            ended.extend((job.turn, t.row.slot, t.episode) for t in job.turns if t.episode is not None)
            for turn in job.turns:
                rows[job.turn * n + turn.row.slot] = turn.row
            self._t_env += job.turns[0].env_s if job.turns else 0.0
            bootstrap.update(job.bootstrap)
            env_spans.append(job.span)
            return job.next_inputs

        try:
            for t in range(turns_per_slot):
                for g in range(len(groups)):
                    if g in pending:  # the group's previous turn: its env half prepared this turn's inputs
                        inputs[g] = take(pending.pop(g).result())
                    retries = self.policy.retries_used
                    start = time.perf_counter()
                    answers, generate_s = self.stepper.answer(self.policy, inputs[g])
                    generate_spans.append((start, time.perf_counter()))
                    batch.generation_retries += self.policy.retries_used - retries
                    self._t_generate += generate_s
                    last = t == turns_per_slot - 1
                    pending[g] = executor.submit(self._env_half, t, inputs[g], answers, generate_s, last)
            for g in range(len(groups)):
                take(pending.pop(g).result())
        except BaseException:
            for future in pending.values():
                future.cancel()
            wait_futures(list(pending.values()))  # never leave the env thread on the pool after collect returns
            raise
        batch.episodes.extend(e for _, _, e in sorted(ended, key=lambda x: x[:2]))
        batch.rows.extend(row for row in rows if row is not None)
        batch.link_rows()
        for s, prompt_ids in bootstrap.items():
            batch.rows[len(batch.rows) - n + s].bootstrap_prompt_ids = prompt_ids
        self.last_timing = {
            "timing_s/rollout_generate": self._t_generate,
            "timing_s/rollout_env": self._t_env,
            "timing_s/rollout_overlap": overlap_seconds(generate_spans, env_spans),
        }
        return batch

    def _env_half(
        self, turn: int, inputs: list[PolicyInput], answers: list[Answer], generate_s: float, last: bool
    ) -> _GroupTurn:
        """The env thread's job for one group: step its slots, draw the tasks of the episodes started, then build
        the group's next inputs (or, after the last turn, its bootstrap prompts)."""
        start = time.perf_counter()
        turns = self.stepper.finish(inputs, answers, only_these=True, generate_s=generate_s)
        for stepped in turns:  # the ended episodes' slots started the episode drawn ahead: draw the next one
            if stepped.episode is not None:
                self._draw_next_task(stepped.row.slot)
        job = _GroupTurn(turn, turns)
        if last:
            job.bootstrap = {
                x.row.slot: self.stepper.bootstrap_prompt(x.row.slot)
                for x in turns
                if not (x.row.terminated or x.row.truncated)
            }
        else:
            job.next_inputs = self.stepper.prepare([i.slot for i in inputs])
        job.span = (start, time.perf_counter())
        return job

    def _env_executor(self) -> ThreadPoolExecutor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="verlog-rollout-env")
        return self._executor

    def close(self) -> None:
        """Stop the pipeline's env thread and close the env pool (idempotent; the run's end)."""
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None
        close = getattr(self.pool, "close", None)
        if close is not None:
            close()

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
