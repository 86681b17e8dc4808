"""The sliding n+1-turn memory: each turn's prompt holds the instruction, the last n turns and the current observation.

Layout of :meth:`SlidingMemory.messages` (Verlog's, after BALROG; docs/algorithms.md), for ``n = 2``::

    {instruction_role}  <env instruction>
    user                Observation:\\n<long-term text of turn t-2>
    assistant           <executed action of turn t-2>          (older than keep_reasoning_turns)
    user                Observation:\\n<long-term text of turn t-1>
    assistant           Previous plan:\\n<full model output of turn t-1>
    user                Current Observation:\\n<short-term text>\\n<long-term text>\\n\\n<format instruction>

So the prompt length stays flat however long the episode runs. :meth:`SlidingMemory.build_prompt` renders the
messages with the tokenizer's own chat template and enforces a token budget without ever cutting the instruction,
the current observation or the generation prompt.
"""

from __future__ import annotations

import re
import weakref
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from verlog.errors import MemoryUsageError, PromptTooLongError

COT_FORMAT_INSTRUCTION = (
    "What will you do next? Please respond in the following format:\n"
    "    THINK: step-by-step reasoning\n"
    "    ACTION: One valid action from the allowed set."
)
"""Verlog's chain-of-thought format instruction (docs/text-envs.md, "Answers"), appended to the last user message."""

ACTION_FORMAT_INSTRUCTION = (
    "What will you do next? Please respond with one valid action from the allowed set, in the following format:\n"
    "    ACTION: <action>"
)
"""The action-only format instruction: the answer is ``ACTION: <action>`` alone (a few tokens instead of ~40)."""

ANSWER_FORMATS = {"cot": COT_FORMAT_INSTRUCTION, "action": ACTION_FORMAT_INSTRUCTION}
"""Answer formats: ``cot`` (a THINK line, then an ACTION line; Verlog's) or ``action`` (the ACTION line alone). The
prompt's format instruction, demonstrations, SFT and evaluation follow the chosen one; the strict parser reads the
action of both."""


def check_answer_format(answer_format: str) -> str:
    """``answer_format`` if it is one of :data:`ANSWER_FORMATS`, else a ValueError naming the choices."""
    if answer_format not in ANSWER_FORMATS:
        raise ValueError(
            f"answer format {answer_format!r} is not one of {', '.join(ANSWER_FORMATS)} (cot: THINK then ACTION; "
            "action: the ACTION line alone)"
        )
    return answer_format


STATE_FORMAT = "verlog.memory/1"


@dataclass
class MemoryConfig:
    """The sliding n+1-turn memory's settings: the training config's ``memory`` section, which training's rollout, the
    in-training evaluation, ``verlog eval`` and the preflight all turn into memories with
    :meth:`SlidingMemory.from_config` (so they lay prompts out alike).

    Attributes:
        n: past turns shown in the prompt (n actions and n + 1 observations).
        keep_reasoning_turns: the newest this-many past turns show the full model output, older ones the action.
        answer_format: ``cot`` (THINK then ACTION) or ``action`` (the ACTION line alone).
        max_image_history: the newest this-many observations (the current one first) carry their image as a
            ``{"type": "image"}`` chat part (BALROG's name); 0 = text only.
    """

    n: int = 1
    keep_reasoning_turns: int = 1
    answer_format: str = "cot"
    max_image_history: int = 0


@dataclass
class PromptTemplate:
    """The wording of the prompt; the defaults are Verlog's.

    Attributes:
        instruction_role: chat role of the env instruction ("system" in Verlog, "user" in BALROG).
        observation_header: put before each past observation.
        current_header: put before the current observation.
        plan_header: put before a past turn's full model output (turns within ``keep_reasoning_turns``).
        format_instruction: appended to the last user message after a blank line; "" appends nothing.
        truncation_marker: appended to an observation that the token budget shortened.
    """

    instruction_role: str = "system"
    observation_header: str = "Observation:\n"
    current_header: str = "Current Observation:\n"
    plan_header: str = "Previous plan:\n"
    format_instruction: str = COT_FORMAT_INSTRUCTION
    truncation_marker: str = "\n[...]"

    @classmethod
    def for_answer_format(cls, answer_format: str) -> PromptTemplate:
        """Verlog's wording with the format instruction of ``answer_format`` (see :data:`ANSWER_FORMATS`)."""
        return cls(format_instruction=ANSWER_FORMATS[check_answer_format(answer_format)])


