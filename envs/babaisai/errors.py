"""Exception classes of the BabaIsAI env."""

from __future__ import annotations

from envs.errors import EnvError


class UnknownTaskError(EnvError, ValueError):
    """A task id that is not one of the 40 BALROG BabaIsAI tasks."""


class LevelError(EnvError, ValueError):
    """A board that cannot be played (bad size, unknown word, no cells)."""
