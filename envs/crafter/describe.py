"""BALROG's Crafter observation text and instruction prompt (docs/text-envs.md, "Crafter-Text").

The describer reads crafter's semantic map (``info["semantic"]``, indexed ``[x][y]``; x grows east, y south).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

ACTIONS: tuple[str, ...] = (
    "Noop", "Move West", "Move East", "Move North", "Move South", "Do", "Sleep", "Place Stone", "Place Table",
    "Place Furnace", "Place Plant", "Make Wood Pickaxe", "Make Stone Pickaxe", "Make Iron Pickaxe",
    "Make Wood Sword", "Make Stone Sword", "Make Iron Sword",
)  # fmt: skip
"""The 17 text actions; index i is crafter action i."""

ACTION_DESCRIPTIONS: dict[str, str] = {
    "Noop": "do nothing",
    "Move West": "move west on flat ground",
    "Move East": "move east on flat ground",
    "Move North": "move north on flat ground",
    "Move South": "move south on flat ground",
    "Do": "Multiuse action to collect material, drink from lake and hit creature in front",
    "Sleep": "sleep when energy level is below maximum",
    "Place Stone": "place a stone in front",
    "Place Table": "place a table",
    "Place Furnace": "place a furnace",
    "Place Plant": "place a plant",
    "Make Wood Pickaxe": "craft a wood pickaxe with a nearby table and wood in inventory",
    "Make Stone Pickaxe": "craft a stone pickaxe with a nearby table, wood, and stone in inventory",
    "Make Iron Pickaxe": "craft an iron pickaxe with a nearby table and furnace, wood, coal, and iron in inventory",
    "Make Wood Sword": "craft a wood sword with a nearby table and wood in inventory",
    "Make Stone Sword": "craft a stone sword with a nearby table, wood, and stone in inventory",
    "Make Iron Sword": "craft an iron sword with a nearby table and furnace, wood, coal, and iron in inventory",
}

ACHIEVEMENT_TITLES: tuple[str, ...] = (
    "Collect Wood", "Place Table", "Eat Cow", "Collect Sapling", "Collect Drink", "Make Wood Pickaxe",
    "Make Wood Sword", "Place Plant", "Defeat Zombie", "Collect Stone", "Place Stone", "Eat Plant",
    "Defeat Skeleton", "Make Stone Pickaxe", "Make Stone Sword", "Wake Up", "Place Furnace", "Collect Coal",
    "Collect Iron", "Make Iron Pickaxe", "Make Iron Sword", "Collect Diamond",
)  # fmt: skip
"""The 22 achievements in the order BALROG's prompt lists them; ``title.lower().replace(" ", "_")`` is crafter's."""

SEMANTIC_NAMES: dict[int, str] = dict(enumerate(
    ("water", "grass", "stone", "path", "sand", "tree", "lava", "coal", "iron", "diamond", "table",
     "furnace", "player", "cow", "zombie", "skeleton", "arrow", "plant"), start=1,
))  # fmt: skip
"""Crafter's semantic ids (materials, then object classes)."""

VITALS: tuple[str, ...] = ("health", "food", "drink", "energy")
SLEEPING_PREFIX = "You are sleeping, and will not be able take actions until energy is full."
DEAD_PREFIX = "You died."

_PROMPT = """You are an agent playing Crafter. The following are the only valid actions you can take in the game, \
followed by a short description of each action:

{actions}.

These are the game achievements you can get:
{achievements}

In a moment I will present a history of actions and observations from the game.
Your goal is to get as far as possible by completing all the achievements.

PLAY!"""


def steps(n: int) -> str:
    return f"{n} step" if n == 1 else f"{n} steps"


def _direction(dx: int, dy: int) -> str:
    parts = []
    if dy < 0:
        parts.append("north")
    elif dy > 0:
        parts.append("south")
    if dx < 0:
        parts.append("west")
    elif dx > 0:
        parts.append("east")
    return "-".join(parts)


TEXT_VARIANTS: tuple[str, ...] = ("v2", "v1", "v0")
"""BALROG's Crafter text versions (docs/text-envs.md): v2 = current (default), v1 = Verlog's, v0 = first release."""

OUT_OF_MAP = "Error, you are out of the map."


