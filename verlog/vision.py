"""Facts about vision-language model folders that several parts of verlog need (docs/vision.md).

A folder is a vision-language model when its ``config.json`` has a ``vision_config`` (Qwen2-VL, Qwen2.5-VL and the
tiny VLM of ``verlog tiny-model --vision``). Such a model's vLLM engine is started with
:func:`vllm_mm_limits`: images per prompt as the run needs, videos 0 (no video processor without torchvision).
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any

ROLLOUT_SENDS_IMAGES = False
"""Whether training's rollout sends each turn's images to the model (not yet: issue 35, docs/vision.md, Next). Until
it does, ``memory.max_image_history`` > 0 is refused at launch (:data:`NOT_SENT_YET`) rather than run as text only."""

NOT_SENT_YET = (
    "memory.max_image_history > 0: training's rollout does not send images to the model yet (issue 35, "
    "docs/vision.md, Next): set memory.max_image_history=0 to train on text"
)


def read_model_config(folder: str | Path) -> dict[str, Any] | None:
    """The folder's ``config.json`` as a dict, or None when it has none (a hub name, a missing folder)."""
    path = Path(folder) / "config.json"
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def is_vision_model(folder: str | Path) -> bool:
    """Whether the model in ``folder`` takes images (its config has a ``vision_config``)."""
    config = read_model_config(folder)
    return bool(config) and "vision_config" in config


def vllm_mm_limits(images_per_prompt: int) -> dict[str, int]:
    """vLLM's ``limit_mm_per_prompt`` for a VLM: ``images_per_prompt`` images (at least 1), no videos."""
    return {"image": max(1, int(images_per_prompt)), "video": 0}


def image_token_count(processor: Any, image: Any) -> int:
    """Tokens the model spends on ``image`` ([H, W, 3] uint8): ``image_grid_thw.prod() // merge_size**2``."""
    image_processor = getattr(processor, "image_processor", processor)
    grid = image_processor(images=[image], return_tensors="np")["image_grid_thw"][0]
    merge = int(getattr(image_processor, "merge_size", 2))
    return int(grid.prod()) // (merge * merge)


def text_only_model_problem(path: str, build_tiny: bool) -> str | None:
    """Why the model at ``path`` cannot take images (a folder without ``vision_config``, or a tiny text model that
    ``model.build_tiny`` would build), or None (a vision-language folder, or a name not on disk)."""
    folder = Path(path).expanduser()
    fix = "use a vision-language model (verlog tiny-model --vision OUT, Qwen2.5-VL) or set memory.max_image_history=0"
    if (folder / "config.json").is_file():
        if is_vision_model(folder):
            return None
        return f"{folder} is a text-only model (its config.json has no vision_config): {fix}"
    if build_tiny and not folder.exists():
        return f"model.build_tiny would build a text-only tiny model at {folder}: {fix}"
    return None


def load_vision_processor(path: str | Path) -> Any:
    """The image processor and tokenizer of the vision-language model at ``path`` (Qwen2-VL family), without a video
    processor (:func:`load_tiny_vlm_processor`); :class:`verlog.errors.ImageSetupError` when it
    cannot be loaded."""
    from verlog.errors import ImageSetupError

    try:
        return load_tiny_vlm_processor(Path(path).expanduser())
    except Exception as exc:  # missing files, a processor of another family, a hub name not downloaded
        first = (str(exc).splitlines() or [""])[0].split(". ")[0][:160]
        raise ImageSetupError(
            f"the image processor of {path} cannot be loaded ({type(exc).__name__}: {first}): give model.path a "
            "Qwen2-VL-family folder with its preprocessor_config.json and tokenizer, or set memory.max_image_history=0"
        ) from None


VISION_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' or 'image' in part %}{{ '<|vision_start|><|image_pad|><|vision_end|>' }}"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{{ '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
"""ChatML as the tiny text model uses it, with Qwen2-VL's content lists: ``{"type": "image"}`` parts become the
vision placeholder (the processor expands ``<|image_pad|>`` to the image's tokens), ``{"type": "text"}`` parts their
text."""


def load_tiny_vlm_processor(path: str | os.PathLike) -> Any:
    """The Qwen2-VL processor of a folder :func:`build_tiny_vlm` wrote (or any Qwen2-VL folder), with no video
    processor: ``processor(text=..., images=[...])`` gives ``input_ids``, ``pixel_values`` ``[patches, 3*2*14*14]``
    and ``image_grid_thw`` ``[images, 3]``."""
    from transformers import AutoTokenizer
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    folder = os.fspath(path)
    return image_only_processor_class()(
        image_processor=Qwen2VLImageProcessorPil.from_pretrained(folder),
        tokenizer=AutoTokenizer.from_pretrained(folder),
        chat_template=VISION_CHAT_TEMPLATE,
    )


@functools.cache
def image_only_processor_class() -> type:
    """``Qwen2VLProcessor`` without its video processor (which needs torchvision): images and text only."""
    from transformers.models.qwen2_vl.processing_qwen2_vl import Qwen2VLProcessor
    from transformers.processing_utils import ProcessorMixin

    class _ImageOnly(Qwen2VLProcessor):
        """Qwen2VLProcessor without its video processor (which needs torchvision); images and text only."""

        def __init__(self, image_processor: Any = None, tokenizer: Any = None, chat_template: Any = None) -> None:
            self.image_token = "<|image_pad|>"
            self.video_token = "<|video_pad|>"
            self.image_token_id = tokenizer.convert_tokens_to_ids(self.image_token)
            self.video_token_id = tokenizer.convert_tokens_to_ids(self.video_token)
            ProcessorMixin.__init__(self, image_processor, tokenizer, chat_template=chat_template)

    _ImageOnly.__name__ = _ImageOnly.__qualname__ = "ImageOnlyQwen2VLProcessor"
    return _ImageOnly
