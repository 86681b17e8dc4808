"""Tests of verlog.prompting.memory: message layouts, the token budget, call-order errors and resume."""

from __future__ import annotations

import json

import pytest

from verlog.errors import MemoryUsageError, PromptTooLongError
from verlog.prompting.memory import COT_FORMAT_INSTRUCTION, PromptTemplate, SlidingMemory, prompt_metrics

INSTRUCTION = "You are an agent playing a simple navigation game. Your goal is to go to the red ball."
FMT = "\n\n" + COT_FORMAT_INSTRUCTION


@pytest.fixture(scope="module")
def tokenizer():
    from verlog.models.tiny_model import DEFAULT_CORPUS, train_tokenizer

    return train_tokenizer(DEFAULT_CORPUS, vocab_size=400)


def play(memory: SlidingMemory, turns: int, obs_len: int = 1) -> None:
    """Reset, then ``turns`` observations with a recorded output after all but the last."""
    memory.reset(INSTRUCTION)
    for t in range(turns):
        memory.observe(" ".join([f"obs{t}"] * obs_len))
        if t < turns - 1:
            memory.record(f"THINK: plan {t}. ACTION: go forward", f"act{t}")


def contents(memory: SlidingMemory) -> list[tuple[str, str]]:
    return [(m["role"], m["content"]) for m in memory.messages()]


# ------------------------------------------------------------------ layouts
def test_n0_shows_instruction_and_current_observation_only():
    memory = SlidingMemory(n=0)
    play(memory, 3)
    assert contents(memory) == [("system", INSTRUCTION), ("user", "Current Observation:\nobs2" + FMT)]


def test_n1_shows_previous_turn_with_its_plan():
    memory = SlidingMemory(n=1)
    play(memory, 3)
    assert contents(memory) == [
        ("system", INSTRUCTION),
        ("user", "Observation:\nobs1"),
        ("assistant", "Previous plan:\nTHINK: plan 1. ACTION: go forward"),
        ("user", "Current Observation:\nobs2" + FMT),
    ]


def test_first_turn_has_no_history():
    memory = SlidingMemory(n=2)
    play(memory, 1)
    assert contents(memory) == [("system", INSTRUCTION), ("user", "Current Observation:\nobs0" + FMT)]


def test_n2_older_turn_shows_only_the_executed_action():
    memory = SlidingMemory(n=2, keep_reasoning_turns=1)
    play(memory, 5)
    assert contents(memory)[1:] == [
        ("user", "Observation:\nobs2"),
        ("assistant", "act2"),
        ("user", "Observation:\nobs3"),
        ("assistant", "Previous plan:\nTHINK: plan 3. ACTION: go forward"),
        ("user", "Current Observation:\nobs4" + FMT),
    ]


@pytest.mark.parametrize("keep", [0, 2, 4])
def test_n4_keeps_the_newest_reasoning_turns(keep):
    memory = SlidingMemory(n=4, keep_reasoning_turns=keep)
    play(memory, 7)
    msgs = contents(memory)
    assert len(msgs) == 1 + 2 * 4 + 1
    assert [c for r, c in msgs if r == "user"][:4] == [f"Observation:\nobs{t}" for t in (2, 3, 4, 5)]
    assistants = [c for r, c in msgs if r == "assistant"]
    expected = [
        f"Previous plan:\nTHINK: plan {t}. ACTION: go forward" if 6 - t <= keep else f"act{t}" for t in (2, 3, 4, 5)
    ]
    assert assistants == expected


def test_short_term_context_only_in_current_observation():
    memory = SlidingMemory(n=1)
    memory.reset(INSTRUCTION)
    memory.observe("tree 1 step north", short_term="health: 9/9")
    memory.record("THINK: x ACTION: Do", "Do")
    memory.observe("grass 1 step north", short_term="health: 8/9")
    msgs = contents(memory)
    assert msgs[1] == ("user", "Observation:\ntree 1 step north")
    assert msgs[-1] == ("user", "Current Observation:\nhealth: 8/9\ngrass 1 step north" + FMT)


def test_custom_template_and_instruction_updates():
    template = PromptTemplate(instruction_role="user", format_instruction="", plan_header="Plan: ")
    memory = SlidingMemory(n=1, template=template)
    play(memory, 2)
    memory.set_instruction("new instruction")
    assert contents(memory) == [
        ("user", "new instruction"),
        ("user", "Observation:\nobs0"),
        ("assistant", "Plan: THINK: plan 0. ACTION: go forward"),
        ("user", "Current Observation:\nobs1"),
    ]


def test_reset_forgets_the_episode():
    memory = SlidingMemory(n=2)
    play(memory, 3)
    memory.reset("other")
    memory.observe("fresh")
    assert contents(memory) == [("system", "other"), ("user", "Current Observation:\nfresh" + FMT)]
    assert memory.history == () and memory.turn_index == 0