def describe_long_term(
    semantic: np.ndarray,
    pos: Sequence[int],
    facing: Sequence[int],
    *,
    sleeping: bool = False,
    health: float = 9,
    view: tuple[int, int] = (9, 9),
    variant: str = "v2",
) -> str:
    """The long-term context: optional status prefix, the nearest thing of each kind, and the faced cell.

    Args:
        semantic: crafter's semantic map ``[x][y]`` of the whole world.
        pos: the player's (x, y).
        facing: the player's facing vector (fx, fy).
        sleeping, health: the player's state (for the prefix).
        view: crafter's view (9, 9); the window is ``view[0]`` wide and ``view[1] - 2`` tall.
        variant: ``"v2"`` (BALROG HEAD: kinds in first-met order, "1 step"), ``"v1"`` (kinds ordered by semantic id,
            always "steps") or ``"v0"`` (v1 with the transposed facing cell). v0/v1 at the east/south map edge
            follow the written description of their swapped bounds check; that corner was not checked against
            BALROG's code here.
    """
    if variant not in TEXT_VARIANTS:
        raise ValueError(f"Crafter text variant must be one of {TEXT_VARIANTS}, got {variant!r}")
    px, py = int(pos[0]), int(pos[1])
    half_w, half_h = view[0] // 2, view[1] // 2
    # Plain slicing, as BALROG does: a negative start (at the west/north edge) gives an empty window.
    window = semantic[px - half_w : px + half_w + 1, py - half_h + 1 : py + half_h]
    cx, cy = half_w, half_h - 1  # the player's cell in the window
    try:
        body = f"{_seen_block(window, cx, cy, variant)}\n\n{_facing_line(window, cx, cy, facing, variant)}"
    except IndexError:  # v0/v1 can read past a window cut at the map edge; BALROG then shows this line
        body = OUT_OF_MAP
    if sleeping:
        return f"{SLEEPING_PREFIX}\n\n\n\n{body}"
    if health <= 0:
        return f"{DEAD_PREFIX}\n\n\n\n{body}"
    return body


def _facing_line(window: np.ndarray, cx: int, cy: int, facing: Sequence[int], variant: str) -> str:
    width, height = window.shape[:2]
    fx, fy = int(facing[0]), int(facing[1])
    if variant == "v2":
        i, j = cx + fx, cy + fy
        inside = 0 <= i < width and 0 <= j < height
    else:  # v0 reads [3 + fy][4 + fx] (transposed), v1 [4 + fx][3 + fy]; both test (height, width) swapped
        i, j = (cy + fy, cx + fx) if variant == "v0" else (cx + fx, cy + fy)
        inside = 0 <= i < height and 0 <= j < width
    if not inside:
        return "You face nothing at your front."
    return f"You face {SEMANTIC_NAMES.get(int(window[i][j]), 'unknown')} at your front."


def _seen_block(window: np.ndarray, cx: int, cy: int, variant: str) -> str:
    nearest: dict[int, tuple[int, int, int]] = {}  # semantic id -> (distance, dx, dy), in first-met order
    for x, column in enumerate(window.tolist()):
        for y, sem_id in enumerate(column):
            if (x == cx and y == cy) or sem_id not in SEMANTIC_NAMES:
                continue
            dx, dy = x - cx, y - cy
            d = abs(dx) + abs(dy)
            best = nearest.get(sem_id)
            if best is None or d < best[0]:
                nearest[sem_id] = (d, dx, dy)
    if not nearest:
        return "You see nothing away from you."
    if variant == "v2":
        lines = [f"- {SEMANTIC_NAMES[k]} {steps(d)} to your {_direction(dx, dy)}" for k, (d, dx, dy) in nearest.items()]
    else:
        lines = [
            f"- {SEMANTIC_NAMES[k]} {d} steps to your {_direction(dx, dy)}"
            for k, (d, dx, dy) in sorted(nearest.items())
        ]
    return "You see:\n" + "\n".join(lines)


def describe_short_term(inventory: Mapping[str, int]) -> str:
    """The short-term context: the four vitals out of 9, then the non-empty inventory in crafter's order."""
    status = "Your status:\n" + "\n".join(f"- {name}: {inventory[name]}/9" for name in VITALS)
    items = [f"- {name}: {n}" for name, n in inventory.items() if name not in VITALS and n != 0]
    if not items:
        return f"{status}\n\nYou have nothing in your inventory."
    return f"{status}\n\nYour inventory:\n" + "\n".join(items)


def instruction(unlocked: set[str] | frozenset[str] = frozenset(), *, achievements: str = "all") -> str:
    """The task prompt.

    Args:
        unlocked: crafter names of the achievements already unlocked this episode (e.g. ``{"collect_wood"}``).
        achievements: ``"all"`` lists the 22 achievements as BALROG does (the prompt never changes);
            ``"remaining"`` lists only those not yet unlocked, renumbered from 1 (Verlog's idea, in BALROG's wording).
    """
    if achievements not in ("all", "remaining"):
        raise ValueError(f"achievements must be 'all' or 'remaining', got {achievements!r}")
    titles = list(ACHIEVEMENT_TITLES)
    if achievements == "remaining":
        titles = [t for t in titles if t.lower().replace(" ", "_") not in unlocked]
    actions = ",\n".join(f"{name}: {ACTION_DESCRIPTIONS[name]}" for name in ACTIONS)
    listing = "\n".join(f"{i}. {title}" for i, title in enumerate(titles, start=1))
    return _PROMPT.format(actions=actions, achievements=listing)
