"""``slow``: any env made to wait a set time on every step and reset, the way a remote simulator does.

For benchmarks of how a rollout hides env time (``rollout.async_mode=pipeline``): ``env.id=slow`` with
``env.kwargs.inner=babyai/goto`` and ``env.kwargs.step_delay_s=0.2`` plays BabyAI GoTo, each step 0.2 s longer. The
wait is a ``time.sleep`` (it frees the CPU, as waiting on a remote server does). Everything else is the inner env's:
observations, rewards, instruction, actions, ``max_steps``, ``get_state``/``set_state`` (its states are the inner
env's, so they carry and check the inner id); the remaining keyword arguments build the inner env.
"""

from __future__ import annotations

import math
import time
from typing import Any

import gymnasium as gym

from envs.core import TextObservation
from envs.registry import make, register, resolve_env_factory

SLOW_ENV_ID = "slow"
"""The registered id of :class:`SlowEnv`."""

__all__ = ["SLOW_ENV_ID", "SlowEnv"]


def _delay(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a number of seconds >= 0, got {value!r}")
    return float(value)


class SlowEnv(gym.Env):
    """An env that sleeps ``step_delay_s`` before each step and ``reset_delay_s`` before each reset of ``inner``.

    Args:
        inner: the env to slow down: a registered id (``"babyai/goto"``) or ``"package.module:factory"``.
        step_delay_s: seconds each step waits.
        reset_delay_s: seconds each reset waits (None: ``step_delay_s``); a pool's auto-reset at an episode's end
            waits for both.
        **kwargs: the inner env's keyword arguments (``max_steps``, ``parse_mode``, ...).

    Attributes other than the ones below (``actions``, ``max_steps``, ``parse``, ...) are read from :attr:`env`.
    """

    def __init__(
        self,
        inner: str | None = None,
        *,
        step_delay_s: float = 0.1,
        reset_delay_s: float | None = None,
        **kwargs: Any,
    ) -> None:
        if not isinstance(inner, str) or not inner:
            raise ValueError(
                f"{SLOW_ENV_ID!r} needs the env it slows down: inner='babyai/goto' (env.kwargs.inner), got {inner!r}"
            )
        self.step_delay_s = _delay(step_delay_s, "step_delay_s")
        self.reset_delay_s = self.step_delay_s if reset_delay_s is None else _delay(reset_delay_s, "reset_delay_s")
        self.inner_id = inner
        factory = resolve_env_factory(inner)
        self.env = make(factory, **kwargs) if isinstance(factory, str) else factory(**kwargs)
        """The inner env."""
        self.observation_space = self.env.observation_space
        self.action_space = self.env.action_space
        self.metadata = getattr(self.env, "metadata", {})
        self.render_mode = getattr(self.env, "render_mode", None)

    # ------------------------------------------------------------------------------------------- gymnasium API
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[TextObservation, dict[str, Any]]:
        time.sleep(self.reset_delay_s)
        return self.env.reset(seed=seed, options=options)

    def step(self, action: str) -> tuple[TextObservation, float, bool, bool, dict[str, Any]]:
        time.sleep(self.step_delay_s)
        return self.env.step(action)

    def render(self) -> Any:
        return self.env.render()

    def close(self) -> None:
        self.env.close()

    # ------------------------------------------------------------------------------------------- TextEnv API
    @property
    def instruction(self) -> str:
        """The inner env's instruction."""
        return self.env.instruction

    @property
    def last_observation(self) -> TextObservation | None:
        """The inner env's most recent observation."""
        return self.env.last_observation

    def get_state(self) -> bytes:
        """The inner env's state (no wait)."""
        return self.env.get_state()

    def set_state(self, state: bytes) -> None:
        """Restore the inner env's state (no wait); the inner env checks and refuses it as its own."""
        self.env.set_state(state)

    def __getattr__(self, name: str) -> Any:
        """Anything else (``actions``, ``max_steps``, ``parse``, ...) comes from the inner env."""
        if name.startswith("_") or "env" not in self.__dict__:
            raise AttributeError(name)
        return getattr(self.env, name)


register(SLOW_ENV_ID, SlowEnv)
