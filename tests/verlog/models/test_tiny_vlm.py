"""``verlog tiny-model --vision``: a tiny Qwen2-VL model that transformers loads and runs on an image."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np


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
