"""Helpers for smoke runs and tests that users want too: a tiny model built locally, no downloads.

``build_tiny_model`` writes a Qwen2-architecture causal LM with random weights and a byte-level BPE tokenizer trained
on a small corpus with the ``tokenizers`` library, plus a ChatML chat template (the Qwen2.5 layout), through
``save_pretrained``. The folder loads in transformers and in vLLM (CPU or GPU), so verl's whole PPO/SFT stack can run
on it. Deterministic for a given seed and corpus.
"""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from verlog.models.folder import TinyModelSpec

# ChatML, as Qwen2.5 uses it (without the tool-calling branches). ``add_generation_prompt`` opens an assistant turn.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")

# Default tokenizer corpus: the words the built-in text games and verlog's prompts use, so that prompts tokenize
# into few tokens even with a small vocabulary.
DEFAULT_CORPUS = [
    "You are an agent playing a simple navigation game. Your goal is to go to the red ball.",
    "The following are the possible actions you can take in the game, followed by a short description of each action:",
    "turn left: turn to the left, turn right: turn to the right, go forward: take one step forward,",
    "pick up: pick up the object below you, drop: drop the object that you are holding,",
    "toggle: manipulate the object in front of you. In a moment I will present you an observation.",
    "Tips: Once the desired object you want to interact or pickup in front of you, you can use the toggle action.",
    "It doesn't make sense to repeat the same action over and over if the observation doesn't change. PLAY!",
    "a wall 1 step forward a wall 2 steps left a wall 3 steps right a green key 1 step right and 2 steps forward",
    "a locked blue door 6 steps forward a open yellow door 1 step forward You carry a yellow key a purple box",
    "a grey ball a red box a blue key put the purple ball next to the yellow ball open the door",
    "pick up the green key, then go to the yellow key go to a yellow key after you pick up a yellow key",
    "Observation: Current Observation: Previous plan: What will you do next? Please respond in the following format:",
    "THINK: step-by-step reasoning ACTION: One valid action from the allowed set.",
    "THINK: the key is ahead, so I move forward. ACTION: go forward",
    "THINK: the ball is to the left, so I turn left. ACTION: turn left",
    "THINK: the box is to the right, so I turn right. ACTION: turn right",
    "You are an agent playing Crafter. Noop Move West Move East Move North Move South Do Sleep Place Stone",
    "Place Table Place Furnace Place Plant Make Wood Pickaxe Make Stone Pickaxe Make Iron Pickaxe Make Wood Sword",
    "You see: - grass 1 step to your west - tree 5 steps to your north-east You face grass at your front.",
    "Your status: - health: 9/9 - food: 9/9 - drink: 9/9 - energy: 9/9 Your inventory: - wood: 1 - sapling: 1",
    "Active rules: baba is you wall is stop key is win Objects on the map: rule `is` 1 step up",
    "ball 2 steps to the right and 1 step down door 3 steps to the left idle up right down left",
    "0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 , . : ; ! ? ' \" ( ) [ ] - _ / \n",
]


