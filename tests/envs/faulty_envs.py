"""Small real envs for the pool, adapter and play tests, importable by spawned workers (no lambdas).

- :class:`Corridor`: a TextEnv written directly on the hooks: walk ``left``/``right`` to the goal at the end.
  The start cell is drawn from the seed, so seeds matter and episodes are reproducible.
- :class:`FaultyCorridor`: the same game with extra actions that misbehave on purpose: ``crash`` raises,
  ``exit`` kills the process with ``os._exit``, ``hang`` sleeps forever, ``interrupt`` raises KeyboardInterrupt,
  ``unpicklable`` returns a lambda in info, ``slow`` takes 0.6 s.
- :class:`UnseededCorridor`: a corridor whose observations no seed reproduces (replay after a restart fails).
- :func:`frozen_lake_text`: gymnasium's FrozenLake through :class:`envs.adapter.GymTextAdapter`.
"""

from __future__ import annotations

import os
import time
import uuid
from typing import Any, ClassVar

import gymnasium as gym

import envs
from envs.adapter import GymTextAdapter
from envs.core import TextEnv, TextObservation


class Corridor(TextEnv):
    """A corridor of ``length`` cells; reward 1 and terminated on reaching the last one."""

    base_actions: ClassVar[list[str]] = ["left", "right"]

    def __init__(self, length: int = 8, max_steps: int | None = 20, **kwargs: Any) -> None:
        super().__init__(max_steps=max_steps, **kwargs)
        self.length = length
        self.actions = list(self.base_actions)
        self.default_action = "left"
        self.max_steps = max_steps or 20
        self.pos = 0

    def _text(self) -> TextObservation:
        return TextObservation.build(f"You are in cell {self.pos}; the goal is cell {self.length - 1}.")

    def _game_reset(self, seed: int | None, options: dict[str, Any] | None) -> tuple[TextObservation, dict]:
        self.pos = int(self.np_random.integers(0, self.length - 1))
        return self._text(), {}

    def _game_step(self, action: str) -> tuple[TextObservation, float, bool, dict]:
        self.pos = max(0, self.pos - 1) if action == "left" else min(self.length - 1, self.pos + 1)
        done = self.pos == self.length - 1
        return self._text(), float(done), done, {}

    def _game_instruction(self) -> str:
        return f"Walk to the end of the corridor. Actions: {', '.join(self.actions)}."

    def _game_progression(self) -> float:
        return 1.0 if self.pos == self.length - 1 else 0.0

    def _game_success(self) -> bool:
        return self.pos == self.length - 1

    def _game_get_state(self) -> Any:
        return {"pos": self.pos, "length": self.length}

    def _game_set_state(self, state: Any) -> None:
        self.pos, self.length = state["pos"], state["length"]


class FaultyCorridor(Corridor):
    """Corridor plus ``crash`` (raises), ``exit`` (``os._exit(3)``) and ``hang`` (sleeps forever)."""

    base_actions: ClassVar[list[str]] = ["left", "right", "crash", "exit", "hang", "interrupt", "unpicklable", "slow"]

    def _game_step(self, action: str) -> tuple[TextObservation, float, bool, dict]:
        if action == "crash":
            raise RuntimeError("injected crash")
        if action == "exit":
            os._exit(3)
        if action == "unpicklable":  # moves left and puts a lambda into info: a worker cannot send it back
            obs, reward, done, _ = super()._game_step("left")
            return obs, reward, done, {"callback": lambda: None}
        if action == "slow":  # a slow but finite step (0.6 s), then "left"
            time.sleep(0.6)
            return super()._game_step("left")
        if action == "interrupt":
            raise KeyboardInterrupt  # what Ctrl-C looks like in an in-process pool
        if action == "hang":
            while True:
                time.sleep(1.0)
        return super()._game_step(action)


class UnseededCorridor(Corridor):
    """Corridor whose observation carries a token that no seed reproduces: it cannot be rebuilt by replay."""

    def _text(self) -> TextObservation:
        return TextObservation.build(f"{super()._text().text} Token {self.token}.")

    def _game_reset(self, seed: int | None, options: dict[str, Any] | None) -> tuple[TextObservation, dict]:
        self.token = uuid.uuid4().hex
        return super()._game_reset(seed, options)


def _describe_lake(obs: Any, info: dict[str, Any], ncol: int = 4) -> str:
    row, col = divmod(int(obs), ncol)
    return f"You stand on row {row}, column {col} of the frozen lake."


def frozen_lake_text(**kwargs: Any) -> GymTextAdapter:
    """FrozenLake 4x4 (not slippery) as a text env; kwargs go to GymTextAdapter (e.g. parse_mode)."""
    return GymTextAdapter(
        gym.make("FrozenLake-v1", is_slippery=False),
        describe=_describe_lake,
        action_names={"left": "move west", "down": "move south", "right": "move east", "up": "move north"},
        instruction="Cross the frozen lake from the top-left corner to the gift in the bottom-right corner.",
        **kwargs,
    )


TEST_IDS = {
    "test/corridor": Corridor,
    "test/faulty": FaultyCorridor,
    "test/unseeded": UnseededCorridor,
    "test/frozen_lake": frozen_lake_text,
}


def register_test_envs() -> None:
    """Register the test ids (idempotent)."""
    for env_id, factory in TEST_IDS.items():
        envs.register(env_id, factory, overwrite=True)
