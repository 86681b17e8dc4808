"""Multi-task rollouts: the curriculum draws each new episode's task family through the env pool, rows and finished
episodes carry it, the trainer's curriculum metrics read them, and a checkpoint resumes the same draws (real envs,
pool, memory and tokenizer; the transformers generator stands in for vLLM)."""

from __future__ import annotations

import pickle

import pytest

from verlog.algorithms.curriculum import CurriculumConfig, TaskCurriculum, curriculum_metrics, family_abs_advantage
from verlog.rollout import RolloutManager, SamplingConfig, make_env_pool
from verlog.rollout.manager import RolloutStateError

TASKS = {
    "len1": {"env_id": "toy/delayed", "kwargs": {"length": 1}},
    "len3": {"env_id": "toy/delayed", "kwargs": {"length": 3}},
}


def _manager(tokenizer, generator, curriculum, *, slots=4, **kw):
    pool = make_env_pool("multitask", slots, env_kwargs={"tasks": TASKS, "env_kwargs": {"parse_mode": "lenient"}})
    return RolloutManager(
        pool, tokenizer, generator, SamplingConfig(max_tokens=4), max_prompt_tokens=512, curriculum=curriculum, **kw
    )


def _sec(seed=0):
    return TaskCurriculum(list(TASKS), CurriculumConfig(kind="sec", alpha=0.5, tau=0.1), seed=seed)


@pytest.mark.slow
def test_slots_play_the_families_the_curriculum_draws(tokenizer, generator):
    curriculum = _sec()
    curriculum.q = {"len1": 0.0, "len3": 5.0}  # tau 0.1: len3 is drawn with probability ~1
    m = _manager(tokenizer, generator, curriculum)
    batch = m.collect(6)
    assert {r.task for r in batch.rows} == {"len3"}
    # a row's turn index never reaches a family's length: the slot's env played that family
    assert all(r.turn_index < 3 for r in batch.rows)
    ended = [e for e in batch.episodes]
    assert ended and {e.task for e in ended} == {"len3"} and all(e.length == 3 for e in ended)
    # the arm rewards and the metrics the trainer logs
    curriculum.q = {"len1": 0.0, "len3": 0.0}  # now uniform: the next episodes mix
    for slot in range(m.num_slots):
        m.slots.draw_next_task(slot)
    batch = m.collect(12)
    families = [r.task for r in batch.rows]
    assert set(families) == {"len1", "len3"}
    lengths = {e.task: e.length for e in batch.episodes}
    assert lengths == {"len1": 1, "len3": 3}
    rewards = family_abs_advantage([1.0 if f == "len1" else 3.0 for f in families], families)
    curriculum.update(rewards)
    metrics = curriculum_metrics(curriculum, batch.episodes, families)
    assert metrics["curriculum/len3/prob"] > 0.99  # the family with the larger advantages is drawn
    assert metrics["family/len1/episodes"] >= 1 and 0 < metrics["family/len1/row_share"] < 1


@pytest.mark.slow
def test_a_checkpoint_resumes_the_same_tasks_and_draws(tokenizer, generator):
    a = _manager(tokenizer, generator, _sec(seed=3))
    a.collect(4)
    state = pickle.loads(pickle.dumps(a.state_dict()))
    a.curriculum.update({"len1": 1.0})
    after_a = [a.curriculum.draw() for _ in range(10)]
    tasks_a = [a.pool.next_options(s) for s in range(a.num_slots)]

    b = _manager(tokenizer, generator, _sec(seed=99))  # another seed: everything must come from the state
    b.load_state_dict(state)
    assert [b.pool.next_options(s) for s in range(b.num_slots)] == tasks_a
    assert [b.pool.episode_task(s) for s in range(b.num_slots)] == [a.pool.episode_task(s) for s in range(4)]
    b.curriculum.update({"len1": 1.0})
    assert [b.curriculum.draw() for _ in range(10)] == after_a

    single = make_env_pool("toy/delayed", 4, env_kwargs={"length": 3})
    c = RolloutManager(single, tokenizer, generator, SamplingConfig(max_tokens=4), max_prompt_tokens=512)
    with pytest.raises(RolloutStateError, match="multi-task run and this run is single-task"):
        c.load_state_dict(state)


@pytest.mark.slow
def test_group_rollouts_give_a_group_one_family(tokenizer, generator):
    m = _manager(tokenizer, generator, _sec(), group_size=2)
    batch = m.collect(3)
    by_group = {}
    for row in batch.rows:
        if not row.idle:
            by_group.setdefault(row.group_id, set()).add(row.task)
    assert by_group and all(len(tasks) == 1 for tasks in by_group.values())
