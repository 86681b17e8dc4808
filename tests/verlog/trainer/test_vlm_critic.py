"""The critic on a vision-language model (verlog.trainer.value_model), loaded through verl 0.9.1's own loader.

verl's ``load_valuehead_model`` asks ``AutoModelForTokenClassification`` first; with verlog's value models registered
it builds a Qwen2-VL critic with no trl. Checked here: the policy's weights, the values' shape, that they depend on
the image (and, the model being causal, only after it), that gradients reach the vision tower, the same through
verl's FSDP engine code with verl's model patches (a fresh interpreter), a Qwen2.5-VL critic from the key layout of
published checkpoints, that the text critic is unchanged, and that a VLM run has verl import the value model.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

import verlog.platform.cpu  # noqa: F401  (the CPU patches first: verl's loader then uses sdpa)

ENGINE_SCRIPT = Path(__file__).with_name("vlm_critic_engine.py")


def _load_critic(folder: Path):
    """verl's own loader, given the config as verl's FSDP engine prepares it for the critic."""
    from transformers import AutoConfig
    from verl.utils.model import load_valuehead_model

    from verlog.trainer.value_model import register_value_models

    register_value_models()
    config = AutoConfig.from_pretrained(folder)
    config.num_labels, config.classifier_dropout = 1, 0.0
    return load_valuehead_model(str(folder), torch.float32, config, False)


def _inputs(folder: Path, images: list[np.ndarray]) -> dict[str, torch.Tensor]:
    """One row per image: the image then a short text; position ids ``[4, B, L]`` (text row + verl's rotary rows)."""
    from verl.models.transformers.qwen2_vl import get_rope_index

    from verlog.models.vision import load_tiny_vlm_processor

    processor = load_tiny_vlm_processor(folder)
    message = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "which colour?"}]}]
    text = processor.apply_chat_template(message, add_generation_prompt=True, tokenize=False)
    enc = processor(text=[text] * len(images), images=images, return_tensors="pt")
    rows = []
    for i, ids in enumerate(enc["input_ids"]):
        rope = get_rope_index(processor, ids, image_grid_thw=enc["image_grid_thw"][i : i + 1])
        rows.append(torch.cat([torch.arange(len(ids))[None], rope]))
    return {
        "input_ids": enc["input_ids"],
        "attention_mask": enc["attention_mask"],
        "position_ids": torch.stack(rows, dim=1),
        "pixel_values": enc["pixel_values"],
        "image_grid_thw": enc["image_grid_thw"],
    }


def _frames(seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (56, 56, 3), dtype=np.uint8) for _ in range(2)]


def test_verl_loader_builds_a_vlm_critic_whose_values_see_the_image(tiny_vlm: Path) -> None:
    critic = _load_critic(tiny_vlm)
    assert type(critic).__name__ == "Qwen2VLForTokenClassification"
    assert not hasattr(critic, "v_head")  # verl's value engine then reads output.logits, as for the text critic
    from transformers import Qwen2VLForConditionalGeneration

    policy = Qwen2VLForConditionalGeneration.from_pretrained(tiny_vlm, dtype=torch.float32)
    for key, value in policy.model.state_dict().items():  # the policy's checkpoint, vision tower included
        assert torch.equal(critic.model.state_dict()[key], value), key
    inputs = _inputs(tiny_vlm, _frames(0))
    values = critic(**inputs, use_cache=False).logits.squeeze(-1)
    batch, length = inputs["input_ids"].shape
    assert values.shape == (batch, length)
    values[:, -1].sum().backward()
    assert critic.score.weight.grad.abs().sum() > 0
    assert sum(float(p.grad.abs().sum()) for p in critic.model.visual.parameters() if p.grad is not None) > 0

    with torch.no_grad():
        again = critic(**inputs).logits.squeeze(-1)
        other = critic(**{**_inputs(tiny_vlm, _frames(1)), "input_ids": inputs["input_ids"]}).logits.squeeze(-1)
    assert torch.equal(again, values.detach())  # deterministic: the change below comes from the image alone
    image_token = critic.config.image_token_id
    first = int((inputs["input_ids"][0] == image_token).nonzero()[0])
    assert torch.allclose(other[:, :first], again[:, :first])  # causal: positions before the image are unchanged
    assert (other[:, first:] - again[:, first:]).abs().min() > 0  # every position from the image on changes


