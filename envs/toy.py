"""``toy/delayed``: a small text env whose reward for the episode's choices arrives only at its last turn.

It exists to check that an RL setup can carry credit across turns (the learnability test in CI, the quick start):
every episode lasts ``length`` turns; each turn the agent picks one of three movement actions; nothing is rewarded
until the last turn, whose reward is the share of the episode's turns on which the agent chose ``go forward``. The
instruction does not say which action pays, so only reinforcement finds it. A uniformly random policy scores 1/3 on
average, the best policy 1.0; ``success`` means every turn chose it.

The observations are short BabyAI-like lines drawn at random (they carry no information about the reward), so that
prompts look like the real games' while staying short. An invalid answer runs ``turn left`` (an unrewarded action).
Episodes end by termination after ``length`` turns (the game's own end, not a time limit).
"""

from __future__ import annotations

from typing import Any

from envs.core import TextEnv, TextObservation

ACTION_DESCRIPTIONS = {
    "turn left": "turn to the left",
    "turn right": "turn to the right",
    "go forward": "take one step forward",
}
REWARDED_ACTION = "go forward"
_THINGS = ("a red ball", "a green key", "a blue box", "a grey ball", "a purple key", "a yellow box", "a wall")
_PLACES = ("1 step forward", "2 steps forward", "1 step left", "3 steps right", "2 steps left", "1 step right")


class ScoredTurnsEnv(TextEnv):
    """A game of ``length`` turns, ended by termination at the last, in which each turn scores or not: ``scored``
    counts the turns that scored (a subclass sets it to 0 on reset and adds to it in its step), progression is
    their share and success is every turn scoring (toy/delayed, toy/visual)."""

    length: int
    scored: int = 0

    def _last_turn(self) -> bool:
        """Whether the step being taken is the episode's last (``episode_step`` counts the steps before it)."""
        return self.episode_step + 1 >= self.length

    def _game_progression(self) -> float:
        return self.scored / self.length

    def _game_success(self) -> bool:
        return self.scored == self.length


class DelayedRewardEnv(ScoredTurnsEnv):
    """The delayed-reward toy game (see the module docstring).

    Args:
        length: turns per episode (>= 1).
        **kwargs: :class:`envs.core.TextEnv` options (``parse_mode``, ``format_penalty``, ...); ``max_steps`` must
            not be below ``length`` (the episode would never reach its reward).
    """

    def __init__(self, length: int = 4, **kwargs: Any) -> None:
        if not isinstance(length, int) or length < 1:
            raise ValueError(f"length must be an integer >= 1 (turns per episode), got {length!r}")
        max_steps = kwargs.pop("max_steps", None)
        if max_steps is not None and max_steps < length:
            raise ValueError(f"max_steps ({max_steps}) must be >= length ({length}): the reward comes at turn {length}")
        super().__init__(max_steps=max_steps, **kwargs)
        self.length = length
        self.actions = list(ACTION_DESCRIPTIONS)
        self.default_action = "turn left"
        self.max_steps = max_steps or length
        self.scored = 0  # turns that chose the rewarded action
        self._view = ""

    def _observe(self) -> TextObservation:
        thing = _THINGS[int(self.np_random.integers(len(_THINGS)))]
        place = _PLACES[int(self.np_random.integers(len(_PLACES)))]
        self._view = f"{thing} {place}"
        return TextObservation.build(self._view)

    def _game_reset(self, seed: int | None, options: dict[str, Any] | None) -> tuple[TextObservation, dict[str, Any]]:
        self.scored = 0
        return self._observe(), {}

    def _game_step(self, action: str) -> tuple[TextObservation, float, bool, dict[str, Any]]:
        self.scored += int(action == REWARDED_ACTION)
        last = self._last_turn()
        reward = self.scored / self.length if last else 0.0
        return self._observe(), reward, last, {}

    def _game_instruction(self) -> str:
        actions = ",\n".join(f"{name}: {text}" for name, text in ACTION_DESCRIPTIONS.items())
        return (
            "You are an agent playing a simple navigation game. Your goal is to find out which moves pay.\n\n"
            "The following are the possible actions you can take in the game, followed by a short description of "
            f"each action:\n\n{actions}.\n\n"
            f"The game lasts {self.length} steps; the reward comes at the end."
        )

    def _game_get_state(self) -> Any:
        return {"rewarded": self.scored, "length": self.length, "view": self._view}

    def _game_set_state(self, state: Any) -> None:
        self.scored, self.length, self._view = int(state["rewarded"]), int(state["length"]), str(state["view"])


def _register() -> None:
    from envs.registry import register

    register("toy/delayed", DelayedRewardEnv)
    register("toy/visual", "envs.toy_visual:VisualToyEnv")


_register()
