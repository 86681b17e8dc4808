"""The BabaIsAI game engine: object codes, rule parsing and the step function.

The board is a flat list of stacks, one per cell, indexed ``i = y * width + x`` (x grows right, y grows down, (0, 0)
is the top-left corner). A stack is a tuple of object codes, bottom first; only the top object of a cell acts (rule
parsing, pushing, blocking, winning). Object codes are small ints:

- rule-affected objects: ``kind * 8 + colour`` (< :data:`TEXT`), with ``kind`` an index into :data:`KINDS` and
  ``colour`` an index into :data:`COLOURS`;
- text blocks: ``TEXT + word`` with ``word`` an index into :data:`WORDS`.

Everything here works on plain tuples and ints so that the solver can copy, hash and step thousands of states per
second without pickling. The rules it implements are in docs/babaisai.md ("The game"), with the quirks that are
reproduced.
"""

from __future__ import annotations

from typing import NamedTuple

KINDS = ("border", "wall", "baba", "ball", "key", "door")
"""Object kinds; ``border`` is the outer ring, never affected by rules and never shown in the text."""
BORDER, WALL, BABA, BALL, KEY, DOOR = range(len(KINDS))

COLOURS = ("red", "green", "blue", "grey", "white")
RED, GREEN, BLUE, GREY, WHITE = range(len(COLOURS))

DEFAULT_COLOUR = {WALL: GREY, BABA: WHITE, BALL: GREEN, KEY: BLUE, DOOR: RED}
"""Colour of an object created by a NOUN IS NOUN transformation."""

NOUNS = ("baba", "ball", "key", "door", "wall")
PROPERTIES = ("you", "win", "stop", "push", "lose", "pull")
WORDS = (*NOUNS, "is", *PROPERTIES)
"""Words written on text blocks. ``move``, ``open`` and ``shut`` are left out: no task places them."""

TEXT = 64
"""Codes from TEXT up are text blocks."""

IS_CODE = TEXT + WORDS.index("is")

# Property bits of a rule-affected object.
YOU, WIN, STOP, PUSH, LOSE, PULL = (1 << k for k in range(len(PROPERTIES)))
PROPERTY_BIT = {name: 1 << k for k, name in enumerate(PROPERTIES)}

NOUN_KIND = {name: KINDS.index(name) for name in NOUNS}
"""Noun word -> object kind."""

WORD_NOUN_KIND = {TEXT + WORDS.index(name): kind for name, kind in NOUN_KIND.items()}
"""Text code of a noun block -> object kind it names."""
WORD_PROPERTY_BIT = {TEXT + WORDS.index(name): bit for name, bit in PROPERTY_BIT.items()}
"""Text code of a property block -> property bit."""

Cells = tuple[tuple[int, ...], ...]

ACTIONS = ("idle", "up", "right", "down", "left")
"""Action names; the position is the action index (0 idle, 1 up, 2 right, 3 down, 4 left)."""


def obj(kind: int, colour: int) -> int:
    """Code of a rule-affected object."""
    return kind * 8 + colour


def word(name: str) -> int:
    """Code of the text block showing ``name``."""
    try:
        return TEXT + WORDS.index(name)
    except ValueError:
        raise ValueError(f"unknown BabaIsAI word {name!r}; known words: {', '.join(WORDS)}") from None


def kind_of(code: int) -> int:
    """Kind index of a rule-affected object code."""
    return code >> 3


def code_name(code: int) -> str:
    """Readable name of a code, e.g. ``'blue door'`` or ``'text:win'``."""
    if code >= TEXT:
        return f"text:{WORDS[code - TEXT]}"
    return f"{COLOURS[code & 7]} {KINDS[code >> 3]}"


class Rules(NamedTuple):
    """The active rules of a board.

    Attributes:
        masks: property bits per object code (length TEXT); border codes always carry STOP.
        text: property rules as ``"<noun> is <property>"`` strings, in parse order, duplicates kept.
        transforms: NOUN IS NOUN rules as ``(kind_from, kind_to)`` pairs, in parse order.
        you_noun: the noun of the last ``X is you`` rule, or None.
    """

    masks: tuple[int, ...]
    text: tuple[str, ...]
    transforms: tuple[tuple[int, int], ...]
    you_noun: str | None


def _top(cells: Cells | list[tuple[int, ...]], i: int) -> int:
    stack = cells[i]
    return stack[-1] if stack else -1


