"""Running evaluation episodes: a fresh env and a fresh memory per episode, turns batched across episodes.

Up to ``concurrency`` episodes (of any tasks) are open at once. Each round builds the prompt of every open episode
with :class:`verlog.memory.SlidingMemory` (the layout training uses), sends them to the generator in one batch, steps
each env with its response, and replaces finished episodes with the next ones in the queue, so one vLLM engine serves
every task of an evaluation. A generation that fails counts as an empty (invalid) answer: the env runs its default
action and the episode's ``generation_failures`` records it.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from verlog.eval.protocol import EpisodeNaming, EpisodeSpec
from verlog.logs import LogProbStats, TurnLog, TurnLogWriter
from verlog.memory import PromptTemplate, SlidingMemory
from verlog.rollout.generator import Generation, GenerationRequest, Generator, SamplingConfig
from verlog.tapes import action_token_start, encode_frame, token_split

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
    env: Any
    memory: SlidingMemory
    record: EpisodeRecord
    actions: Counter = field(default_factory=Counter)
    started: float = field(default_factory=time.perf_counter)
    image: Any = None  # the current observation's image, when the env renders one (tape frames)


def _make_env(spec: EpisodeSpec, env_kwargs: dict[str, Any], max_steps: int | None) -> Any:
    import envs

    kwargs = dict(env_kwargs)
    if max_steps is not None:
        kwargs["max_steps"] = max_steps
    return envs.make(spec.env_id, **kwargs)


def run_episodes(
    specs: Sequence[EpisodeSpec],
    generator: Generator,
    tokenizer: Any,
    sampling: SamplingConfig,
    *,
    memory_n: int = 1,
    max_prompt_tokens: int | None = 1024,
    concurrency: int | None = None,
    env_kwargs: dict[str, Any] | None = None,
    max_steps: int | None = None,
    turn_log: TurnLogWriter | None = None,
    on_episode: Callable[[EpisodeRecord], None] | None = None,
    answer_format: str = "cot",
    keep_reasoning_turns: int = 1,
) -> list[EpisodeRecord]:
    """Play every episode of ``specs`` to its end; records come back in the order of ``specs``.

    Args:
        specs: the episodes (see :meth:`verlog.eval.protocol.EvalProtocol.episodes`).
        generator: completes token prompts (vLLM engine, transformers...).
        tokenizer: the model's tokenizer (chat template, decode).
        sampling: sampling settings (temperature, max_tokens...).
        memory_n: past turns in each prompt (Verlog: 1).
        max_prompt_tokens: prompt budget; the memory drops old turns to fit (None: no limit).
        concurrency: most episodes open at once (None: all of them).
        env_kwargs: keyword arguments for ``envs.make``.
        max_steps: step limit override (None: the env's own).
        turn_log: where to write one :class:`verlog.logs.TurnLog` per turn, or None.
        on_episode: called with each finished episode's record (progress output, saving as you go).
        answer_format: the prompt's format instruction, ``cot`` or ``action`` (training's ``memory.answer_format``).
        keep_reasoning_turns: training's ``memory.keep_reasoning_turns``.
    """
    if concurrency is not None and concurrency < 1:
        raise ValueError(f"concurrency must be >= 1 or None (all episodes at once), got {concurrency}")
    queue = deque(specs)
    limit = concurrency or max(len(queue), 1)
    kwargs = dict(env_kwargs or {})
    template = PromptTemplate.for_answer_format(answer_format)
    done: dict[EpisodeSpec, EpisodeRecord] = {}
    open_eps: list[_OpenEpisode] = []

    def open_next() -> None:
        while queue and len(open_eps) < limit:
            spec = queue.popleft()
            env = _make_env(spec, kwargs, max_steps)
            obs, _info = env.reset(seed=spec.seed)
            memory = SlidingMemory(n=memory_n, keep_reasoning_turns=keep_reasoning_turns, template=template)
            memory.reset(env.instruction)
            memory.observe(obs.long_term, obs.short_term)
            record = EpisodeRecord(spec.env_id, spec.episode_index, spec.seed)
            open_eps.append(_OpenEpisode(spec, env, memory, record, image=getattr(obs, "image", None)))

    open_next()
    while open_eps:
        prompts = []
        for ep in open_eps:
            ep.memory.set_instruction(ep.env.instruction)  # Crafter's instruction changes during an episode
            prompts.append(ep.memory.build_prompt(tokenizer, max_prompt_tokens))
        requests = [GenerationRequest(ep.spec.episode_id, p.token_ids) for ep, p in zip(open_eps, prompts)]
        start = time.perf_counter()
        results = generator.generate(requests, sampling)
        generate_s = time.perf_counter() - start
        if len(results) != len(requests):
            raise RuntimeError(f"the generator returned {len(results)} results for {len(requests)} requests")
        still_open: list[_OpenEpisode] = []
        for ep, prompt, result in zip(open_eps, prompts, results):
            failed = not isinstance(result, Generation)
            generation = Generation(token_ids=[]) if failed else result
            text = "" if failed else tokenizer.decode(generation.token_ids, skip_special_tokens=True)
            start = time.perf_counter()
            obs, reward, terminated, truncated, info = ep.env.step(text)
            env_s = time.perf_counter() - start
            rec = ep.record
            rec.num_steps += 1
            rec.episode_return += float(reward)
            rec.valid_actions += int(bool(info.get("action_valid")))
            rec.generation_failures += int(failed)
            rec.input_tokens += prompt.num_tokens
            rec.output_tokens += len(generation.token_ids)
            action = str(info.get("action") or "")
            ep.actions[action] += 1
            rec.progression = float(info.get("progression", rec.progression))
            if turn_log is not None and turn_log.wants(ep.spec.episode_id):
                ended = bool(terminated or truncated)
                turn_log.write(
                    TurnLog(
                        episode_id=ep.spec.episode_id,
                        turn=rec.num_steps - 1,
                        env_id=ep.spec.env_id,
                        seed=ep.spec.seed,
                        prompt_messages=prompt.messages,
                        response=text,
                        parsed_action=ep.env.parsed_output(text),
                        action=action,
                        action_valid=bool(info.get("action_valid")),
                        reward=float(reward),
                        terminated=bool(terminated),
                        truncated=bool(truncated),
                        progression=rec.progression,
                        logprobs=LogProbStats.of(generation.log_probs),
                        prompt_tokens=prompt.num_tokens,
                        response_tokens=len(generation.token_ids),
                        timings={"generate_s": generate_s, "env_s": env_s},
                        extra={"generation_error": repr(result)} if failed else {},
                        observation=ep.memory.current_observation,
                        success=bool(info.get("success", False)) if ended else None,
                        token_split=token_split(
                            action_token_start(tokenizer, generation.token_ids, text),
                            len(generation.token_ids),
                            logprobs=generation.log_probs,
                        ),
                        memory_turns=prompt.turns_kept,
                        frame=encode_frame(ep.image),
                    )
                )
            ep.memory.record(text, action)
            if terminated or truncated:
                rec.terminated, rec.truncated = bool(terminated), bool(truncated)
                rec.success = bool(info.get("success", False))
                rec.action_frequency = dict(ep.actions)
                rec.env_stats = {k: info[k] for k in ENV_STAT_KEYS if k in info}
                rec.wall_time_s = time.perf_counter() - ep.started
                ep.env.close()
                done[ep.spec] = rec
                if on_episode is not None:
                    on_episode(rec)
            else:
                ep.memory.observe(obs.long_term, obs.short_term)
                ep.image = getattr(obs, "image", None)
                still_open.append(ep)
        open_eps[:] = still_open
        open_next()
    return [done[spec] for spec in specs]
