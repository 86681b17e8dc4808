"""Turning the model's text into one of an env's action strings.

Three modes, chosen per env config (``parse_mode``):

- ``strict`` (default): BALROG's chain-of-thought parsing (docs/text-envs.md, "Answers"). Drop every character
  that is not an ASCII letter, whitespace or ``:``; take what follows the last case-sensitive ``ACTION:`` (the whole
  filtered text when there is none); strip it; accept it only if it is exactly one of the actions.
- ``naive``: BALROG's agent without reasoning: the same character filter and nothing else, then exact membership.
- ``lenient``: forgiving of formatting, not of content:

  1. the text after the **last** ``action:`` marker in any case (``ACTION:``, ``Action:``, ``**Action**:``), or the
     whole text when there is no marker;
  2. only the first non-empty line of it;
  3. surrounding whitespace, markdown (``*``, ``_`` runs, backticks), quotes, angle/square brackets and trailing
     punctuation (``.,;:!?``) stripped;
  4. matched against the actions ignoring case, with ``_`` read as a space and runs of spaces collapsed;
  5. failing that, looked up in the env's synonym map (keys compared the same way), then retried once with every
     parenthesised span removed (``Do (chop the tree)`` -> ``Do``).

  The synonym maps of BabyAI and Crafter are :data:`BABYAI_SYNONYMS` and :data:`CRAFTER_SYNONYMS` (Verlog's;
  docs/text-envs.md). Verlog maps a diagonal move such as ``Move North-West`` to a *random* one of its two
  components; we do not (a parser should be a pure function): diagonal moves are invalid and execute the default
  action.

All functions here are pure. :func:`extract` gives the string a mode reads out of the text (BALROG stores it in the
history even when it is not a valid action); :func:`parse_action` gives the matched action or None.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Literal

ParseMode = Literal["strict", "lenient", "naive"]
PARSE_MODES: tuple[str, ...] = ("strict", "lenient", "naive")

_NOT_LETTER_SPACE_COLON = re.compile(r"[^A-Za-z\s:]")
# "action" then optional markdown emphasis / spaces, then ":" (e.g. "ACTION:", "**Action:**", "**action**:").
_LENIENT_MARKER = re.compile(r"(?<![a-z])action[\s*_`]*:", re.IGNORECASE)
_EDGE_JUNK = " \t\r\n*_`'\"<>[]{}.,;:!?\u201c\u201d\u2018\u2019"
_PARENTHESISED = re.compile(r"\([^()]*\)")
_SPACES = re.compile(r"\s+")

BABYAI_SYNONYMS: dict[str, str] = {
    "turnleft": "turn left",
    "turnright": "turn right",
    "goforward": "go forward",
    "pickup": "pick up",
}
"""Verlog's exact BabyAI rewrites, for the lenient parser."""


def _crafter_synonyms() -> dict[str, str]:
    table: dict[str, str] = {}
    for direction in ("North", "South", "East", "West"):
        for amount in ("1 Step", "2 Steps", "3 Steps"):
            table[f"Move {direction} {amount}"] = f"Move {direction}"
    for phrase in (
        "Collect Stone", "Mine Stone", "Chop Tree", "Chop", "Chop Trees", "Cut Tree", "Chop_Tree", "Cut",
        "Collect Wood", "Drink", "Drink From Water", "Drink From Lakes", "Mine", "Collect Coal", "Collect Iron",
        "Mine Coal", "Defeat Zombie", "Defeat Skeleton", "Eat Cow", "Attack", "Collect Sapling",
    ):  # fmt: skip
        table[phrase] = "Do"
    table["Make Table"] = "Place Table"
    table["Make Crafting Table"] = "Place Table"
    table["Make Furnace"] = "Place Furnace"
    return table


CRAFTER_SYNONYMS: dict[str, str] = _crafter_synonyms()
"""Verlog's exact Crafter rewrites without the random diagonal moves, for the lenient parser."""


def normalize(text: str) -> str:
    """The comparison key of the lenient parser: lower case, ``_`` as a space, whitespace runs as one space."""
    return _SPACES.sub(" ", text.replace("_", " ")).strip().lower()


def extract(text: str, mode: ParseMode = "strict") -> str:
    """The answer string that ``mode`` reads out of the model's ``text`` (before matching it to an action).

    In ``strict`` and ``naive`` mode this is what BALROG records as the agent's output (and puts in the history),
    valid or not. In ``lenient`` mode it is the cleaned first line after the last marker.
    """
    if mode == "strict":
        return _NOT_LETTER_SPACE_COLON.sub("", text).split("ACTION:")[-1].strip()
    if mode == "naive":
        return _NOT_LETTER_SPACE_COLON.sub("", text)
    if mode == "lenient":
        markers = list(_LENIENT_MARKER.finditer(text))
        tail = text[markers[-1].end() :] if markers else text
        line = next((ln for ln in tail.splitlines() if ln.strip(_EDGE_JUNK)), "")
        return line.strip(_EDGE_JUNK)
    raise ValueError(f"parse mode must be one of {PARSE_MODES}, got {mode!r}")


def parse_action(
    text: str,
    actions: Sequence[str],
    *,
    mode: ParseMode = "strict",
    synonyms: Mapping[str, str] | None = None,
) -> str | None:
    """The action string (an element of ``actions``) that ``text`` names, or None when it names none.

    Args:
        text: the model's whole completion.
        actions: the env's valid action strings.
        mode: ``"strict"``, ``"naive"`` or ``"lenient"`` (see the module docstring).
        synonyms: extra rewrites for lenient mode, phrase -> action string (keys compared after :func:`normalize`).
            Ignored by the other modes.
    """
    candidate = extract(text, mode)
    if mode != "lenient":
        return candidate if candidate in actions else None
    return match_lenient(candidate, actions, synonyms)


def match_lenient(candidate: str, actions: Sequence[str], synonyms: Mapping[str, str] | None = None) -> str | None:
    """Match an extracted answer to ``actions`` ignoring case/underscores, then through ``synonyms``."""
    by_key = {normalize(action): action for action in actions}
    synonym_keys = {normalize(key): value for key, value in (synonyms or {}).items()}
    for attempt in (candidate, _PARENTHESISED.sub(" ", candidate)):
        key = normalize(attempt.strip(_EDGE_JUNK))
        if key in by_key:
            return by_key[key]
        target = synonym_keys.get(key)
        if target is not None and target in actions:
            return target
    return None
