"""A BabyAI env that raises once, on the N-th training step taken in this process (N from VERLOG_TEST_CRASH_AT_STEP).

Used by the e2e training test as ``env.id=crashy_env:make`` (this folder on PYTHONPATH) to check that an env slot
crashing mid-rollout does not stop training. Steps of episodes reset with a seed from 2**31 up (the in-training
evaluation's, which training never draws) are not counted, so the crash lands in training whenever evaluations run.
"""

from __future__ import annotations

import os
from typing import Any

import envs

_steps = 0


class CrashOnce:
    """Wraps a TextEnv; delegates everything, but ``step`` raises on the process's N-th step."""

    def __init__(self, env: Any) -> None:
        self._env = env
        self._training = True

    def __getattr__(self, name: str) -> Any:
        return getattr(self._env, name)

    def reset(self, *, seed: int | None = None, **kwargs: Any) -> Any:
        # an env once reset with an evaluation seed belongs to an evaluation's pool: its later episodes (a slot idling
        # after its episode ended, auto-reset with a drawn seed) are not training's either
        self._training = self._training and (seed is None or seed < 2**31)
        return self._env.reset(seed=seed, **kwargs)

    def step(self, action: str) -> Any:
        global _steps
        if not self._training:
            return self._env.step(action)
        _steps += 1
        if _steps == int(os.environ.get("VERLOG_TEST_CRASH_AT_STEP", "0")):
            raise RuntimeError(f"injected env crash at step {_steps}")
        return self._env.step(action)


def make(**kwargs: Any) -> CrashOnce:
    return CrashOnce(envs.make("babyai/goto", **kwargs))
