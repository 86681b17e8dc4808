"""Collectors: how one collect advances the env slots (:class:`~verlog.rollout.slots.RolloutSlots`) and turns them
into a :class:`~verlog.rollout.batch.TurnBatch` of per-turn rows.

A rollout has one collector, chosen once from its settings (:func:`choose_collector`):

- :class:`LockstepCollector`: every collect advances every slot ``T`` turns with the episode stepper
  (:class:`verlog.rollout.stepper.EpisodeStepper`, the loop evaluation, demos and ``verlog play`` use too): build
  each slot's prompt from its memory, generate all ``N`` responses in one batch, step all ``N`` envs with the model's
  text, record one row per slot. Episodes persist across collects, so long episodes span several PPO iterations;
  the last row of an unfinished episode carries the prompt of the next state as its *bootstrap prompt*.
- :class:`PipelinedCollector` (``rollout.async_mode=pipeline``): the lockstep rows, with the slots in ``G`` groups
  and one group's env half (its env step, then its next prompts) running in one background thread while the next
  group generates: ``gen(g0, t) | env(g0, t) ∥ gen(g1, t) | env(g1, t) ∥ gen(g0, t + 1) ...``.
- :class:`GroupedCollector` (``group_size=K``, the group estimators GRPO and GiGPO): every collect plays *whole
  episodes*, the ``K`` slots of a group reset to one seed.

Each collect returns a batch that carries its own timing (``TurnBatch.timing``): nothing is read back from a
collector after a call.

Failures never lose the batch: a request whose generation fails is retried (the policy's ``retries``), then the
slot's turn is recorded with a bare end-of-turn response (an invalid action: the env runs its default action; the
row counts in ``rollout/generation_failures``); an env that crashes ends its episode as truncated (the env pool
restarts it) and the row carries ``env_error``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass, field

from envs.multitask import TASK_OPTION
from verlog.errors import VerlogError
from verlog.rollout.batch import EpisodeStats, TurnBatch, TurnRow
from verlog.rollout.slots import RolloutSlots
from verlog.rollout.stepper import Answer, GeneratorPolicy, PolicyInput, Stepped

GENERATE_S = "timing_s/rollout_generate"
ENV_S = "timing_s/rollout_env"
OVERLAP_S = "timing_s/rollout_overlap"
PIPELINED = "rollout/pipelined"
PIPELINE_MIN_ENV_SHARE = 0.1
"""A pipelined rollout falls back to lockstep for a collect when the previous collect's env steps took less than
this share of its generation time (:meth:`PipelinedCollector.pays`)."""
GROUP_SEED_END = 2**31 - 1
"""Group seeds after the first iteration are drawn from ``[0, GROUP_SEED_END)``, like the env pool's own seed streams
(evaluation seeds from ``2**31`` up are never met)."""


class GroupRolloutError(VerlogError, ValueError):
    """Group rollouts cannot run with these settings (group size, or an env step limit beyond the batch)."""


class Collector:
    """One collection strategy over the slots, generating with ``policy`` (the base of the three collectors)."""

    def __init__(self, slots: RolloutSlots, policy: GeneratorPolicy) -> None:
        self.slots = slots
        self.policy = policy

    @property
    def slot_groups(self) -> list[list[int]]:
        """The slot groups whose generations run together (one group of every slot but in the pipeline)."""
        return [list(range(self.slots.num_slots))]

    def collect(self, turns_per_slot: int) -> TurnBatch:
        """Advance the slots ``turns_per_slot`` turns; ``num_slots * turns_per_slot`` rows, row
        ``t * num_slots + slot`` (slot-major within each turn)."""
        raise NotImplementedError

    def close(self) -> None:
        """Stop what the collector started (idempotent); the slots' pool is the rollout's to close."""


def choose_collector(
    slots: RolloutSlots, policy: GeneratorPolicy, *, group_size: int | None, pipeline_groups: int | None
) -> Collector:
    """The collector of a rollout: :class:`GroupedCollector` with ``group_size``, :class:`PipelinedCollector` with
    ``pipeline_groups >= 2``, else :class:`LockstepCollector` (``pipeline_groups`` None or 1)."""
    n = slots.num_slots
    if pipeline_groups is not None and not 1 <= pipeline_groups <= n:
        raise ValueError(
            f"pipeline_groups must be between 1 and the {n} env slots (rollout.num_slots), got {pipeline_groups}"
        )
    pipelined = pipeline_groups is not None and pipeline_groups >= 2
    if group_size is not None:
        if pipelined:
            raise GroupRolloutError(
                f"group rollouts (group_size={group_size}, the estimators grpo and gigpo) play whole episodes in "
                f"lockstep and cannot be pipelined (pipeline_groups={pipeline_groups}): set rollout.async_mode=off, "
                "or use algorithm.estimator=dual_gae"
            )
        return GroupedCollector(slots, policy, group_size)
    if pipelined:
        return PipelinedCollector(slots, policy, int(pipeline_groups or 0))
    return LockstepCollector(slots, policy)


def _check_turns(turns_per_slot: int) -> None:
    if turns_per_slot < 1:
        raise ValueError(f"turns_per_slot must be >= 1, got {turns_per_slot}")


def _timed_batch(group_size: int | None = None) -> TurnBatch:
    """An empty batch whose timing counts from 0."""
    return TurnBatch(group_size=group_size, timing={GENERATE_S: 0.0, ENV_S: 0.0})


def step_turn(
    slots: RolloutSlots, policy: GeneratorPolicy, batch: TurnBatch, only: list[int] | None = None
) -> list[Stepped]:
    """One turn of the slots ``only`` (default: all) through the stepper; adds the finished episodes, retries and
    seconds to ``batch``. With persistent slots an ended episode's slot goes on with the episode drawn ahead, whose
    successor's task is drawn now. Returns the turns in slot order."""
    retries = policy.retries_used
    turns = slots.stepper.step(policy, only, continue_episodes=slots.persistent)
    batch.generation_retries += policy.retries_used - retries
    batch.episodes.extend(t.episode for t in turns if t.episode is not None)
    if slots.persistent:
        for t in turns:
            if t.episode is not None:
                slots.draw_next_task(t.row.slot)
    if turns:
        batch.timing[GENERATE_S] += turns[0].generate_s
        batch.timing[ENV_S] += turns[0].env_s
    return turns


