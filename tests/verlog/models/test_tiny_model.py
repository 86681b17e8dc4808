"""verlog.models.tiny_model: the tiny model in transformers (vLLM:
tests/verlog/rollout/test_vllm_engine_generator.py)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import torch

from verlog.models.tiny_model import CHAT_TEMPLATE, TinyModelSpec, build_tiny_model

MESSAGES = [
    {"role": "system", "content": "You are an agent playing a simple navigation game."},
    {"role": "user", "content": "Current Observation:\na wall 1 step forward"},
]


def _digest(folder: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.iterdir())
        if p.suffix in (".json", ".safetensors", ".jinja")
    }


def test_transformers_loads_and_generates(tiny_model: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    assert model.config.model_type == "qwen2"
    assert model.config.hidden_size // model.config.num_attention_heads >= 32
    prompt = tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False)
    assert prompt.startswith("<|im_start|>system\nYou are an agent")
    assert prompt.endswith("<|im_start|>assistant\n")
    ids = tokenizer(prompt, return_tensors="pt")
    out = model.generate(**ids, max_new_tokens=8, do_sample=False)
    assert out.shape[1] > ids["input_ids"].shape[1]
    # the byte-level tokenizer round-trips any text
    text = "THINK: go ahead. ACTION: go forward ✓"
    assert tokenizer.decode(tokenizer(text)["input_ids"]) == text
    assert tokenizer.eos_token == "<|im_end|>"
    assert model.generation_config.eos_token_id == tokenizer.eos_token_id


def test_deterministic_given_seed(tmp_path: Path) -> None:
    a = build_tiny_model(tmp_path / "a", seed=3)
    b = build_tiny_model(tmp_path / "b", seed=3)
    c = build_tiny_model(tmp_path / "c", seed=4)
    assert _digest(a) == _digest(b)
    assert _digest(a)["model.safetensors"] != _digest(c)["model.safetensors"]


def test_custom_sizes_and_corpus(tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = build_tiny_model(
        tmp_path / "m", corpus=["hello world"] * 10, hidden_size=128, num_layers=3, num_heads=2, vocab_size=320
    )
    model = AutoModelForCausalLM.from_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert model.config.num_hidden_layers == 3 and model.config.hidden_size == 128
    assert len(tokenizer) <= 320
    assert tokenizer.chat_template == CHAT_TEMPLATE
    logits = model(torch.tensor([[1, 2, 3]])).logits
    assert logits.shape == (1, 3, model.config.vocab_size)


@pytest.mark.parametrize(
    ("sizes", "message"),
    [
        ({"hidden_size": 64, "num_heads": 4}, "head_dim"),
        ({"hidden_size": 65, "num_heads": 2}, "divide"),
        ({"vocab_size": 100}, "vocab_size"),
    ],
)
def test_bad_sizes_are_rejected(tmp_path: Path, sizes: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build_tiny_model(tmp_path / "bad", **sizes)
    assert TinyModelSpec().head_dim == 32


# The tiny model in vLLM (CPU) is checked together with VllmEngineGenerator, on one engine start-up:
# tests/verlog/rollout/test_vllm_engine_generator.py.


def test_clean_engine_leftovers_keeps_segments_in_use(tmp_path: Path) -> None:
    import mmap

    from verlog.models.tiny_model import clean_engine_leftovers

    busy, stale = tmp_path / "psm_busy", tmp_path / "psm_stale"
    for path in (busy, stale):
        path.write_bytes(b"\0" * 4096)
    pattern = str(tmp_path / "psm_*")
    with open(busy, "r+b") as handle, mmap.mmap(handle.fileno(), 4096):
        removed = clean_engine_leftovers([pattern])
    assert removed == [str(stale)]
    assert busy.exists() and not stale.exists()
    assert clean_engine_leftovers([pattern]) == [str(busy)]


def test_env_corpus_makes_an_envs_prompts_shorter(tmp_path: Path) -> None:
    """--tokenizer-env / env_corpus: the tokenizer also learns an env's words, so its instruction takes fewer tokens."""
    import subprocess
    import sys

    import envs
    from verlog.models.tiny_model import DEFAULT_CORPUS, env_corpus, train_tokenizer

    texts = env_corpus("crafter/default", episodes=2, steps=5)
    env = envs.make("crafter/default")
    env.reset(seed=0)
    assert env.instruction in texts and len(texts) >= 4
    plain = train_tokenizer(DEFAULT_CORPUS, 1024)
    learned = train_tokenizer([*DEFAULT_CORPUS, *texts], 1024)
    assert len(learned(env.instruction)["input_ids"]) < 0.8 * len(plain(env.instruction)["input_ids"])
    out = tmp_path / "model"
    proc = subprocess.run(
        [sys.executable, "-m", "verlog", "tiny-model", str(out), "--tokenizer-env", "crafter/default"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    bad = subprocess.run(
        [sys.executable, "-m", "verlog", "tiny-model", str(tmp_path / "m2"), "--tokenizer-env", "crafter/nope"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert bad.returncode == 2 and "crafter/nope" in bad.stderr and "Traceback" not in bad.stderr
