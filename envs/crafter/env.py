"""Crafter-Text: BALROG's text interface to crafter 1.8.3 (docs/text-envs.md, "Crafter-Text")."""

from __future__ import annotations

from typing import Any

import numpy as np

from envs.actions import CRAFTER_SYNONYMS
from envs.core import TextEnv, TextObservation, check_either
from envs.crafter.describe import (
    ACTIONS,
    TEXT_VARIANTS,
    describe_long_term,
    describe_short_term,
    instruction,
)
from envs.crafter.game import CrafterGame

NUM_ACHIEVEMENTS = 22
_ACTION_INDEX = {name: i for i, name in enumerate(ACTIONS)}


class CrafterTextEnv(TextEnv):
    """Crafter with BALROG's observation text, 17 actions, crafter's reward and progression = unlocked / 22.

    ``reset(seed=s)`` builds the first world of ``crafter.Env(seed=s)`` and takes one ``noop`` step, as BALROG does
    (its observation is the first one; its reward is dropped). ``reset()`` without a seed builds the next world of
    the same seed (the first time: a seed drawn from the env's RNG). The episode terminates only on death and is
    truncated after ``max_steps`` (2,000, BALROG's evaluator limit). ``info`` also holds ``achievements`` (crafter's
    counts), ``inventory`` and ``score`` (the number of achievements unlocked).

    Args:
        achievements: ``"all"`` (BALROG: the prompt lists the 22 achievements, fixed) or ``"remaining"`` (only those
            not unlocked yet, rebuilt every step).
        text_variant: BALROG's observation text version, ``"v2"`` (HEAD, default), ``"v1"`` (Verlog's) or ``"v0"``.
        render_image: the old spelling of ``images=True``.
        **kwargs: :class:`envs.core.TextEnv` options (``parse_mode``, ``format_penalty``,
            ``invalid_action_feedback``, ``max_steps``, ``images``). ``images=True`` attaches crafter's own frame to
            each observation: the local view (9x7 cells around the player) above the inventory, ``[256, 256, 3]``
            uint8, as BALROG's VLM mode shows it (costs about a millisecond a step; the game evolves the same either
            way).
    """

    default_action = "Noop"
    provides_images = True

    def __init__(
        self, *, achievements: str = "all", text_variant: str = "v2", render_image: bool = False, **kwargs: Any
    ) -> None:
        if render_image:
            kwargs["images"] = True
        super().__init__(**kwargs)
        check_either("achievements", achievements, ("all", "remaining"))
        if text_variant not in TEXT_VARIANTS:
            raise ValueError(f"text_variant must be one of {TEXT_VARIANTS}, got {text_variant!r}")
        self.text_variant = text_variant
        self.achievements_in_prompt = achievements
        self.actions = list(ACTIONS)
        self.max_steps = self._max_steps_override or 2000
        self.game: CrafterGame | None = None

    def synonyms(self) -> dict[str, str]:
        return CRAFTER_SYNONYMS

    def render(self) -> np.ndarray | None:
        """crafter's RGB frame of the current state, drawn without touching the game's RNG."""
        if self.game is None or self.game.player is None:
            return None
        rng_state = self.game.world.random.get_state()
        try:
            return self.game.render()
        finally:
            self.game.world.random.set_state(rng_state)

    # ------------------------------------------------------------------ game hooks
    def _observe(self, image: np.ndarray | None, semantic: np.ndarray) -> TextObservation:
        game = self.game
        assert game is not None
        player = game.player
        long_term = describe_long_term(
            semantic,
            player.pos,
            player.facing,
            sleeping=player.sleeping,
            health=player.health,
            view=tuple(int(v) for v in game._view),
            variant=self.text_variant,
        )
        return TextObservation.build(long_term, describe_short_term(player.inventory), image)

    def _info(self) -> dict[str, Any]:
        player = self.game.player  # type: ignore[union-attr]
        achievements = dict(player.achievements)
        return {
            "achievements": achievements,
            "inventory": dict(player.inventory),
            "score": sum(1 for n in achievements.values() if n > 0),
        }

    def _game_reset(self, seed: int | None, options: dict[str, Any] | None) -> tuple[TextObservation, dict[str, Any]]:
        if seed is not None or self.game is None:
            if seed is None:
                seed = int(self.np_random.integers(0, 2**31 - 1))
            if self.game is None:
                self.game = CrafterGame(seed, render=self.images)
            self.game.reseed(seed)
        self.game.reset()
        image, _, _, info = self.game.step(0)  # BALROG's reset: one noop, reward dropped
        return self._observe(image, info["semantic"]), self._info()

    def _game_step(self, action: str) -> tuple[TextObservation, float, bool, dict[str, Any]]:
        game = self.game
        assert game is not None
        image, reward, _, info = game.step(_ACTION_INDEX[action])
        dead = game.player.health <= 0
        return (
            self._observe(image, info["semantic"]),
            float(reward),
            bool(dead),
            self._info(),
        )

    def _game_instruction(self) -> str:
        unlocked = set(self.game._unlocked or ()) if self.game is not None else set()
        return instruction(unlocked, achievements=self.achievements_in_prompt)

    def _game_progression(self) -> float:
        if self.game is None or self.game.player is None:
            return 0.0
        unlocked = sum(1 for n in self.game.player.achievements.values() if n > 0)
        return unlocked / NUM_ACHIEVEMENTS

    def _game_success(self) -> bool:
        return self._game_progression() >= 1.0

    def _game_get_state(self) -> Any:
        return self.game.get_state() if self.game is not None else None

    def _game_set_state(self, state: Any) -> None:
        if state is None:
            self.game = None
            return
        if self.game is None:
            self.game = CrafterGame(state["seed"], render=self.images)
        self.game.set_state(state)
