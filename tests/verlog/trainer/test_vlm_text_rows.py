"""A vision-language model trained on text rows (memory.max_image_history=0, or a micro-batch without images):
verl 0.9.1's Qwen2-VL forward fails on them under transformers 5, verlog's wrapper (verlog/trainer/vlm_text_rows.py)
gives the plain model's logits (docs/vision.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).with_name("vlm_text_forward.py")


def test_text_rows_through_verls_patched_forward_give_the_plain_logits(tiny_vlm: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), str(tiny_vlm)], capture_output=True, text=True, timeout=600, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    # the fault the wrapper is for; when a verl release fixes it, drop verlog/trainer/vlm_text_rows.py and its seam
    assert result["verl_error"] is not None and "'mean'" in result["verl_error"], result
    assert result["gap"] < 1e-5, result  # [4, B, L] text positions through verl's forward = the model's own
    # the dummy picture keeps every vision parameter in the backward (FSDP ranks stay in step), with zero gradient
    assert result["visual_grads"] == result["visual_params"] and result["visual_grad_max"] == 0.0, result
    assert result["text_grad_max"] > 0.0, result
