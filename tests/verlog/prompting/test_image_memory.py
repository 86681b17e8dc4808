"""``memory.max_image_history``: the newest k observations carry their image as a ``{"type": "image"}`` part, image
tokens count in the prompt budget, and 0 keeps today's text-only prompts (docs/vision.md)."""

from __future__ import annotations

import functools
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import envs
from verlog.models.vision import image_token_count
from verlog.prompting.budget import budget_problem
from verlog.prompting.memory import MemoryConfig, SlidingMemory


@pytest.fixture(scope="module")
def vlm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("vlm") / "model"
    subprocess.run([sys.executable, "-m", "verlog", "tiny-model", "--vision", str(out)], check=True)
    return out


@pytest.fixture(scope="module")
def processor(vlm: Path):
    from verlog.models.vision import load_tiny_vlm_processor

    return load_tiny_vlm_processor(vlm)


def _frame(value: int, size: int = 56) -> np.ndarray:
    return np.full((size, size, 3), value, np.uint8)


def _episode(memory: SlidingMemory, turns: int) -> None:
    memory.reset("Answer with the colour.")
    for t in range(turns):
        if t:
            memory.record(f"THINK: turn {t - 1}\nACTION: red", "red")
        memory.observe(f"observation {t}", "", _frame(10 * t + 10))


def _kinds(messages: list[dict]) -> list[str]:
    return ["image" if isinstance(m["content"], list) else "text" for m in messages if m["role"] == "user"]


def test_zero_keeps_text_only_prompts(processor) -> None:
    with_images, plain = SlidingMemory(n=2), SlidingMemory(n=2)
    _episode(with_images, 4)
    plain.reset("Answer with the colour.")
    for t in range(4):
        if t:
            plain.record(f"THINK: turn {t - 1}\nACTION: red", "red")
        plain.observe(f"observation {t}")
    assert with_images.messages() == plain.messages()
    a, b = with_images.build_prompt(processor.tokenizer), plain.build_prompt(processor.tokenizer)
    assert (a.token_ids, a.num_tokens, a.images) == (b.token_ids, b.num_tokens, [])


@pytest.mark.parametrize("k", [1, 2, 5])
def test_newest_k_observations_carry_their_image(processor, k: int) -> None:
    memory = SlidingMemory(n=2, max_image_history=k, image_tokens=functools.partial(image_token_count, processor))
    _episode(memory, 4)  # 2 past turns kept + the current one
    shown = min(k, 3)
    assert _kinds(memory.messages()) == ["text"] * (3 - shown) + ["image"] * shown
    built = memory.build_prompt(processor.tokenizer)
    assert [int(img[0, 0, 0]) for img in built.images] == [20, 30, 40][3 - shown :]  # prompt order, newest last
    # the count is what the processor makes of the rendered prompt and its images
    enc = processor(text=[built.text], images=built.images, return_tensors="np")
    assert built.num_tokens == enc["input_ids"].shape[1]
    assert built.num_tokens == len(built.token_ids) + shown * (4 - 1)  # 56x56: 4 tokens, 1 placeholder written


@pytest.mark.parametrize("k", [1, 2, 5])
def test_a_resumed_memory_shows_the_same_images(processor, k: int) -> None:
    """state_dict keeps the images a later prompt can still show (a resumed episode's prompts are the same, images
    included), as JSON; an older state without images still loads (its prompts are then text only)."""
    import json

    count = functools.partial(image_token_count, processor)
    memory = SlidingMemory(n=2, max_image_history=k, image_tokens=count)
    _episode(memory, 4)
    state = json.loads(json.dumps(memory.state_dict()))
    assert sum("image" in h for h in state["history"]) == min(k - 1, 2) and "image" in state["current"]
    resumed = SlidingMemory(n=2, max_image_history=k, image_tokens=count)
    resumed.load_state_dict(state)
    for m in (memory, resumed):  # the next turn too: the current image moves into the history
        m.record("THINK: turn 3\nACTION: red", "red")
        m.observe("observation 4", "", _frame(50))
    a, b = memory.build_prompt(processor.tokenizer), resumed.build_prompt(processor.tokenizer)
    assert (a.token_ids, a.num_tokens) == (b.token_ids, b.num_tokens)
    assert len(a.images) == len(b.images) == min(k, 3) and all((x == y).all() for x, y in zip(a.images, b.images))
    old = {**state, "history": [{k2: v for k2, v in h.items() if k2 != "image"} for h in state["history"]]}
    old["current"] = {k2: v for k2, v in state["current"].items() if k2 != "image"}
    text_only = SlidingMemory(n=2, max_image_history=k, image_tokens=count)
    text_only.load_state_dict(old)
    assert text_only.build_prompt(processor.tokenizer).images == []


def test_budget_drops_turns_with_their_images(processor) -> None:
    count = functools.partial(image_token_count, processor)
    memory = SlidingMemory(n=2, max_image_history=3, image_tokens=count)
    _episode(memory, 4)
    full = memory.build_prompt(processor.tokenizer)
    tight = memory.build_prompt(processor.tokenizer, full.num_tokens - 1)
    assert tight.turns_kept == 1 and len(tight.images) == 2 and tight.num_tokens <= full.num_tokens - 1


def test_an_image_that_cannot_fit_is_named_before_launch(processor) -> None:
    env = envs.make("toy/visual")
    count = functools.partial(image_token_count, processor)
    memory = MemoryConfig(n=1, max_image_history=1)
    need_text = budget_problem(env, "toy/visual", processor.tokenizer, MemoryConfig(n=1), 8, "opt", "the tokenizer")
    problem = budget_problem(env, "toy/visual", processor.tokenizer, memory, 8, "opt", "the tokenizer", 0, count)
    assert need_text is not None and problem is not None and "of which 4 for its image" in problem
    text_need = int(need_text.split("at least ")[1].split(",")[0])
    image_need = int(problem.split("at least ")[1].split(",")[0])
    assert image_need == text_need + 6  # <|vision_start|>, 4 image tokens, <|vision_end|>
    assert budget_problem(env, "toy/visual", processor.tokenizer, memory, image_need, "o", "t", 0, count) is None


def test_negative_max_image_history_is_refused() -> None:
    with pytest.raises(ValueError, match="max_image_history"):
        SlidingMemory(max_image_history=-1)


def test_images_switch_the_env_and_the_pool_on_and_the_rollout_needs_the_processor() -> None:
    from verlog.errors import ImageSetupError
    from verlog.rollout.build import build_rollout, image_pool_settings

    assert image_pool_settings({"a": 1}, MemoryConfig(), False) == ({"a": 1}, False)
    assert image_pool_settings({"a": 1}, MemoryConfig(), True) == ({"a": 1}, True)
    assert image_pool_settings({"a": 1}, MemoryConfig(max_image_history=2), False) == ({"a": 1, "images": True}, True)
    with pytest.raises(ImageSetupError, match="needs the model's image processor"):
        build_rollout(
            env_id="toy/visual",
            env_kwargs={},
            tasks=None,
            num_slots=1,
            tokenizer=None,
            generator=None,  # type: ignore[arg-type]
            sampling=None,
            memory=MemoryConfig(max_image_history=1),
            max_prompt_tokens=512,  # type: ignore[arg-type]
        )
