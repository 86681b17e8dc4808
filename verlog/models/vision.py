"""Facts about vision-language model folders that several parts of verlog need (docs/vision.md).

A folder is a vision-language model when its ``config.json`` has a ``vision_config`` (Qwen2-VL, Qwen2.5-VL and the
tiny VLM of ``verlog tiny-model --vision``). Such a model's vLLM engine is started with
:func:`vllm_vision_kwargs`: images per prompt as the run needs, videos 0 (no video processor without torchvision),
and the images normalised by the processor, not on the device.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any

ROLLOUT_SENDS_IMAGES = True
"""Whether training's rollout sends each turn's images to the model: it does (issue 35, docs/vision.md); the critic
reads them too (``verlog.trainer.value_model``, bootstrap prompts with their images)."""

IMAGE_PAD = "<|image_pad|>"
"""The placeholder the chat template writes once per image; the model reads it ``image tokens`` times."""


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


def vllm_vision_kwargs(images_per_prompt: int) -> dict[str, Any]:
    """The vLLM engine arguments of a VLM, in training (verl's server) and in evaluation (a standalone engine).

    - ``limit_mm_per_prompt``: :func:`vllm_mm_limits`.
    - ``mm_device_do_normalize=False``: vLLM 0.31 normalises Qwen2-VL's pixels inside the model by default, with two
      buffers (``visual.input_norm.weight`` and ``.bias``) computed from the processor's mean and std when the model
      is built. verl starts its rollout engine on placeholder weights (``load_format=dummy``), which fill those
      buffers with noise, and its weight sync sends only the checkpoint's tensors, so the buffers were never
      repaired: every image reached the vision tower scaled by about 0 (measured: the tiny VLM after SFT on images,
      93% success in ``verlog eval``, scored 4% in training's rollout, with ``training/rollout_probs_diff_max``
      0.98 before any update; docs/vision.md). With the processor normalising, as the trainer's rows do, the model
      holds no such buffer.
    """
    return {"limit_mm_per_prompt": vllm_mm_limits(images_per_prompt), "mm_device_do_normalize": False}


def image_token_count(processor: Any, image: Any) -> int:
    """Tokens the model spends on ``image`` ([H, W, 3] uint8): ``image_grid_thw.prod() // merge_size**2``."""
    image_processor = getattr(processor, "image_processor", processor)
    grid = image_processor(images=[image], return_tensors="np")["image_grid_thw"][0]
    merge = int(getattr(image_processor, "merge_size", 2))
    return int(grid.prod()) // (merge * merge)


class ImageTokenCounter:
    """:func:`image_token_count` remembered per image size (Qwen2-VL's count depends only on height and width), so
    that the memory's budget and the rollout's expansion ask the processor once per size."""

    def __init__(self, processor: Any) -> None:
        self.processor = processor
        self._by_size: dict[tuple[int, ...], int] = {}

    def __call__(self, image: Any) -> int:
        size = tuple(getattr(image, "shape", ())[:2]) or tuple(getattr(image, "size", ())[::-1])
        if size not in self._by_size:
            self._by_size[size] = image_token_count(self.processor, image)
        return self._by_size[size]


def expand_image_pads(token_ids: list[int], pad_id: int, counts: list[int]) -> list[int]:
    """``token_ids`` with its k-th ``<|image_pad|>`` (``pad_id``) repeated ``counts[k]`` times: the ids the model
    reads (the processor's ``input_ids``); a ``ValueError`` when the pads and the counts do not pair up."""
    found = sum(1 for t in token_ids if t == pad_id)
    if found != len(counts):
        raise ValueError(f"the prompt has {found} image placeholders for {len(counts)} images")
    out: list[int] = []
    images = iter(counts)
    for token in token_ids:
        out.extend([token] * next(images) if token == pad_id else [token])
    return out


def fold_image_pads(token_ids: list[int], placeholder_ids: set[int] | frozenset[int]) -> list[int]:
    """The inverse of :func:`expand_image_pads`: each run of a placeholder token (``<|image_pad|>``,
    ``<|video_pad|>``) folded back to one, as vLLM's processor wants a token prompt with images (it expands each
    placeholder to its image's tokens itself)."""
    out: list[int] = []
    for token in token_ids:
        if not (out and token in placeholder_ids and out[-1] == token):
            out.append(token)
    return out


def placeholder_token_ids(tokenizer: Any) -> list[int]:
    """The ids of ``<|image_pad|>`` and ``<|video_pad|>`` in a vision-language model's tokenizer: tokens the policy
    must never sample (a sampled one has no image behind it; verl's rollout server bans them the same way)."""
    unknown = getattr(tokenizer, "unk_token_id", None)
    ids = [tokenizer.convert_tokens_to_ids(t) for t in (IMAGE_PAD, "<|video_pad|>")]
    return [int(i) for i in ids if i is not None and i != unknown]


def pixel_inputs(processor: Any, images: list[Any]) -> dict[str, Any]:
    """The vision inputs of one row's images (torch tensors): ``pixel_values`` ``[patches, C*T*P*P]`` and
    ``image_grid_thw`` ``[images, 3]`` (patches = ``image_grid_thw.prod(-1).sum()``), and ``images_seqlens``
    ``[images * t]`` (each image's ``h*w`` per temporal patch, as verl's agent loop gives its trainer)."""
    import torch

    image_processor = getattr(processor, "image_processor", processor)
    out = image_processor(images=list(images), return_tensors="pt")
    grid = out["image_grid_thw"]
    return {
        "pixel_values": out["pixel_values"],
        "image_grid_thw": grid,
        "images_seqlens": torch.repeat_interleave(grid[:, 1] * grid[:, 2], grid[:, 0]),
    }


def multimodal_rows(model_path: str | Path, max_image_history: int) -> bool:
    """Whether a run's rows take the vision-language path: verl's ``[B, 4, L]`` multimodal rotary positions and a
    ``multi_modal_inputs`` column (``{}`` for a row without images). True with images in the prompt
    (``max_image_history`` > 0) and for any vision-language model, images or not: Qwen2-VL's forward in verl reads
    the three rotary rows even on text-only rows (measured: the first old log-probs failed with plain positions)."""
    return max_image_history > 0 or is_vision_model(Path(model_path).expanduser())


def prefix_sharing_off_reason(model_path: str | Path, max_image_history: int, prefix_sharing: bool) -> str | None:
    """Why ``hardware.prefix_sharing`` is turned off for a run on the vision-language path (one log line), or None:
    such rows carry ``multi_modal_inputs`` and three-row rotary positions, which the shared-prefix passes do not
    handle, so every pass runs verl's own per-row path (docs/vision.md)."""
    if not prefix_sharing or not multimodal_rows(model_path, max_image_history):
        return None
    why = "rows with images (memory.max_image_history > 0)" if max_image_history > 0 else "a VLM's rows"
    return (
        f"hardware.prefix_sharing is off for this run: {why} take verl's per-row passes (their vision inputs and "
        "multimodal rotary positions are not shared; docs/vision.md)"
    )


def rollout_processor(model_path: str, max_image_history: int) -> Any:
    """The processor training's rollout builds image prompts and rows with (:func:`load_vision_processor`) on the
    vision-language path (:func:`multimodal_rows`), or None for a text model's run."""
    return load_vision_processor(model_path) if multimodal_rows(model_path, max_image_history) else None


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
