"""Sampling settings: the training config's ``sampling`` section and what every generator receives.

One class for both: :class:`verlog.config.schema.TrainConfig` holds it as its ``sampling`` section (``max_tokens`` is
set from ``rollout.max_response_tokens`` there), and the rollout, the evaluation and ``verlog eval`` hand it to
:mod:`verlog.rollout.generator`'s generators. A plain module, so the config (which may not import the rollout) and the
rollout (which may not import the config) both import it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class SamplingConfig:
    """Sampling of one rollout (training, validation or ``verlog eval``).

    Attributes:
        temperature: softmax temperature; 0 is greedy (Verlog: 1.0 for training).
        top_p: nucleus sampling mass, in (0, 1] (1.0 = off).
        top_k: keep the k most likely tokens; -1 (or 0) switches it off.
        max_tokens: most tokens per response (the training config sets it from ``rollout.max_response_tokens``,
            never as ``sampling.max_tokens``).
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    max_tokens: int = 64

    def check(self) -> SamplingConfig:
        """Raise ValueError for a value out of range; returns ``self``. Every generator's user calls it (the typed
        config's own checks report the config's keys with their names instead)."""
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        return self