def test_prompt_length_stays_flat(tokenizer):
    memory = SlidingMemory(n=1)
    play(memory, 2)
    sizes = []
    for _ in range(2, 60):
        sizes.append(memory.build_prompt(tokenizer).num_tokens)
        memory.record("THINK: plan 7. ACTION: go forward", "go forward")
        memory.observe("obs7")
    assert max(sizes) == min(sizes)


# ------------------------------------------------------------------ call order and arguments
def test_call_order_errors():
    memory = SlidingMemory()
    with pytest.raises(MemoryUsageError, match="before reset"):
        memory.observe("x")
    memory.reset(INSTRUCTION)
    with pytest.raises(MemoryUsageError, match="no current observation"):
        memory.messages()
    with pytest.raises(MemoryUsageError, match="record\\(\\) before observe"):
        memory.record("r", "a")
    memory.observe("x")
    with pytest.raises(MemoryUsageError, match="twice without record"):
        memory.observe("y")
    memory.record("r", "a")
    with pytest.raises(MemoryUsageError, match="twice for one observation"):
        memory.record("r", "a")


@pytest.mark.parametrize("kwargs,match", [({"n": -1}, "memory n"), ({"keep_reasoning_turns": -2}, "keep_reasoning")])
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SlidingMemory(**kwargs)


# ------------------------------------------------------------------ tokenization and budget
def test_build_prompt_uses_the_chat_template(tokenizer):
    memory = SlidingMemory(n=2)
    play(memory, 4)
    built = memory.build_prompt(tokenizer)
    text = tokenizer.apply_chat_template(memory.messages(), tokenize=False, add_generation_prompt=True)
    assert built.text == text and text.endswith("<|im_start|>assistant\n")
    assert built.token_ids == tokenizer.encode(text, add_special_tokens=False)
    assert built.num_tokens == len(built.token_ids)
    assert built.turns_kept == 2 and not built.truncated_observation
    assert built.messages == memory.messages()


def _size(memory, tokenizer, turns):
    return memory._render(tokenizer, turns, None).num_tokens


def test_budget_drops_oldest_turns_first(tokenizer):
    memory = SlidingMemory(n=4, keep_reasoning_turns=1)
    play(memory, 6)
    two = _size(memory, tokenizer, 2)
    assert _size(memory, tokenizer, 1) < two < _size(memory, tokenizer, 3)
    built = memory.build_prompt(tokenizer, max_prompt_tokens=two)
    assert built.turns_kept == 2 and built.num_tokens == two and not built.truncated_observation
    assert [m["content"] for m in built.messages[1:5]] == [
        "Observation:\nobs3",
        "act3",
        "Observation:\nobs4",
        "Previous plan:\nTHINK: plan 4. ACTION: go forward",
    ]
    assert memory.build_prompt(tokenizer, max_prompt_tokens=two - 1).turns_kept == 1
    assert memory.build_prompt(tokenizer, max_prompt_tokens=10**6).turns_kept == 4


def test_budget_then_shortens_the_remaining_observation(tokenizer):
    memory = SlidingMemory(n=3)
    play(memory, 4, obs_len=40)
    one = _size(memory, tokenizer, 1)
    built = memory.build_prompt(tokenizer, max_prompt_tokens=one - 20)
    assert built.turns_kept == 1 and built.truncated_observation
    assert built.num_tokens <= one - 20
    assert built.num_tokens > one - 30  # the longest prefix that fits, not an arbitrary cut
    shortened = built.messages[1]["content"]
    original = "Observation:\n" + " ".join(["obs2"] * 40)
    assert shortened.endswith("\n[...]") and original.startswith(shortened[: -len("\n[...]")])
    assert built.messages[2]["content"] == "Previous plan:\nTHINK: plan 2. ACTION: go forward"
    assert built.messages[-1] == memory.messages()[-1]  # the current observation is intact
    assert built.text.endswith("<|im_start|>assistant\n")


def test_budget_falls_back_to_the_minimal_prompt_then_errors(tokenizer):
    memory = SlidingMemory(n=1)
    memory.reset(INSTRUCTION)
    memory.observe("obs0")
    memory.record("THINK: " + "go forward " * 200 + "ACTION: go forward", "go forward")  # a plan too long to keep
    memory.observe("obs1 " * 30)
    minimal = _size(memory, tokenizer, 0)
    built = memory.build_prompt(tokenizer, max_prompt_tokens=minimal)
    assert built.turns_kept == 0 and built.num_tokens == minimal and not built.truncated_observation
    with pytest.raises(PromptTooLongError) as err:
        memory.build_prompt(tokenizer, max_prompt_tokens=minimal - 1)
    message = str(err.value)
    assert f"is {minimal} tokens" in message and f"max_prompt_tokens = {minimal - 1}" in message
    assert "memory.n" in message


def test_budget_error_with_no_history(tokenizer):
    memory = SlidingMemory(n=0)
    play(memory, 1)
    with pytest.raises(PromptTooLongError, match="max_prompt_tokens = 5"):
        memory.build_prompt(tokenizer, max_prompt_tokens=5)
    with pytest.raises(ValueError, match="positive"):
        memory.build_prompt(tokenizer, max_prompt_tokens=0)


