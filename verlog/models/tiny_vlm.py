"""A tiny random-weight vision-language model built on the spot (``verlog tiny-model --vision OUT``), no downloads.

:func:`build_tiny_vlm` writes a Qwen2-VL model (transformers' ``Qwen2VLForConditionalGeneration``: a small vision
tower of ViT blocks whose 2x2 patch merger feeds the text model, and a small Qwen2 text model with multimodal
rotary positions) with its processor: Qwen2-VL's image processor (the PIL one, which needs no torchvision), the
locally trained tokenizer of :func:`verlog.models.tiny_model.train_tokenizer` with Qwen2-VL's vision tokens added, and a
chat template that puts ``<|vision_start|><|image_pad|><|vision_end|>`` where a message holds an image.

:func:`verlog.models.vision.load_tiny_vlm_processor` builds the processor from such a folder without a video processor:
transformers' Qwen2-VL video processor needs torchvision, which this CPU stack cannot carry (docs/vision.md).

Image tokens: an image of ``H x W`` pixels is resized to multiples of ``patch_size * merge_size`` (28) within
``[min_pixels, max_pixels]``, cut into 14x14 patches, and each 2x2 block of patches becomes one token, so a 56x56
frame is 4 tokens and BabyAI's 112x112 agent view 16.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from verlog.models.folder import TinyModelSpec
from verlog.models.vision import VISION_CHAT_TEMPLATE

VISION_TOKENS = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")
"""Qwen2-VL's vision special tokens, added to the tiny tokenizer."""

SPEC_FILE = "verlog_tiny_vlm.json"
"""The sizes the folder was built with (:class:`TinyVLMSpec`), beside the model."""


@dataclass(frozen=True)
class TinyVLMSpec(TinyModelSpec):
    """Sizes of the tiny VLM. Text: :class:`verlog.models.folder.TinyModelSpec`'s (head_dim >= 32 for vLLM's CPU
    attention). Vision: ``vision_depth`` ViT blocks of width ``vision_width`` and ``vision_heads`` heads on 14x14
    patches; images are resized to ``[min_pixels, max_pixels]`` pixels."""

    vision_width: int = 64
    vision_depth: int = 2
    vision_heads: int = 2
    min_pixels: int = 28 * 28
    max_pixels: int = 224 * 224

    def validate(self) -> None:
        """Raise ValueError naming a size the model cannot have, and the fix."""
        super().validate()
        if self.head_dim % 4:
            raise ValueError(
                f"head_dim {self.head_dim} must divide by 4 (multimodal rotary sections): change hidden_size"
            )
        if self.vision_width % self.vision_heads or (self.vision_width // self.vision_heads) % 4:
            raise ValueError(
                f"vision_width {self.vision_width} / vision_heads {self.vision_heads} must be a multiple of 4"
            )
        if not 28 * 28 <= self.min_pixels <= self.max_pixels:
            raise ValueError(f"need 784 <= min_pixels <= max_pixels, got {self.min_pixels} and {self.max_pixels}")

    def mrope_section(self) -> list[int]:
        """Rotary frequencies given to (time, height, width): sums to head_dim / 2, in Qwen2-VL's 1:1.5:1.5."""
        half = self.head_dim // 2
        side = 3 * half // 8
        return [half - 2 * side, side, side]


def vlm_config(spec: TinyVLMSpec, tokenizer: Any) -> Any:
    """The ``Qwen2VLConfig`` of ``spec``, its special token ids from ``tokenizer``."""
    from transformers import Qwen2VLConfig

    ids = {name: tokenizer.convert_tokens_to_ids(token) for name, token in zip(_TOKEN_KEYS, VISION_TOKENS)}
    text = {
        "vocab_size": len(tokenizer),
        **spec.qwen2_sizes(),
        "rope_parameters": {"rope_type": "default", "rope_theta": 1e6, "mrope_section": spec.mrope_section()},
        "bos_token_id": tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
        "tie_word_embeddings": True,
    }
    vision = {
        "depth": spec.vision_depth,
        "embed_dim": spec.vision_width,
        "hidden_size": spec.hidden_size,
        "num_heads": spec.vision_heads,
        "mlp_ratio": 2,
        # verl 0.9.1's FLOPs counter reads Qwen2.5-VL's vision keys for every Qwen2-VL-family model and fails
        # without them (a Qwen2-VL vision config has neither): the ViT's MLP width and the merger's output width
        "intermediate_size": 2 * spec.vision_width,
        "out_hidden_size": spec.hidden_size,
    }
    return Qwen2VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=True, dtype="float32", **ids)


_TOKEN_KEYS = ("vision_start_token_id", "vision_end_token_id", "image_token_id", "video_token_id")


def vision_tokenizer(corpus: Any, vocab_size: int) -> Any:
    """:func:`verlog.models.tiny_model.train_tokenizer` with :data:`VISION_TOKENS` added and the vision chat
    template."""
    from verlog.models.tiny_model import DEFAULT_CORPUS, train_tokenizer

    tokenizer = train_tokenizer(DEFAULT_CORPUS if corpus is None else corpus, vocab_size)
    tokenizer.add_tokens(list(VISION_TOKENS), special_tokens=True)
    tokenizer.chat_template = VISION_CHAT_TEMPLATE
    return tokenizer


def build_tiny_vlm(path: str | os.PathLike, corpus: Any = None, spec: TinyVLMSpec | None = None) -> Path:
    """Write a tiny random-weight Qwen2-VL model, its tokenizer and its image processor to ``path``.

    Returns:
        The folder: ``Qwen2VLForConditionalGeneration.from_pretrained`` loads the model,
            :func:`verlog.models.vision.load_tiny_vlm_processor`
        the processor (``AutoTokenizer`` the tokenizer alone).
    """
    import torch
    from transformers import GenerationConfig, Qwen2VLForConditionalGeneration
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    spec = spec or TinyVLMSpec()
    spec.validate()
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = vision_tokenizer(corpus, spec.vocab_size)
    torch.manual_seed(spec.seed)
    model = Qwen2VLForConditionalGeneration(vlm_config(spec, tokenizer))
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, do_sample=True
    )
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    image_processor = Qwen2VLImageProcessorPil(min_pixels=spec.min_pixels, max_pixels=spec.max_pixels)
    image_processor.save_pretrained(out)
    (out / "processor_config.json").write_text(json.dumps({"processor_class": "Qwen2VLProcessor"}, indent=2) + "\n")
    (out / "chat_template.jinja").write_text(VISION_CHAT_TEMPLATE)
    (out / SPEC_FILE).write_text(json.dumps(asdict(spec), indent=2) + "\n")
    return out
