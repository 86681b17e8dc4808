"""Reading the free-form ``verl:`` section of ``verlog train``'s config: the value it sets for one of verl's keys,
whether written as nested sections or as dotted names (the checks before a launch ask it)."""

from __future__ import annotations

from typing import Any

from verlog.config.schema import TrainConfig

VERL_CORRECTION = "algorithm.rollout_correction"
"""verl's rollout-correction section (under ``verl:``): verlog fills it from ``algorithm.rollout_is``."""


def verl_setting(cfg: TrainConfig, key: str) -> Any:
    """The value ``verl:`` sets for verl's dotted ``key`` (nested sections or dotted names alike), or None."""

    def flat(node: Any, prefix: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in dict(node).items():
            name = f"{prefix}{k}"
            out.update(flat(v, name + ".") if isinstance(v, dict) else {name: v})
        return out

    return flat(cfg.verl or {}, "").get(key)


def is_true(value: Any) -> bool:
    """Whether a ``verl:`` value means true (``True``, or the text ``true`` in any case)."""
    return value is True or str(value).strip().lower() == "true"
