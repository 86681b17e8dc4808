"""Multi-turn rollouts: env slots + memories -> per-turn rows (see :mod:`verlog.rollout.manager`); the turn loop that
training, evaluation, demos, the warm start and ``verlog play`` share is :mod:`verlog.rollout.stepper`."""

from verlog.rollout.batch import EpisodeStats, TurnBatch, TurnRow
from verlog.rollout.generator import (
    Generation,
    GenerationRequest,
    Generator,
    TransformersGenerator,
    VerlServerGenerator,
    VllmEngineGenerator,
)
from verlog.rollout.manager import RolloutManager, RolloutStateError, make_env_pool
from verlog.rollout.stepper import Answer, EpisodeStepper, GeneratorPolicy, Policy, PolicyInput, Stepped
from verlog.sampling import SamplingConfig

__all__ = [
    "Answer",
    "EpisodeStats",
    "EpisodeStepper",
    "Generation",
    "GenerationRequest",
    "Generator",
    "GeneratorPolicy",
    "Policy",
    "PolicyInput",
    "RolloutManager",
    "RolloutStateError",
    "SamplingConfig",
    "Stepped",
    "TransformersGenerator",
    "TurnBatch",
    "TurnRow",
    "VerlServerGenerator",
    "VllmEngineGenerator",
    "make_env_pool",
]
