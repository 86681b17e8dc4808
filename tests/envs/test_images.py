"""Images in observations (issue 35): the rules, the games' images, the adapter, the pool and toy/visual."""

from __future__ import annotations

import random

import gymnasium as gym
import numpy as np
import pytest

import envs
from envs.core import TextObservation
from envs.errors import EnvImageError
from envs.images import check_image
from envs.pool import EnvPool


@pytest.mark.parametrize(
    "bad", [[[0, 0, 0]], np.zeros((4, 4), np.uint8), np.zeros((4, 4, 4), np.uint8), np.zeros((4, 4, 3), np.float32)]
)
def test_a_wrong_image_is_a_named_error(bad: object) -> None:
    with pytest.raises(EnvImageError):
        TextObservation.build("x", image=bad)  # type: ignore[arg-type]
    assert check_image(np.zeros((2, 3, 3), np.uint8)).shape == (2, 3, 3)


@pytest.mark.parametrize(
    ("env_id", "shape"),
    [("babyai/goto", (112, 112, 3)), ("crafter/default", (256, 256, 3)), ("toy/visual", (56, 56, 3))],
)
def test_games_draw_images_only_when_asked_and_deterministically(env_id: str, shape: tuple) -> None:
    a, b = envs.make(env_id, images=True), envs.make(env_id, images=True)
    first, second = a.reset(seed=3)[0], b.reset(seed=3)[0]
    assert first.image.shape == shape and first.image.dtype == np.uint8
    assert np.array_equal(first.image, second.image)
    if env_id != "toy/visual":
        assert envs.make(env_id).reset(seed=3)[0].image is None


def test_an_env_without_images_refuses_them() -> None:
    with pytest.raises(EnvImageError, match="draws no images"):
        envs.make("toy/delayed", images=True)


def test_adapter_takes_a_render_or_an_image_observation() -> None:
    lake = gym.make("FrozenLake-v1", render_mode="rgb_array")
    env = envs.GymTextAdapter(lake, lambda obs, info: f"cell {obs}", ["w", "s", "e", "n"], "cross", images="render")
    assert env.reset(seed=0)[0].image.ndim == 3
    with pytest.raises(EnvImageError, match="render_mode"):
        envs.GymTextAdapter(gym.make("FrozenLake-v1"), str, ["w", "s", "e", "n"], "cross", images="render")
    with pytest.raises(EnvImageError, match="image observation space"):
        envs.GymTextAdapter(lake, str, ["w", "s", "e", "n"], "cross", images="observation")


def test_the_pool_carries_images_unchanged() -> None:
    local = envs.make("toy/visual", length=3)
    expected = local.reset(seed=0)[0].image
    with EnvPool("toy/visual", num_envs=1, env_kwargs={"length": 3}, keep_images=True) as pool:
        ((obs, _),) = pool.reset(seeds=0)
        assert np.array_equal(obs.image, expected)
        ((nxt, *_),) = pool.step(["turn left"])
        assert np.array_equal(nxt.image, local.step("turn left")[0].image)


def test_visual_toy_text_alone_scores_chance() -> None:
    rng = random.Random(0)
    env = envs.make("toy/visual", images=False)
    wins = seen = 0
    for seed in range(600):
        obs, _ = env.reset(seed=seed)
        assert obs.image is None and obs.text == "Look at the image and answer."
        wins += env.step(rng.choice(env.actions))[4]["success"]
        oracle = envs.make("toy/visual")
        oracle.reset(seed=seed)
        seen += oracle.step(oracle.answer)[4]["success"]
    assert 0.27 < wins / 600 < 0.40 and seen == 600


def test_visual_toy_square_sides() -> None:
    """``min_side``/``max_side`` bound the square (the learnability recipe fills the picture); bad bounds are named."""
    filled = envs.make("toy/visual", min_side=56, max_side=56)
    for seed in range(5):
        obs, _ = filled.reset(seed=seed)
        assert (obs.image == obs.image[0, 0]).all() and filled.square == (0, 0, 56)  # one colour, edge to edge
    bounded = envs.make("toy/visual", min_side=20, max_side=30)
    sides = set()
    for seed in range(40):
        bounded.reset(seed=seed)
        sides.add(bounded.square[2])
    assert sides <= set(range(20, 31)) and len(sides) > 3
    for bad in ({"min_side": 0}, {"min_side": 30, "max_side": 20}, {"max_side": 57}, {"min_side": 2.5}):
        with pytest.raises(ValueError, match="min_side <= max_side <= size"):
            envs.make("toy/visual", **bad)
