"""A vision-language model trained on text only (memory.max_image_history=0) is refused before launch, in one line:
verl's Qwen2-VL forward needs the 4-row positions verlog builds only for runs with images (docs/vision.md)."""

from __future__ import annotations

from pathlib import Path

from verlog.config.checks import check_config
from verlog.config.compose import load_config
from verlog.config.preflight import vision_model_on_text


def test_a_vlm_on_text_only_is_refused_and_with_images_is_not(tiny_vlm: Path, tiny_model: Path) -> None:
    text = check_config(load_config([f"model.path={tiny_vlm}", "memory.max_image_history=0"]))
    [problem] = vision_model_on_text(text)
    assert problem.key == "memory.max_image_history" and "set memory.max_image_history=1" in problem.message
    with_images = check_config(load_config([f"model.path={tiny_vlm}", "memory.max_image_history=1"]))
    assert vision_model_on_text(with_images) == []
    assert vision_model_on_text(check_config(load_config([f"model.path={tiny_model}"]))) == []  # a text model
