"""The pipelined rollout (RolloutManager(pipeline_groups=G), rollout.async_mode=pipeline): the same rows, episodes,
task draws and checkpoints as lockstep, with one slot group's env half running while another group generates (real
envs and pools, in-process and in worker processes; a generator that answers from the prompt alone stands in for
vLLM, so that its answers do not depend on how the requests are batched)."""

from __future__ import annotations

import dataclasses
import threading
import zlib

import pytest

from envs.errors import EnvPoolError
from envs.pool import EnvPool
from envs.toy import DelayedRewardEnv
from verlog.algorithms.curriculum import CurriculumConfig, TaskCurriculum
from verlog.errors import GeneratorDownError
from verlog.prompting.memory import MemoryConfig
from verlog.rollout import Generation, RolloutManager, SamplingConfig, make_env_pool
from verlog.rollout.build import build_rollout
from verlog.rollout.manager import PIPELINE_MIN_ENV_SHARE, GroupRolloutError, overlap_seconds, pipeline_slot_groups

ANSWERS = ["go forward", "turn left", "go forward", "turn right", "fly away"]  # "fly away": invalid, default action
TASKS = {
    "len1": {"env_id": "toy/delayed", "kwargs": {"length": 1}},
    "len3": {"env_id": "toy/delayed", "kwargs": {"length": 3}},
}


class PromptGenerator:
    """Answers each request from its prompt tokens alone (a hash picks the action); a request whose hash is 0 mod 7
    fails its first attempt (a retry), 0 mod 11 every attempt (a failed generation). ``before`` is called with the
    requests before answering them."""

    def __init__(self, tokenizer, before=None):
        self.tokenizer = tokenizer
        self.before = before
        self.failed_once: set[tuple[str, int]] = set()

    def generate(self, requests, sampling):
        if self.before is not None:
            self.before(requests)
        out: list = []
        for r in requests:
            h = zlib.crc32(repr(r.prompt_ids).encode())
            if h % 11 == 0 or (h % 7 == 0 and (r.request_id, h) not in self.failed_once):
                self.failed_once.add((r.request_id, h))
                out.append(RuntimeError("server went away"))
                continue
            text = f"THINK: {h % 97}.\nACTION: {ANSWERS[h % len(ANSWERS)]}"
            ids = [*self.tokenizer.encode(text, add_special_tokens=False), self.tokenizer.eos_token_id]
            out.append(Generation(token_ids=ids, log_probs=[-(h % 5) / 10] * len(ids)))
        return out


def _manager(tokenizer, pool, generator=None, curriculum=None, **kw):
    m = RolloutManager(
        pool,
        tokenizer,
        generator or PromptGenerator(tokenizer),
        SamplingConfig(max_tokens=16),
        max_prompt_tokens=512,
        seed=5,
        run_id="p",
        curriculum=curriculum,
        **kw,
    )
    m.pipeline_min_env_share = 0.0  # pipeline every collect, however fast these envs answer
    return m


def test_pipelining_falls_back_to_lockstep_when_envs_answer_at_once(tokenizer):
    """After the first collect, a collect is pipelined only while env steps take at least a tenth of generation."""
    pool = make_env_pool("toy/delayed", 4, in_process=True)
    try:
        m = _manager(tokenizer, pool, pipeline_groups=2)
        m.pipeline_min_env_share = PIPELINE_MIN_ENV_SHARE
        assert m.collector.pays(None)  # nothing measured yet
        assert not m.collector.pays({"timing_s/rollout_generate": 1.0, "timing_s/rollout_env": 0.05})
        assert m.collector.pays({"timing_s/rollout_generate": 1.0, "timing_s/rollout_env": 0.2})
        m.collector.previous = {"timing_s/rollout_generate": 1.0, "timing_s/rollout_env": 0.0}
        batch = m.collect(2)  # lockstep, and says so
        assert len(batch) == 8
        assert batch.timing["rollout/pipelined"] == 0.0 and batch.timing["timing_s/rollout_overlap"] == 0.0
        m.pipeline_min_env_share = 0.0
        assert m.collect(2).timing["rollout/pipelined"] == 1.0
    finally:
        m.close()


