"""One bad setting of ``verlog train``'s config: :class:`Problem` (the key, what is wrong, the fix).

Every check before a launch returns a list of them: :mod:`verlog.config.checks` (types, values, sizes) and each
advantage estimator's own checks (:mod:`verlog.algorithms.estimators`), which is why this sits in a module of its own
that both import.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """One bad setting: the key, what is wrong with it and the fix (one line)."""

    key: str
    message: str

    def __str__(self) -> str:
        return self.message if self.message.startswith(self.key) else f"{self.key}: {self.message}"
