"""RolloutManager with the transformers generator and an in-process env pool (no Ray, no vLLM)."""

from __future__ import annotations

import pytest
import torch

from verlog.rollout import (
    Generation,
    GenerationRequest,
    RolloutManager,
    SamplingConfig,
    make_env_pool,
)


def _manager(tokenizer, generator, *, slots=3, max_steps=5, seed=0, env_id="babyai/goto", **kw):
    pool = make_env_pool(env_id, slots, env_kwargs={"max_steps": max_steps}, in_process=True, seed=seed)
    return RolloutManager(
        pool, tokenizer, generator, SamplingConfig(max_tokens=8), max_prompt_tokens=1024, seed=seed, **kw
    )


def test_collect_rows_links_and_bootstrap(tokenizer, generator):
    m = _manager(tokenizer, generator, max_steps=3)
    batch = m.collect(4)
    assert len(batch) == 12
    for i, row in enumerate(batch.rows):
        assert row.slot == i % 3
        assert 1 <= len(row.response_ids) <= 8
        assert row.response_logprobs is not None and len(row.response_logprobs) == len(row.response_ids)
        assert all(lp <= 0 for lp in row.response_logprobs)
        if row.next_row >= 0:
            nxt = batch.rows[row.next_row]
            assert (nxt.episode_id, nxt.turn_index) == (row.episode_id, row.turn_index + 1)
            assert not (row.terminated or row.truncated)
    # max_steps=3: every episode still running after 3 turns is truncated there, with a bootstrap prompt
    for row in batch.rows:
        if row.turn_index == 2 and not row.terminated:
            assert row.truncated and row.bootstrap_prompt_ids
    # the last row of each slot bootstraps unless its episode ended there
    for row in batch.rows[-3:]:
        assert (row.bootstrap_prompt_ids is not None) == (not row.terminated)
    assert batch.metrics()["env/episodes"] >= 3
    t = batch.to_tensors(tokenizer.pad_token_id, 1024, 8)
    assert t["prompts"].shape == (12, 1024) and t["responses"].shape == (12, 8)
    assert torch.equal(t["response_mask"].sum(1), torch.tensor([len(r.response_ids) for r in batch.rows]))
    last = t["response_mask"].sum(1) - 1
    assert torch.allclose(t["rm_scores"][torch.arange(12), last], torch.tensor([r.reward for r in batch.rows]))


def test_episodes_persist_across_collects_and_state_restores(tokenizer, generator):
    m = _manager(tokenizer, generator, max_steps=50)
    m.collect(2)
    before = m.current_episodes()
    assert all(turn == 2 or eid.endswith("-e2") for eid, turn in before)
    state = m.state_dict()
    second = m.collect(1)
    assert [(r.episode_id, r.turn_index) for r in second.rows] == before or any(r.terminated for r in second.rows)
    m2 = _manager(tokenizer, generator, max_steps=50, seed=123)
    m2.load_state_dict(state)
    assert m2.current_episodes() == before
    again = m2.collect(1)
    assert [r.prompt_ids for r in again.rows] == [r.prompt_ids for r in second.rows]


class _FlakyGenerator:
    """Fails the first call for slot 0's request, and every call for slot 1's."""

    def __init__(self, inner):
        self.inner = inner
        self.calls = 0

    def generate(self, requests, sampling):
        self.calls += 1
        out = self.inner.generate(requests, sampling)
        for i, r in enumerate(requests):
            if "-s1-" in r.request_id or ("-s0-" in r.request_id and self.calls == 1):
                out[i] = RuntimeError("server went away")
        return out


def test_failed_generation_is_retried_then_truncated_to_invalid_answer(tokenizer, generator):
    m = _manager(tokenizer, _FlakyGenerator(generator), slots=2, generation_retries=1)
    batch = m.collect(1)
    assert len(batch) == 2
    s0, s1 = batch.rows
    assert not s0.generation_failed and len(s0.response_ids) >= 1
    assert s1.generation_failed and s1.response_ids == [tokenizer.eos_token_id] and not s1.action_valid
    assert batch.generation_retries == 2
    assert batch.metrics()["rollout/generation_failures"] == 1


def test_generator_protocol_results():
    gen = Generation(token_ids=[1, 2], log_probs=[-0.1, -0.2])
    assert gen.token_ids == [1, 2]
    with pytest.raises(ValueError):
        SamplingConfig(max_tokens=0).check()
    assert GenerationRequest("a", [1]).prompt_ids == [1]


class _CrashAtSecondStep:
    """babyai/goto whose second step raises (once per env instance)."""

    def __init__(self, **kwargs):
        import envs

        self._env = envs.make("babyai/goto", **kwargs)
        self._steps = 0

    def __getattr__(self, name):
        return getattr(self._env, name)

    def step(self, action):
        self._steps += 1
        if self._steps == 2:
            raise RuntimeError("injected crash")
        return self._env.step(action)


def test_env_crash_truncates_the_episode_and_the_slot_goes_on(tokenizer, generator):
    from envs.pool import EnvPool

    pool = EnvPool(_CrashAtSecondStep, num_envs=2, env_kwargs={"max_steps": 50}, in_process=True, seed=0)
    m = RolloutManager(pool, tokenizer, generator, SamplingConfig(max_tokens=8), max_prompt_tokens=1024)
    batch = m.collect(3)
    crashed = [r for r in batch.rows if r.env_error is not None]
    assert len(crashed) == 2 and all(r.turn_index == 1 for r in crashed if not r.terminated)
    for row in crashed:
        assert row.truncated and not row.terminated and row.next_row == -1 and row.bootstrap_prompt_ids
    assert batch.metrics()["rollout/env_errors"] == 2
    assert len(batch) == 6  # the batch keeps its size; the slots start new episodes
    assert all(eid.endswith("-e2") for eid, _ in m.current_episodes())


def test_finished_episodes_record_the_seed_that_reproduces_them(tokenizer, generator):
    from envs import make

    m = _manager(tokenizer, generator, slots=2, max_steps=2, seed=40)
    batch = m.collect(4)  # max_steps=2: every slot finishes two episodes
    by_slot = {s: [e for e in batch.episodes if e.slot == s] for s in (0, 1)}
    assert [len(eps) for eps in by_slot.values()] == [2, 2]
    assert [by_slot[s][0].seed for s in (0, 1)] == [40, 41]  # slot i's first episode: seed + i
    assert all(r.seed == {e.episode_id: e.seed for e in batch.episodes}[r.episode_id] for r in batch.rows)
    later = [by_slot[s][1].seed for s in (0, 1)]
    assert all(isinstance(seed, int) for seed in later) and len(set(later) | {40, 41}) == 4
    # the recorded seed rebuilds the episode: a fresh env reset with it gives the instruction the slot saw
    m2 = _manager(tokenizer, generator, slots=2, max_steps=2, seed=40)
    m2.collect(2)  # the second episodes have just begun
    for s in (0, 1):
        env = make("babyai/goto", max_steps=2)
        env.reset(seed=later[s])
        assert env.instruction == m2.pool.instruction(s)
        env.close()
