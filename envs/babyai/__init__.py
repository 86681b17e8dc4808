"""BabyAI-Text: BALROG's five BabyAI-MixedTrainLocal tasks on upstream minigrid, with BALROG's text interface.

Registers ``babyai/goto``, ``babyai/pickup``, ``babyai/open``, ``babyai/putnext`` and ``babyai/pick_up_seq_go_to``.
``envs.make("babyai/goto", parse_mode="lenient", num_dists=0, max_steps=...)`` passes its keyword arguments to
:class:`BabyAITextEnv`.
"""

from __future__ import annotations

from functools import partial

from envs.babyai.env import BabyAITextEnv
from envs.babyai.level import TASK_KINDS, MixedLocalLevel
from envs.registry import register

for _kind in TASK_KINDS:
    register(f"babyai/{_kind}", partial(BabyAITextEnv, _kind))

__all__ = ["TASK_KINDS", "BabyAITextEnv", "MixedLocalLevel"]
