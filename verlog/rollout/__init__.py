"""Multi-turn rollouts: env slots + memories -> per-turn rows (see :mod:`verlog.rollout.manager`): the slots' state
(:mod:`verlog.rollout.slots`) and the collectors that advance it (:mod:`verlog.rollout.collectors`); the turn loop
that training, evaluation, demos, the warm start and ``verlog play`` share is :mod:`verlog.rollout.stepper`."""

from verlog.prompting.sampling import SamplingConfig
from verlog.rollout.batch import EpisodeStats, TurnBatch, TurnRow
from verlog.rollout.collectors import Collector, GroupedCollector, LockstepCollector, PipelinedCollector
from verlog.rollout.generator import (
    Generation,
    GenerationRequest,
    Generator,
    TransformersGenerator,
    VerlServerGenerator,
    VllmEngineGenerator,
)
from verlog.rollout.manager import RolloutManager
from verlog.rollout.slots import RolloutSlots, RolloutStateError, make_env_pool
from verlog.rollout.stepper import Answer, EpisodeStepper, GeneratorPolicy, Policy, PolicyInput, Stepped

__all__ = [
    "Answer",
    "Collector",
    "EpisodeStats",
    "EpisodeStepper",
    "Generation",
    "GenerationRequest",
    "Generator",
    "GeneratorPolicy",
    "GroupedCollector",
    "LockstepCollector",
    "PipelinedCollector",
    "Policy",
    "PolicyInput",
    "RolloutManager",
    "RolloutSlots",
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
