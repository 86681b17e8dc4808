"""Procedural generation of the 40 BALROG BabaIsAI tasks (docs/babaisai.md, "Levels").

Every draw goes through the ``numpy.random.RandomState`` passed in, with the same legacy calls, arguments and order
as the original package, so ``generate(task, RandomState(s))`` builds the level BALROG plays after
``np.random.seed(s)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from envs.babaisai.errors import UnknownTaskError
from envs.babaisai.world import (
    BABA,
    BALL,
    BLUE,
    BORDER,
    DOOR,
    GREEN,
    GREY,
    KEY,
    KINDS,
    RED,
    WALL,
    WHITE,
    Cells,
    obj,
    word,
)

TASKS: tuple[str, ...] = (
    "make_win-distr_obj_rule",
    "goto_win-distr_obj_rule",
    "goto_win",
    "goto_win-distr_obj",
    "goto_win-distr_rule",
    "goto_win-distr_obj-irrelevant_rule",
    "make_win-distr_obj",
    "make_win-distr_rule",
    "make_win",
    "make_win-distr_obj-irrelevant_rule",
    "two_room-goto_win",
    "two_room-goto_win-distr_obj_rule",
    "two_room-goto_win-distr_rule",
    "two_room-goto_win-distr_obj",
    "two_room-goto_win-distr_obj-irrelevant_rule",
    "two_room-goto_win-distr_win_rule",
    "two_room-break_stop-goto_win-distr_obj_rule",
    "two_room-break_stop-goto_win-distr_obj",
    "two_room-break_stop-goto_win-distr_rule",
    "two_room-break_stop-goto_win-distr_obj-irrelevant_rule",
    "two_room-break_stop-goto_win",
    "two_room-maybe_break_stop-goto_win-distr_obj_rule",
    "two_room-maybe_break_stop-goto_win",
    "two_room-maybe_break_stop-goto_win-distr_obj",
    "two_room-maybe_break_stop-goto_win-distr_rule",
    "two_room-maybe_break_stop-goto_win-distr_obj-irrelevant_rule",
    "two_room-make_win-distr_obj_rule",
    "two_room-make_win-distr_rule",
    "two_room-make_win",
    "two_room-make_win-distr_obj-irrelevant_rule",
    "two_room-make_win-distr_obj",
    "two_room-make_win-distr_win_rule",
    "two_room-break_stop-make_win-distr_obj_rule",
    "two_room-break_stop-make_win-distr_rule",
    "two_room-break_stop-make_win",
    "two_room-break_stop-make_win-distr_obj-irrelevant_rule",
    "two_room-break_stop-make_win-distr_obj",
    "two_room-make_you",
    "two_room-make_you-make_win",
    "two_room-make_wall_win",
)
"""The 40 BALROG task ids (config.yaml order, without the ``env/`` prefix)."""

MAX_STEPS = 100

ROLE_KINDS = (BALL, KEY, DOOR)
ROLE_COLOURS = (RED, BLUE, GREEN)

# Suffix -> (DOBJ, DRULE, IRR, DWIN)
_SUFFIX_FLAGS = {
    "": (False, False, False, False),
    "-distr_obj": (True, False, False, False),
    "-distr_rule": (False, True, False, False),
    "-distr_obj_rule": (True, True, False, False),
    "-distr_obj-irrelevant_rule": (True, True, True, False),
    "-distr_win_rule": (True, True, False, True),
}

# Single-room distractor-rule cells; (6,1) and (6,6) appear twice on purpose, as in the original (seed-exact levels).
_SINGLE_DRULE_CELLS = (
    (4, 6),
    (5, 6),
    (6, 6),
    (4, 1),
    (5, 1),
    (6, 1),
    (6, 1),
    (6, 2),
    (6, 3),
    (6, 4),
    (6, 5),
    (6, 6),
)
_UNPUSH = (
    (11, 2),
    (11, 3),
    (11, 4),
    (11, 5),
    (11, 6),
    (11, 7),
    (10, 7),
    (9, 7),
    (8, 7),
)

# Two-room regions, half-open: (x0, x1, y0, y1).
_LP = (2, 6, 3, 6)
_RP = (7, 11, 3, 6)
_LP2 = (2, 5, 3, 6)
_RP2 = (8, 11, 3, 6)
_REGIONS = {"LEFT": (1, 5, 1, 8), "RIGHT": (7, 11, 2, 9), "ANY": (1, 12, 2, 9)}

# Two-room prefix -> (BSTOP, BWIN, object region)
_TWO_ROOM_PREFIX = {
    "two_room-goto_win": (True, False, "LEFT"),
    "two_room-break_stop-goto_win": (False, False, "RIGHT"),
    "two_room-maybe_break_stop-goto_win": (False, False, "ANY"),
    "two_room-make_win": (True, True, "LEFT"),
    "two_room-break_stop-make_win": (False, True, "RIGHT"),
}


@dataclass(frozen=True)
class Level:
    """A generated level.

    Attributes:
        task: the task id, e.g. ``"two_room-goto_win"``.
        width, height: board size in cells.
        cells: stacks of object codes per cell (index ``y * width + x``), bottom first.
        target_plan: BALROG's plan metadata, e.g. ``"break[wall is stop], goto[door]"``.
    """

    task: str
    width: int
    height: int
    cells: Cells
    target_plan: str


class _Grid:
    """Mutable board used while generating."""

    def __init__(self, width: int, height: int) -> None:
        self.width, self.height = width, height
        self.stacks: list[list[int]] = [[] for _ in range(width * height)]
        border = obj(BORDER, GREY)
        for x in range(width):
            self.put(x, 0, border)
            self.put(x, height - 1, border)
        for y in range(1, height - 1):
            self.put(0, y, border)
            self.put(width - 1, y, border)

    def put(self, x: int, y: int, code: int) -> None:
        self.stacks[y * self.width + x].append(code)

    def move_top(self, src: tuple[int, int], dst: tuple[int, int]) -> None:
        code = self.stacks[src[1] * self.width + src[0]].pop()
        self.put(dst[0], dst[1], code)

    def rule(self, x: int, y: int, first: str, third: str) -> None:
        self.put(x, y, word(first))
        self.put(x + 1, y, word("is"))
        self.put(x + 2, y, word(third))

    def sample_cell(self, rng: np.random.RandomState, region: tuple[int, int, int, int]) -> tuple[int, int]:
        x0, x1, y0, y1 = region
        while True:
            x = int(rng.randint(x0, x1))
            y = int(rng.randint(y0, y1))
            if not self.stacks[y * self.width + x]:
                return x, y

    def freeze(self) -> Cells:
        return tuple(tuple(stack) for stack in self.stacks)


def _roles(rng: np.random.RandomState) -> list[tuple[int, int]]:
    """(kind, colour) of o1 (win target), o2 (distractor), o3 (spare)."""
    names = rng.choice(3, size=3, replace=False)
    colours = rng.choice(3, size=3)
    return [(ROLE_KINDS[int(n)], ROLE_COLOURS[int(c)]) for n, c in zip(names, colours)]


def _noun(kind: int) -> str:
    return KINDS[kind]


def _split(task: str, prefixes: tuple[str, ...]) -> tuple[str, tuple[bool, bool, bool, bool]]:
    for prefix in sorted(prefixes, key=len, reverse=True):
        if task.startswith(prefix) and task[len(prefix) :] in _SUFFIX_FLAGS:
            return prefix, _SUFFIX_FLAGS[task[len(prefix) :]]
    raise UnknownTaskError(f"unknown BabaIsAI task {task!r}; known tasks: {', '.join(TASKS)}")


def _single_room(task: str, rng: np.random.RandomState) -> Level:
    prefix, (dobj, drule, irr, dwin) = _split(task, ("goto_win", "make_win"))
    grid = _Grid(8, 8)
    (k1, c1), (k2, c2), (k3, _) = _roles(rng)
    grid.rule(1, 6, "baba", "you")
    grid.rule(1, 1, _noun(k1), "win")
    make = prefix == "make_win"
    if make:
        grid.move_top((1, 1), grid.sample_cell(rng, (2, 6, 2, 6)))
    if drule:
        x, y = _SINGLE_DRULE_CELLS[int(rng.randint(0, 12))]
        grid.put(x, y, word(_noun(k3 if irr else k2)))
    region = (1, 8, 2, 8)
    grid.put(*grid.sample_cell(rng, region), obj(BABA, WHITE))
    grid.put(*grid.sample_cell(rng, region), obj(k1, c1))
    if dobj:
        grid.put(*grid.sample_cell(rng, region), obj(k2, c2))
    if dwin:
        grid.rule(4, 4, _noun(k3), "win")
    o1 = _noun(k1)
    plan = f"make[{o1} is win], goto[{o1}]" if make else f"goto[{o1}]"
    return Level(task, 8, 8, grid.freeze(), plan)


def _two_room_base() -> _Grid:
    grid = _Grid(13, 9)
    for y in range(1, 8):
        grid.put(6, y, obj(WALL, GREY))
    return grid


def _two_room(task: str, rng: np.random.RandomState) -> Level:
    prefix, (dobj, drule, irr, dwin) = _split(task, tuple(_TWO_ROOM_PREFIX))
    bstop, bwin, region_name = _TWO_ROOM_PREFIX[prefix]
    grid = _two_room_base()
    (k1, c1), (k2, c2), (k3, _) = _roles(rng)
    grid.rule(1, 7, "baba", "you")
    grid.rule(1, 2, "wall", "stop")
    grid.rule(9, 1, _noun(k1), "win")
    if drule:
        if irr:
            grid.put(*grid.sample_cell(rng, _RP), word(_noun(k3)))
        elif dobj:
            grid.put(*_UNPUSH[int(rng.randint(0, 9))], word(_noun(k2)))
        else:
            grid.put(*grid.sample_cell(rng, _RP), word(_noun(k2)))
    if bstop:
        cell = grid.sample_cell(rng, _LP)
        k = int(rng.randint(0, 2))
        grid.move_top(((2, 2), (3, 2))[k], cell)
    if bwin:
        grid.move_top((9, 1), grid.sample_cell(rng, _RP))
    grid.put(*grid.sample_cell(rng, _LP), obj(BABA, WHITE))
    region = _REGIONS[region_name]
    o1_cell = grid.sample_cell(rng, region)
    grid.put(*o1_cell, obj(k1, c1))
    if dobj:
        grid.put(*grid.sample_cell(rng, region), obj(k2, c2))
    if dwin:
        grid.rule(9, 4, _noun(k3), "win")
    o1 = _noun(k1)
    steps = []
    if not bstop and (bwin or o1_cell[0] > 6):
        steps.append("break[wall is stop]")
    if bwin:
        steps.append(f"make[{o1} is win]")
    steps.append(f"goto[{o1}]")
    return Level(task, 13, 9, grid.freeze(), ", ".join(steps))


def _make_you(task: str, rng: np.random.RandomState) -> Level:
    make_win = task == "two_room-make_you-make_win"
    grid = _two_room_base()
    (k1, c1), (k2, c2), _ = _roles(rng)
    grid.rule(1, 6, "baba", "you")
    grid.rule(1, 1, "wall", "stop")
    grid.rule(9, 1, _noun(k1), "win")
    grid.put(*grid.sample_cell(rng, _LP2), word(_noun(k2)))
    if make_win:
        grid.move_top((9, 1), grid.sample_cell(rng, _RP2))
    grid.put(*grid.sample_cell(rng, _LP2), obj(BABA, WHITE))
    grid.put(*grid.sample_cell(rng, _REGIONS["RIGHT"]), obj(k1, c1))
    grid.put(*grid.sample_cell(rng, _REGIONS["RIGHT"]), obj(k2, c2))
    o1, o2 = _noun(k1), _noun(k2)
    middle = f"make[{o1} is win], " if make_win else ""
    return Level(task, 13, 9, grid.freeze(), f"make[{o2} is you], {middle}goto[{o1}]")


def _make_wall_win(task: str, rng: np.random.RandomState) -> Level:
    grid = _two_room_base()
    (k1, c1), (k2, c2), (k3, _) = _roles(rng)
    grid.rule(1, 7, "baba", "you")
    grid.rule(2, 2, "wall", "stop")
    grid.rule(9, 1, _noun(k1), "win")
    grid.put(*grid.sample_cell(rng, _RP2), word(_noun(k3)))
    grid.move_top((9, 1), _UNPUSH[int(rng.randint(0, 9))])
    grid.put(*grid.sample_cell(rng, _LP2), obj(BABA, WHITE))
    grid.put(*grid.sample_cell(rng, _REGIONS["RIGHT"]), obj(k1, c1))
    grid.put(*grid.sample_cell(rng, _REGIONS["RIGHT"]), obj(k2, c2))
    return Level(task, 13, 9, grid.freeze(), "break[wall is stop], make[wall is win], goto[wall]")


def generate(task: str, rng: np.random.RandomState) -> Level:
    """Build one level of ``task`` drawing from ``rng`` in the original's order."""
    if task not in TASKS:
        raise UnknownTaskError(f"unknown BabaIsAI task {task!r}; known tasks: {', '.join(TASKS)}")
    if task.startswith("two_room-make_you"):
        return _make_you(task, rng)
    if task == "two_room-make_wall_win":
        return _make_wall_win(task, rng)
    if task.startswith("two_room-"):
        return _two_room(task, rng)
    return _single_room(task, rng)
