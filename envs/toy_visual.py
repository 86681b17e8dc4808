"""``toy/visual``: a toy env whose answer is only in the image (the learnability test of vision-language agents).

Each turn shows one coloured square on a dark background at a random place and size; its colour names the action
that pays (red: turn left, green: go forward, blue: turn right). The text is the same every turn ("Look at the
image and answer."), so a text-only policy scores chance (1/3 a turn) and a policy that sees the image can score 1.
A correct answer earns ``1 / length``; an episode lasts ``length`` turns and ends by termination; ``success``
means every turn was answered correctly. An invalid answer runs ``turn left`` (add ``format_penalty`` to punish it).

Images are on by default here (``images=True``; 56x56 pixels, 4 image tokens in a Qwen2-VL model): the image is the
point of this env. ``images=False`` gives the text-only control. Deterministic per seed (the colours, places and
sizes come from the env's seeded RNG).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from envs.core import TextObservation
from envs.toy import ScoredTurnsEnv

COLOUR_ACTIONS = {"red": "turn left", "green": "go forward", "blue": "turn right"}
"""The square's colour -> the action that pays."""
_RGB = {"red": (220, 40, 40), "green": (40, 200, 60), "blue": (50, 80, 230)}
_BACKGROUND = (30, 30, 30)
OBSERVATION_TEXT = "Look at the image and answer."


def draw_square(size: int, colour: str, top: int, left: int, side: int) -> np.ndarray:
    """A ``[size, size, 3]`` uint8 picture: a ``side``-pixel square of ``colour`` at (``top``, ``left``)."""
    image = np.empty((size, size, 3), dtype=np.uint8)
    image[:] = _BACKGROUND
    image[top : top + side, left : left + side] = _RGB[colour]
    return image


class VisualToyEnv(ScoredTurnsEnv):
    """The visual toy game (see the module docstring).

    Args:
        length: turns per episode (>= 1).
        size: the image's side in pixels (>= 8; a multiple of 28 avoids resizing in Qwen2-VL's processor).
        min_side, max_side: the square's side is drawn from [min_side, max_side] pixels (defaults ``size // 4`` and
            ``size // 2``; ``min_side = max_side = size``: the colour fills the picture).
        images: attach the picture to each observation (default True; False: the text-only control).
        **kwargs: :class:`envs.core.TextEnv` options (``parse_mode``, ``format_penalty``, ...).
    """

    provides_images = True
    default_action = "turn left"

    def __init__(
        self,
        length: int = 1,
        size: int = 56,
        images: bool = True,
        min_side: int | None = None,
        max_side: int | None = None,
        **kwargs: Any,
    ) -> None:
        if not isinstance(length, int) or length < 1:
            raise ValueError(f"length must be an integer >= 1 (turns per episode), got {length!r}")
        if not isinstance(size, int) or size < 8:
            raise ValueError(f"size must be an integer >= 8 (pixels), got {size!r}")
        min_side = size // 4 if min_side is None else min_side
        max_side = size // 2 if max_side is None else max_side
        if not all(isinstance(v, int) for v in (min_side, max_side)) or not 1 <= min_side <= max_side <= size:
            raise ValueError(
                f"the square's sides must be integers with 1 <= min_side <= max_side <= size ({size}), got "
                f"min_side={min_side!r}, max_side={max_side!r}"
            )
        max_steps = kwargs.pop("max_steps", None)
        if max_steps is not None and max_steps < length:
            raise ValueError(f"max_steps ({max_steps}) must be >= length ({length})")
        super().__init__(max_steps=max_steps, images=images, **kwargs)
        self.length, self.size = length, size
        self.min_side, self.max_side = min_side, max_side
        self.actions = list(COLOUR_ACTIONS.values())
        self.max_steps = max_steps or length
        self.scored = 0  # turns answered correctly
        self.colour = "red"
        self.square = (0, 0, size // 2)

    def _observe(self) -> TextObservation:
        """Draw this turn's colour, place and size from the env's RNG (drawn with or without images)."""
        rng = self.np_random
        self.colour = list(COLOUR_ACTIONS)[int(rng.integers(len(COLOUR_ACTIONS)))]
        side = int(rng.integers(self.min_side, self.max_side + 1))
        top, left = (int(v) for v in rng.integers(0, self.size - side + 1, size=2))
        self.square = (top, left, side)
        return TextObservation.build(OBSERVATION_TEXT, image=self.picture() if self.images else None)

    def picture(self) -> np.ndarray:
        """This turn's image, ``[size, size, 3]`` uint8."""
        return draw_square(self.size, self.colour, *self.square)

    def render(self) -> np.ndarray:
        return self.picture()

    @property
    def answer(self) -> str:
        """The action that pays this turn (what a policy that sees the image answers)."""
        return COLOUR_ACTIONS[self.colour]

    def _game_reset(self, seed: int | None, options: dict[str, Any] | None) -> tuple[TextObservation, dict[str, Any]]:
        self.scored = 0
        return self._observe(), {}

    def _game_step(self, action: str) -> tuple[TextObservation, float, bool, dict[str, Any]]:
        hit = action == self.answer
        self.scored += int(hit)
        last = self._last_turn()
        info = {"correct": hit, "answer": self.answer}
        return self._observe(), (1.0 / self.length if hit else 0.0), last, info

    def _game_instruction(self) -> str:
        code = ", ".join(f"{colour}: {action}" for colour, action in COLOUR_ACTIONS.items())
        return (
            "You are an agent playing a colour game. Each turn you are shown an image with one coloured square. "
            f"Its colour says which action is right ({code}).\n\n"
            "The following are the possible actions you can take in the game:\n\n"
            f"{', '.join(self.actions)}.\n\n"
            f"The game lasts {self.length} step{'s' if self.length > 1 else ''}; each right answer is rewarded."
        )

    def _game_get_state(self) -> Any:
        return {"correct": self.scored, "length": self.length, "colour": self.colour, "square": self.square}

    def _game_set_state(self, state: Any) -> None:
        self.scored, self.length = int(state["correct"]), int(state["length"])
        self.colour, self.square = str(state["colour"]), tuple(int(v) for v in state["square"])
