"""Action parsing: BALROG's strict and naive modes exactly (docs/text-envs.md) and the lenient mode (table-driven)."""

from __future__ import annotations

import pytest

from envs.actions import (
    BABYAI_SYNONYMS,
    CRAFTER_SYNONYMS,
    extract,
    match_lenient,
    normalize,
    parse_action,
)
from envs.babyai.describe import ACTIONS as BABYAI
from envs.crafter.describe import ACTIONS as CRAFTER

# (completion, expected action or None) for BALROG's CoT parsing (strict), BabyAI actions
STRICT_BABYAI = [
    ("turn left", "turn left"),
    ("I think... ACTION: go forward", "go forward"),
    ("**ACTION:** turn left", "turn left"),  # asterisks are filtered out
    ("ACTION: go forward.", "go forward"),  # the period is filtered out
    ('ACTION: "pick up"', "pick up"),
    ("ACTION: turn left\nACTION: toggle", "toggle"),  # the last marker wins
    ("ACTION:\n  drop  \n", "drop"),
    ("Action: go forward", None),  # marker is case-sensitive: the whole text is used
    ("ACTION: Go forward", None),  # match is case-sensitive
    ("ACTION: go_forward", None),  # the underscore is removed: "goforward"
    ("ACTION: pick_up", None),
    ("ACTION: turn left (to face the key)", None),
    ("ACTION: go forward then turn left", None),
    ("", None),
    ("ACTION:", None),
    ("ACTION: go  forward", None),  # inner whitespace is kept
]

STRICT_CRAFTER = [
    ("... ACTION: Move North.", "Move North"),
    ("ACTION: Move North", "Move North"),
    ("ACTION: move north", None),
    ("Action: Do", None),  # no "ACTION:": the whole text, invalid
    ("ACTION: Place Table!", "Place Table"),
    ("ACTION: Make Wood Pickaxe", "Make Wood Pickaxe"),
]

# BALROG's naive agent
NAIVE_BABYAI = [
    ("turn left", "turn left"),
    ('"go forward"', "go forward"),
    ("Turn left.", None),  # "Turn left": case-sensitive
    ("1. go forward", None),  # " go forward": leading space is kept
    ("go forward\n", None),  # nothing is stripped
    ("ACTION: go forward", None),
]

LENIENT_BABYAI = [
    ("go forward", "go forward"),
    ("Go Forward.", "go forward"),
    ("THINK: the key is ahead.\nACTION: go forward", "go forward"),
    ("Action: turn left", "turn left"),
    ("action: Turn_Left", "turn left"),
    ("**Action:** `pick up`", "pick up"),
    ("**Action**: toggle!", "toggle"),
    ("ACTION: 'drop'", "drop"),
    ("ACTION: <turn right>", "turn right"),
    (
        "ACTION: go forward\nbecause the wall is far",
        "go forward",
    ),  # only the first line counts
    ("ACTION:\n\n  turn left  ", "turn left"),  # the first non-empty line
    ("action: turn left ... final ACTION: toggle", "toggle"),  # last marker
    ("ACTION: drop\nThe transaction: done", "drop"),  # "transaction:" is not a marker
    ("ACTION: pickup", "pick up"),  # Verlog synonyms
    ("ACTION: turnleft", "turn left"),
    ("ACTION: goforward.", "go forward"),
    (
        "ACTION: turn right (to face the ball)",
        "turn right",
    ),  # parenthesised span dropped
    ("ACTION: go   forward", "go forward"),
    ("ACTION: move forward", None),
    ("ACTION: go forward and turn left", None),
    ("I will turn left", None),
    ("", None),
    ("ACTION:", None),
]

LENIENT_CRAFTER = [
    ("ACTION: move north", "Move North"),
    ("ACTION: MOVE_WEST.", "Move West"),
    ("ACTION: Do (chop the tree)", "Do"),
    ("ACTION: Chop Tree", "Do"),
    ("ACTION: collect wood", "Do"),
    ("ACTION: Drink from water", "Do"),
    ("ACTION: Move North 2 Steps", "Move North"),
    ("ACTION: move east 1 step", "Move East"),
    ("ACTION: Make Crafting Table", "Place Table"),
    ("ACTION: make furnace", "Place Furnace"),
    ("ACTION: Move North-West", None),  # diagonal moves are invalid (no random choice)
    ("ACTION: Move Northwest", None),
    ("ACTION: make_wood_pickaxe", "Make Wood Pickaxe"),
    ("ACTION: noop", "Noop"),
    ("ACTION: Fly", None),
]


@pytest.mark.parametrize(("text", "expected"), STRICT_BABYAI)
def test_strict_babyai(text: str, expected: str | None) -> None:
    assert parse_action(text, BABYAI, mode="strict") == expected


@pytest.mark.parametrize(("text", "expected"), STRICT_CRAFTER)
def test_strict_crafter(text: str, expected: str | None) -> None:
    assert parse_action(text, CRAFTER, mode="strict") == expected


@pytest.mark.parametrize(("text", "expected"), NAIVE_BABYAI)
def test_naive_babyai(text: str, expected: str | None) -> None:
    assert parse_action(text, BABYAI, mode="naive") == expected


@pytest.mark.parametrize(("text", "expected"), LENIENT_BABYAI)
def test_lenient_babyai(text: str, expected: str | None) -> None:
    assert parse_action(text, BABYAI, mode="lenient", synonyms=BABYAI_SYNONYMS) == expected


@pytest.mark.parametrize(("text", "expected"), LENIENT_CRAFTER)
def test_lenient_crafter(text: str, expected: str | None) -> None:
    assert parse_action(text, CRAFTER, mode="lenient", synonyms=CRAFTER_SYNONYMS) == expected


def test_strict_ignores_synonyms() -> None:
    assert parse_action("ACTION: pickup", BABYAI, mode="strict", synonyms=BABYAI_SYNONYMS) is None


def test_lenient_without_synonyms_rejects_them() -> None:
    assert parse_action("ACTION: pickup", BABYAI, mode="lenient") is None


def test_synonym_to_an_action_the_env_lacks_is_invalid() -> None:
    assert match_lenient("chop tree", ["Noop"], CRAFTER_SYNONYMS) is None


@pytest.mark.parametrize(
    ("text", "mode", "expected"),
    [
        ("Think. ACTION: Move North.", "strict", "Move North"),
        ("Think. Action: Do", "strict", "Think Action: Do"),
        ("1. Move North", "naive", " Move North"),
        ("**Action:** `Move North`.\nmore", "lenient", "Move North"),
    ],
)
def test_extract_gives_the_recorded_output(text: str, mode: str, expected: str) -> None:
    assert extract(text, mode) == expected  # type: ignore[arg-type]


def test_unknown_mode_is_an_error() -> None:
    with pytest.raises(ValueError, match="parse mode"):
        parse_action("turn left", BABYAI, mode="fuzzy")  # type: ignore[arg-type]


def test_normalize() -> None:
    assert normalize("  Make_Wood  Pickaxe ") == "make wood pickaxe"


def test_synonym_tables_point_at_real_actions() -> None:
    assert set(BABYAI_SYNONYMS.values()) <= set(BABYAI)
    assert set(CRAFTER_SYNONYMS.values()) <= set(CRAFTER)
    assert not any("north west" in normalize(k) or "northwest" in normalize(k) for k in CRAFTER_SYNONYMS)
