"""Rule parsing and step dynamics of the BabaIsAI engine on small hand-built boards (docs/babaisai.md, "The game")."""

from __future__ import annotations

import pytest

from envs.babaisai.boards import parse_board
from envs.babaisai.errors import LevelError
from envs.babaisai.world import (
    BABA,
    BALL,
    DOOR,
    KEY,
    TEXT,
    WALL,
    WORDS,
    Rules,
    advance,
    parse_rules,
    reference_cell,
    you_cells,
)

LETTER = {BABA: "b", KEY: "k", BALL: "o", WALL: "w", DOOR: "d"}
"""Board-format letter of each object kind."""

UP, RIGHT, DOWN, LEFT = 1, 2, 3, 4


class Board:
    """A board plus its rules, stepped with the engine."""

    def __init__(self, text: str) -> None:
        self.cells, self.width = parse_board(text)
        self.rules: Rules = parse_rules(self.cells, self.width)

    def step(self, action: int) -> tuple[bool, bool]:
        self.cells, self.rules, won, lost = advance(self.cells, self.rules, action, self.width)
        return won, lost

    def at(self, x: int, y: int) -> list[str]:
        """Names in cell (x, y) of the inner board (border excluded), bottom first."""
        stack = self.cells[(y + 1) * self.width + x + 1]
        return [WORDS[c - TEXT].upper() if c >= TEXT else LETTER[c >> 3] for c in stack]

    def you(self) -> list[tuple[int, int]]:
        return [(i % self.width - 1, i // self.width - 1) for i in you_cells(self.cells, self.rules)]


def test_horizontal_and_vertical_rules_parse_in_row_major_order() -> None:
    board = Board(
        """
        KEY  .  BABA IS YOU
        IS   .  .    .  .
        WIN  .  .    .  b
        """
    )
    # The scan meets the vertical rule's `is` at (0,1) after the horizontal one at (3,0).
    assert board.rules.text == ("baba is you", "key is win")
    assert board.rules.you_noun == "baba"


def test_broken_lines_and_non_rules_give_nothing() -> None:
    board = Board(
        """
        BABA .  IS YOU
        YOU  IS WIN .
        IS   .  .   b
        """
    )
    assert board.rules.text == ()
    assert reference_cell(board.cells, board.rules) is None


def test_duplicate_rules_are_listed_twice() -> None:
    board = Board(
        """
        BABA IS YOU
        BABA IS YOU
        .    b  .
        """
    )
    assert board.rules.text == ("baba is you", "baba is you")


def test_text_blocks_are_pushed_never_entered_and_a_chain_against_the_border_stays() -> None:
    board = Board(
        """
        BABA IS  YOU .  .
        b    WIN .   .  .
        """
    )
    board.step(RIGHT)
    assert board.at(1, 1) == ["b"] and board.at(2, 1) == ["WIN"]
    board.step(RIGHT)
    board.step(RIGHT)
    assert board.at(3, 1) == ["b"] and board.at(4, 1) == ["WIN"]
    before = board.cells
    assert board.step(RIGHT) == (False, False)
    assert board.cells == before, "the chain baba -> WIN -> border does not move"


def test_longer_push_chain_against_the_border_does_not_move() -> None:
    board = Board(
        """
        BABA IS  YOU
        .    .   .
        b    KEY IS
        """
    )
    before = board.cells
    board.step(RIGHT)
    assert board.cells == before


def test_pushing_a_block_out_of_line_breaks_the_rule_at_once() -> None:
    text = """
        BABA IS YOU .
        .    .  .   .
        KEY  IS WIN .
        .    b  .   k
        """
    control = Board(text)
    assert "key is win" in control.rules.text
    assert control.step(RIGHT) == (False, False)
    assert control.step(RIGHT) == (True, False), "with the rule intact, stepping onto the key wins"

    board = Board(text)
    board.step(UP)  # pushes the `is` of "key is win" up, out of line
    assert board.rules.text == ("baba is you",)
    assert board.you() == [(1, 2)]
    for action in (DOWN, RIGHT):
        board.step(action)
    won, _ = board.step(RIGHT)
    assert not won and board.at(3, 3) == ["k", "b"], "the key is no longer WIN: baba just stands on it"


def test_win_test_uses_the_rules_from_before_the_step() -> None:
    board = Board(
        """
        .    KEY .   .  .
        b    IS  .   .  .
        .    WIN .   .  .
        BABA IS  YOU .  .
        .    .   b   k  .
        """
    )
    assert "key is win" in board.rules.text
    # The first baba pushes the vertical rule's `is` out of line; the second one steps onto the key in the same step.
    won, _ = board.step(RIGHT)
    assert won
    assert "key is win" not in board.rules.text


def test_wall_is_stop_blocks_and_breaking_it_lets_the_agent_through() -> None:
    board = Board(
        """
        BABA IS YOU  .
        .    .  .    .
        WALL IS STOP .
        .    b  w    .
        """
    )
    board.step(RIGHT)
    assert board.you() == [(1, 3)], "wall is stop blocks the move"
    board.step(UP)  # pushes the `is` of "wall is stop" up: the rule is gone after this step
    assert board.rules.text == ("baba is you",)
    board.step(DOWN)
    board.step(RIGHT)
    assert board.at(2, 3) == ["w", "b"], "the wall is now entered and baba stands on it"


def test_forming_x_is_win_then_stepping_onto_x_wins() -> None:
    board = Board(
        """
        BABA IS YOU .
        .    .  .   .
        .    IS WIN .
        KEY  .  .   .
        b    .  .   k
        """
    )
    assert board.rules.text == ("baba is you",)
    assert board.step(UP) == (False, False)  # pushes KEY up into line: "key is win"
    assert board.rules.text == ("baba is you", "key is win")
    for action in (RIGHT, DOWN, RIGHT):
        assert board.step(action) == (False, False)
    assert board.step(RIGHT) == (True, False)


def test_standing_on_an_object_that_becomes_win_does_not_win() -> None:
    board = Board(
        """
        BABA IS YOU  .
        WALL IS STOP .
        .    IS WIN  .
        KEY  .  .    w
        b    .  .    k+b
        """
    )
    # The left baba forms "key is win"; the right one is blocked by the wall and stays on the key.
    assert board.step(UP) == (False, False)
    assert "key is win" in board.rules.text and board.at(3, 4) == ["k", "b"]
    assert board.step(LEFT) == (False, False)
    assert board.step(RIGHT) == (True, False), "stepping back onto the key wins"


def test_stop_object_stops_a_chain() -> None:
    board = Board(
        """
        BABA IS  YOU  .   .
        WALL IS  STOP .   .
        b    KEY WIN  w   .
        """
    )
    before = board.cells
    board.step(RIGHT)
    assert board.cells == before
    board_open = Board(
        """
        BABA IS  YOU  .   .
        .    .   .    .   .
        b    KEY WIN  w   .
        """
    )
    board_open.step(RIGHT)  # without "wall is stop" the chain moves and WIN covers the wall
    assert board_open.at(3, 2) == ["w", "WIN"] and board_open.at(2, 2) == ["KEY"] and board_open.at(1, 2) == ["b"]


@pytest.mark.parametrize(
    ("rule", "row", "after"),
    [
        ("PUSH", "b    k  .    .", [[], ["b"], ["k"]]),  # the key ahead of the mover is pushed on
        ("PULL", "k    b  .    .", [[], ["k"], ["b"]]),  # the key behind the mover is dragged after it
    ],
    ids=["push-makes-objects-pushable", "pull-drags-the-object-behind-the-mover"],
)
def test_push_and_pull_properties_move_the_key_with_baba(rule: str, row: str, after: list[list[str]]) -> None:
    board = Board(
        f"""
        BABA IS YOU  .
        KEY  IS {rule} .
        {row}
        """
    )
    board.step(RIGHT)
    assert [board.at(x, 2) for x in range(3)] == after


def test_two_you_objects_move_together() -> None:
    board = Board(
        """
        BABA IS YOU .
        b    .  .   .
        .    .  .   .
        .    b  .   .
        .    .  .   .
        """
    )
    board.step(RIGHT)
    assert board.you() == [(1, 1), (2, 3)]
    board.step(DOWN)  # the first baba lands in a row the scan has not reached yet and must not move again
    assert board.you() == [(1, 2), (2, 4)]


def test_adjacent_you_objects_stack_and_the_covered_one_stays() -> None:
    board = Board(
        """
        BABA IS YOU .
        b    b  .   .
        """
    )
    board.step(RIGHT)  # the left baba steps onto the right one, which is then hidden and does not move
    assert board.at(0, 1) == [] and board.at(1, 1) == ["b", "b"]
    board.step(RIGHT)  # only the top baba moves on
    assert board.at(1, 1) == ["b"] and board.at(2, 1) == ["b"]


def test_only_the_last_movers_win_flag_counts() -> None:
    board = Board(
        """
        BABA IS YOU .
        KEY  IS WIN .
        b    k  .   .
        .    .  b   .
        """
    )
    won, _ = board.step(RIGHT)  # the first baba steps onto the key, the second one then overwrites the flag
    assert not won
    board2 = Board(
        """
        BABA IS YOU .
        KEY  IS WIN .
        .    .  b   .
        b    k  .   .
        """
    )
    won, _ = board2.step(RIGHT)  # here the later mover (lower row) steps onto the key
    assert won


def test_breaking_the_last_you_rule_leaves_nothing_you_and_freezes_the_board() -> None:
    board = Board(
        """
        .    b  .
        BABA IS YOU
        .    .  .
        """
    )
    assert board.you() == [(1, 0)]
    board.step(DOWN)  # pushes `is` down: "baba is you" is gone
    assert board.rules.text == ()
    assert board.you() == []
    assert reference_cell(board.cells, board.rules) is None
    before = board.cells
    board.step(LEFT)
    assert board.cells == before


def test_noun_is_noun_stacks_a_new_object_on_top_after_each_step() -> None:
    board = Board(
        """
        BABA IS YOU  .
        KEY  IS BALL .
        b    .  k    .
        """
    )
    assert board.rules.transforms == ((KEY, BALL),)
    assert "key is ball" not in board.rules.text, "transformations are not listed as active rules"
    assert board.at(2, 2) == ["k"], "nothing is transformed at reset"
    board.step(RIGHT)
    assert board.at(2, 2) == ["k", "o"], "a ball is put on top of the key; the key stays underneath"
    board.step(LEFT)
    assert board.at(2, 2) == ["k", "o"], "the top is now a ball, so nothing more is added"


def test_bad_board_text_names_the_token() -> None:
    with pytest.raises(LevelError, match="'Q'"):
        parse_board("b Q")


def test_a_blocked_mover_that_is_itself_win_wins() -> None:
    board = Board(
        """
        BABA IS YOU
        BABA IS WIN
        b    .  .
        """
    )
    assert board.step(RIGHT) == (False, False), "moving into an empty cell tests that cell, not the mover"
    assert board.step(DOWN) == (True, False), "blocked by the border: the mover itself is tested"


def test_lose_property() -> None:
    board = Board(
        """
        BABA IS YOU  .
        KEY  IS LOSE .
        b    k  .    .
        """
    )
    assert board.step(RIGHT) == (False, True)
