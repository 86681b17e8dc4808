"""A vision-language model trained on text only (memory.max_image_history=0) is refused before launch, in one line:
verl's Qwen2-VL forward needs the 4-row positions verlog builds only for runs with images (docs/vision.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from verlog.config.checks import check_config
from verlog.config.compose import load_config
from verlog.config.preflight import vision_model_on_text


@pytest.fixture(scope="module")
def vlm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from verlog.models.tiny_vlm import build_tiny_vlm

    return build_tiny_vlm(tmp_path_factory.mktemp("vlm") / "model")


def test_a_vlm_on_text_only_is_refused_and_with_images_is_not(vlm: Path, tiny_model: Path) -> None:
    text = check_config(load_config([f"model.path={vlm}", "memory.max_image_history=0"]))
    [problem] = vision_model_on_text(text)
    assert problem.key == "memory.max_image_history" and "set memory.max_image_history=1" in problem.message
    assert vision_model_on_text(check_config(load_config([f"model.path={vlm}", "memory.max_image_history=1"]))) == []
    assert vision_model_on_text(check_config(load_config([f"model.path={tiny_model}"]))) == []  # a text model