def train_tokenizer(corpus: Iterable[str], vocab_size: int):
    """A byte-level BPE tokenizer (``transformers.PreTrainedTokenizerFast``) trained on ``corpus``, ChatML-ready."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(corpus), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        unk_token=None,
        additional_special_tokens=["<|im_start|>"],
        model_max_length=1 << 20,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def env_corpus(env_id: str, *, episodes: int = 8, steps: int = 40, seed: int = 0) -> list[str]:
    """Texts of an env for a tokenizer corpus: its instruction (repeated once per episode, as prompts repeat it) and
    the observations of ``episodes`` episodes of uniformly random actions, at most ``steps`` steps each."""
    import random

    import envs

    env = envs.make(env_id)
    rng = random.Random(seed)
    texts: list[str] = []
    try:
        for episode in range(episodes):
            obs, _ = env.reset(seed=seed + episode)
            texts += [env.instruction, obs.text]
            for _ in range(steps):
                obs, _, terminated, truncated, _ = env.step(rng.choice(list(env.actions)))
                texts.append(obs.text)
                if terminated or truncated:
                    break
    finally:
        close = getattr(env, "close", None)
        if callable(close):
            close()
    return texts


def build_tiny_model(
    path: str | Path,
    corpus: Iterable[str] | None = None,
    spec: TinyModelSpec | None = None,
    tokenizer: Any = None,
    **sizes: int,
) -> Path:
    """Write a tiny Qwen2 causal LM with random weights and a locally trained tokenizer to ``path``.

    Args:
        path: output folder (created; existing files are overwritten).
        corpus: texts to train the tokenizer on (default: the built-in games' vocabulary).
        tokenizer: a tokenizer :func:`train_tokenizer` already trained, used instead of training one on ``corpus``
            (BPE training may break ties differently from one run to the next: ``verlog sft`` checks its data with
            the tokenizer the model then gets).
        spec: model sizes; or give the fields of :class:`TinyModelSpec` as keyword arguments
            (e.g. ``hidden_size=512, num_layers=8``).

    Returns:
        The folder, ready for ``AutoModelForCausalLM.from_pretrained``, vLLM and verl.
    """
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    if spec is None:
        spec = TinyModelSpec(**sizes)
    elif sizes:
        raise TypeError("give either spec or size keyword arguments, not both")
    spec.validate()
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)

    if tokenizer is None:
        tokenizer = train_tokenizer(DEFAULT_CORPUS if corpus is None else corpus, spec.vocab_size)
    vocab = len(tokenizer)
    config = Qwen2Config(
        vocab_size=vocab,
        **spec.qwen2_sizes(),
        tie_word_embeddings=True,
        bos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        dtype="float32",
    )
    torch.manual_seed(spec.seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, do_sample=True
    )
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / "verlog_tiny_model.json").write_text(json.dumps(asdict(spec), indent=2) + "\n")
    return out


ENGINE_LEFTOVER_PATTERNS = ("/dev/shm/psm_*", "/dev/shm/verl_weights_*", "/tmp/vllm_dist_*")
"""Files vLLM and verl can leave behind on CPU: shared-memory ring buffers, weight segments, dist init files."""


def _paths_in_use() -> set[str]:
    """Every file path some live process has open or mapped (best effort: processes we may not read are skipped)."""
    used: set[str] = set()
    for proc in glob.glob("/proc/[0-9]*"):
        try:
            for fd in os.listdir(f"{proc}/fd"):
                try:
                    used.add(os.readlink(f"{proc}/fd/{fd}"))
                except OSError:
                    continue
            with open(f"{proc}/maps") as maps:
                for line in maps:
                    parts = line.split(maxsplit=5)
                    if len(parts) == 6:
                        used.add(parts[5].strip().removesuffix(" (deleted)"))
        except OSError:
            continue
    return used


def clean_engine_leftovers(patterns: Iterable[str] = ENGINE_LEFTOVER_PATTERNS) -> list[str]:
    """Remove vLLM/verl leftovers that no live process has open or mapped; returns the removed paths.

    Safe while other runs are going on: a segment still open or mapped by any process is kept.
    """
    candidates = [path for pattern in patterns for path in glob.glob(pattern)]
    if not candidates:
        return []
    used = _paths_in_use()
    removed = []
    for path in candidates:
        if path in used:
            continue
        try:
            os.remove(path)
            removed.append(path)
        except OSError:
            continue
    return removed


ANSWER_ACTIONS = (
    "turn left",
    "turn right",
    "go forward",
    "pick up",
    "toggle",  # BabyAI
    "up",
    "down",
    "left",
    "right",
    "idle",  # BabaIsAI
    "Move West",
    "Move East",
    "Move North",
    "Do",
    "Noop",  # Crafter
)
"""Actions :class:`RandomAnswerGenerator` names (the built-in games'; an action a game lacks is an invalid answer)."""


class RandomAnswerGenerator:
    """A stand-in policy that answers every prompt with ``ACTION: <random action>`` (or a THINK line before it with
    ``think``) and end-of-text: real env rows without a model (benchmarks, the row-cost equality tests)."""

    def __init__(self, tokenizer, seed: int = 0, think: bool = False) -> None:
        import random

        self.tokenizer = tokenizer
        self.rng = random.Random(seed)
        self.think = think

    def generate(self, requests, sampling):
        from verlog.rollout.generator import Generation

        out = []
        for _ in requests:
            action = self.rng.choice(ANSWER_ACTIONS)
            text = f"THINK: the goal may be near, so {action}.\nACTION: {action}" if self.think else f"ACTION: {action}"
            ids = [*self.tokenizer.encode(text, add_special_tokens=False), self.tokenizer.eos_token_id]
            out.append(Generation(token_ids=ids, log_probs=[-1.0] * len(ids)))
        return out


def collect_turn_rows(
    env_id: str,
    tokenizer,
    *,
    slots: int,
    turns: int,
    memory_n: int = 1,
    answer_format: str = "action",
    max_prompt_tokens: int = 4096,
    seed: int = 0,
    env_kwargs: dict | None = None,
):
    """``slots x turns`` per-turn rows of ``env_id`` as training collects them (a
    :class:`~verlog.rollout.batch.TurnBatch`: real prompts through the sliding memory with ``memory_n`` past turns,
    answers by :class:`RandomAnswerGenerator`)."""
    from verlog.prompting.memory import MemoryConfig
    from verlog.prompting.sampling import SamplingConfig
    from verlog.rollout.build import build_rollout

    rollout = build_rollout(
        env_id=env_id,
        env_kwargs=dict(env_kwargs or {}),
        tasks=None,
        num_slots=slots,
        tokenizer=tokenizer,
        generator=RandomAnswerGenerator(tokenizer, seed=seed, think=answer_format == "cot"),
        sampling=SamplingConfig(max_tokens=64),
        memory=MemoryConfig(n=memory_n, answer_format=answer_format),
        max_prompt_tokens=max_prompt_tokens,
        in_process=True,
        seed=seed,
        run_id="rows",
    )
    try:
        return rollout.collect(turns)
    finally:
        rollout.close()