class LockstepCollector(Collector):
    """Every slot steps, then every slot generates, turn after turn (module docstring)."""

    def collect(self, turns_per_slot: int) -> TurnBatch:
        _check_turns(turns_per_slot)
        slots = self.slots
        if not slots.started:
            slots.start()
        batch = _timed_batch()
        for _ in range(turns_per_slot):
            batch.rows.extend(t.row for t in step_turn(slots, self.policy, batch))
        batch.link_rows()
        n = slots.num_slots
        for s in range(n):  # the slot's last row: bootstrap from the prompt its episode goes on with
            last = batch.rows[len(batch.rows) - n + s]
            if not (last.terminated or last.truncated):
                last.bootstrap_prompt_ids = slots.stepper.bootstrap_prompt(s)
                last.bootstrap_images = slots.stepper.bootstrap_images(s)
        return batch


# ------------------------------------------------------------------------------------------------ pipeline
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


@dataclass
class _PipelineRun:
    """What one pipelined collect gathers as the env halves finish (in submission order)."""

    rows: list[TurnRow | None]
    bootstrap: dict[int, list[int]] = field(default_factory=dict)
    generate_spans: list[tuple[float, float]] = field(default_factory=list)
    env_spans: list[tuple[float, float]] = field(default_factory=list)
    ended: list[tuple[int, int, EpisodeStats]] = field(default_factory=list)
    """(turn, slot, episode): lockstep's order is turn, then slot."""