@dataclass(frozen=True)
class Turn:
    """One finished turn in the memory: its observation's long-term text, the model's output, the executed action."""

    long_term: str
    response: str
    action: str
    image: Any = field(default=None, compare=False, repr=False)


@dataclass
class BuiltPrompt:
    """A rendered, tokenized prompt.

    Attributes:
        messages: the chat messages that were rendered.
        token_ids: the prompt's token ids (chat template applied, generation prompt included).
        num_tokens: ``len(token_ids)``, plus for each image its tokens beyond the one ``<|image_pad|>`` the chat
            template writes (the processor expands it to ``image_grid_thw.prod() // merge_size**2``).
        turns_kept: how many past turns the prompt holds (fewer than the memory's when the budget dropped some).
        truncated_observation: whether the oldest kept observation was shortened to fit the budget.
        text: the rendered prompt text.
    """

    messages: list[dict[str, Any]]
    token_ids: list[int]
    num_tokens: int
    turns_kept: int
    truncated_observation: bool
    text: str = field(default="", repr=False)
    images: list[Any] = field(default_factory=list, repr=False)
    """The images of the prompt's ``{"type": "image"}`` parts, in prompt order ([H, W, 3] uint8 each)."""


class ChatTokenizer(Protocol):
    """What :meth:`SlidingMemory.build_prompt` needs of a tokenizer (any Hugging Face tokenizer fits)."""

    def apply_chat_template(self, conversation: Any, *args: Any, **kwargs: Any) -> Any: ...

    def encode(self, text: str, *args: Any, **kwargs: Any) -> list[int]: ...


