"""toy/delayed: the reward for the episode's choices arrives only at its last turn."""

from __future__ import annotations

import pytest

import envs
from envs.toy import REWARDED_ACTION, DelayedRewardEnv


@pytest.mark.parametrize(
    "answers,expected",
    [
        (["go forward"] * 4, 1.0),
        (["turn left", "ACTION: go forward", "turn right", "go forward"], 0.5),
        (["no idea"] * 4, 0.0),  # invalid answers run "turn left", which is not rewarded
    ],
)
def test_reward_only_at_the_last_turn_is_the_share_of_rewarded_choices(answers, expected) -> None:
    env = envs.make("toy/delayed")
    env.reset(seed=3)
    for i, answer in enumerate(answers):
        _, reward, terminated, truncated, info = env.step(answer)
        if i < 3:
            assert (reward, terminated, truncated) == (0.0, False, False)
    assert (reward, terminated, truncated) == (expected, True, False)
    assert info["success"] is (expected == 1.0) and info["progression"] == expected


def test_length_state_round_trip_and_bad_settings() -> None:
    env = DelayedRewardEnv(length=2)
    obs, _ = env.reset(seed=0)
    assert "lasts 2 steps" in env.instruction and REWARDED_ACTION in env.instruction and obs.text
    env.step("go forward")
    twin = DelayedRewardEnv(length=2)
    twin.reset(seed=5)
    twin.set_state(env.get_state())
    assert twin.step("turn left")[1:3] == env.step("turn left")[1:3] == (0.5, True)
    with pytest.raises(ValueError, match="length must be"):
        DelayedRewardEnv(length=0)
    with pytest.raises(ValueError, match="max_steps"):
        DelayedRewardEnv(length=4, max_steps=3)


def test_observations_are_seeded() -> None:
    a, b = envs.make("toy/delayed"), envs.make("toy/delayed")
    assert a.reset(seed=11)[0].text == b.reset(seed=11)[0].text
    assert [a.step("go forward")[0].text for _ in range(3)] == [b.step("turn left")[0].text for _ in range(3)]