class PipelinedCollector(Collector):
    """The lockstep rows with slot groups pipelined: group ``g``'s generation of turn ``t`` runs while the env thread
    does the env half of the group before (module docstring).

    The groups are :func:`pipeline_slot_groups` (in a subprocess pool, a share of every worker's slots each). Only the
    env thread uses the pool during a collect; the rows, episodes and checkpoints are the lockstep ones (the same
    policy answers every turn from the same prompt: zero staleness), only the generation batches are smaller;
    multi-task draws follow the groups' order, which is the slots' order with contiguous groups (in a subprocess pool
    the tasks drawn are then the lockstep ones in another order). A batch's timing adds ``timing_s/rollout_overlap``
    (the seconds the env thread worked while the main thread generated; ``timing_s/rollout_env`` stays the seconds
    of the env steps alone) and ``rollout/pipelined`` (whether this collect was, :meth:`pays`).

    Args:
        slots, policy: as :class:`Collector`'s.
        groups: slot groups, 2 .. ``num_slots``.
        min_env_share: :meth:`pays`'s threshold (0: pipeline every collect).
    """

    def __init__(
        self,
        slots: RolloutSlots,
        policy: GeneratorPolicy,
        groups: int,
        min_env_share: float = PIPELINE_MIN_ENV_SHARE,
    ) -> None:
        super().__init__(slots, policy)
        n = slots.num_slots
        if not 2 <= groups <= n:
            raise ValueError(f"a pipeline needs between 2 and the {n} env slots as groups, got {groups}")
        pool = slots.pool
        workers = None
        if not getattr(pool, "in_process", True) and hasattr(pool, "worker_of"):
            workers = [pool.worker_of(s) for s in range(n)]
        self.groups = pipeline_slot_groups(n, groups, workers)
        self.min_env_share = min_env_share
        self.previous: dict[str, float] | None = None
        """The timing of this collector's previous batch (:meth:`pays` reads it), None before the first."""
        self._lockstep = LockstepCollector(slots, policy)
        self._executor: ThreadPoolExecutor | None = None  # the env thread (started on first use)

    @property
    def slot_groups(self) -> list[list[int]]:
        return self.groups

    def pays(self, previous: Mapping[str, float] | None) -> bool:
        """Whether a collect after one of timing ``previous`` is pipelined: always the first (None); then only while
        the last collect's env steps took at least :attr:`min_env_share` of its generation time. Pipelining hides
        env time behind generation, but generates in smaller batches, which costs more per turn; with envs that
        answer at once it only costs. Pipelined or not, the rows are the same, so the choice can change from one
        collect to the next."""
        generate = (previous or {}).get(GENERATE_S)
        env = (previous or {}).get(ENV_S)
        if generate is None or env is None or generate <= 0:
            return True
        return env >= self.min_env_share * generate

    def collect(self, turns_per_slot: int) -> TurnBatch:
        _check_turns(turns_per_slot)
        if not self.slots.started:
            self.slots.start()
        pipelined = self.pays(self.previous)
        batch = self._collect_pipelined(turns_per_slot) if pipelined else self._lockstep.collect(turns_per_slot)
        batch.timing.setdefault(OVERLAP_S, 0.0)
        batch.timing[PIPELINED] = float(pipelined)
        self.previous = dict(batch.timing)
        return batch

    def _collect_pipelined(self, turns_per_slot: int) -> TurnBatch:
        """The pipelined collect: the same rows, episodes and bootstrap prompts as lockstep."""
        n, groups, stepper = self.slots.num_slots, self.groups, self.slots.stepper
        batch = _timed_batch()
        run = _PipelineRun(rows=[None] * (n * turns_per_slot))
        inputs = [stepper.prepare(slots) for slots in groups]  # the env thread is idle: nothing else uses the pool
        executor = self._env_executor()
        pending: dict[int, Future[_GroupTurn]] = {}  # group -> its env half in the env thread (submission order)
        try:
            for t in range(turns_per_slot):
                for g in range(len(groups)):
                    if g in pending:  # the group's previous turn: its env half prepared this turn's inputs
                        inputs[g] = self._take(pending.pop(g).result(), run, batch)
                    retries = self.policy.retries_used
                    start = time.perf_counter()
                    answers, generate_s = stepper.answer(self.policy, inputs[g])
                    run.generate_spans.append((start, time.perf_counter()))
                    batch.generation_retries += self.policy.retries_used - retries
                    batch.timing[GENERATE_S] += generate_s
                    last = t == turns_per_slot - 1
                    pending[g] = executor.submit(self._env_half, t, inputs[g], answers, generate_s, last)
            for g in range(len(groups)):
                self._take(pending.pop(g).result(), run, batch)
        except BaseException:
            for future in pending.values():
                future.cancel()
            wait_futures(list(pending.values()))  # never leave the env thread on the pool after collect returns
            raise
        batch.episodes.extend(e for _, _, e in sorted(run.ended, key=lambda x: x[:2]))
        batch.rows.extend(row for row in run.rows if row is not None)
        batch.link_rows()
        for s, prompt_ids in run.bootstrap.items():
            last = batch.rows[len(batch.rows) - n + s]
            last.bootstrap_prompt_ids = prompt_ids
            last.bootstrap_images = stepper.bootstrap_images(s)  # the env thread is done: the same state
        batch.timing[OVERLAP_S] = overlap_seconds(run.generate_spans, run.env_spans)
        return batch

    def _take(self, job: _GroupTurn, run: _PipelineRun, batch: TurnBatch) -> list[PolicyInput]:
        """Record a finished env half (in submission order, the order lockstep records the slots in); returns the
        group's next inputs."""
        n = self.slots.num_slots
        run.ended.extend((job.turn, t.row.slot, t.episode) for t in job.turns if t.episode is not None)
        for turn in job.turns:
            run.rows[job.turn * n + turn.row.slot] = turn.row
        batch.timing[ENV_S] += job.turns[0].env_s if job.turns else 0.0
        run.bootstrap.update(job.bootstrap)
        run.env_spans.append(job.span)
        return job.next_inputs

    def _env_half(
        self, turn: int, inputs: list[PolicyInput], answers: list[Answer], generate_s: float, last: bool
    ) -> _GroupTurn:
        """The env thread's job for one group: step its slots, draw the tasks of the episodes started, then build
        the group's next inputs (or, after the last turn, its bootstrap prompts)."""
        start = time.perf_counter()
        stepper = self.slots.stepper
        turns = stepper.finish(inputs, answers, only_these=True, generate_s=generate_s)
        for stepped in turns:  # the ended episodes' slots started the episode drawn ahead: draw the next one
            if stepped.episode is not None:
                self.slots.draw_next_task(stepped.row.slot)
        job = _GroupTurn(turn, turns)
        if last:
            job.bootstrap = {
                x.row.slot: stepper.bootstrap_prompt(x.row.slot)
                for x in turns
                if not (x.row.terminated or x.row.truncated)
            }
        else:
            job.next_inputs = stepper.prepare([i.slot for i in inputs])
        job.span = (start, time.perf_counter())
        return job

    def _env_executor(self) -> ThreadPoolExecutor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="verlog-rollout-env")
        return self._executor

    def close(self) -> None:
        """Stop the env thread (idempotent)."""
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None


