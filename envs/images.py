"""Images in observations: the rules an observation's image follows, and ways to look at one.

An observation may carry an RGB image beside its text (``TextObservation.image``), for vision-language agents
(docs/vision.md). The rules (:func:`check_image`): a numpy array of shape ``[H, W, 3]``, dtype ``uint8`` (0-255),
``H`` and ``W`` at least :data:`MIN_SIDE` pixels. Envs draw images only when asked (``images=True``), so text-only
runs cost nothing.

:func:`ansi_image` draws an image in a terminal (24-bit colour, two pixels per character cell);
:func:`write_png` saves one as a PNG file with the standard library alone.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from envs.errors import EnvImageError

MIN_SIDE = 1
"""The smallest height and width an observation's image may have (a vision model's processor resizes it)."""


def check_image(image: Any, where: str = "the observation's image") -> np.ndarray:
    """``image`` if it follows the rules (``[H, W, 3]`` uint8 numpy array), else EnvImageError naming what it is
    and the fix. ``where`` names the image in the message."""
    if not isinstance(image, np.ndarray):
        raise EnvImageError(
            f"{where} must be a numpy array [H, W, 3] of dtype uint8, got a {type(image).__name__}; convert it with "
            "np.asarray(image, dtype=np.uint8)"
        )
    if image.ndim != 3 or image.shape[2] != 3 or min(image.shape[:2]) < MIN_SIDE:
        hint = " (drop the alpha channel: image[..., :3])" if image.ndim == 3 and image.shape[2] == 4 else ""
        raise EnvImageError(
            f"{where} must have shape [H, W, 3] (RGB, height and width >= {MIN_SIDE}), got {list(image.shape)}{hint}"
        )
    if image.dtype != np.uint8:
        raise EnvImageError(
            f"{where} must have dtype uint8 (0-255), got {image.dtype}; convert floats in [0, 1] with "
            "(image * 255).round().astype(np.uint8)"
        )
    return image


def ansi_image(image: np.ndarray, width: int = 32) -> str:
    """``image`` as terminal text: at most ``width`` character columns, each cell the colours of two pixels
    (upper half block in 24-bit ANSI colour), nearest-neighbour scaled."""
    check_image(image)
    height, src_width = image.shape[:2]
    cols = max(1, min(width, src_width))
    rows = max(2, round(height * cols / src_width / 2) * 2)
    ys = (np.arange(rows) * height // rows).clip(0, height - 1)
    xs = (np.arange(cols) * src_width // cols).clip(0, src_width - 1)
    small = image[ys][:, xs]
    lines = []
    for top, bottom in zip(small[0::2], small[1::2]):
        cells = [f"\x1b[38;2;{a[0]};{a[1]};{a[2]}m\x1b[48;2;{b[0]};{b[1]};{b[2]}m\u2580" for a, b in zip(top, bottom)]
        lines.append("".join(cells) + "\x1b[0m")
    return "\n".join(lines)


def write_png(image: np.ndarray, path: str | Path) -> Path:
    """Save ``image`` ([H, W, 3] uint8) as an 8-bit RGB PNG at ``path``; returns the path."""
    check_image(image)
    height, width = image.shape[:2]
    raw = b"".join(b"\x00" + np.ascontiguousarray(row).tobytes() for row in image)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    data = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b"")
    out = Path(path)
    out.write_bytes(data)
    return out
