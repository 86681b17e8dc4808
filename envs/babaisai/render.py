"""A simple top-down RGB picture of a BabaIsAI board (numpy only), for viewers and image observations."""

from __future__ import annotations

import numpy as np

from envs.babaisai.world import BABA, BORDER, NOUNS, TEXT, WALL, WORDS, Cells

TILE = 12
"""Pixels per cell side."""

_COLOUR_RGB = (
    (220, 50, 50),
    (60, 180, 75),
    (60, 100, 230),
    (128, 128, 128),
    (245, 245, 245),
)
_NOUN_RGB = (230, 90, 200)
_IS_RGB = (250, 250, 250)
_PROPERTY_RGB = (240, 160, 40)


def _tile(code: int) -> np.ndarray:
    tile = np.zeros((TILE, TILE, 3), dtype=np.uint8)
    if code >= TEXT:  # text block: dark square with a coloured frame and a coloured centre bar
        name = WORDS[code - TEXT]
        rgb = _NOUN_RGB if name in NOUNS else _IS_RGB if name == "is" else _PROPERTY_RGB
        tile[:, :] = (30, 30, 30)
        tile[1:-1, 1], tile[1:-1, -2], tile[1, 1:-1], tile[-2, 1:-1] = (
            rgb,
            rgb,
            rgb,
            rgb,
        )
        tile[TILE // 2 - 1 : TILE // 2 + 1, 3:-3] = rgb
        return tile
    kind, colour = code >> 3, code & 7
    rgb = _COLOUR_RGB[colour] if colour < len(_COLOUR_RGB) else (255, 0, 255)
    if kind == BORDER:
        tile[:, :] = (90, 90, 90)
    elif kind == WALL:
        tile[:, :] = (70, 70, 70)
        tile[1:-1, 1:-1] = rgb
    elif kind == BABA:
        tile[2:-2, 3:-3] = rgb
        tile[4:6, 4:-4] = (0, 0, 0)
    else:  # ball, key, door: a filled disc / bar / frame by kind
        yy, xx = np.mgrid[:TILE, :TILE]
        centre = (TILE - 1) / 2
        if kind == 3:
            tile[(yy - centre) ** 2 + (xx - centre) ** 2 <= (TILE / 2 - 2) ** 2] = rgb
        elif kind == 4:
            tile[3:5, 2:-2] = rgb
            tile[5:-2, -5:-3] = rgb
        else:
            tile[1:-1, 1:-1] = rgb
            tile[3:-1, 3:-3] = (0, 0, 0)
    return tile


_TILES = {code: _tile(code) for code in [*range(6 * 8), *range(TEXT, TEXT + len(WORDS))]}


def render_rgb(cells: Cells, width: int, height: int) -> np.ndarray:
    """The board's top objects as an image, shape ``[height * TILE, width * TILE, 3]`` uint8."""
    image = np.zeros((height * TILE, width * TILE, 3), dtype=np.uint8)
    for i, stack in enumerate(cells):
        if stack:
            y, x = divmod(i, width)
            image[y * TILE : (y + 1) * TILE, x * TILE : (x + 1) * TILE] = _TILES[stack[-1]]
    return image
