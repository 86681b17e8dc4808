"""Multi-turn rollouts: env slots + memories -> per-turn rows (see :mod:`verlog.rollout.manager`)."""

from verlog.rollout.batch import EpisodeStats, TurnBatch, TurnRow
from verlog.rollout.generator import (
    Generation,
    GenerationRequest,
    Generator,
    SamplingConfig,
    TransformersGenerator,
    VerlServerGenerator,
    VllmEngineGenerator,
)
from verlog.rollout.manager import RolloutManager, RolloutStateError, make_env_pool

__all__ = [
    "EpisodeStats",
    "Generation",
    "GenerationRequest",
    "Generator",
    "RolloutManager",
    "RolloutStateError",
    "SamplingConfig",
    "TransformersGenerator",
    "TurnBatch",
    "TurnRow",
    "VerlServerGenerator",
    "VllmEngineGenerator",
    "make_env_pool",
]