# ------------------------------------------------------------------------------------------------ group rollouts
def group_seed(first_seed: int, iteration: int) -> int:
    """The seed a group's episodes reset with in ``iteration`` (0-based): ``first_seed`` in iteration 0, then the
    ``iteration``-th draw of ``numpy.random.default_rng(first_seed)`` in ``[0, GROUP_SEED_END)``: the same stream an
    env pool slot started with ``first_seed`` draws its later episodes' seeds from (``envs.pool``), so evaluation's
    seed-overlap check, which follows slot ``i``'s stream from ``seed + i``, covers group ``i`` too."""
    import numpy as np

    if iteration == 0:
        return int(first_seed)
    return int(np.random.default_rng(int(first_seed)).integers(0, GROUP_SEED_END, size=iteration)[-1])


class GroupedCollector(Collector):
    """Group rollouts: every collect plays *whole episodes*.

    It resets every slot at its start, the ``group_size`` slots of a group to one seed (group ``g``'s seeds are
    :func:`group_seed` ``(seed + g, iteration)``; multi-task: one task per group); a slot whose episode ends stops
    there (its later turns in the batch are *idle rows*: no model call, outside the loss) and starts its next
    episode only at the next collect. An episode still running after ``turns_per_slot`` turns has all its rows left
    out of the loss (``trained=False``): its return is unknown, and a group estimator must not train on a made-up
    one. :meth:`check_step_limit` refuses an env whose step limit lies beyond ``turns_per_slot``, so with the envs'
    time limits that never happens (docs/algorithms.md).

    Raises:
        GroupRolloutError: ``group_size`` below 1 or not dividing the slots.
    """

    def __init__(self, slots: RolloutSlots, policy: GeneratorPolicy, group_size: int) -> None:
        super().__init__(slots, policy)
        n = slots.num_slots
        if group_size < 1 or n % group_size:
            raise GroupRolloutError(f"group_size must be >= 1 and divide the {n} env slots, got {group_size}")
        if slots.persistent:
            raise ValueError("group rollouts need slots whose episodes do not persist (RolloutSlots(persistent=False))")
        self.group_size = group_size
        self._step_limit_checked = False

    def group_seeds(self, iteration: int) -> list[int]:
        """The seed of each slot's episode in group rollout ``iteration`` (equal within a group)."""
        k, n = self.group_size, self.slots.num_slots
        seeds = [group_seed(self.slots.seed + g, iteration) for g in range(n // k)]
        return [seeds[s // k] for s in range(n)]

    def check_step_limit(self, turns_per_slot: int) -> None:
        """Refuse group rollouts whose env can run longer than ``turns_per_slot`` (its ``max_steps``): such an
        episode would not end within the iteration, and its rows would never be trained."""
        try:
            limit = self.slots.pool.get_attr(0, "max_steps")
        except Exception:  # an env without a step limit: unfinished episodes are left out and counted
            return
        if isinstance(limit, int) and limit > turns_per_slot:
            raise GroupRolloutError(
                f"group rollouts play whole episodes, but the env's step limit ({limit} steps) is above "
                f"rollout.turns_per_slot={turns_per_slot}: set rollout.turns_per_slot={limit} or lower the limit "
                f"(env.kwargs.max_steps={turns_per_slot})"
            )

    def collect(self, turns_per_slot: int) -> TurnBatch:
        """One iteration of whole episodes: reset every slot to its group's seed, play until each episode ends or
        ``turns_per_slot`` turns pass; rows ``t * num_slots + slot`` (idle rows fill the turns after a slot's
        episode ended)."""
        _check_turns(turns_per_slot)
        slots, stepper = self.slots, self.slots.stepper
        n, k, it = slots.num_slots, self.group_size, slots.group_iteration
        group_ids = [f"{slots.run_id}-i{it}-g{s // k}" for s in range(n)]
        options = None
        if slots.curriculum is not None:  # one task per group: its episodes start from the same state
            tasks = slots.curriculum.draw_many(n // k)
            options = [{TASK_OPTION: tasks[s // k]} for s in range(n)]
        anchors = [str(obs.text) for obs, _info in stepper.reset(self.group_seeds(it), options=options)]
        slots.started = True
        if not self._step_limit_checked:  # after the reset: some envs set their limit there
            self.check_step_limit(turns_per_slot)
            self._step_limit_checked = True
        batch = _timed_batch(group_size=k)
        tokenizer = slots.tokenizer
        eos = tokenizer.eos_token_id
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
        episode_of = [ep.episode_id for ep in stepper.episodes]
        for t in range(turns_per_slot):
            live = [s for s in range(n) if stepper.open[s]]  # an ended episode waits for the next reset
            rows: dict[int, TurnRow] = {}
            if live:
                for turn in step_turn(slots, self.policy, batch, live):
                    s = turn.row.slot
                    rows[s] = turn.row
                    turn.row.group_id, turn.row.anchor = group_ids[s], anchors[s]
                    if turn.next_observation is not None:
                        anchors[s] = str(turn.next_observation.text)
            for s in range(n):
                batch.rows.append(rows.get(s) or _idle_row(s, t, episode_of[s], group_ids[s], pad, eos))
        unfinished = {episode_of[s] for s in range(n) if stepper.open[s]}
        for row in batch.rows:
            if row.episode_id in unfinished:
                row.trained = False
        batch.link_rows()
        slots.group_iteration += 1
        return batch


def _idle_row(slot: int, turn: int, episode_id: str, group_id: str, pad: int, eos: int) -> TurnRow:
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
