"""Group rollouts (RolloutManager(group_size=K)): whole episodes per iteration, slots of a group on one seed."""

from __future__ import annotations

import pytest
import torch

from envs.toy import DelayedRewardEnv
from verlog.algorithms.group_advantage import group_advantages
from verlog.rollout import Generation, RolloutManager, SamplingConfig
from verlog.rollout.manager import GroupRolloutError, group_seed


class VariableLengthEnv(DelayedRewardEnv):
    """toy/delayed whose episode lasts 1 + seed % 3 turns (at most 3), so episodes of one batch end at different
    turns; observations depend on the seed and the turn only (as toy/delayed's)."""

    def __init__(self, **kwargs):
        super().__init__(length=3, max_steps=kwargs.pop("max_steps", 3), **kwargs)

    def _game_reset(self, seed, options):
        self.length = 1 + (int(seed) % 3 if seed is not None else 0)
        return super()._game_reset(seed, options)


class _ScriptedGenerator:
    """Answers ``ACTION: go forward`` or ``ACTION: turn right`` by the slot number in the request id."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.calls = 0

    def generate(self, requests, sampling):
        self.calls += 1
        out = []
        for r in requests:
            slot = int(r.request_id.split("-s")[1].split("-")[0])
            text = "ACTION: go forward" if slot % 2 == 0 else "ACTION: turn right"
            ids = [*self.tokenizer.encode(text, add_special_tokens=False), self.tokenizer.eos_token_id]
            out.append(Generation(token_ids=ids, log_probs=[-0.5] * len(ids)))
        return out


def _manager(tokenizer, *, slots=8, group_size=4, seed=10, max_steps=3, factory=VariableLengthEnv):
    from envs.pool import EnvPool

    pool = EnvPool(factory, num_envs=slots, env_kwargs={"max_steps": max_steps}, in_process=True, seed=0)
    return RolloutManager(
        pool,
        tokenizer,
        _ScriptedGenerator(tokenizer),
        SamplingConfig(max_tokens=16),
        max_prompt_tokens=1024,
        seed=seed,
        run_id="t",
        group_size=group_size,
    )


def test_group_seeds_follow_the_pool_streams():
    from envs.pool import EnvPool

    assert group_seed(5, 0) == 5
    # iteration i's seed is the i-th draw of the stream the env pool gives a slot reset with that first seed
    pool = EnvPool(VariableLengthEnv, num_envs=1, env_kwargs={"max_steps": 3}, in_process=True)
    pool.reset(seeds=[5])
    drawn = []
    for _ in range(3):
        while True:
            _obs, _r, term, trunc, _info = pool.step(["ACTION: go forward"])[0]
            if term or trunc:
                break
        drawn.append(pool.episode_seed(0))
    assert drawn == [group_seed(5, i) for i in (1, 2, 3)]
    pool.close()


def test_whole_episodes_groups_and_idle_rows(tokenizer):
    m = _manager(tokenizer)
    batch = m.collect(3)
    assert len(batch) == 24 and batch.group_size == 4
    for t in range(3):
        assert [r.slot for r in batch.rows[t * 8 : (t + 1) * 8]] == list(range(8))
    real = [r for r in batch.rows if not r.idle]
    # each slot reset to its group's seed: slots 0-3 on group_seed(10, 0) = 10, slots 4-7 on 11
    assert {r.slot: r.seed for r in real} == {s: 10 + s // 4 for s in range(8)}
    assert {r.slot: r.group_id for r in real} == {s: f"t-i0-g{s // 4}" for s in range(8)}
    # seed 10 -> episodes of 2 turns, seed 11 -> 3 turns; afterwards the slot idles (no model call, no loss)
    lengths = {s: len([r for r in real if r.slot == s]) for s in range(8)}
    assert lengths == {s: 2 if s < 4 else 3 for s in range(8)}
    idle = [r for r in batch.rows if r.idle]
    assert len(idle) == 4 and all(r.slot < 4 and r.turn_index == 2 and not r.trained for r in idle)
    assert all(r.trained for r in real) and m.generator.calls == 3
    # every episode is whole: turn 0 .. end, the last one terminated
    for s in range(8):
        rows = [r for r in real if r.slot == s]
        assert [r.turn_index for r in rows] == list(range(len(rows))) and rows[-1].terminated
        assert all(r.bootstrap_prompt_ids is None for r in rows)
    # the slots of a group see the same observations turn by turn (anchor states), whatever they answered
    for g in range(2):
        for t in range(lengths[4 * g]):
            anchors = {r.anchor for r in real if r.slot // 4 == g and r.turn_index == t}
            assert len(anchors) == 1 and anchors != {""}
    metrics = batch.metrics()
    assert metrics["rollout/idle_rows"] == 4 and metrics["rollout/unfinished_rows"] == 0
    assert metrics["rollout/turns"] == 20 and metrics["env/episodes"] == 8
    # the tensors: idle rows are attended but outside the loss
    t = batch.to_tensors(tokenizer.pad_token_id, 1024, 16)
    idle_pos = [i for i, r in enumerate(batch.rows) if r.idle]
    assert t["response_mask"][idle_pos].sum() == 0 and t["rm_scores"][idle_pos].abs().sum() == 0
    assert (t["attention_mask"][idle_pos].sum(1) == 2).all()
    # next iteration: fresh episodes from turn 0 on the groups' next seeds
    second = m.collect(3)
    firsts = [r for r in second.rows if r.turn_index == 0 and not r.idle]
    assert len(firsts) == 8 and {r.seed for r in firsts} == {group_seed(10, 1), group_seed(11, 1)}
    assert {r.group_id for r in firsts} == {"t-i1-g0", "t-i1-g1"}
    assert m.state_dict()["group_iteration"] == 2


def test_group_rows_feed_grpo(tokenizer):
    """Slots 0, 2 (go forward) beat 1, 3 (turn right) in each group: GRPO gives them +, the others -."""
    m = _manager(tokenizer)
    batch = m.collect(3)
    t = batch.to_tensors(tokenizer.pad_token_id, 1024, 16)
    rows = batch.rows
    out = group_advantages(
        "grpo",
        t["rm_scores"],
        t["response_mask"],
        [r.episode_id for r in rows],
        [r.turn_index for r in rows],
        [r.terminated or r.truncated for r in rows],
        [r.group_id for r in rows],
        [r.anchor for r in rows],
        [r.trained for r in rows],
    )
    for i, r in enumerate(rows):
        if r.idle:
            assert out.row_advantages[i] == 0
        else:
            assert (out.row_advantages[i] > 0) == (r.slot % 2 == 0)
    assert torch.equal(out.advantages.abs().sum(1) > 0, torch.tensor([not r.idle for r in rows]))


def test_unfinished_episode_rows_are_left_out(tokenizer):
    m = _manager(tokenizer, slots=4, group_size=2, max_steps=3)
    m.collector.check_step_limit = lambda turns: None  # an env whose limit is unknown: the batch can end mid-episode
    batch = m.collect(2)  # seed 10: 2 turns, ends; seed 11: 3 turns, cut after 2
    by_slot = {s: [r for r in batch.rows if r.slot == s] for s in range(4)}
    assert all(r.trained for s in (0, 1) for r in by_slot[s])
    assert all(not r.trained and not r.idle for s in (2, 3) for r in by_slot[s])
    assert batch.metrics()["rollout/unfinished_rows"] == 4
    t = batch.to_tensors(tokenizer.pad_token_id, 1024, 16)
    assert t["response_mask"][[i for i, r in enumerate(batch.rows) if r.slot >= 2]].sum() == 0


def test_step_limit_beyond_the_batch_is_refused(tokenizer):
    m = _manager(tokenizer, max_steps=5)
    with pytest.raises(GroupRolloutError, match=r"rollout\.turns_per_slot=5"):
        m.collect(3)
    with pytest.raises(GroupRolloutError, match="divide"):
        _manager(tokenizer, slots=6, group_size=4)


def test_checkpoint_keeps_the_group_iteration(tokenizer):
    m = _manager(tokenizer)
    m.collect(3)
    state = m.state_dict()
    m2 = _manager(tokenizer)
    m2.load_state_dict(state)
    assert [r.seed for r in m2.collect(3).rows[:8]] == [r.seed for r in m.collect(3).rows[:8]]
