"""The collectors (verlog/rollout/collectors.py) over the slots' state (verlog/rollout/slots.py): each batch carries
its own timing, each collector checks its own settings when it is built, and a batch pickled before batches carried a
timing (rows collected ahead, in an older checkpoint) still loads."""

from __future__ import annotations

import pickle

import pytest
from hash_generator import HashGenerator  # beside this file

from verlog.rollout import (
    GeneratorPolicy,
    GroupedCollector,
    LockstepCollector,
    PipelinedCollector,
    RolloutManager,
    RolloutSlots,
    SamplingConfig,
    TurnBatch,
    make_env_pool,
)
from verlog.rollout.collectors import GroupRolloutError


def _parts(tokenizer, slots=4, persistent=True):
    pool = make_env_pool("toy/delayed", slots, env_kwargs={"length": 3, "max_steps": 3}, seed=1)
    rollout_slots = RolloutSlots(pool, tokenizer, max_prompt_tokens=512, seed=3, persistent=persistent)
    policy = GeneratorPolicy(HashGenerator(tokenizer), tokenizer, SamplingConfig(max_tokens=16))
    return rollout_slots, policy


@pytest.mark.parametrize(
    ("kind", "extra"),
    [("lockstep", set()), ("pipelined", {"timing_s/rollout_overlap", "rollout/pipelined"}), ("grouped", set())],
)
def test_every_collect_returns_its_own_timing(tokenizer, kind, extra):
    slots, policy = _parts(tokenizer, persistent=kind != "grouped")
    collector = {
        "lockstep": lambda: LockstepCollector(slots, policy),
        "pipelined": lambda: PipelinedCollector(slots, policy, 2, min_env_share=0.0),
        "grouped": lambda: GroupedCollector(slots, policy, 2),
    }[kind]()
    try:
        first, second = collector.collect(3), collector.collect(2)
        assert (len(first), len(second)) == (12, 8)
        for batch in (first, second):
            assert set(batch.timing) == {"timing_s/rollout_generate", "timing_s/rollout_env", *extra}
            assert batch.timing["timing_s/rollout_generate"] > 0 and batch.timing["timing_s/rollout_env"] > 0
        assert first.timing is not second.timing  # each batch its own: a later collect leaves the first alone
    finally:
        collector.close()
        slots.close()


def test_the_manager_keeps_no_result_of_a_call(tokenizer):
    pool = make_env_pool("toy/delayed", 2, env_kwargs={"length": 2})
    m = RolloutManager(pool, tokenizer, HashGenerator(tokenizer), SamplingConfig(max_tokens=16), max_prompt_tokens=512)
    try:
        batch = m.collect(2)
        assert batch.timing["timing_s/rollout_env"] >= 0 and not hasattr(m, "last_timing")
        assert isinstance(m.collector, LockstepCollector) and m.pipeline_groups is None
    finally:
        m.close()


def test_each_collector_checks_its_settings(tokenizer):
    slots, policy = _parts(tokenizer)
    try:
        for groups in (1, 5):
            with pytest.raises(ValueError, match="between 2 and the 4 env slots"):
                PipelinedCollector(slots, policy, groups)
        with pytest.raises(ValueError, match="persistent=False"):
            GroupedCollector(slots, policy, 2)
        with pytest.raises(ValueError, match="turns_per_slot must be >= 1"):
            LockstepCollector(slots, policy).collect(0)
    finally:
        slots.close()
    slots, policy = _parts(tokenizer, slots=6, persistent=False)
    try:
        with pytest.raises(GroupRolloutError, match="divide the 6 env slots"):
            GroupedCollector(slots, policy, 4)
    finally:
        slots.close()


def test_a_batch_pickled_without_timing_loads_with_an_empty_one():
    batch = TurnBatch(generation_retries=2, timing={"timing_s/rollout_env": 1.0})
    del batch.__dict__["timing"]  # as batches were before they carried their timing
    loaded = pickle.loads(pickle.dumps(batch))
    assert loaded.timing == {} and loaded.generation_retries == 2
    again = pickle.loads(pickle.dumps(TurnBatch(timing={"timing_s/rollout_env": 1.0})))
    assert again.timing == {"timing_s/rollout_env": 1.0}
