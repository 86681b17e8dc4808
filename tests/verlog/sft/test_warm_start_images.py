"""The format-only warm start of the tiny VLM with images (``verlog tiny-model --vision --warm-start``): rows with the
env's frames in the rollout's prompt layout, steps with their pixels, a folder that loads as a VLM again."""

from __future__ import annotations

import collections
from pathlib import Path

import pytest

from verlog.cli import main
from verlog.sft.warm_start import WarmStartConfig, WarmStartError, answer_rows, warm_start


def test_rows_show_the_frame_as_the_rollout_does_with_random_answers(tiny_vlm: Path) -> None:
    import envs
    from verlog.models.vision import IMAGE_PAD, ImageTokenCounter, expand_image_pads, load_vision_processor
    from verlog.prompting.memory import MemoryConfig, SlidingMemory

    processor = load_vision_processor(tiny_vlm)
    tok, counter = processor.tokenizer, ImageTokenCounter(processor)
    config = WarmStartConfig(
        env_id="toy/visual", episodes=60, answer_format="action", max_prompt_tokens=512, max_image_history=1
    )
    rows = answer_rows(config, tok, counter)
    assert len(rows) == 60  # toy/visual: one turn an episode
    pad = tok.convert_tokens_to_ids(IMAGE_PAD)
    assert all(len(r.images) == 1 and r.prompt_ids.count(pad) == 4 for r in rows)  # a 56x56 frame: 4 tokens

    env = envs.make("toy/visual", images=True)
    obs, _ = env.reset(seed=0)
    memory = SlidingMemory.from_config(MemoryConfig(1, 1, "action", 1), image_tokens=counter)
    memory.reset(env.instruction)
    memory.observe(obs.long_term, obs.short_term, image=obs.image)
    built = memory.build_prompt(tok, 512)
    assert rows[0].prompt_ids == expand_image_pads(list(built.token_ids), pad, [4])  # the rollout's prompt
    assert (rows[0].images[0] == obs.image).all()
    answers = collections.Counter(tok.decode(r.answer_ids[:-1]) for r in rows)
    assert set(answers) == {f"ACTION: {a}" for a in env.actions}
    assert min(answers.values()) >= 12  # roughly uniform: the image does not choose the answer
    assert all(r.answer_ids[-1] == tok.eos_token_id for r in rows)


def test_warm_start_with_images_lowers_the_loss_and_saves_a_vlm(tiny_vlm: Path, tmp_path: Path) -> None:
    import torch
    from transformers import AutoModelForImageTextToText

    from verlog.models.vision import load_vision_processor

    config = WarmStartConfig(
        env_id="toy/visual",
        steps=8,
        batch_size=4,
        warmup_steps=2,
        episodes=8,
        answer_format="action",
        max_image_history=1,
    )
    before = AutoModelForImageTextToText.from_pretrained(tiny_vlm, dtype=torch.float32)
    stats = warm_start(tiny_vlm, config, out_dir=tmp_path / "warm")
    assert stats["last_loss"] < stats["first_loss"] and stats["images_per_row"] == 1.0
    after = AutoModelForImageTextToText.from_pretrained(tmp_path / "warm", dtype=torch.float32)
    moved = [
        name
        for (name, a), (_, b) in zip(before.model.visual.named_parameters(), after.model.visual.named_parameters())
        if not torch.equal(a, b)
    ]
    assert moved  # the vision tower trained too: the frames went through it
    assert load_vision_processor(tmp_path / "warm").image_processor.merge_size == 2  # processor files came along
    from verlog.models.tiny_model import build_tiny_model

    text_model = build_tiny_model(tmp_path / "text", seed=0)
    with pytest.raises(WarmStartError, match="needs a vision-language model"):
        warm_start(text_model, config)  # images asked of a text model: refused before any step


def test_cli_builds_and_warm_starts_the_tiny_vlm(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "tiny_vlm"
    args = ["tiny-model", str(out), "--vision", "--warm-start", "toy/visual", "--answer-format", "action"]
    assert main([*args, "--warm-start-steps", "2", "--warm-start-batch", "2", "--max-prompt-tokens", "512"]) == 0
    printed = capsys.readouterr().out
    assert "[warm-start] toy/visual: 2 steps" in printed and "1.0 images a prompt" in printed
    assert (out / "preprocessor_config.json").is_file() and (out / "model.safetensors").is_file()
