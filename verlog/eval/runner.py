"""Running evaluation episodes: one episode per seed, through the env pool and the training rollout's stepper.

Up to ``concurrency`` episodes (of any tasks) are open at once, each in a slot of an ``envs.pool.EnvPool``, so an env
that raises, or a worker process that dies or hangs, ends that episode as truncated (``env_stats["env_error"]``)
instead of stopping the evaluation. Each round the :class:`verlog.rollout.stepper.EpisodeStepper` (the loop training
uses) builds every open episode's prompt with :class:`verlog.prompting.memory.SlidingMemory`, sends them to the
generator in one batch, steps the envs with the responses and updates the memories, so one vLLM engine serves every task
and the prompts are token for token training's. A failed generation is retried (``generation_retries``), then answered
with a bare end-of-turn token, as in training: empty text, an invalid answer (the env runs its default action), counted
in the episode's ``generation_failures``.

Episodes run in *waves* of ``concurrency`` (default: all in one wave): the pool auto-resets a finished slot with a seed
of its own stream, so a slot whose episode ended idles until the wave's last episode ends, and the next wave resets
every slot to its episode's seed.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from verlog.eval.protocol import EpisodeNaming, EpisodeSpec
from verlog.prompting.memory import MemoryConfig, SlidingMemory
from verlog.prompting.sampling import SamplingConfig
from verlog.rollout.generator import Generator
from verlog.rollout.stepper import EpisodeStepper, GeneratorPolicy, Policy, Stepped
from verlog.tapes.record import LogProbStats, TurnLog, TurnLogWriter
from verlog.tapes.recorders import action_token_start, encode_frame, token_split

# Keys of an env's final info worth keeping in the episode record (BALROG's env stats: BabyAI mission, Crafter
# score and achievements).
ENV_STAT_KEYS = ("mission", "score", "achievements")


@dataclass
class EpisodeRecord(EpisodeNaming):
    """The outcome of one evaluation episode (one line of ``episodes.jsonl``).

    Attributes:
        env_id: the registered env id (``babyai/goto``); ``env`` and ``task`` are its two parts.
        episode_index: index of the episode within its task.
        seed: the seed ``env.reset`` got.
        episode_return: sum of rewards.
        num_steps: steps taken.
        success: the env's success flag at the end.
        progression: BALROG's progression at the end, in [0, 1].
        terminated: ended in a terminal state; ``truncated``: cut by the step limit.
        valid_actions: steps whose response named a valid action.
        generation_failures: steps whose generation failed (run as invalid answers).
        input_tokens: prompt tokens over all steps; ``output_tokens``: response tokens.
        action_frequency: executed action -> count.
        env_stats: the final info's :data:`ENV_STAT_KEYS` present (mission, score, achievements).
        wall_time_s: seconds from the episode's reset to its end (shared with the episodes batched alongside).
    """

    env_id: str
    episode_index: int
    seed: int
    episode_return: float = 0.0
    num_steps: int = 0
    success: bool = False
    progression: float = 0.0
    terminated: bool = False
    truncated: bool = False
    valid_actions: int = 0
    generation_failures: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    action_frequency: dict[str, int] = field(default_factory=dict)
    env_stats: dict[str, Any] = field(default_factory=dict)
    wall_time_s: float = 0.0

    @property
    def valid_action_rate(self) -> float:
        return self.valid_actions / self.num_steps if self.num_steps else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"env": self.env, "task": self.task, **asdict(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EpisodeRecord:
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in data.items() if k in names})


@dataclass
class _OpenEpisode:
    spec: EpisodeSpec
    record: EpisodeRecord
    actions: Counter = field(default_factory=Counter)
    started: float = field(default_factory=time.perf_counter)
    parse_mode: str | None = None  # the env's parse mode (read once, for the turn log's parsed action)


def run_episodes(
    specs: Sequence[EpisodeSpec],
    generator: Generator,
    tokenizer: Any,
    sampling: SamplingConfig,
    *,
    memory: MemoryConfig | None = None,
    generation_retries: int = 1,
    image_tokens: Callable[[Any], int] | None = None,
    **play: Any,
) -> list[EpisodeRecord]:
    """Play every episode of ``specs`` to its end; records come back in the order of ``specs``.

    Args:
        specs: the episodes (see :meth:`verlog.eval.protocol.EvalProtocol.episodes`).
        generator: completes token prompts (vLLM engine, transformers...).
        tokenizer: the model's tokenizer (chat template, decode).
        sampling: sampling settings (temperature, max_tokens...).
        memory: the memory settings, training's ``memory`` section (past turns ``n``, ``keep_reasoning_turns``, the
            prompt's ``answer_format``); None: :class:`verlog.prompting.memory.MemoryConfig`'s defaults, training's.
        generation_retries: retries of a failed generation before it becomes an invalid answer (training's
            ``rollout.generation_retries``).
        image_tokens: a vision-language model's tokens per image (``verlog.models.vision.ImageTokenCounter``),
            needed when ``memory.max_image_history`` > 0: then the envs draw their images and the newest observations
            are shown with them, as in training.
        play: :func:`play_episodes`'s keyword arguments (``max_prompt_tokens``, ``concurrency``, ``env_kwargs``,
            ``max_steps``, ``turn_log``, ``on_episode``, ``in_process``, ``num_workers``, ``step_timeout``,
            ``backend``, ``ray_options``), passed on as given.
    """
    memory = memory if memory is not None else MemoryConfig()
    images = memory.max_image_history > 0
    if images and image_tokens is None:
        raise ValueError("memory.max_image_history > 0 needs image_tokens (the model's tokens per image)")
    policy = GeneratorPolicy(generator, tokenizer, sampling, retries=generation_retries)
    return play_episodes(
        specs,
        policy,
        tokenizer,
        memory_factory=lambda: SlidingMemory.from_config(memory, image_tokens),
        images=images,
        **play,
    )


def play_episodes(
    specs: Sequence[EpisodeSpec],
    policy: Policy,
    tokenizer: Any,
    *,
    memory_factory: Callable[[], SlidingMemory],
    max_prompt_tokens: int | None = 1024,
    concurrency: int | None = None,
    env_kwargs: dict[str, Any] | None = None,
    max_steps: int | None = None,
    turn_log: TurnLogWriter | None = None,
    on_episode: Callable[[EpisodeRecord], None] | None = None,
    in_process: bool = True,
    num_workers: int | None = None,
    step_timeout: float | None = 60.0,
    backend: str | None = None,
    ray_options: dict[str, Any] | None = None,
    images: bool = False,
) -> list[EpisodeRecord]:
    """:func:`run_episodes` with any :class:`~verlog.rollout.stepper.Policy` (and a memory factory).

    Args:
        max_prompt_tokens: prompt budget; the memory drops old turns to fit (None: no limit).
        concurrency: most episodes open at once (None: all of them).
        env_kwargs: keyword arguments for every env (``envs.make``'s).
        max_steps: step limit override (None: the env's own).
        turn_log: where to write one :class:`verlog.tapes.record.TurnLog` per turn, or None.
        on_episode: called with each finished episode's record (progress output, saving as you go).
        in_process: step the envs in this process (env exceptions still end only their episode) or, False, in
            ``num_workers`` subprocess workers (a dead or hung worker is replaced too; ``step_timeout`` seconds).
        backend: the env pool's backend (``subprocess``, ``ray``, ``in_process``; None: from ``in_process``), and
            ``ray_options`` its Ray workers' requests (``envs.pool.EnvPool``): evaluation inside training places its
            envs where training's are.
        images: the envs draw their images (the memory shows the newest observations with them).
    """
    from envs.pool import EnvPool

    if concurrency is not None and concurrency < 1:
        raise ValueError(f"concurrency must be >= 1 or None (all episodes at once), got {concurrency}")
    specs = list(specs)
    limit = concurrency or max(len(specs), 1)
    kwargs = dict(env_kwargs or {})
    if max_steps is not None:
        kwargs["max_steps"] = max_steps
    if images:
        kwargs["images"] = True
    done: dict[EpisodeSpec, EpisodeRecord] = {}
    pool: Any = None
    try:
        for first in range(0, len(specs), limit):
            wave = specs[first : first + limit]
            ids = [s.env_id for s in wave]
            if pool is None or pool.env_ids[: len(wave)] != ids:  # the slots hold other tasks: a new pool
                if pool is not None:
                    pool.close()
                local = backend == "in_process" or (backend is None and in_process)
                workers = None if local or num_workers is None else min(num_workers, len(ids))
                pool = EnvPool(
                    ids,
                    env_kwargs=kwargs,
                    in_process=local,
                    num_workers=workers,
                    step_timeout=None if local else step_timeout,
                    keep_images=images or turn_log is not None,
                    backend=backend,
                    ray_options=ray_options,
                )
                memories = [memory_factory() for _ in ids]
                stepper = EpisodeStepper(
                    pool, tokenizer, memories, max_prompt_tokens=max_prompt_tokens, bootstrap_prompts=False
                )
            _play_wave(wave, pool, stepper, policy, tokenizer, turn_log, done, on_episode)
    finally:
        if pool is not None:
            pool.close()
    return [done[spec] for spec in specs]


def _play_wave(
    wave: list[EpisodeSpec],
    pool: Any,
    stepper: EpisodeStepper,
    policy: Policy,
    tokenizer: Any,
    turn_log: TurnLogWriter | None,
    done: dict[EpisodeSpec, EpisodeRecord],
    on_episode: Callable[[EpisodeRecord], None] | None,
) -> None:
    """Reset the wave's slots to their episodes' seeds (spare slots draw their own and idle), play them to the end."""
    seeds: list[int | None] = [s.seed for s in wave] + [None] * (pool.num_envs - len(wave))
    results = pool.reset(seeds=seeds)
    open_eps: dict[int, _OpenEpisode] = {}
    for slot, spec in enumerate(wave):
        stepper.begin(slot, results[slot][0], spec.episode_id)
        open_eps[slot] = _OpenEpisode(spec, EpisodeRecord(spec.env_id, spec.episode_index, spec.seed))
    for slot in range(len(wave), pool.num_envs):
        stepper.close(slot)
    while open_eps:
        for turn in stepper.step(policy, sorted(open_eps), continue_episodes=False):
            ep = open_eps[turn.row.slot]
            _count(ep, turn)
            if turn_log is not None and turn_log.wants(ep.spec.episode_id):
                if ep.parse_mode is None:
                    ep.parse_mode = str(pool.get_attr(turn.row.slot, "parse_mode"))
                turn_log.write(_turn_log(ep, turn, tokenizer))
            if turn.episode is not None:
                rec = ep.record
                rec.terminated, rec.truncated = turn.row.terminated, turn.row.truncated
                rec.success = bool(turn.row.success)
                rec.action_frequency = dict(ep.actions)
                rec.env_stats = {k: turn.info[k] for k in ENV_STAT_KEYS if k in turn.info}
                if turn.row.env_error is not None:
                    rec.env_stats["env_error"] = turn.row.env_error
                rec.wall_time_s = time.perf_counter() - ep.started
                done[ep.spec] = rec
                del open_eps[turn.row.slot]
                if on_episode is not None:
                    on_episode(rec)


def _count(ep: _OpenEpisode, turn: Stepped) -> None:
    rec, row = ep.record, turn.row
    rec.num_steps += 1
    rec.episode_return += row.reward
    rec.valid_actions += int(row.action_valid)
    rec.generation_failures += int(turn.answer.failed)
    rec.input_tokens += turn.prompt.num_tokens
    rec.output_tokens += len(turn.answer.token_ids)
    ep.actions[row.action] += 1
    rec.progression = float(turn.info.get("progression", rec.progression))


def _turn_log(ep: _OpenEpisode, turn: Stepped, tokenizer: Any) -> TurnLog:
    from envs.actions import extract

    row, answer, prompt = turn.row, turn.answer, turn.prompt
    return TurnLog(
        episode_id=ep.spec.episode_id,
        turn=row.turn_index,
        env_id=ep.spec.env_id,
        seed=ep.spec.seed,
        prompt_messages=prompt.messages,
        response=answer.text,
        parsed_action=extract(answer.text, ep.parse_mode),  # type: ignore[arg-type]
        action=row.action,
        action_valid=row.action_valid,
        reward=row.reward,
        terminated=row.terminated,
        truncated=row.truncated,
        progression=ep.record.progression,
        logprobs=LogProbStats.of(answer.log_probs),
        prompt_tokens=prompt.num_tokens,
        response_tokens=len(answer.token_ids),
        timings={"generate_s": turn.generate_s, "env_s": turn.env_s},
        extra={"generation_error": answer.error} if answer.failed else {},
        observation=row.observation,
        success=row.success if turn.episode is not None else None,
        token_split=token_split(
            action_token_start(tokenizer, answer.token_ids, answer.text),
            len(answer.token_ids),
            logprobs=answer.log_probs,
        ),
        memory_turns=prompt.turns_kept,
        frame=encode_frame(row.frame),
    )
