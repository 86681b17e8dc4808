"""Helpers shared by the env tests (module-level, so that spawned processes can import them)."""

from __future__ import annotations

from typing import Any


def play_actions(env: Any, actions: list[str]) -> list[tuple[str, float, bool]]:
    """Step ``env`` through ``actions`` until its episode ends: ``(observation text, reward, terminated)`` per step."""
    out = []
    for action in actions:
        obs, reward, terminated, truncated, _ = env.step(action)
        out.append((obs.text, reward, terminated))
        if terminated or truncated:
            break
    return out