def _pool(case: str, slots: int):
    if case == "toy":
        return make_env_pool("toy/delayed", slots, env_kwargs={"length": 3}, seed=1)
    if case == "goto":
        return make_env_pool("babyai/goto", slots, env_kwargs={"max_steps": 4}, seed=1)
    if case == "goto-workers":
        return make_env_pool("babyai/goto", slots, env_kwargs={"max_steps": 4}, in_process=False, num_workers=3, seed=1)
    if case == "multitask":
        return make_env_pool("multitask", slots, env_kwargs={"tasks": TASKS}, seed=1)
    raise AssertionError(case)


def _rows(batch):
    return [dataclasses.asdict(row) for row in batch.rows]


@pytest.mark.slow
@pytest.mark.parametrize("case", ["toy", "goto", "goto-workers", "multitask"])
def test_pipeline_gives_the_lockstep_rows_episodes_and_state(tokenizer, case):
    slots = 5  # groups of 3 and 2 (or 2, 2 and 1): uneven blocks
    managers = []
    try:
        for groups in (None, 2, 3):
            curriculum = None
            if case == "multitask":
                curriculum = TaskCurriculum(list(TASKS), CurriculumConfig(kind="uniform"), seed=9)
            managers.append(_manager(tokenizer, _pool(case, slots), curriculum=curriculum, pipeline_groups=groups))
        lockstep, *pipelined = managers
        assert [m.slot_groups for m in pipelined] == (
            [[[0, 2], [1, 3, 4]], [[0], [2, 4], [1, 3]]]  # slots of workers (0, 0, 1, 1, 2): a share of each
            if case == "goto-workers"
            else [[[0, 1], [2, 3, 4]], [[0], [1, 2], [3, 4]]]
        )
        ended = 0
        for turns in (3, 4, 1):
            want = lockstep.collect(turns)
            ended += len(want.episodes)
            for m in pipelined:
                got = m.collect(turns)
                assert _rows(got) == _rows(want)
                assert got.episodes == want.episodes
                assert got.generation_retries == want.generation_retries
                assert set(got.timing) == {*want.timing, "timing_s/rollout_overlap", "rollout/pipelined"}
                assert got.timing["rollout/pipelined"] == 1.0
                assert m.state_dict() == lockstep.state_dict()
        assert ended >= 5 and lockstep.policy.retries_used > 0  # episodes ended (auto-reset), requests were retried
        assert "timing_s/rollout_overlap" not in want.timing  # lockstep logs what it always did
    finally:
        for m in managers:
            m.close()


class _MeetingEnv(DelayedRewardEnv):
    """toy/delayed whose steps record their thread; the first step meets the generation of group 1 at
    :data:`MEETING` (so it passes only when both run at once)."""

    threads: list[str] = []  # noqa: RUF012

    def step(self, action):
        _MeetingEnv.threads.append(threading.current_thread().name)
        if len(_MeetingEnv.threads) == 1:
            MEETING.wait()
        return super().step(action)


MEETING = threading.Barrier(2, timeout=30)


def test_group_1_generates_while_group_0_steps(tokenizer):
    met: list[list[int]] = []

    def before(requests):  # group 1's first generation waits for group 0's first env step to be running
        slots = sorted(int(r.request_id.split("-s")[1].split("-")[0]) for r in requests)
        if slots == [2, 3] and not met:
            MEETING.wait()
            met.append(slots)

    _MeetingEnv.threads = []
    MEETING.reset()
    pool = EnvPool(_MeetingEnv, num_envs=4, in_process=True, env_kwargs={"length": 2})
    m = _manager(tokenizer, pool, PromptGenerator(tokenizer, before), pipeline_groups=2)
    try:
        batch = m.collect(3)
        assert met == [[2, 3]] and len(batch) == 12
        # every env step of the collect ran in the one env thread (the pool is never used by two threads)
        assert len(_MeetingEnv.threads) == 12 and all(t.startswith("verlog-rollout-env") for t in _MeetingEnv.threads)
        assert batch.timing["timing_s/rollout_overlap"] > 0.0
    finally:
        m.close()
    m.close()  # idempotent
    assert pool.closed and m.collector._executor is None


class _FatalEnv(DelayedRewardEnv):
    """toy/delayed whose step and rebuild fail once :attr:`broken` is set (the pool raises EnvPoolError)."""

    broken = False

    def __init__(self, **kwargs):
        if _FatalEnv.broken:
            raise RuntimeError("the simulator is gone")
        super().__init__(**kwargs)

    def step(self, action):
        if _FatalEnv.broken:
            raise RuntimeError("the simulator is gone")
        return super().step(action)


