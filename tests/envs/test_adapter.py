"""GymTextAdapter on real gymnasium envs: action mapping, info keys, limits, callbacks, state round trips."""

from __future__ import annotations

import pickle
import threading
import warnings

import faulty_envs
import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

from envs.adapter import ACTIONS_HEADER, EpisodeView, GymTextAdapter
from envs.core import INFO_KEYS, TextObservation
from envs.errors import EnvStateError

# FrozenLake 4x4: S F F F / F H F H / F F F H / H F F G. This path avoids the holes.
SAFE_PATH = ["right", "right", "down", "down", "down", "right"]


def _lake(**kwargs) -> GymTextAdapter:
    return faulty_envs.frozen_lake_text(**kwargs)


def _lake_with_own_limit(**kwargs) -> GymTextAdapter:
    """FrozenLake whose own TimeLimit (2 steps) comes before the adapter's ``max_steps`` (10)."""
    return GymTextAdapter(
        gym.make("FrozenLake-v1", is_slippery=False, max_episode_steps=2),
        describe=lambda obs, info: f"cell {obs}",
        action_names=["left", "down", "right", "up"],
        instruction="Reach the goal.",
        max_steps=10,
        **kwargs,
    )


def test_reaching_the_goal_terminates_with_success_and_progression() -> None:
    env = _lake()
    obs, info = env.reset(seed=0)
    assert obs.text == "You stand on row 0, column 0 of the frozen lake."
    assert set(INFO_KEYS) <= set(info) and info["progression"] == 0.0
    for i, action in enumerate(SAFE_PATH):
        obs, reward, terminated, truncated, info = env.step(action)
        assert set(INFO_KEYS) <= set(info) and info["action"] == action and info["action_valid"] is True
        assert info["episode_step"] == i + 1
        if i < len(SAFE_PATH) - 1:
            assert (reward, terminated, truncated) == (0.0, False, False) and "success" not in info
    assert obs.text == "You stand on row 3, column 3 of the frozen lake."
    assert (reward, terminated, truncated) == (1.0, True, False)
    assert info["success"] is True and info["progression"] == 1.0


def test_falling_in_a_hole_is_terminated_without_success() -> None:
    env = _lake()
    env.reset(seed=0)
    env.step("right")
    _, reward, terminated, _, info = env.step("down")  # row 1, column 1 is a hole
    assert terminated and reward == 0.0 and info["success"] is False and info["progression"] == 0.0


def test_instruction_lists_actions_with_descriptions() -> None:
    env = _lake()
    env.reset(seed=0)
    assert env.instruction.startswith("Cross the frozen lake")
    assert f"{ACTIONS_HEADER}, followed by a short description of each action:" in env.instruction
    assert env.instruction.endswith("left: move west,\ndown: move south,\nright: move east,\nup: move north.")
    assert env.actions == ["left", "down", "right", "up"] and env.default_action == "left"


def test_invalid_answer_runs_default_action_with_penalty_and_feedback() -> None:
    env = _lake(format_penalty=0.5, invalid_action_feedback=True, default_action="down")
    env.reset(seed=0)
    obs, reward, _, _, info = env.step("jump over the lake")
    assert info["action"] == "down" and info["action_valid"] is False and info["raw_action"] == "jump over the lake"
    assert reward == -0.5
    assert "did not contain a valid action. Defaulted to action: down" in obs.text
    assert obs.text.endswith("row 1, column 0 of the frozen lake.")
    _, _, _, _, info = env.step("I think... ACTION: right")
    assert info["action"] == "right" and info["action_valid"] is True


def test_max_steps_truncates_and_inner_time_limit_is_kept() -> None:
    env = _lake(max_steps=3)
    env.reset(seed=0)
    results = [env.step("left") for _ in range(3)]
    assert [r[3] for r in results] == [False, False, True] and not any(r[2] for r in results)
    assert results[-1][4]["success"] is False
    inner = _lake_with_own_limit()
    assert inner.max_steps == 10
    inner.reset(seed=0)
    assert inner.step("left")[3] is False
    _, _, terminated, truncated, info = inner.step("left")
    assert truncated and not terminated and "success" in info
    with pytest.raises(EnvStateError, match="after the episode ended"):
        inner.step("left")
    assert GymTextAdapter(gym.make("FrozenLake-v1"), lambda o, i: "", ["a", "b", "c", "d"], "x").max_steps == 100


