"""BabyAI-Text: BALROG's text interface to our MixedTrainLocal levels (docs/text-envs.md, "BabyAI-Text")."""

from __future__ import annotations

from typing import Any

import numpy as np

from envs.actions import BABYAI_SYNONYMS
from envs.babyai.describe import ACTIONS, describe, instruction
from envs.babyai.level import MixedLocalLevel, canonical_kind
from envs.core import TextEnv, TextObservation, check_either
from envs.errors import EnvStateError

_ACTION_INDEX = {name: i for i, name in enumerate(ACTIONS)}


class BabyAITextEnv(TextEnv):
    """One BabyAI task kind with BALROG's observation text, actions, reward and progression.

    Reward is minigrid's: ``1 - 0.9 * t / max_steps`` on success, else 0. ``max_steps`` is the level's (64 for goto
    and pickup, 128 for open, putnext and pick_up_seq_go_to) unless overridden; an override changes only when the
    episode is truncated, not the reward formula. Progression is 1.0 once any step was rewarded, else 0.0.

    Args:
        kind: ``goto``, ``pickup``, ``open``, ``putnext`` or ``pick_up_seq_go_to``.
        num_dists: extra distractor objects (0 as in BALROG; the pre-2024-12-10 BALROG variant used 8).
        instruction_variant: ``"balrog"`` or ``"verlog"`` (Verlog's two corrected action descriptions).
        render_image: the old spelling of ``images=True``.
        **kwargs: :class:`envs.core.TextEnv` options (``parse_mode``, ``format_penalty``,
            ``invalid_action_feedback``, ``max_steps``, ``images``). ``images=True`` attaches minigrid's agent-view
            render to each observation (BALROG's VLM mode: ``get_pov_render(tile_size=16)``, the 7x7 cells in
            front of the agent, ``[112, 112, 3]`` uint8).
    """

    default_action = "go forward"
    provides_images = True

    def __init__(
        self,
        kind: str,
        *,
        num_dists: int = 0,
        instruction_variant: str = "balrog",
        render_image: bool = False,
        **kwargs: Any,
    ) -> None:
        if render_image:
            kwargs["images"] = True
        super().__init__(**kwargs)
        check_either("instruction_variant", instruction_variant, ("balrog", "verlog"))
        self.kind = canonical_kind(kind)
        self.instruction_variant = instruction_variant
        self.actions = list(ACTIONS)
        self.level = MixedLocalLevel(self.kind, num_dists=num_dists)
        # the level sets it at each reset (64 or 128); known in advance because the kind is fixed
        self.max_steps = self._max_steps_override or (64 if self.kind in ("goto", "pickup") else 128)
        self._rewarded = False
        self._solved = False

    @property
    def level_ready(self) -> bool:
        """Whether the level has been generated (by a reset or a restored state)."""
        return getattr(self.level, "instrs", None) is not None

    @property
    def mission(self) -> str:
        """This episode's mission, e.g. ``"go to the green key"``."""
        if not self.level_ready:
            raise EnvStateError("the mission is drawn at reset(); call reset() first")
        return self.level.mission

    def synonyms(self) -> dict[str, str]:
        return BABYAI_SYNONYMS

    def render(self) -> np.ndarray | None:
        """minigrid's top-down RGB frame of the whole level (agent's view highlighted), or None before reset."""
        if not self.level_ready:
            return None
        return self.level.get_frame(highlight=True, tile_size=16, agent_pov=False)

    # ------------------------------------------------------------------ game hooks
    def _observe(self, obs: dict[str, Any]) -> TextObservation:
        image = self.level.get_pov_render(tile_size=16) if self.images else None
        return TextObservation.build(describe(obs["image"], self.level.carrying), "", image)

    def _game_reset(self, seed: int | None, options: dict[str, Any] | None) -> tuple[TextObservation, dict[str, Any]]:
        obs, _ = self.level.reset(seed=seed)
        self.max_steps = self.level.max_steps
        self._rewarded = False
        self._solved = False
        return self._observe(obs), {"mission": self.level.mission}

    def _game_step(self, action: str) -> tuple[TextObservation, float, bool, dict[str, Any]]:
        obs, reward, terminated, _, _ = self.level.step(_ACTION_INDEX[action])
        if reward > 0:
            self._rewarded = True
            self._solved = self._solved or terminated
        return (
            self._observe(obs),
            float(reward),
            bool(terminated),
            {"mission": self.level.mission},
        )

    def _game_instruction(self) -> str:
        return instruction(self.mission, variant=self.instruction_variant)

    def _game_progression(self) -> float:
        return 1.0 if self._rewarded else 0.0

    def _game_success(self) -> bool:
        return self._solved

    def _state_kind(self) -> str:
        return f"{super()._state_kind()}[{self.kind}]"  # a goto state must not load into a pickup env

    def _game_get_state(self) -> Any:
        # The whole level object: its verifier holds a reference to the level, which pickling keeps consistent.
        if self.level.window is not None:
            raise EnvStateError("get_state() is not available while a human render window is open")
        return {"level": self.level, "rewarded": self._rewarded, "solved": self._solved}

    def _game_set_state(self, state: Any) -> None:
        self.level = state["level"]
        self._rewarded = state["rewarded"]
        self._solved = state["solved"]
