"""``slow`` (envs.slow.SlowEnv): any env that waits a set time per step and reset (a sleep), otherwise the inner
env: the same observations, rewards and infos for the same seed and actions, its instruction, limits and states."""

from __future__ import annotations

import time

import pytest

import envs
from envs.errors import EnvStateError
from envs.pool import EnvPool
from envs.slow import SLOW_ENV_ID, SlowEnv

ACTIONS = ["go forward", "turn left", "fly away", "go forward", "turn right", "go forward", "go forward"]


def _play(env, seed: int, actions: list[str]) -> list:
    out = [env.reset(seed=seed)]
    for action in actions:
        obs, reward, terminated, truncated, info = env.step(action)
        out.append((obs, reward, terminated, truncated, info))
        if terminated or truncated:
            out.append(env.reset(seed=seed + 1))
    return out


def test_it_plays_the_inner_env_with_its_kwargs() -> None:
    slow = envs.make(SLOW_ENV_ID, inner="babyai/goto", step_delay_s=0.0, max_steps=3)
    inner = envs.make("babyai/goto", max_steps=3)
    assert isinstance(slow, SlowEnv) and slow.max_steps == inner.max_steps == 3
    assert _play(slow, 4, ACTIONS) == _play(inner, 4, ACTIONS)  # episodes end at the 3-step limit and restart
    assert slow.instruction == inner.instruction and slow.actions == inner.actions
    assert slow.last_observation == inner.last_observation
    assert slow.parse("ACTION: go forward") == inner.parse("ACTION: go forward")


def test_steps_and_resets_wait_without_using_the_cpu() -> None:
    env = SlowEnv("toy/delayed", step_delay_s=0.2, reset_delay_s=0.1)
    wall, cpu = time.monotonic(), time.process_time()
    env.reset(seed=0)
    assert time.monotonic() - wall >= 0.1
    wall = time.monotonic()
    for _ in range(2):
        env.step("go forward")
    assert time.monotonic() - wall >= 0.4
    assert time.process_time() - cpu < 0.2  # a sleep: 0.5 s waited, next to no CPU time
    assert SlowEnv("toy/delayed", step_delay_s=0.05).reset_delay_s == 0.05  # the step delay by default


def test_its_state_is_the_inner_envs_and_round_trips() -> None:
    env = SlowEnv("babyai/goto", step_delay_s=0.0)
    env.reset(seed=7)
    env.step("go forward")
    state = env.get_state()
    expected = [env.step(a) for a in ACTIONS[:3]]
    fresh = SlowEnv("babyai/goto", step_delay_s=0.0)
    fresh.set_state(state)
    assert [fresh.step(a) for a in ACTIONS[:3]] == expected
    plain = envs.make("babyai/goto")  # the state is babyai/goto's own: the inner env restores it anywhere
    plain.set_state(state)
    assert plain.step(ACTIONS[0]) == expected[0]
    with pytest.raises(EnvStateError):
        SlowEnv("toy/delayed", step_delay_s=0.0).set_state(state)


def test_in_a_worker_pool_it_matches_the_inner_env_and_restores() -> None:
    kwargs = {"inner": "toy/delayed", "step_delay_s": 0.01, "length": 3}
    with (
        EnvPool(SLOW_ENV_ID, num_envs=2, num_workers=1, env_kwargs=kwargs) as pool,
        EnvPool("toy/delayed", num_envs=2, in_process=True, env_kwargs={"length": 3}) as ref,
    ):
        assert pool.reset(seeds=3) == ref.reset(seeds=3)
        for step in range(4):
            actions = ["go forward", "turn left" if step % 2 else "go forward"]
            assert pool.step(actions) == ref.step(actions)
        assert pool.instruction(1) == ref.instruction(1) and pool.get_attr(0, "max_steps") == 3
        states = pool.slot_states()
        expected = [pool.step(["go forward", "go forward"]) for _ in range(4)]
        with EnvPool(SLOW_ENV_ID, num_envs=2, in_process=True, env_kwargs=kwargs) as again:
            again.restore_slots(states)
            assert [again.step(["go forward", "go forward"]) for _ in range(4)] == expected


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="inner='babyai/goto'"):
        envs.make(SLOW_ENV_ID, step_delay_s=0.1)
    with pytest.raises(ValueError, match="step_delay_s must be a number of seconds >= 0"):
        SlowEnv("toy/delayed", step_delay_s=-1)
    with pytest.raises(ValueError, match="reset_delay_s"):
        SlowEnv("toy/delayed", reset_delay_s=float("nan"))
    with pytest.raises(envs.UnknownEnvError):
        SlowEnv("babyai/gotoo")