def test_callbacks_instruction_template_and_text_observation() -> None:
    seen: list[EpisodeView] = []

    def progression(view: EpisodeView) -> float:
        seen.append(view)
        return view.steps / 4

    env = GymTextAdapter(
        gym.make("CliffWalking-v1"),
        describe=lambda obs, info: TextObservation.build(f"cell {obs}", short_term=f"info keys {sorted(info)}"),
        action_names=["up", "right", "down", "left"],
        instruction=lambda obs, info: f"Start at cell {obs}. {{actions}} Avoid the cliff.",
        progression=progression,
        success=lambda view: view.total_reward > -3,
    )
    obs, _ = env.reset(seed=1)
    assert obs.long_term == "cell 36" and obs.short_term.startswith("info keys") and obs.text.endswith("cell 36")
    assert env.instruction.startswith("Start at cell 36. " + ACTIONS_HEADER + ":\n\nup,\nright,\ndown,\nleft.")
    assert env.instruction.endswith(" Avoid the cliff.")
    env.step("up")
    _, reward, _, _, info = env.step("right")
    assert reward == -1.0 and info["progression"] == 0.5 and seen[-1].total_reward == -2.0
    env.step("right")
    env.step("right")
    assert env.step("right")[4]["progression"] == 1.0  # clipped to [0, 1]


def test_state_round_trip_restores_rng_of_a_slippery_lake() -> None:
    def slippery() -> GymTextAdapter:
        return GymTextAdapter(
            gym.make("FrozenLake-v1", is_slippery=True, map_name="8x8"),
            describe=lambda obs, info: f"cell {obs}",
            action_names=["left", "down", "right", "up"],
            instruction="Reach the goal.",
            max_steps=200,
        )

    env = slippery()
    env.reset(seed=3)
    for _ in range(3):
        env.step("right")
    state = env.get_state()
    actions = ["down", "right", "right", "down", "right", "down"] * 4
    expected = [_step_tuple(env.step(a)) for a in actions if not env._episode_over]
    restored = slippery()  # a different object, as in a new process; the bytes go through pickle
    restored.set_state(pickle.loads(pickle.dumps(state)))
    got = [_step_tuple(restored.step(a)) for a in actions[: len(expected)]]
    assert got == expected and len(expected) >= 5
    assert len({text for text, *_ in expected}) > 2  # the slippery moves really used the RNG


def _step_tuple(result: tuple) -> tuple:
    obs, reward, terminated, truncated, info = result
    return obs.text, reward, terminated, truncated, info["raw_info"].get("prob")


class _Unpicklable(gym.Env):
    observation_space = gym.spaces.Discrete(2)
    action_space = gym.spaces.Discrete(2)

    def __init__(self) -> None:
        self.lock = threading.Lock()

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return 0, {}

    def step(self, action):
        return 1, 0.0, False, False, {}


def test_unpicklable_env_state_error_names_the_env_and_the_fix() -> None:
    env = GymTextAdapter(_Unpicklable(), lambda o, i: "x", ["a", "b"], "Do it.")
    env.reset(seed=0)
    with pytest.raises(EnvStateError, match=r"_Unpicklable cannot be pickled .*_game_get_state"):
        env.get_state()


def test_constructor_rejects_bad_arguments() -> None:
    box = gym.make("Pendulum-v1")
    with pytest.raises(TypeError, match="needs a Discrete action space"):
        GymTextAdapter(box, lambda o, i: "", ["a"], "x")
    lake = gym.make("FrozenLake-v1")
    with pytest.raises(ValueError, match="3 names but the env's action space has 4 actions"):
        GymTextAdapter(lake, lambda o, i: "", ["a", "b", "c"], "x")
    with pytest.raises(ValueError, match="distinct"):
        GymTextAdapter(lake, lambda o, i: "", ["a", "a", "c", "d"], "x")
    with pytest.raises(ValueError, match="default_action 'jump' is not one of"):
        GymTextAdapter(lake, lambda o, i: "", ["a", "b", "c", "d"], "x", default_action="jump")
    bad = GymTextAdapter(lake, lambda o, i: 42, ["a", "b", "c", "d"], "x")
    with pytest.raises(TypeError, match="describe\\(\\) must return a str or a TextObservation, got int"):
        bad.reset(seed=0)


def test_gymnasium_env_checker_accepts_the_adapter() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_env(_lake(), skip_render_check=True)


def test_time_limit_terminate_applies_to_the_wrapped_envs_own_limit_too() -> None:
    inner = _lake_with_own_limit(time_limit="terminate")
    inner.reset(seed=0)
    inner.step("left")
    _, _, terminated, truncated, info = inner.step("left")
    assert terminated and not truncated and info["time_limit_reached"] is True and info["success"] is False
    own = _lake(max_steps=3, time_limit="terminate")
    own.reset(seed=0)
    assert [own.step("left")[2:4] for _ in range(3)] == [(False, False), (False, False), (True, False)]