def test_errors_of_the_env_thread_and_of_generation_reach_the_caller(tokenizer):
    _FatalEnv.broken = False
    m = _manager(tokenizer, EnvPool(_FatalEnv, num_envs=4, in_process=True), pipeline_groups=2)
    try:
        m.collect(2)
        _FatalEnv.broken = True
        with pytest.raises(EnvPoolError, match="cannot be rebuilt"):
            m.collect(2)
    finally:
        _FatalEnv.broken = False
        m.close()

    calls = []

    def down(requests):
        calls.append(len(requests))
        if len(calls) == 4:
            raise GeneratorDownError("the inference server died")

    m = _manager(tokenizer, make_env_pool("toy/delayed", 4), PromptGenerator(tokenizer, down), pipeline_groups=2)
    try:
        with pytest.raises(GeneratorDownError):
            m.collect(3)
        executor = m.collector._executor
        assert executor is not None and executor.submit(lambda: "idle").result(timeout=5) == "idle"
    finally:
        m.close()


def test_pipeline_settings_are_checked(tokenizer):
    pool = make_env_pool("toy/delayed", 4)
    try:
        with pytest.raises(GroupRolloutError, match=r"rollout\.async_mode=off"):
            _manager(tokenizer, pool, pipeline_groups=2, group_size=2)
        with pytest.raises(ValueError, match="between 1 and the 4 env slots"):
            _manager(tokenizer, pool, pipeline_groups=5)
        for groups in (None, 1):
            m = _manager(tokenizer, pool, pipeline_groups=groups, group_size=2)
            assert m.pipeline_groups is None and m.slot_groups == [[0, 1, 2, 3]]
    finally:
        pool.close()


def test_slot_groups_and_overlap():
    assert pipeline_slot_groups(5, 2) == [[0, 1], [2, 3, 4]]
    assert pipeline_slot_groups(4, 4) == [[0], [1], [2], [3]]
    # a subprocess pool steps a worker's slots one after the other: every group takes a share of every worker, so
    # one group's env half keeps all workers busy
    assert pipeline_slot_groups(16, 2, [s // 8 for s in range(16)]) == [
        [0, 1, 2, 3, 8, 9, 10, 11],
        [4, 5, 6, 7, 12, 13, 14, 15],
    ]
    assert pipeline_slot_groups(4, 2, [0, 0, 1, 1]) == [[0, 2], [1, 3]]
    workers = [s * 4 // 6 for s in range(6)]  # 6 slots in 4 workers (0, 0, 1, 2, 2, 3)
    assert pipeline_slot_groups(6, 2, workers) == [[0, 2, 3], [1, 4, 5]]
    assert pipeline_slot_groups(6, 3, [0, 0, 0, 1, 1, 1]) == [[0, 3], [1, 4], [2, 5]]
    with pytest.raises(ValueError):
        pipeline_slot_groups(2, 3)
    assert overlap_seconds([(0, 2), (3, 5)], [(1, 4)]) == 2.0
    assert overlap_seconds([(0, 1)], [(1, 2)]) == 0.0


def _pipelined_toy_rollout(tokenizer, **settings) -> RolloutManager:
    """build_rollout on toy/delayed: 4 slots in 2 pipeline groups, this file's prompt-hash generator; ``settings``
    replace any argument."""
    defaults = dict(
        env_id="toy/delayed",
        env_kwargs={},
        tasks=None,
        num_slots=4,
        tokenizer=tokenizer,
        generator=PromptGenerator(tokenizer),
        sampling=SamplingConfig(max_tokens=8),
        memory=MemoryConfig(n=2),
        max_prompt_tokens=512,
        pipeline_groups=2,
    )
    return build_rollout(**{**defaults, **settings})


def test_build_rollout_passes_pipeline_groups(tokenizer):
    rollout = _pipelined_toy_rollout(tokenizer, env_kwargs={"length": 2})
    try:
        assert rollout.slot_groups == [[0, 1], [2, 3]] and len(rollout.collect(2)) == 8
    finally:
        rollout.close()
    with pytest.raises(GroupRolloutError):
        _pipelined_toy_rollout(tokenizer, group_size=2)
