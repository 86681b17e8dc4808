"""Hand-written boards: a small text format for tests, docs and custom puzzles.

One row per line, cells separated by spaces; the border ring is added around the rows given. Cell tokens:

- ``.`` empty; ``#`` a border block (never moves, never enterable);
- objects (lower case): ``b`` baba, ``w`` wall, ``o`` ball, ``k`` key, ``d`` door (default colours);
- text blocks (upper case): any word of :data:`envs.babaisai.world.WORDS`, e.g. ``BABA IS YOU``;
- a stack joins tokens bottom first with ``+``, e.g. ``k+WIN`` (a WIN block lying on a key).

Example::

    cells, width = parse_board('''
        BABA IS  YOU
        .    b   .
        KEY  IS  WIN
    ''')
"""

from __future__ import annotations

from envs.babaisai.errors import LevelError
from envs.babaisai.world import BABA, BALL, BORDER, DEFAULT_COLOUR, DOOR, GREY, KEY, WALL, WORDS, Cells, obj, word

_OBJECTS = {"b": BABA, "w": WALL, "o": BALL, "k": KEY, "d": DOOR}


def _token(token: str) -> tuple[int, ...]:
    codes = []
    for part in token.split("+"):
        if part == ".":
            continue
        if part == "#":
            codes.append(obj(BORDER, GREY))
        elif part in _OBJECTS:
            kind = _OBJECTS[part]
            codes.append(obj(kind, DEFAULT_COLOUR[kind]))
        elif part.lower() in WORDS and part.isupper():
            codes.append(word(part.lower()))
        else:
            raise LevelError(
                f"unknown board token {part!r}; use . # b w o k d, or an upper-case word of {', '.join(WORDS)}"
            )
    return tuple(codes)


def parse_board(text: str) -> tuple[Cells, int]:
    """``(cells, width)`` of the board written in ``text`` with a border ring added around it."""
    rows = [line.split() for line in text.strip().splitlines() if line.strip()]
    if not rows:
        raise LevelError("the board text has no rows")
    inner = len(rows[0])
    if any(len(row) != inner for row in rows):
        raise LevelError(f"every board row needs the same number of cells; got {[len(r) for r in rows]}")
    width = inner + 2
    border = (obj(BORDER, GREY),)
    cells: list[tuple[int, ...]] = [border] * width
    for row in rows:
        cells.append(border)
        cells.extend(_token(token) for token in row)
        cells.append(border)
    cells.extend([border] * width)
    return tuple(cells), width
