"""verlog.rollout.build.build_rollout: the rollout a training run trains on, built from the config's sections in one
place (real envs, pool, memory and tokenizer; the transformers generator stands in for vLLM)."""

from __future__ import annotations

import pytest

from verlog.algorithms.curriculum import CurriculumConfig
from verlog.prompting.memory import MemoryConfig
from verlog.prompting.sampling import SamplingConfig
from verlog.rollout.build import build_rollout


def _build(tokenizer, generator, **kw):
    settings = dict(
        env_id="toy/delayed",
        env_kwargs={"length": 2, "parse_mode": "lenient"},
        tasks=None,
        num_slots=2,
        tokenizer=tokenizer,
        generator=generator,
        sampling=SamplingConfig(max_tokens=4),
        memory=MemoryConfig(n=2),
        max_prompt_tokens=512,
        seed=3,
        run_id="run-a",
    )
    return build_rollout(**{**settings, **kw})


@pytest.mark.slow
def test_one_task_rollout_has_the_sections_settings(tokenizer, generator):
    rollout = _build(tokenizer, generator)
    try:
        assert rollout.num_slots == 2 and rollout.curriculum is None
        batch = rollout.collect(3)
        assert len(batch) == 6
        assert all(r.episode_id.startswith("run-a-s") for r in batch.rows)  # episode ids carry the run name
        # memory.n=2: every slot's memory is a window of two past turns
        assert all(m.n == 2 for m in rollout.memories)
        # toy/delayed of length 2: no episode is longer than the env's kwargs say
        assert batch.episodes and all(e.length == 2 for e in batch.episodes)
    finally:
        rollout.pool.close()


@pytest.mark.slow
def test_tasks_give_multitask_slots_and_a_curriculum(tokenizer, generator):
    tasks = {"short": "toy/delayed", "long": {"id": "toy/delayed", "kwargs": {"length": 3}}}
    rollout = _build(
        tokenizer,
        generator,
        env_kwargs={"parse_mode": "lenient", "length": 1},
        tasks=tasks,
        curriculum=CurriculumConfig(kind="uniform"),
        num_slots=4,
    )
    try:
        assert rollout.curriculum is not None and set(rollout.curriculum.families) == {"short", "long"}
        batch = rollout.collect(6)
        lengths = {e.task: e.length for e in batch.episodes}
        # env.kwargs apply to every family; a family's own kwargs win
        assert lengths == {"short": 1, "long": 3}
    finally:
        rollout.pool.close()
