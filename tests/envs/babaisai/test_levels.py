"""Level generation of the 40 BALROG BabaIsAI tasks, checked against the original package (docs/babaisai.md)."""

from __future__ import annotations

import numpy as np
import pytest

from envs.babaisai import TASKS, generate
from envs.babaisai.errors import UnknownTaskError
from envs.babaisai.solver import shortest_plan
from envs.babaisai.world import COLOURS, KINDS, TEXT, WORDS


def tops(task: str, seed: int) -> dict[tuple[int, int], str]:
    """Top of every non-empty cell except the border and the divider walls: 'IS' for text, 'blue door' for objects."""
    level = generate(task, np.random.RandomState(seed))
    out = {}
    for i, stack in enumerate(level.cells):
        if not stack:
            continue
        top = stack[-1]
        name = WORDS[top - TEXT].upper() if top >= TEXT else f"{COLOURS[top & 7]} {KINDS[top >> 3]}"
        if name.endswith(("border", "grey wall")):
            continue
        out[(i % level.width, i // level.width)] = name
    return out


def test_all_40_balrog_tasks_are_listed_once() -> None:
    assert len(TASKS) == 40 and len(set(TASKS)) == 40
    assert TASKS[0] == "make_win-distr_obj_rule" and TASKS[-1] == "two_room-make_wall_win"


# Layouts the original package generates after np.random.seed(0).
SPEC_LAYOUTS = {
    "goto_win": {
        (1, 1): "DOOR", (2, 1): "IS", (3, 1): "WIN", (1, 3): "blue door", (3, 3): "white baba",
        (1, 6): "BABA", (2, 6): "IS", (3, 6): "YOU",
    },
    "make_win-distr_obj_rule": {
        (2, 1): "IS", (3, 1): "WIN", (5, 2): "white baba", (1, 3): "red key", (3, 3): "blue door", (5, 3): "DOOR",
        (1, 6): "BABA", (2, 6): "IS", (3, 6): "YOU", (6, 6): "KEY",
    },
    "two_room-make_you": {
        (1, 1): "WALL", (2, 1): "IS", (3, 1): "STOP", (9, 1): "DOOR", (10, 1): "IS", (11, 1): "WIN",
        (7, 2): "blue door", (7, 4): "red key", (2, 5): "white baba", (3, 5): "KEY",
        (1, 6): "BABA", (2, 6): "IS", (3, 6): "YOU",
    },
    "two_room-make_wall_win": {
        (10, 1): "IS", (11, 1): "WIN", (2, 2): "WALL", (3, 2): "IS", (4, 2): "STOP", (4, 3): "white baba",
        (9, 3): "red key", (9, 5): "BALL", (7, 6): "blue door", (11, 6): "DOOR",
        (1, 7): "BABA", (2, 7): "IS", (3, 7): "YOU",
    },
    "two_room-maybe_break_stop-goto_win-distr_obj_rule": {
        (9, 1): "DOOR", (10, 1): "IS", (11, 1): "WIN", (1, 2): "WALL", (2, 2): "IS", (3, 2): "STOP",
        (9, 2): "blue door", (11, 3): "red key", (3, 5): "white baba", (11, 5): "KEY",
        (1, 7): "BABA", (2, 7): "IS", (3, 7): "YOU",
    },
}  # fmt: skip


@pytest.mark.parametrize("task", sorted(SPEC_LAYOUTS))
def test_seed_0_layouts_match_the_spec_examples(task: str) -> None:
    assert tops(task, 0) == SPEC_LAYOUTS[task]


def test_two_room_levels_have_the_divider_and_sizes() -> None:
    single = generate("goto_win", np.random.RandomState(1))
    two = generate("two_room-goto_win", np.random.RandomState(1))
    assert (single.width, single.height) == (8, 8) and (two.width, two.height) == (13, 9)
    divider = [two.cells[y * 13 + 6] for y in range(1, 8)]
    assert all(stack and KINDS[stack[0] >> 3] == "wall" for stack in divider)


@pytest.mark.parametrize("task", TASKS)
def test_same_seed_same_level_and_seeds_differ(task: str) -> None:
    levels = [generate(task, np.random.RandomState(seed)) for seed in range(8)]
    again = [generate(task, np.random.RandomState(seed)) for seed in range(8)]
    assert levels == again
    assert len({level.cells for level in levels}) > 1


def test_generation_draws_only_from_the_given_rng() -> None:
    np.random.seed(123)
    before = np.random.get_state()[1].copy()
    generate("two_room-make_win-distr_win_rule", np.random.RandomState(5))
    assert (np.random.get_state()[1] == before).all()


def test_target_plans() -> None:
    assert generate("goto_win", np.random.RandomState(0)).target_plan == "goto[door]"
    assert generate("make_win", np.random.RandomState(0)).target_plan.startswith("make[")
    assert generate("two_room-make_you", np.random.RandomState(0)).target_plan == "make[key is you], goto[door]"
    plan = generate("two_room-maybe_break_stop-goto_win-distr_obj_rule", np.random.RandomState(0)).target_plan
    assert plan == "break[wall is stop], goto[door]", "the door is in the right room and stop is intact"
    assert generate("two_room-make_wall_win", np.random.RandomState(0)).target_plan == (
        "break[wall is stop], make[wall is win], goto[wall]"
    )


# Optimal (breadth-first) solution lengths for seeds 0-4 (docs/babaisai.md, "Validation").
SPEC_OPTIMAL = {
    "goto_win": [2, 9, 2, 3, 1],
    "make_win": [14, 19, 16, 15, 17],
    "two_room-goto_win": [5, 2, 1, 4, 3],
    "two_room-break_stop-goto_win": [14, 11, 12, 11, 10],
    "two_room-maybe_break_stop-goto_win": [4, 5, 13, 2, 2],
}


@pytest.mark.parametrize("task", sorted(SPEC_OPTIMAL))
def test_shortest_solutions_match_the_spec_table(task: str) -> None:
    lengths = []
    for seed in range(5):
        level = generate(task, np.random.RandomState(seed))
        plan = shortest_plan(level.cells, level.width, 100)
        lengths.append(None if plan is None else len(plan))
    assert lengths == SPEC_OPTIMAL[task]


def test_unknown_task_names_the_choices() -> None:
    with pytest.raises(UnknownTaskError, match="two_room-goto_win"):
        generate("two_room-goto-win", np.random.RandomState(0))
