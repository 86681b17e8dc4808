"""The format penalty is ADDED to the env's reward in every env: an invalid answer's step reward is exactly the
reward of the default action minus the penalty, and a goal reached by the default action is still rewarded."""

from __future__ import annotations

import random

import faulty_envs
import pytest

import envs

PENALTY = 0.25


def _make(env_id: str, **kwargs):
    if env_id == "gym/frozen_lake":
        return faulty_envs.frozen_lake_text(default_action="right", **kwargs)
    return envs.make(env_id, **kwargs)


@pytest.mark.parametrize("env_id", ["babyai/goto", "babaisai/goto_win", "crafter/default", "gym/frozen_lake"])
def test_invalid_answer_reward_is_the_default_actions_reward_minus_the_penalty(env_id: str) -> None:
    env = _make(env_id, format_penalty=PENALTY, max_steps=30)
    twin = _make(env_id, max_steps=30)
    rng = random.Random(0)
    checked = 0
    for seed in range(3):
        env.reset(seed=seed)
        twin.reset(seed=seed)
        done = False
        while not done:
            invalid = rng.random() < 0.5
            answer = "no action here" if invalid else rng.choice(env.actions)
            twin.set_state(env.get_state())  # the same world, RNG included
            expected = twin.step(env.default_action if invalid else answer)
            _, reward, terminated, truncated, info = env.step(answer)
            assert info["action_valid"] is (not invalid)
            assert reward == pytest.approx(expected[1] - (PENALTY if invalid else 0.0))
            assert (terminated, truncated) == expected[2:4] and info.get("success") == expected[4].get("success")
            done = terminated or truncated
            checked += invalid
    assert checked >= 5


def test_a_goal_reached_by_the_default_action_is_rewarded_in_the_gym_adapter() -> None:
    env = _make("gym/frozen_lake", format_penalty=PENALTY)
    env.reset(seed=0)
    for action in ["right", "right", "down", "down", "down"]:
        env.step(action)
    _, reward, terminated, _, info = env.step("???")  # the default action "right" reaches the goal
    assert terminated and info["success"] is True and info["action_valid"] is False
    assert reward == pytest.approx(1.0 - PENALTY)
