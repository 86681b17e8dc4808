"""verl 0.9.1's Qwen2-VL forward on a micro-batch without images, under transformers 5.

verl's ``_get_input_embeds`` (``verl.models.transformers.qwen2_vl``, the forward of Qwen2-VL and Qwen2.5-VL in its
FSDP engine) runs the vision tower on a dummy picture when a micro-batch has no image, so that every rank's vision
parameters take part in the backward (FSDP ranks would otherwise wait on each other), and adds 0 x its mean to the
text embeddings. For real images it unpacks the tower's output (``unpack_visual_output``: transformers 5 returns a
``BaseModelOutputWithPooling``); for the dummy it does not, so a vision-language model trained on text rows failed on
its first old log-probs (``AttributeError: 'BaseModelOutputWithPooling' object has no attribute 'mean'``, measured:
a run with ``memory.max_image_history=0``, and any micro-batch of only text rows in a run with images).

:func:`install` wraps the function: a call with pixel values goes to verl's unchanged; a call without runs the same
text branch with the tower's output unpacked (the embeddings, plus 0 x the dummy features' mean). verl imports this
module in every process of a vision-language run (``VERL_USE_EXTERNAL_MODULES``, set by the launcher).
"""

from __future__ import annotations

import functools
from typing import Any

VLM_TEXT_ROWS_MODULE = "verlog.trainer.vlm_text_rows"
"""This module's name, for ``VERL_USE_EXTERNAL_MODULES``."""
TARGET_MODULE = "verl.models.transformers.qwen2_vl"
DUMMY_GRID = (1, 4, 4)
"""The dummy picture's patch grid (time, height, width): 16 patches, 4 tokens after the 2x2 merge."""


def text_only_embeds(model: Any, input_ids: Any, attention_mask: Any = None) -> tuple[Any, Any]:
    """The input embeddings ``[B, L, hidden]`` of a micro-batch without images and its attention mask, with the
    vision tower run on a dummy picture whose features count 0 (every vision parameter gets a zero gradient)."""
    import torch
    from verl.utils.transformers_compat import unpack_visual_output

    embeds = model.get_input_embeddings()(input_ids)
    vision = model.config.vision_config
    patch = vision.in_channels * vision.temporal_patch_size * vision.patch_size**2
    patches = DUMMY_GRID[0] * DUMMY_GRID[1] * DUMMY_GRID[2]
    dummy = torch.zeros((patches, patch), dtype=embeds.dtype, device=embeds.device)
    grid = torch.tensor([DUMMY_GRID], dtype=torch.long, device=embeds.device)
    features, _ = unpack_visual_output(model.visual(dummy.type(model.visual.dtype), grid_thw=grid))
    embeds = embeds + 0.0 * features.to(embeds.dtype).mean()
    if attention_mask is not None:
        attention_mask = attention_mask.to(embeds.device)
    return embeds, attention_mask


def _wrap(original: Any) -> Any:
    @functools.wraps(original)
    def get_input_embeds(
        model: Any,
        input_ids: Any,
        attention_mask: Any = None,
        pixel_values: Any = None,
        pixel_values_videos: Any = None,
        image_grid_thw: Any = None,
        video_grid_thw: Any = None,
    ) -> tuple[Any, Any]:
        if pixel_values is None and pixel_values_videos is None:
            return text_only_embeds(model, input_ids, attention_mask)
        return original(
            model, input_ids, attention_mask, pixel_values, pixel_values_videos, image_grid_thw, video_grid_thw
        )

    get_input_embeds.verlog_text_rows = True  # type: ignore[attr-defined]
    return get_input_embeds


def _replace(module: Any) -> None:
    if not getattr(module._get_input_embeds, "verlog_text_rows", False):
        module._get_input_embeds = _wrap(module._get_input_embeds)


def install() -> None:
    """Wrap verl's function in this process, now or when its module is first imported."""
    from verlog.platform.cpu import when_imported

    when_imported(TARGET_MODULE, _replace)


# verl imports this module in every process of a vision-language run (VERL_USE_EXTERNAL_MODULES, set by the launcher)
install()
