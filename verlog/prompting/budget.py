"""Whether an env's first prompt fits a prompt budget, checked before any model or engine starts.

The first prompt of an episode (the instruction, the first observation and the format instruction; no history yet)
is the smallest prompt the memory ever builds for it: a budget below it fails on the first turn of every episode.
``verlog train``'s preflight, ``verlog eval``, ``verlog demos`` and ``verlog tiny-model --warm-start`` ask
:func:`budget_problem` with the tokenizer they will use, so a budget too small is one line with the number to write.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

from verlog.errors import PromptTooLongError
from verlog.prompting.memory import ChatTokenizer, MemoryConfig, SlidingMemory


def budget_problem(
    env: Any,
    env_id: str,
    tokenizer: ChatTokenizer,
    memory: MemoryConfig,
    budget: int,
    option: str,
    counted: str,
    seed: int = 0,
    image_tokens: Callable[[Any], int] | None = None,
) -> str | None:
    """Why ``budget`` tokens do not hold ``env``'s first prompt (``option`` names the setting to raise, ``counted``
    how the tokens were counted), or None when they do. ``env`` is reset with ``seed``. With
    ``memory.max_image_history`` > 0 the first observation's image counts too (``image_tokens`` per image, from the
    model's processor: ``verlog.models.vision.image_token_count``)."""
    obs, _ = env.reset(seed=seed)
    # the first turn has no history, so memory.n and keep_reasoning_turns do not matter here
    first = SlidingMemory.from_config(dataclasses.replace(memory, n=0, keep_reasoning_turns=0), image_tokens)
    first.reset(str(getattr(env, "instruction", "")))
    first.observe(getattr(obs, "long_term", str(obs)), getattr(obs, "short_term", ""), getattr(obs, "image", None))
    try:
        first.build_prompt(tokenizer, budget)
    except PromptTooLongError:
        built = first.build_prompt(tokenizer)
        need = built.num_tokens
        image = ""
        if built.images and image_tokens is not None:
            image = f", of which {int(image_tokens(built.images[0]))} for its image"
        return (
            f"{budget} tokens do not hold the first prompt of {env_id} (its instruction, first observation and the "
            f"format instruction: {need} tokens{image}, counted with {counted}): raise {option} to at least {need}, "
            "better "
            f"{2 ** math.ceil(math.log2(need * 2))} to leave room for the history"
        )
    return None
