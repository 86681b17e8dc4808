"""``verlog tiny-model --vision``: a tiny Qwen2-VL model that transformers loads and runs on an image."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from verlog.models.folder import TinyModelSpec
from verlog.models.tiny_vlm import TinyVLMSpec, vision_tokenizer, vlm_config


def test_tiny_model_vision_builds_a_model_that_runs_on_an_image(tmp_path: Path) -> None:
    import torch
    from transformers import Qwen2VLForConditionalGeneration

    from verlog.models.vision import load_tiny_vlm_processor

    out = tmp_path / "vlm"
    subprocess.run([sys.executable, "-m", "verlog", "tiny-model", "--vision", str(out)], check=True)
    model = Qwen2VLForConditionalGeneration.from_pretrained(out, dtype=torch.float32)
    processor = load_tiny_vlm_processor(out)
    message = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "look"}]}]
    text = processor.apply_chat_template(message, add_generation_prompt=True, tokenize=False)
    enc = processor(text=[text], images=[np.full((56, 56, 3), 200, np.uint8)], return_tensors="pt")
    assert tuple(enc["image_grid_thw"][0]) == (1, 4, 4)  # 16 patches, 4 image tokens
    assert int((enc["input_ids"] == processor.image_token_id).sum()) == 4
    generated = model.generate(**enc, max_new_tokens=4, do_sample=True)
    assert generated.shape[1] > enc["input_ids"].shape[1]


@pytest.mark.parametrize(
    "sizes",
    [
        {"hidden_size": 64, "num_heads": 4},
        {"hidden_size": 65, "num_heads": 2},
        {"num_heads": 2, "num_kv_heads": 3},
        {"vocab_size": 100},
    ],
)
def test_the_vlm_text_sizes_are_checked_as_the_text_models(sizes: dict) -> None:
    with pytest.raises(ValueError) as text_error:
        TinyModelSpec(**sizes).validate()
    with pytest.raises(ValueError) as vlm_error:
        TinyVLMSpec(**sizes).validate()
    assert str(vlm_error.value) == str(text_error.value)


@pytest.mark.parametrize(
    ("sizes", "message"),
    [
        ({"hidden_size": 76, "num_heads": 2}, "head_dim 38 must divide by 4"),
        ({"hidden_size": 68, "num_heads": 2}, "head_dim 34 must divide by 4"),
        ({"vision_width": 60, "vision_heads": 2}, "vision_width 60 / vision_heads 2 must be a multiple of 4"),
        ({"min_pixels": 100}, "need 784 <= min_pixels <= max_pixels, got 100 and 50176"),
    ],
)
def test_the_vision_sizes_are_checked(sizes: dict, message: str) -> None:
    TinyModelSpec(**{k: v for k, v in sizes.items() if k in TinyModelSpec.__dataclass_fields__}).validate()
    with pytest.raises(ValueError, match=message):
        TinyVLMSpec(**sizes).validate()


def test_the_vlm_text_config_has_the_specs_sizes() -> None:
    spec = TinyVLMSpec(hidden_size=128, num_layers=3, num_heads=2, num_kv_heads=2, intermediate_size=200)
    text = vlm_config(spec, vision_tokenizer(None, spec.vocab_size)).text_config
    assert (text.hidden_size, text.num_hidden_layers, text.num_attention_heads) == (128, 3, 2)
    assert (text.num_key_value_heads, text.intermediate_size, text.max_position_embeddings) == (2, 200, 4096)
    assert spec.mrope_section() == [8, 12, 12] and sum(spec.mrope_section()) == spec.head_dim // 2
