"""The planner solves every BALROG BabaIsAI task for seeds 0-19, and its plans replay through the text interface."""

from __future__ import annotations

import pytest

import envs
from envs.babaisai import TASKS, solve, solve_board
from envs.babaisai.boards import parse_board

SEEDS = range(20)

KNOWN_UNSOLVABLE: dict[tuple[str, int], str] = {}
"""(task, seed) levels that cannot be won as generated, with the reason. None among tasks x seeds 0-19: every level
of the 40 tasks is solvable from its start (breaking rules by mistake is what makes levels unsolvable)."""


@pytest.mark.parametrize("task", TASKS)
def test_solver_wins_every_seed_and_the_plan_replays_through_text(task: str) -> None:
    for seed in SEEDS:
        env = envs.make(f"babaisai/{task}")
        first, _ = env.reset(seed=seed)
        plan = solve(env)
        if (task, seed) in KNOWN_UNSOLVABLE:
            assert plan is None, f"{task} seed {seed} was listed as unsolvable but has a plan"
            continue
        assert plan is not None, f"no plan for {task} seed {seed}"
        assert len(plan) <= env.max_steps
        assert env.last_observation == first and env.episode_step == 0, "solve() must not touch the env"
        for i, action in enumerate(plan, start=1):
            _, reward, terminated, truncated, info = env.step(action)
            assert info["action_valid"] and not info["level_reset"]
            assert terminated == (i == len(plan)), f"{task} seed {seed}: episode ended early at step {i}"
        assert reward == pytest.approx(1 - 0.9 * len(plan) / 100)
        assert info["success"] and not truncated


def test_unwinnable_board_gives_none() -> None:
    cells, width = parse_board(
        """
        BABA IS YOU .
        .    b  .   k
        """
    )
    assert solve_board(cells, width, 50) is None


def test_plan_longer_than_the_limit_is_refused() -> None:
    env = envs.make("babaisai/goto_win")
    env.reset(seed=1)  # shortest plan: 9 steps
    assert solve(env, max_steps=5) is None
    plan = solve(env, max_steps=9)
    assert plan is not None and len(plan) == 9