def test_verl_engine_code_with_verl_model_patches_gives_the_same_values(tiny_vlm: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(ENGINE_SCRIPT), str(tiny_vlm)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["class"] == "Qwen2VLForTokenClassification"
    assert out["position_rows"] == 4
    assert out["row_lengths"] == out["valid_lengths"]  # one value per token of each row, padding dropped
    assert out["max_gap"] < 1e-5  # verl's patched forward and nested layout: the plain model's values
    assert out["vision_grad"] > 0 and out["score_grad"] > 0


def test_a_qwen2_5_vl_critic_loads_the_published_key_layout(tiny_vlm: Path, tmp_path: Path) -> None:
    from safetensors.torch import load_file
    from transformers import AutoConfig, Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    base = AutoConfig.from_pretrained(tiny_vlm).to_dict()
    vision = {"depth": 2, "hidden_size": 64, "out_hidden_size": 64, "num_heads": 2, "intermediate_size": 128}
    vision.update({"fullatt_block_indexes": [1], "window_size": 56})
    ids = {k: base[k] for k in ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id")}
    config = Qwen2_5_VLConfig(text_config=base["text_config"], vision_config=vision, tie_word_embeddings=True, **ids)
    torch.manual_seed(0)
    policy = Qwen2_5_VLForConditionalGeneration(config)
    folder = tmp_path / "qwen2_5_vl"
    policy.save_pretrained(folder)
    # transformers writes the key layout of the published checkpoints (Qwen2.5-VL-3B-Instruct's): visual.*, model.*
    saved = load_file(folder / "model.safetensors")
    assert any(k.startswith("visual.") for k in saved) and any(k.startswith("model.layers.") for k in saved)

    critic = _load_critic(folder)
    assert type(critic).__name__ == "Qwen2_5_VLForTokenClassification"
    loaded = critic.state_dict()
    for key, value in policy.model.state_dict().items():  # every weight of the policy reached the critic's model
        assert torch.equal(loaded[f"model.{key}"], value), key
    inputs = _inputs(tiny_vlm, _frames(0))  # the same processor family: 14x14 patches, 2x2 merge
    values = critic(**inputs).logits.squeeze(-1)
    assert values.shape == inputs["input_ids"].shape


def test_the_text_critic_is_unchanged(tiny_model: Path, tokenizer) -> None:
    critic = _load_critic(tiny_model)
    assert type(critic).__name__ == "Qwen2ForTokenClassification"
    enc = tokenizer(["go forward", "turn left now"], return_tensors="pt", padding=True)
    values = critic(**enc).logits.squeeze(-1)
    assert values.shape == enc["input_ids"].shape


def test_a_vlm_run_has_verl_import_the_value_model_everywhere(tiny_vlm: Path, tiny_model: Path, monkeypatch) -> None:
    from types import SimpleNamespace

    from verlog.trainer.runner import _platform_env
    from verlog.trainer.value_model import VALUE_MODEL_MODULE

    monkeypatch.delenv("VERL_ENGINE_VENDOR", raising=False)
    hardware = SimpleNamespace(cpu=False, prefix_sharing=False)
    for folder, wanted in ((tiny_vlm, True), (tiny_model, False)):
        monkeypatch.setenv("VERL_USE_EXTERNAL_MODULES", "some.module")
        _platform_env(SimpleNamespace(hardware=hardware, model=SimpleNamespace(path=str(folder))))
        modules = os.environ["VERL_USE_EXTERNAL_MODULES"].split(",")
        assert modules[0] == "some.module" and (VALUE_MODEL_MODULE in modules) == wanted


def test_bootstrap_prompts_carry_their_images_to_the_critic(tiny_vlm: Path) -> None:
    """The value step's prompt-only rows (V(s_{t+1}) of an episode that goes on) get the prompt's images as the
    rollout's rows do: ``multi_modal_inputs`` and verl's ``[k, 4, L]`` rotary positions; a text run keeps 2-D ones."""
    from types import SimpleNamespace

    from verl import DataProto

    import envs
    from verlog.models.vision import (
        IMAGE_PAD,
        ImageTokenCounter,
        expand_image_pads,
        load_vision_processor,
        pixel_inputs,
    )
    from verlog.prompting.memory import SlidingMemory
    from verlog.trainer.model_passes import ModelPasses
    from verlog.trainer.vision_rows import mrope_position_ids

    processor = load_vision_processor(tiny_vlm)
    counter = ImageTokenCounter(processor)
    env = envs.make("toy/visual", images=True)
    obs, _ = env.reset(seed=0)
    memory = SlidingMemory(max_image_history=1, image_tokens=counter)
    memory.reset(env.instruction)
    memory.observe(obs.long_term, obs.short_term, image=obs.image)
    built = memory.build_prompt(processor.tokenizer)
    pad = processor.tokenizer.convert_tokens_to_ids(IMAGE_PAD)
    prompt = expand_image_pads(list(built.token_ids), pad, [counter(obs.image)])

    passes = ModelPasses.__new__(ModelPasses)  # the value step's row builders alone: no workers
    passes.tokenizer, passes.rollout = processor.tokenizer, SimpleNamespace(processor=processor)
    multimodal = DataProto.from_dict(
        tensors={"position_ids": torch.zeros(2, 4, 3, dtype=torch.long)},
        non_tensors={"bootstrap_images": _objects([[obs.image], []])},
    )
    images = passes._bootstrap_images(multimodal, [0, 1])
    rows = passes._prompt_only_rows([prompt, prompt[-5:]], {}, images)
    positions, column = rows.batch["position_ids"], rows.non_tensor_batch["multi_modal_inputs"]
    assert positions.shape == (2, 4, len(prompt) + 1)  # the prompt and one pad token
    ids, mask = rows.batch["input_ids"], rows.batch["attention_mask"]
    assert torch.equal(positions[0], mrope_position_ids(processor, ids[0], mask[0], column[0]["image_grid_thw"]))
    assert torch.equal(column[0]["pixel_values"], pixel_inputs(processor, [obs.image])["pixel_values"])
    assert column[1] == {}  # a prompt without images: text positions on all rows, no vision inputs

    text = DataProto.from_dict(tensors={"position_ids": torch.zeros(2, 3, dtype=torch.long)})
    assert passes._bootstrap_images(text, [0, 1]) is None
    assert passes._prompt_only_rows([prompt], {}, None).batch["position_ids"].dim() == 2


def _objects(values: list) -> np.ndarray:
    column = np.empty(len(values), dtype=object)
    for i, value in enumerate(values):
        column[i] = value
    return column


def test_verl_flops_counter_reads_the_tiny_vlm_config(tiny_vlm: Path) -> None:
    """verl 0.9.1 counts a Qwen2-VL-family batch's FLOPs with Qwen2.5-VL's vision keys (``intermediate_size``,
    ``out_hidden_size``) after every actor and critic pass with images: the tiny VLM's config has them."""
    from transformers import AutoConfig
    from verl.utils.flops_counter import FlopsCounter

    flops, _ = FlopsCounter(AutoConfig.from_pretrained(tiny_vlm)).estimate_flops([40, 50], 1.0, images_seqlens=[16])
    text_only, _ = FlopsCounter(AutoConfig.from_pretrained(tiny_vlm)).estimate_flops([40, 50], 1.0)
    assert flops > text_only > 0  # the vision tower's share counted
