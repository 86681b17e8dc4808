"""BALROG's text view of a BabaIsAI board (docs/babaisai.md, "Text") and the instruction prompt."""

from __future__ import annotations

from envs.babaisai.world import BALL, DOOR, KEY, TEXT, WALL, WORDS, Cells, Rules, reference_cell

ACTION_DESCRIPTIONS = {
    "idle": "wait for one step",
    "up": "take one step up",
    "right": "take one step to the right",
    "down": "take one step down",
    "left": "take one step to the left",
}
"""BALROG's one-line description of each action, in action-index order."""

YOU_MISSING_PREFIX = "[...] IS YOU rule was broken, environment reset"
"""BALROG's literal prefix when the level is reset because nothing is YOU (no newline after it)."""

_KIND_NAMES = {WALL: "wall", BALL: "ball", KEY: "key", DOOR: "door"}
"""Listed object kinds: baba objects and the border are never listed."""

_INTRO = (
    "You are playing a puzzle game in the style of Baba Is You. The rules of each level are written on text blocks "
    "that lie on the grid, and every rule reads `<noun> is <property>`: the object named by an `is you` rule is the "
    "one you control, and you win by moving it onto an object named by an `is win` rule. You can push text blocks "
    "to break rules or to form new ones. These are the actions you can take, each with a short description:"
)
_TIPS = (
    "Tips:\n"
    "- A rule only holds while its three blocks stand in one line, read left to right or top to bottom.\n"
    "- Pushing one block of a rule out of line breaks the rule at once; pushing a noun into line makes a new rule.\n"
    "- Text blocks can always be pushed, but you cannot walk over them.\n"
    "- An object that is STOP blocks you; break its rule to walk through it.\n"
    "- If no rule makes something YOU, the level starts over.\n"
    "- Pushing a block against the edge of the map, or against something that is STOP, does not move it.\n"
    "- Positions in the observation are counted from the object you control.\n"
    "- An action that leaves the observation unchanged is not worth repeating."
)


def instruction_prompt() -> str:
    """The task prompt: an introduction, the five actions with descriptions, tips, then ``PLAY!``."""
    actions = ",\n".join(f"{name}: {text}" for name, text in ACTION_DESCRIPTIONS.items()) + "."
    return f"{_INTRO}\n\n{actions}\n\n{_TIPS}\n\nPLAY!"


def rules_text(rules: Rules) -> str:
    """The ``Active rules:`` block: property rules in parse order, one per line (transformations left out)."""
    return "Active rules:\n" + "\n".join(rules.text)


def _offset(dx: int, dy: int) -> str:
    # BALROG writes "2 step to the left" / "2 step up": the plural is only used for right and down.
    parts = []
    if dx > 0:
        parts.append("1 step to the right" if dx == 1 else f"{dx} steps to the right")
    elif dx < 0:
        parts.append(f"{-dx} step to the left")
    if dy > 0:
        parts.append("1 step down" if dy == 1 else f"{dy} steps down")
    elif dy < 0:
        parts.append(f"{-dy} step up")
    return " and ".join(parts)


def object_lines(cells: Cells, rules: Rules, width: int) -> list[str] | None:
    """One line per listed cell (row-major) relative to the YOU reference cell; None when nothing is YOU."""
    ref = reference_cell(cells, rules)
    if ref is None:
        return None
    rx, ry = ref % width, ref // width
    lines = []
    for i, stack in enumerate(cells):
        if not stack:
            continue
        top = stack[-1]
        if top >= TEXT:
            name = f"rule `{WORDS[top - TEXT]}`"
        elif (top >> 3) in _KIND_NAMES:
            name = _KIND_NAMES[top >> 3]
        else:
            continue
        offset = _offset(i % width - rx, i // width - ry)
        lines.append(f"{name} {offset}" if offset else "")  # the YOU object's own cell gives an empty line
    return lines


def observation_text(cells: Cells, rules: Rules, width: int) -> str | None:
    """BALROG's observation string, or None when nothing is YOU (the caller resets the level)."""
    lines = object_lines(cells, rules, width)
    if lines is None:
        return None
    return rules_text(rules) + "\n\nObjects on the map:\n" + "\n".join(lines)
