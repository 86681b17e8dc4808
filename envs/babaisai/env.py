"""BabaIsAIEnv: one BALROG BabaIsAI task as a verlog text env."""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from envs.babaisai.boards import parse_board
from envs.babaisai.errors import LevelError, UnknownTaskError
from envs.babaisai.levels import MAX_STEPS, TASKS, Level, generate
from envs.babaisai.render import render_rgb
from envs.babaisai.text import YOU_MISSING_PREFIX, instruction_prompt, object_lines, observation_text, rules_text
from envs.babaisai.world import ACTIONS, Cells, Rules, advance, parse_rules
from envs.core import TextEnv, TextObservation, check_either
from envs.errors import EnvStateError

YouMissingText = Literal["balrog", "new_level"]

_SYNONYMS = {
    "wait": "idle",
    "noop": "idle",
    "stay": "idle",
    "move up": "up",
    "move right": "right",
    "move down": "down",
    "move left": "left",
}


class BabaIsAIEnv(TextEnv):
    """A BabaIsAI task with BALROG's text interface (docs/babaisai.md).

    Actions are ``idle, up, right, down, left``; a win gives ``1 - 0.9 * t / max_steps`` and ends the episode
    (terminated); reaching ``max_steps`` (100) truncates it. When no object is YOU after a step, the level is
    replaced by a new one drawn from the same RNG stream, as BALROG's wrapper does: reward 0, the episode goes on
    with the steps it has left, and ``info["level_reset"]`` is True.

    Args:
        task: one of :data:`envs.babaisai.TASKS`, e.g. ``"two_room-goto_win"``.
        include_image: the old spelling of ``images=True`` (an RGB render of the board, ``[height * 12, width * 12,
            3]`` uint8, in every observation's ``image``).
        you_missing_text: text after a level reset. ``"balrog"``: BALROG's prefix, the old level's rules, then the
            new level's object list (BALROG prints a raw dict there; we print the proper list). ``"new_level"``:
            the prefix, a newline, then the new level's full observation.
        **kwargs: TextEnv options (``parse_mode``, ``format_penalty``, ``invalid_action_feedback``, ``max_steps``,
            ``images``).

    ``reset(options={"board": text})`` plays a hand-written board (format of :mod:`envs.babaisai.boards`) instead
    of a generated level; a level reset after that draws a generated level again.
    """

    default_action = "idle"
    provides_images = True
    max_steps = MAX_STEPS

    def __init__(
        self,
        task: str,
        *,
        include_image: bool = False,
        you_missing_text: YouMissingText = "balrog",
        **kwargs: Any,
    ) -> None:
        if task not in TASKS:
            raise UnknownTaskError(f"unknown BabaIsAI task {task!r}; known tasks: {', '.join(TASKS)}")
        check_either("you_missing_text", you_missing_text, ("balrog", "new_level"))
        kwargs.pop("add_ruleset", None)  # BALROG passes it; rules are always shown
        if include_image:
            kwargs["images"] = True
        super().__init__(**kwargs)
        self.actions = list(ACTIONS)
        self.task = task
        self.you_missing_text: YouMissingText = you_missing_text
        self._rng: np.random.RandomState | None = None
        self.level: Level | None = None
        self.cells: Cells = ()
        self.rules: Rules | None = None
        self.t = 0
        self._won = False

    @property
    def width(self) -> int:
        return self._require_level().width

    @property
    def height(self) -> int:
        return self._require_level().height

    def _require_level(self) -> Level:
        if self.level is None:
            raise RuntimeError(f"BabaIsAIEnv({self.task!r}) has no level yet; call reset() first")
        return self.level

    # ----------------------------------------------------------------- game hooks
    def _new_level(self) -> None:
        assert self._rng is not None
        self.level = generate(self.task, self._rng)
        self.cells = self.level.cells
        self.rules = parse_rules(self.cells, self.level.width)
        self.t = 0
        self._won = False

    def _observation(self, long_term: str) -> TextObservation:
        image = self.render() if self.images else None
        return TextObservation.build(long_term, image=image)

    def _game_reset(self, seed: int | None, options: dict[str, Any] | None) -> tuple[TextObservation, dict[str, Any]]:
        if seed is not None:
            if not 0 <= seed < 2**32:
                raise ValueError(f"BabaIsAI seeds are NumPy legacy seeds in [0, 2**32), got {seed}; use seed % 2**32")
            self._rng = np.random.RandomState(seed)
        elif self._rng is None:
            self._rng = np.random.RandomState(int(self.np_random.integers(2**31)))
        if options and "board" in options:
            cells, width = parse_board(options["board"])
            self.level = Level(self.task, width, len(cells) // width, cells, "custom")
            self.cells, self.rules, self.t, self._won = cells, parse_rules(cells, width), 0, False
        else:
            self._new_level()
        text = observation_text(self.cells, self.rules, self.width)
        if text is None:  # never happens for the 40 tasks: generation always leaves a YOU object
            raise LevelError(f"the {self.task!r} board has no YOU object (no 'X is you' rule with an X on top)")
        return self._observation(text), self._level_info(level_reset=False)

    def _level_info(self, level_reset: bool) -> dict[str, Any]:
        level = self._require_level()
        return {
            "task": self.task,
            "target_plan": level.target_plan,
            "level_reset": level_reset,
        }

    def _game_step(self, action: str) -> tuple[TextObservation, float, bool, dict[str, Any]]:
        index = ACTIONS.index(action)
        self.t += 1
        reward, terminated = 0.0, False
        if index != 0:
            self.cells, self.rules, won, lost = advance(self.cells, self.rules, index, self.width)
            if won:
                reward, terminated, self._won = (
                    1.0 - 0.9 * self.t / self.max_steps,
                    True,
                    True,
                )
            elif lost:
                reward, terminated = -1.0, True
        text = observation_text(self.cells, self.rules, self.width)
        if text is not None or terminated:
            return (
                self._observation(text or rules_text(self.rules)),
                reward,
                terminated,
                self._level_info(False),
            )
        old_rules = rules_text(self.rules)
        self._new_level()
        if self.you_missing_text == "balrog":
            lines = object_lines(self.cells, self.rules, self.width) or []
            text = YOU_MISSING_PREFIX + old_rules + "\n\nObjects on the map:\n" + "\n".join(lines)
        else:
            text = YOU_MISSING_PREFIX + "\n" + (observation_text(self.cells, self.rules, self.width) or "")
        return self._observation(text), reward, False, self._level_info(True)

    def _game_instruction(self) -> str:
        return instruction_prompt()

    def _game_progression(self) -> float:
        return 1.0 if self._won else 0.0

    def _game_success(self) -> bool:
        return self._won

    def _game_get_state(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "level": self.level,
            "cells": self.cells,
            "t": self.t,
            "won": self._won,
            "rng": self._rng.get_state() if self._rng is not None else None,
        }

    def _game_set_state(self, state: dict[str, Any]) -> None:
        if state.get("task") != self.task:
            raise EnvStateError(f"state is for BabaIsAI task {state.get('task')!r}, this env plays {self.task!r}")
        self.level = state["level"]
        self.cells = state["cells"]
        self.rules = parse_rules(self.cells, self.level.width)
        self.t = state["t"]
        self._won = state["won"]
        if state["rng"] is None:
            self._rng = None
        else:
            self._rng = np.random.RandomState()
            self._rng.set_state(state["rng"])

    def synonyms(self) -> dict[str, str]:
        return dict(_SYNONYMS)

    def render(self) -> np.ndarray:
        """The board as an RGB image ``[height * 12, width * 12, 3]`` uint8."""
        level = self._require_level()
        return render_rgb(self.cells, level.width, level.height)
