"""BALROG's BabyAI observation text, computed from minigrid's egocentric encoding (docs/text-envs.md, "BabyAI-Text").

The input is the ``image`` minigrid returns with every observation: ``grid.encode(vis_mask)`` of the agent's 7x7
view, indexed ``[x][y]`` with (type, colour, state) per cell, the agent at (3, 6) facing towards y = 0.
"""

from __future__ import annotations

import numpy as np
from minigrid.core.constants import IDX_TO_COLOR, IDX_TO_OBJECT, OBJECT_TO_IDX

ACTIONS: tuple[str, ...] = (
    "turn left",
    "turn right",
    "go forward",
    "pick up",
    "drop",
    "toggle",
)
"""The six text actions, in minigrid's action order (index = minigrid action)."""

ACTION_DESCRIPTIONS: dict[str, str] = {
    "turn left": "turn to the left",
    "turn right": "turn to the right",
    "go forward": "take one step forward",
    "pick up": "pick up the object below you",
    "drop": "drop the object that you are holding",
    "toggle": "manipulate the object in front of you",
}
"""BALROG's action descriptions."""

VERLOG_ACTION_DESCRIPTIONS: dict[str, str] = {
    **ACTION_DESCRIPTIONS,
    "pick up": "pick up the object one step in front of you",
    "toggle": "manipulate the object one step in front of you",
}
"""Verlog's copy, which corrects the two descriptions that do not say the front cell."""

_INSTRUCTION = """You are an agent playing a simple navigation game. Your goal is to {mission}. \
The following are the possible actions you can take in the game, followed by a short description of each action:

{actions}.

In a moment I will present you an observation.

Tips:
- Once the desired object you want to interact or pickup in front of you, \
you can use the 'toggle' action to interact with it.
- It doesn't make sense to repeat the same action over and over if the observation doesn't change.

PLAY!"""

_UNSEEN, _EMPTY, _WALL, _DOOR = (OBJECT_TO_IDX[n] for n in ("unseen", "empty", "wall", "door"))
_DOOR_STATES = ("open", "closed", "locked")
_AGENT_X, _AGENT_Y = 3, 6
# (direction word, cells from the agent outwards) for the three straight-line wall scans
_SCANS = (
    ("forward", [(3, y) for y in range(5, -1, -1)]),
    ("left", [(x, 6) for x in range(2, -1, -1)]),
    ("right", [(x, 6) for x in range(4, 7)]),
)


def steps(n: int) -> str:
    """``"1 step"``, ``"2 steps"``."""
    return f"{n} step" if n == 1 else f"{n} steps"


def describe(image: np.ndarray, carrying: object | None = None) -> str:
    """The observation text BALROG shows (its lines with ``"You see "`` removed, joined by newlines).

    Args:
        image: minigrid's encoded partial view, shape ``(7, 7, 3)`` indexed ``[x][y]``.
        carrying: the carried ``WorldObj`` (its ``color`` and ``type`` are named), or None.
    """
    return "\n".join(describe_lines(image, carrying))


def describe_lines(image: np.ndarray, carrying: object | None = None) -> list[str]:
    """The lines of :func:`describe`, in order (carried object, walls forward/left/right, objects)."""
    cells = image.tolist()  # nested lists [x][y] -> [type, colour, state]; plain Python is faster on 49 cells
    lines: list[str] = []
    if carrying is not None:
        lines.append(f"You carry a {carrying.color} {carrying.type}")  # type: ignore[attr-defined]
    for word, scan in _SCANS:
        for k, (x, y) in enumerate(scan, start=1):
            t = cells[x][y][0]
            if t == _UNSEEN or t == _EMPTY:
                continue
            if t == _WALL:
                lines.append(f"a wall {steps(k)} {word}")
            break
    for x, column in enumerate(cells):  # x ascending, then y ascending (farthest first)
        for y, (t, c, s) in enumerate(column):
            if t == _UNSEEN or t == _EMPTY or t == _WALL or (x == _AGENT_X and y == _AGENT_Y):
                continue
            if t == _DOOR:
                head = f"a {_DOOR_STATES[s]} {IDX_TO_COLOR[c]} door "
            else:
                head = f"a {IDX_TO_COLOR[c]} {IDX_TO_OBJECT[t]} "
            lines.append(head + _distance_phrase(x - _AGENT_X, _AGENT_Y - y))
    return lines


def _distance_phrase(dx: int, fwd: int) -> str:
    if dx == 0:
        return f"{steps(fwd)} forward"
    side = "right" if dx > 0 else "left"
    if fwd == 0:
        return f"{steps(abs(dx))} {side}"
    return f"{steps(abs(dx))} {side} and {steps(fwd)} forward"


def instruction(mission: str, *, variant: str = "balrog") -> str:
    """The task prompt for ``mission``; ``variant="verlog"`` uses Verlog's two corrected descriptions."""
    if variant not in ("balrog", "verlog"):
        raise ValueError(f"instruction variant must be 'balrog' or 'verlog', got {variant!r}")
    table = ACTION_DESCRIPTIONS if variant == "balrog" else VERLOG_ACTION_DESCRIPTIONS
    actions = ",\n".join(f"{name}: {table[name]}" for name in ACTIONS)
    return _INSTRUCTION.format(mission=mission, actions=actions)
