"""Crafter-Text: crafter 1.8.3 with BALROG's text interface. Registers ``crafter/default``.

``envs.make("crafter/default", parse_mode="lenient", achievements="remaining", max_steps=...)`` passes its keyword
arguments to :class:`CrafterTextEnv`.
"""

from __future__ import annotations

from envs.crafter.env import CrafterTextEnv
from envs.crafter.game import CrafterGame
from envs.registry import register

register("crafter/default", CrafterTextEnv)

__all__ = ["CrafterGame", "CrafterTextEnv"]