def parse_rules(cells: Cells | list[tuple[int, ...]], width: int) -> Rules:
    """Rebuild the rules from scratch: every top ``is`` block, horizontal before vertical, cells in row-major order."""
    kind_masks = [0] * len(KINDS)
    text: list[str] = []
    transforms: list[tuple[int, int]] = []
    you_noun: str | None = None
    for i, stack in enumerate(cells):
        if not stack or stack[-1] != IS_CODE:
            continue
        for first, third in ((i - 1, i + 1), (i - width, i + width)):
            a, b = _top(cells, first), _top(cells, third)
            kind = WORD_NOUN_KIND.get(a)
            if kind is None:
                continue
            bit = WORD_PROPERTY_BIT.get(b)
            if bit is not None:
                kind_masks[kind] |= bit
                prop = WORDS[b - TEXT]
                text.append(f"{KINDS[kind]} is {prop}")
                if prop == "you":
                    you_noun = KINDS[kind]
            elif b in WORD_NOUN_KIND:
                transforms.append((kind, WORD_NOUN_KIND[b]))
    kind_masks[BORDER] = STOP
    masks = tuple(kind_masks[code >> 3] if (code >> 3) < len(KINDS) else 0 for code in range(TEXT))
    return Rules(masks, tuple(text), tuple(transforms), you_noun)


class _Move:
    """Bookkeeping of one step: which YOU objects already moved (by cell and stack depth) and whether text moved."""

    __slots__ = ("moved", "text_moved")

    def __init__(self) -> None:
        self.moved: set[tuple[int, int]] = set()
        self.text_moved = False


def _try_move(cells: list[tuple[int, ...]], i: int, d: int, masks: tuple[int, ...], ctx: _Move) -> tuple[int, int]:
    """Move the top object of cell ``i`` by offset ``d`` (pushing what is in front); returns (dest, win|lose bits)."""
    f = i + d
    front = cells[f]
    if front:
        top = front[-1]
        if top >= TEXT or masks[top] & PUSH:
            _try_move(cells, f, d, masks, ctx)
            front = cells[f]
    if not front:
        dest = f
    else:
        top = front[-1]
        dest = f if top < TEXT and not masks[top] & STOP else i
    target = cells[dest]
    outcome = masks[target[-1]] & (WIN | LOSE) if target and target[-1] < TEXT else 0
    if dest != i:
        source = cells[i]
        mover = source[-1]
        cells[i] = source[:-1]
        cells[dest] = (*target, mover)
        if mover >= TEXT:
            ctx.text_moved = True
        elif ctx.moved and (i, len(source) - 1) in ctx.moved:
            ctx.moved.discard((i, len(source) - 1))
            ctx.moved.add((dest, len(target)))
        behind = cells[i - d] if 0 <= i - d < len(cells) else ()
        if behind and behind[-1] < TEXT and masks[behind[-1]] & PULL:
            _try_move(cells, i - d, d, masks, ctx)
    return dest, outcome


def advance(cells: Cells, rules: Rules, action: int, width: int) -> tuple[Cells, Rules, bool, bool]:
    """One non-idle step of the game (docs/babaisai.md, "A step").

    Args:
        cells: the board before the step.
        rules: the rules parsed from ``cells``.
        action: 1 up, 2 right, 3 down, 4 left (0, idle, changes nothing and must be handled by the caller).
        width: board width (the row stride of ``cells``).

    Returns:
        ``(cells, rules, won, lost)`` after the step: YOU objects moved one at a time in row-major order, then the
        rules rebuilt and NOUN IS NOUN transformations applied. ``won``/``lost`` come from the last YOU object
        that tried to move (the original's overwrite), tested against the rules from before the step.
    """
    d = (0, -width, 1, width, -1)[action]
    board = list(cells)
    masks = rules.masks
    ctx = _Move()
    outcome = 0
    for i in range(len(board)):
        stack = board[i]
        if not stack:
            continue
        top = stack[-1]
        if top < TEXT and masks[top] & YOU and (i, len(stack) - 1) not in ctx.moved:
            dest, outcome = _try_move(board, i, d, masks, ctx)
            ctx.moved.add((dest, len(board[dest]) - 1))
    new_rules = parse_rules(board, width) if ctx.text_moved else rules
    if new_rules.transforms:
        _transform(board, new_rules.transforms)
    return (
        tuple(board),
        new_rules,
        bool(outcome & WIN),
        bool(outcome & LOSE) and not outcome & WIN,
    )


def _transform(board: list[tuple[int, ...]], transforms: tuple[tuple[int, int], ...]) -> None:
    """NOUN1 IS NOUN2: put a new NOUN2 object on top of every cell whose top is a NOUN1 object (old one stays)."""
    for kind_from, kind_to in transforms:
        new = obj(kind_to, DEFAULT_COLOUR[kind_to])
        for i, stack in enumerate(board):
            if stack and stack[-1] < TEXT and stack[-1] >> 3 == kind_from:
                board[i] = (*stack, new)


def you_cells(cells: Cells, rules: Rules) -> list[int]:
    """Cells whose top object currently has YOU, in row-major order."""
    masks = rules.masks
    return [i for i, s in enumerate(cells) if s and s[-1] < TEXT and masks[s[-1]] & YOU]


def reference_cell(cells: Cells, rules: Rules) -> int | None:
    """BALROG's reference cell: the first cell whose top is of the last ``X is you`` rule's kind; None if missing."""
    if rules.you_noun is None:
        return None
    kind = NOUN_KIND[rules.you_noun]
    for i, stack in enumerate(cells):
        if stack and stack[-1] < TEXT and stack[-1] >> 3 == kind:
            return i
    return None
