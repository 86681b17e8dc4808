"""Per-turn rows with images for verl's FSDP actor: ``multi_modal_inputs`` and multimodal rotary position ids.

A row whose prompt showed images (``TurnRow.images``; its ``prompt_ids`` hold each image's expanded
``<|image_pad|>`` run) carries its vision inputs in the non-tensor column ``multi_modal_inputs``
(:func:`verlog.models.vision.pixel_inputs`: ``pixel_values``, ``image_grid_thw``, ``images_seqlens``); verl's FSDP
engine concatenates a micro-batch's dicts (``verl.utils.model.extract_multi_modal_inputs``) and passes them to the model
for the old log-probs, the reference and the update. A row without images has ``{}``.

Qwen2-VL's rotary embedding has three position rows (time, height, width: the image's tokens sit on a grid, text
advances all three), computed with verl's ``verl.models.transformers.qwen2_vl.get_rope_index``. verl's rows carry
four: the plain text positions first, then those three (``[B, 4, L]``; its engine splits them and feeds the model
``[4, B, L]``), for every row of a multimodal batch, with or without images.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from verlog.errors import VerlogError
from verlog.models.vision import IMAGE_PAD, pixel_inputs
from verlog.rollout.batch import TurnRow


class ImageRowError(VerlogError, RuntimeError):
    """A row's image placeholders and its images do not pair up (the run cannot train on it)."""


def mrope_position_ids(
    processor: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, grid: Any
) -> torch.Tensor:
    """verl's position ids of one laid-out row: ``[4, L]``, the text positions then Qwen2-VL's three rotary rows.

    Args:
        input_ids, attention_mask: ``[L]`` the row as laid out (left-padded prompt, right-padded response).
        grid: ``[images, 3]`` the row's ``image_grid_thw``, or None for a row without images.
    """
    from verl.models.transformers.qwen2_vl import get_rope_index
    from verl.utils.model import compute_position_id_with_mask

    start = processor.tokenizer.convert_tokens_to_ids("<|vision_start|>")
    read = input_ids.clone()
    last = int(attention_mask.nonzero().max()) if bool(attention_mask.any()) else -1
    if last >= 0 and int(read[last]) == start:
        # a sampled <|vision_start|> as the last token: get_rope_index reads the token after each one
        read[last] = int(processor.tokenizer.pad_token_id or 0)
    vision = get_rope_index(processor, input_ids=read, image_grid_thw=grid, attention_mask=attention_mask)
    text = compute_position_id_with_mask(attention_mask.unsqueeze(0))
    return torch.cat([text, vision.to(text.dtype)], dim=0)


def row_vision_inputs(processor: Any, row: TurnRow) -> dict[str, torch.Tensor]:
    """One row's ``multi_modal_inputs`` (``{}`` without images); :class:`ImageRowError` when its ``prompt_ids``
    do not hold one image-token run of the right length per image."""
    if not row.images:
        return {}
    inputs = pixel_inputs(processor, list(row.images))
    merge = int(processor.image_processor.merge_size)
    need = int(inputs["image_grid_thw"].prod(dim=-1).sum()) // (merge * merge)
    pad = processor.tokenizer.convert_tokens_to_ids(IMAGE_PAD)
    found = sum(1 for t in row.prompt_ids if t == pad)
    if found != need:
        raise ImageRowError(
            f"row {row.episode_id} turn {row.turn_index}: its prompt holds {found} image tokens for "
            f"{len(row.images)} image(s) of {need} tokens"
        )
    return inputs


def vision_columns(
    processor: Any, rows: Sequence[TurnRow], input_ids: torch.Tensor, attention_mask: torch.Tensor
) -> tuple[torch.Tensor, np.ndarray]:
    """The position ids ``[B, 4, L]`` and the ``multi_modal_inputs`` column ``[B]`` (object) of a batch with images.

    Args:
        rows: the batch's rows, in the order of ``input_ids``.
        input_ids, attention_mask: ``[B, L]`` the laid-out rows (``TurnBatch.to_tensors``).
    """
    column = np.empty(len(rows), dtype=object)
    positions = []
    for i, row in enumerate(rows):
        column[i] = row_vision_inputs(processor, row)
        grid = column[i].get("image_grid_thw")
        positions.append(mrope_position_ids(processor, input_ids[i], attention_mask[i], grid))
    return torch.stack(positions), column


def image_row_metrics(rows: Sequence[TurnRow]) -> dict[str, float]:
    """``rollout/image_rows`` (rows whose prompt carried images, sent to the model and to the actor with them) and
    ``rollout/images_per_row`` (their mean image count)."""
    counts = [len(r.images) for r in rows if not r.idle]
    with_images = [c for c in counts if c]
    return {
        "rollout/image_rows": float(len(with_images)),
        "rollout/images_per_row": float(np.mean(with_images)) if with_images else 0.0,
    }
