"""A corridor whose extra actions make the env return what a text env must not (for tests/envs/test_pool_faults.py).

``intobs`` returns an int as the observation, ``strobs`` a plain string (accepted: the pool wraps it),
``nanreward``/``infreward`` a non-finite reward, ``noneinfo`` None as the info. Each also moves left, like
``left``. Module-level classes, so that spawned pool workers can import them.
"""

from __future__ import annotations

from typing import Any, ClassVar

from faulty_envs import Corridor


class BadOutputCorridor(Corridor):
    base_actions: ClassVar[list[str]] = ["left", "right", "intobs", "strobs", "nanreward", "infreward", "noneinfo"]

    def _game_step(self, action: str) -> tuple[Any, float, bool, dict]:
        obs, reward, done, info = super()._game_step("left" if action not in ("left", "right") else action)
        if action == "intobs":
            return 42, reward, done, info
        if action == "strobs":
            return obs.text, reward, done, info
        if action == "nanreward":
            return obs, float("nan"), done, info
        if action == "infreward":
            return obs, float("inf"), done, info
        return obs, reward, done, info

    def step(self, action: str) -> tuple[Any, float, bool, bool, Any]:
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward, terminated, truncated, None if action == "noneinfo" else info