class SlidingMemory:
    """Per-slot memory of one episode, giving each turn's prompt.

    Call order per episode: ``reset(instruction)``, then per turn ``observe(...)``, ``messages()`` or
    ``build_prompt(...)``, ``record(response, action)``; the next ``observe`` moves the recorded turn into history.

    Args:
        n: past turns shown (Verlog's ``max_text_history``; n actions and n + 1 observations). 0 shows only the
            instruction and the current observation.
        keep_reasoning_turns: the newest this-many past turns show the model's full output under ``plan_header``;
            older ones show only the executed action.
        template: wording of the prompt (default: Verlog's).
        max_image_history: the newest this-many observations carry their image (0: text only).
        image_tokens: tokens of one image (``verlog.models.vision.image_token_count``); needed to count prompts with
            images.
    """

    def __init__(
        self,
        n: int = 1,
        keep_reasoning_turns: int = 1,
        template: PromptTemplate | None = None,
        max_image_history: int = 0,
        image_tokens: Callable[[Any], int] | None = None,
    ) -> None:
        if not isinstance(n, int) or n < 0:
            raise ValueError(f"memory n must be an integer >= 0 (past turns shown), got {n!r}")
        if not isinstance(keep_reasoning_turns, int) or keep_reasoning_turns < 0:
            raise ValueError(f"keep_reasoning_turns must be an integer >= 0, got {keep_reasoning_turns!r}")
        if not isinstance(max_image_history, int) or max_image_history < 0:
            raise ValueError(f"memory.max_image_history must be an integer >= 0, got {max_image_history!r}")
        self.max_image_history = max_image_history
        self.image_tokens = image_tokens
        self.n = n
        self.keep_reasoning_turns = keep_reasoning_turns
        self.template = template if template is not None else PromptTemplate()
        self._instruction: str | None = None
        self._history: deque[Turn] = deque(maxlen=n)
        self._current: tuple[str, str] | None = None
        self._current_image: Any = None
        self._recorded: tuple[str, str] | None = None
        self._turn_index = -1

    @classmethod
    def from_config(
        cls, config: MemoryConfig | None = None, image_tokens: Callable[[Any], int] | None = None
    ) -> SlidingMemory:
        """A memory laid out by ``config`` (default: :class:`MemoryConfig`'s, Verlog's): its ``n``, its
        ``keep_reasoning_turns`` and the prompt wording of its ``answer_format``. Every memory built from settings is
        built here."""
        config = config if config is not None else MemoryConfig()
        return cls(
            n=config.n,
            keep_reasoning_turns=config.keep_reasoning_turns,
            template=PromptTemplate.for_answer_format(config.answer_format),
            max_image_history=config.max_image_history,
            image_tokens=image_tokens,
        )

    # ------------------------------------------------------------------ episode events
    def reset(self, instruction: str) -> None:
        """Start a new episode: forget every turn and set the env's instruction."""
        self._instruction = instruction
        self._history.clear()
        self._current = None
        self._current_image = None
        self._recorded = None
        self._turn_index = -1

    def set_instruction(self, instruction: str) -> None:
        """Replace the instruction (Crafter rebuilds it every step with the remaining achievements)."""
        self._instruction = instruction

    def observe(self, long_term: str, short_term: str = "", image: Any = None) -> None:
        """Set the current observation; the previous one (with its recorded output) moves into history. ``image``
        ([H, W, 3] uint8 or None) is kept only when ``max_image_history`` > 0."""
        if self._instruction is None:
            raise MemoryUsageError("SlidingMemory.observe() before reset(instruction): call reset() at episode start")
        if self._current is not None:
            if self._recorded is None:
                raise MemoryUsageError(
                    "SlidingMemory.observe() called twice without record(): record the model's output and the "
                    "executed action of each turn before the next observation"
                )
            response, action = self._recorded
            self._history.append(Turn(self._current[0], response, action, self._current_image))
        self._current = (long_term, short_term)
        self._current_image = image if self.max_image_history > 0 else None
        self._recorded = None
        self._turn_index += 1

    def record(self, response: str, action: str) -> None:
        """Store the model's full output for the current turn and the action string that was executed."""
        if self._current is None:
            raise MemoryUsageError("SlidingMemory.record() before observe(): there is no current turn to record")
        if self._recorded is not None:
            raise MemoryUsageError("SlidingMemory.record() called twice for one observation")
        self._recorded = (response, action)

    # ------------------------------------------------------------------ views
    @property
    def instruction(self) -> str | None:
        return self._instruction

    @property
    def history(self) -> tuple[Turn, ...]:
        """The remembered past turns, oldest first (at most ``n``)."""
        return tuple(self._history)

    @property
    def current_observation(self) -> str:
        """The current observation as the prompt shows it (short-term context, a newline, the long-term one); empty
        before the first ``observe``."""
        if self._current is None:
            return ""
        long_term, short_term = self._current
        return f"{short_term}\n{long_term}" if short_term else long_term

    @property
    def turn_index(self) -> int:
        """Index of the current turn in the episode (0 after the first ``observe``; -1 before it)."""
        return self._turn_index

    def messages(self) -> list[dict[str, Any]]:
        """The chat messages of the current turn's prompt, with all remembered turns."""
        return self._messages(len(self._history), None)

    def build_prompt(self, tokenizer: ChatTokenizer, max_prompt_tokens: int | None = None) -> BuiltPrompt:
        """Render and tokenize the current prompt with the tokenizer's chat template (generation prompt added).

        With ``max_prompt_tokens``, a prompt over budget first loses its oldest turns, then (when one turn is left)
        that turn's observation is shortened (``template.truncation_marker`` marks it), then the turn goes too. The
        instruction, the current observation and the generation prompt are never cut.

        Raises:
            PromptTooLongError: even the instruction + current observation + generation prompt exceed the budget.
        """
        if max_prompt_tokens is not None and max_prompt_tokens <= 0:
            raise ValueError(f"max_prompt_tokens must be positive or None, got {max_prompt_tokens}")
        total = len(self._history)
        full = self._render(tokenizer, total, None)
        if max_prompt_tokens is None or full.num_tokens <= max_prompt_tokens:
            return full
        # Largest number of newest turns that fits (the token count only grows with more turns).
        low, high = 0, total - 1  # ``high`` turns is the most that may still fit
        best: BuiltPrompt | None = None
        while low < high:
            mid = (low + high + 1) // 2
            attempt = self._render(tokenizer, mid, None)
            if attempt.num_tokens <= max_prompt_tokens:
                low, best = mid, attempt
            else:
                high = mid - 1
        if low >= 1:
            return best if best is not None and best.turns_kept == low else self._render(tokenizer, low, None)
        if total >= 1:
            shortened = self._shorten_newest(tokenizer, max_prompt_tokens)
            if shortened is not None:
                return shortened
        minimal = self._render(tokenizer, 0, None)
        if minimal.num_tokens <= max_prompt_tokens:
            return minimal
        raise self._too_long(tokenizer, minimal.num_tokens, max_prompt_tokens)

    # ------------------------------------------------------------------ resume
    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable state of the episode (the wording in ``template`` is configuration, not state). With
        images, the ones a later prompt can still show (the current observation's and the newest
        ``max_image_history - 1`` past turns') are kept too, as ``{"shape", "base64"}`` of their raw uint8 pixels."""
        shown_past = max(self.max_image_history - 1, 0)
        history = []
        for age, t in enumerate(reversed(self._history), start=1):
            turn = {"long_term": t.long_term, "response": t.response, "action": t.action}
            if t.image is not None and age <= shown_past:
                turn["image"] = _image_state(t.image)
            history.append(turn)
        current = None
        if self._current is not None:
            current = {"long_term": self._current[0], "short_term": self._current[1]}
            if self._current_image is not None:
                current["image"] = _image_state(self._current_image)
        return {
            "format": STATE_FORMAT,
            "n": self.n,
            "keep_reasoning_turns": self.keep_reasoning_turns,
            "instruction": self._instruction,
            "history": history[::-1],
            "current": current,
            "recorded": None
            if self._recorded is None
            else {"response": self._recorded[0], "action": self._recorded[1]},
            "turn_index": self._turn_index,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output. With a smaller ``n`` than when saved, only the newest turns are kept."""
        if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
            found = state.get("format") if isinstance(state, dict) else type(state).__name__
            raise ValueError(f"not a SlidingMemory state (format {found!r}, expected {STATE_FORMAT!r})")
        try:
            history = [
                Turn(h["long_term"], h["response"], h["action"], _state_image(h.get("image"), self.max_image_history))
                for h in state["history"]
            ]
            current = state["current"]
            recorded = state["recorded"]
            self._instruction = state["instruction"]
            self._current = None if current is None else (current["long_term"], current["short_term"])
            self._current_image = (
                None if current is None else _state_image(current.get("image"), self.max_image_history)
            )
            self._recorded = None if recorded is None else (recorded["response"], recorded["action"])
            self._turn_index = int(state["turn_index"])
        except (KeyError, TypeError) as exc:
            raise ValueError(f"SlidingMemory state is missing or has a malformed field: {exc!r}") from exc
        self._history = deque(history, maxlen=self.n)

    # ------------------------------------------------------------------ internals
    def _messages(self, turns: int, shortened: str | None) -> list[dict[str, Any]]:
        """Messages with the newest ``turns`` past turns; ``shortened`` replaces the oldest kept observation."""
        return self._messages_and_images(turns, shortened)[0]

    def _with_image(self, text: str, image: Any, age: int, images: list[Any]) -> str | list[dict[str, str]]:
        """``text``, or an image part then ``text`` when the observation ``age`` turns old (0 = current) carries its
        image (``age < max_image_history``)."""
        if image is None or age >= self.max_image_history:
            return text
        images.append(image)
        return [{"type": "image"}, {"type": "text", "text": text}]

    def _messages_and_images(self, turns: int, shortened: str | None) -> tuple[list[dict[str, Any]], list[Any]]:
        if self._instruction is None or self._current is None:
            raise MemoryUsageError("no current observation: call reset(instruction) and observe() first")
        tpl = self.template
        images: list[Any] = []
        out: list[dict[str, Any]] = [{"role": tpl.instruction_role, "content": self._instruction}]
        history = list(self._history)
        kept = history[len(history) - turns :] if turns else []
        for i, turn in enumerate(kept):
            age = len(kept) - i  # 1 = the previous turn
            obs = shortened if (i == 0 and shortened is not None) else turn.long_term
            content = self._with_image(tpl.observation_header + obs, turn.image, age, images)
            out.append({"role": "user", "content": content})
            if age <= self.keep_reasoning_turns:
                out.append({"role": "assistant", "content": tpl.plan_header + turn.response})
            else:
                out.append({"role": "assistant", "content": turn.action})
        long_term, short_term = self._current
        current = tpl.current_header + (f"{short_term}\n{long_term}" if short_term else long_term)
        if tpl.format_instruction:
            current += "\n\n" + tpl.format_instruction
        out.append({"role": "user", "content": self._with_image(current, self._current_image, 0, images)})
        return out, images

    def _render(self, tokenizer: ChatTokenizer, turns: int, shortened: str | None) -> BuiltPrompt:
        messages, images = self._messages_and_images(turns, shortened)
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        ids = _encoder_for(tokenizer).encode(text)
        extra = 0
        if images:
            if self.image_tokens is None:
                raise MemoryUsageError(
                    "a prompt with images needs image_tokens (the processor's count per image) to count its tokens"
                )
            extra = sum(int(self.image_tokens(image)) - 1 for image in images)
        return BuiltPrompt(messages, ids, len(ids) + extra, turns, shortened is not None, text, images)

    def _shorten_newest(self, tokenizer: ChatTokenizer, budget: int) -> BuiltPrompt | None:
        """The newest turn alone, its observation cut to the longest prefix that fits; None if nothing fits."""
        text = self._history[-1].long_term
        marker = self.template.truncation_marker
        low, high = 0, len(text) - 1  # a cut keeps text[:k] with k < len(text)
        best: BuiltPrompt | None = None
        while low <= high:
            mid = (low + high) // 2
            attempt = self._render(tokenizer, 1, text[:mid] + marker)
            if attempt.num_tokens <= budget:
                best, low = attempt, mid + 1
            else:
                high = mid - 1
        return best

    def _too_long(self, tokenizer: ChatTokenizer, minimal: int, budget: int) -> PromptTooLongError:
        long_term, short_term = self._current or ("", "")
        instruction = len(tokenizer.encode(self._instruction or "", add_special_tokens=False))
        observation = len(tokenizer.encode(f"{short_term}\n{long_term}", add_special_tokens=False))
        image = ""
        if self._current_image is not None and self.max_image_history > 0 and self.image_tokens is not None:
            image = f"current image {int(self.image_tokens(self._current_image))} tokens + "
        return PromptTooLongError(
            f"the smallest prompt (instruction {instruction} tokens + current observation {observation} tokens + "
            f"{image}chat template and format instruction) is {minimal} tokens, over max_prompt_tokens = {budget}: "
            f"raise max_prompt_tokens (the prompt length setting) to at least {minimal}; lowering memory.n (now "
            f"{self.n}) "
            "does not help, the instruction and current observation are never cut"
        )


class _PieceEncoder:
    """Token ids of rendered prompts, encoding each piece of text between added tokens once (LRU cache).

    Fast tokenizers cut the text at added tokens (``<|im_start|>``, ...) before normalising and pre-tokenizing each
    piece on its own, so a prompt's ids are the concatenation of its pieces' ids, and the long instruction piece is
    encoded once per episode instead of once per turn. Tokenizers whose added tokens strip whitespace or are
    normalised are encoded whole; the first ``checks`` prompts are compared with a whole-text encode, and the cache
    switches itself off on any difference.
    """

    def __init__(self, tokenizer: ChatTokenizer, max_pieces: int = 4096, checks: int = 8) -> None:
        self.tokenizer = tokenizer
        self.max_pieces = max_pieces
        self.checks = checks
        self.enabled = False
        self._pieces: OrderedDict[str, list[int]] = OrderedDict()
        added = getattr(tokenizer, "added_tokens_decoder", None)
        if not isinstance(added, dict) or not added:
            return
        tokens = list(added.items())
        if any(
            getattr(t, "lstrip", True) or getattr(t, "rstrip", True) or getattr(t, "normalized", True)
            for _, t in tokens
        ):
            return
        if any(getattr(t, "single_word", True) for _, t in tokens):
            return
        self._ids = {str(getattr(t, "content", t)): int(i) for i, t in tokens}
        alternatives = sorted(self._ids, key=len, reverse=True)
        self._split = re.compile("(" + "|".join(re.escape(a) for a in alternatives) + ")")
        self.enabled = True

    def encode(self, text: str) -> list[int]:
        if not self.enabled:
            return list(self.tokenizer.encode(text, add_special_tokens=False))
        ids: list[int] = []
        for piece in self._split.split(text):
            if not piece:
                continue
            special = self._ids.get(piece)
            if special is not None:
                ids.append(special)
                continue
            cached = self._pieces.get(piece)
            if cached is None:
                cached = list(self.tokenizer.encode(piece, add_special_tokens=False))
                self._pieces[piece] = cached
                if len(self._pieces) > self.max_pieces:
                    self._pieces.popitem(last=False)
            else:
                self._pieces.move_to_end(piece)
            ids.extend(cached)
        if self.checks > 0:
            self.checks -= 1
            whole = list(self.tokenizer.encode(text, add_special_tokens=False))
            if whole != ids:
                self.enabled = False
                self._pieces.clear()
                return whole
        return ids


_ENCODERS: weakref.WeakKeyDictionary[Any, _PieceEncoder] = weakref.WeakKeyDictionary()


def _encoder_for(tokenizer: ChatTokenizer) -> _PieceEncoder:
    """The piece encoder of ``tokenizer`` (one per tokenizer object, shared by every memory that uses it)."""
    try:
        encoder = _ENCODERS.get(tokenizer)
        if encoder is None:
            encoder = _ENCODERS[tokenizer] = _PieceEncoder(tokenizer)
        return encoder
    except TypeError:  # not weak-referenceable or not hashable: plain whole-text encoding
        encoder = _PieceEncoder(tokenizer)
        encoder.enabled = False
        return encoder


class PromptSize(Protocol):
    """What :func:`prompt_metrics` reads of a prompt: a :class:`BuiltPrompt`, or a turn record's copy of it."""

    @property
    def num_tokens(self) -> int: ...

    @property
    def turns_kept(self) -> int: ...

    @property
    def truncated_observation(self) -> bool: ...


def prompt_metrics(prompts: Sequence[PromptSize]) -> dict[str, float]:
    """Prompt-size diagnostics over a batch's prompts (docs/metrics.md): size, past turns the budget kept, share
    of prompts whose oldest kept observation the budget shortened."""
    if not prompts:
        return {}
    sizes = [p.num_tokens for p in prompts]
    return {
        "rollout/prompt_tokens/mean": sum(sizes) / len(sizes),
        "rollout/prompt_tokens/max": float(max(sizes)),
        "rollout/memory_turns_kept/mean": sum(p.turns_kept for p in prompts) / len(prompts),
        "rollout/prompt_truncated_frac": sum(p.truncated_observation for p in prompts) / len(prompts),
    }


def _image_state(image: Any) -> dict[str, Any]:
    """A memory image in :meth:`SlidingMemory.state_dict`: its shape and its raw uint8 pixels in base64."""
    import base64

    import numpy as np

    pixels = np.ascontiguousarray(np.asarray(image, dtype=np.uint8))
    return {"shape": list(pixels.shape), "base64": base64.b64encode(pixels.tobytes()).decode("ascii")}


def _state_image(state: dict[str, Any] | None, max_image_history: int) -> Any:
    """An image of :meth:`SlidingMemory.state_dict` back as ``[H, W, 3]`` uint8 (None when absent, or for a memory
    that shows no images)."""
    if state is None or max_image_history <= 0:
        return None
    import base64

    import numpy as np

    pixels = np.frombuffer(base64.b64decode(state["base64"]), dtype=np.uint8)
    return pixels.reshape([int(v) for v in state["shape"]]).copy()