# ------------------------------------------------------------------ resume
def test_state_round_trip_through_json():
    memory = SlidingMemory(n=2)
    play(memory, 4)
    memory.record("THINK: now ACTION: turn left", "turn left")  # mid-turn: recorded, next observation pending
    state = json.loads(json.dumps(memory.state_dict()))
    restored = SlidingMemory(n=2)
    restored.load_state_dict(state)
    assert restored.state_dict() == memory.state_dict()
    for m in (memory, restored):
        m.observe("obs4")
    assert restored.messages() == memory.messages() and restored.turn_index == memory.turn_index == 4


def test_state_into_smaller_memory_keeps_newest_turns_and_rejects_garbage():
    memory = SlidingMemory(n=3)
    play(memory, 5)
    smaller = SlidingMemory(n=1)
    smaller.load_state_dict(memory.state_dict())
    assert [t.long_term for t in smaller.history] == ["obs3"]
    with pytest.raises(ValueError, match="not a SlidingMemory state"):
        smaller.load_state_dict({"format": "other"})
    with pytest.raises(ValueError, match="malformed"):
        smaller.load_state_dict({"format": "verlog.memory/1", "history": [{}]})


def test_prompt_metrics(tokenizer):
    memory = SlidingMemory(n=2)
    play(memory, 3)
    full = memory.build_prompt(tokenizer)
    cut = memory.build_prompt(tokenizer, max_prompt_tokens=full.num_tokens - 1)
    metrics = prompt_metrics([full, cut])
    assert metrics["rollout/prompt_tokens/max"] == full.num_tokens
    assert metrics["rollout/memory_turns_kept/mean"] == (full.turns_kept + cut.turns_kept) / 2 == 1.5
    assert metrics["rollout/prompt_truncated_frac"] == 0.0
    assert prompt_metrics([]) == {}


# ------------------------------------------------------------------ piece-cached encoding
def test_piece_encoder_matches_whole_text_encoding(tokenizer):
    from verlog.prompting.memory import _PieceEncoder

    encoder = _PieceEncoder(tokenizer, checks=0)
    assert encoder.enabled
    texts = [
        "<|im_start|>system\nYou are an agent<|im_end|>\n<|im_start|>user\n a wall 1 step  forward \n\n<|im_end|>",
        "<|im_start|><|im_end|>  leading and trailing  <|endoftext|>",
        "no special tokens at all: go forward, turn left.",
        "<|im_start|>assistant\n",
    ]
    for text in texts * 2:  # the second round comes from the cache
        assert encoder.encode(text) == tokenizer.encode(text, add_special_tokens=False)


class _Added:
    def __init__(self, content, **flags):
        self.content = content
        self.lstrip = flags.get("lstrip", False)
        self.rstrip = self.normalized = self.single_word = False


class _CountingTokenizer:
    """Encodes a text as [its length]: splitting at added tokens changes the result."""

    def __init__(self, **flags):
        self.added_tokens_decoder = {0: _Added("<s>", **flags)}

    def encode(self, text, add_special_tokens=False):
        return [len(text)]


def test_piece_encoder_switches_off_when_pieces_differ():
    from verlog.prompting.memory import _PieceEncoder

    encoder = _PieceEncoder(_CountingTokenizer())
    assert encoder.enabled
    assert encoder.encode("ab<s>cd") == [7]  # checked against the whole text, found different
    assert not encoder.enabled and encoder.encode("ab<s>c") == [6]
    assert not _PieceEncoder(_CountingTokenizer(lstrip=True)).enabled


def test_cached_prompt_ids_stay_exact_after_the_checks(tokenizer):
    memory = SlidingMemory(n=2)
    memory.reset(INSTRUCTION)
    for t in range(15):  # more prompts than the encoder's self-checks
        memory.observe(f"a wall {t} steps forward\n a red ball  {t % 3} step left ", short_term=f"health: {t}/9")
        built = memory.build_prompt(tokenizer)
        assert built.token_ids == tokenizer.encode(built.text, add_special_tokens=False)
        memory.record(f"THINK: step {t}.\nACTION: go forward ", "go forward")


def test_answer_format_sets_the_format_instruction() -> None:
    from verlog.prompting.memory import (
        ACTION_FORMAT_INSTRUCTION,
        COT_FORMAT_INSTRUCTION,
        PromptTemplate,
        check_answer_format,
    )

    for fmt, text in (("cot", COT_FORMAT_INSTRUCTION), ("action", ACTION_FORMAT_INSTRUCTION)):
        memory = SlidingMemory(template=PromptTemplate.for_answer_format(fmt))
        memory.reset("Play.")
        memory.observe("a wall 1 step forward")
        assert memory.messages()[-1]["content"].endswith("\n\n" + text)
    with pytest.raises(ValueError, match="not one of cot, action"):
        check_answer_format("json")
