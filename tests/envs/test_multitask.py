"""MultiTaskEnv and the pool's next-episode options: slots switch tasks as the main process tells them, auto-reset and
crash recovery use those options, states round-trip."""

from __future__ import annotations

import warnings

import faulty_envs
import pytest
from faulty_envs import Corridor, FaultyCorridor
from gymnasium.utils.env_checker import check_env

import envs
from envs.errors import EnvStateError
from envs.multitask import MULTITASK_ENV_ID, MultiTaskEnv, UnknownTaskError, task_env_ids
from envs.pool import EnvPool

faulty_envs.register_test_envs()

# Corridors of two lengths: the observation names the goal cell, so it shows which task an episode plays.
TASKS = {
    "short": {"env_id": FaultyCorridor, "kwargs": {"length": 3}},
    "long": {"env_id": FaultyCorridor, "kwargs": {"length": 8}},
}
GOAL = {"short": "goal is cell 2", "long": "goal is cell 7"}


def _task_of(obs) -> str:
    return next(name for name, text in GOAL.items() if text in obs.text)


def _finish(pool: EnvPool, slot: int, other: str = "left", limit: int = 20) -> list:
    """Step with ``right`` in ``slot`` (``other`` elsewhere) until its episode ends; the results of that step."""
    for _ in range(limit):
        actions = [other] * pool.num_envs
        actions[slot] = "right"
        results = pool.step(actions)
        if results[slot][2] or results[slot][3]:
            return results
    raise AssertionError(f"slot {slot}'s episode did not end in {limit} steps")


# --------------------------------------------------------------------------------------------- the env alone
def test_reset_switches_task_and_info_names_it() -> None:
    env = envs.make(MULTITASK_ENV_ID, tasks=TASKS)
    assert env.env_id == MULTITASK_ENV_ID and env.task_names == ("short", "long")
    obs, info = env.reset(seed=0, options={"task": "long"})
    assert info["task"] == "long" and _task_of(obs) == "long" and env.task == "long"
    assert env.actions == FaultyCorridor.base_actions and "corridor" in env.instruction  # the active env's
    _, _, _, _, info = env.step("right")
    assert info["task"] == "long"
    obs, info = env.reset(seed=1, options={"task": "short"})
    assert info["task"] == "short" and _task_of(obs) == "short"
    obs, info = env.reset(seed=2)  # no task named: the current one goes on
    assert info["task"] == "short"
    assert env.task_ids == {"short": "faulty_envs:FaultyCorridor", "long": "faulty_envs:FaultyCorridor"}


def test_tasks_by_env_id_with_shared_and_own_kwargs() -> None:
    tasks = {"easy": {"env_id": "toy/delayed", "kwargs": {"length": 2}}, "hard": "toy/delayed"}
    env = MultiTaskEnv(tasks, env_kwargs={"length": 6, "parse_mode": "lenient"}, task="hard")
    env.reset(seed=0)
    assert env.task == "hard" and env.max_steps == 6 and env.parse_mode == "lenient"
    env.reset(seed=0, options={"task": "easy"})
    assert env.max_steps == 2 and env.parse_mode == "lenient"  # the task's kwargs override the shared ones
    assert task_env_ids(["toy/delayed"]) == {"toy/delayed": "toy/delayed"}


def test_unknown_tasks_are_named_errors() -> None:
    env = MultiTaskEnv(TASKS)
    with pytest.raises(UnknownTaskError, match="Did you mean: long"):
        env.reset(seed=0, options={"task": "lnog"})
    with pytest.raises(envs.UnknownEnvError, match="toy/delayed"):
        MultiTaskEnv({"a": "toy/delaed"})
    with pytest.raises(UnknownTaskError, match="at least one task"):
        MultiTaskEnv({})
    with pytest.raises(EnvStateError, match="before reset"):
        env.step("right")


def test_gymnasium_env_checker() -> None:
    env = MultiTaskEnv({"a": Corridor, "b": {"env_id": Corridor, "kwargs": {"length": 5}}})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", message=".*not having a spec.*")
        check_env(env, skip_render_check=True)


def test_state_round_trips_into_a_fresh_env() -> None:
    env = MultiTaskEnv(TASKS)
    env.reset(seed=3, options={"task": "long"})
    env.step("left")
    state = env.get_state()
    expected = [env.step(a)[0].text for a in ("right", "right", "left")]

    other = MultiTaskEnv(TASKS)
    other.reset(seed=9, options={"task": "short"})
    other.set_state(state)
    assert other.task == "long" and other.last_observation is not None
    assert [other.step(a)[0].text for a in ("right", "right", "left")] == expected


def test_a_foreign_or_corrupted_state_is_refused_and_changes_nothing() -> None:
    env = MultiTaskEnv(TASKS)
    env.reset(seed=3, options={"task": "long"})
    state = env.get_state()
    other = MultiTaskEnv({"short": TASKS["short"]})
    other.reset(seed=1)
    before = other.last_observation
    with pytest.raises(EnvStateError, match="same tasks"):
        other.set_state(state)
    corrupted = state[:-3] + bytes(b ^ 1 for b in state[-3:])
    with pytest.raises(EnvStateError, match="corrupted"):
        env.set_state(corrupted)
    with pytest.raises(EnvStateError, match="not a MultiTaskEnv state"):
        env.set_state(b"junk")
    assert other.task == "short" and other.last_observation == before


# --------------------------------------------------------------------------------------------- in a pool
def test_auto_reset_uses_the_options_set_before_the_step() -> None:
    with EnvPool(MULTITASK_ENV_ID, num_envs=3, env_kwargs={"tasks": TASKS}, in_process=True) as pool:
        first = pool.reset(seeds=0, options={"task": "short"})
        assert [info["task"] for _, info in first] == ["short"] * 3
        assert [pool.episode_task(i) for i in range(3)] == ["short"] * 3
        pool.set_next_options(1, {"task": "long"})
        assert pool.next_options(1) == {"task": "long"} and pool.next_options(0) is None
        results = _finish(pool, 1)
        obs, _, _, _, info = results[1]
        assert info["final_info"]["task"] == "short"  # the episode that ended
        assert info["task"] == "long" and _task_of(obs) == "long" and pool.episode_task(1) == "long"
        pool.set_next_options(1, {"task": "short"})  # chosen after the step: for the episode after this one
        assert pool.episode_task(1) == "long"
        assert _task_of(pool.step(["left"] * 3)[1][0]) == "long"
        results = _finish(pool, 1)
        assert results[1][4]["final_info"]["task"] == "long" and results[1][4]["task"] == "short"
        assert [pool.episode_task(i) for i in (0, 2)] == ["short", "short"]  # untouched slots keep their task


def test_slots_switch_tasks_as_told_over_many_episodes() -> None:
    with EnvPool(MULTITASK_ENV_ID, num_envs=2, env_kwargs={"tasks": TASKS}, in_process=True) as pool:
        pool.reset(seeds=5, options=[{"task": "short"}, {"task": "long"}])
        plan = ["long", "short", "short", "long", "short"]
        played = []
        for task in plan:
            pool.set_next_options(0, {"task": task})
            results = _finish(pool, 0, other="right")
            played.append(results[0][4]["task"])
            assert _task_of(results[0][0]) == task == pool.episode_task(0)
        assert played == plan


def test_crash_recovery_keeps_the_tasks() -> None:
    """An env that raises ends only its slot's episode (the next one gets the chosen task); a worker that dies is
    replaced and its other slot's episode (started by an auto-reset with a chosen task) is replayed unchanged."""
    with EnvPool(MULTITASK_ENV_ID, num_envs=2, num_workers=1, env_kwargs={"tasks": TASKS}, step_timeout=10) as pool:
        pool.reset(seeds=11, options={"task": "short"})
        pool.set_next_options(1, {"task": "long"})
        _finish(pool, 1)  # slot 1 now plays "long", started by the worker's auto-reset
        assert pool.episode_task(1) == "long"
        pool.set_next_options(0, {"task": "long"})
        results = pool.step(["crash", "left"])
        obs, _, _, truncated, info = results[0]
        assert truncated and "injected crash" in info["env_error"]
        assert info["final_info"]["task"] == "short" and info["task"] == "long" and _task_of(obs) == "long"
        assert pool.episode_task(0) == "long"
        step_before = results[1][4]["episode_step"]

        pool.set_next_options(0, {"task": "short"})
        pid = pool.worker_pids()[0]
        results = pool.step(["exit", "left"])  # os._exit in slot 0: the worker dies
        assert pool.worker_pids()[0] != pid and pool.stats["worker_restarts"] == 1
        obs, _, _, truncated, info = results[0]
        assert truncated and info["final_info"]["task"] == "long" and _task_of(obs) == "short"
        obs, _, _, _, info = results[1]
        assert "env_error" not in info, info.get("env_error")  # replayed with its task, so the replay matched
        assert info["task"] == "long" and _task_of(obs) == "long" and info["episode_step"] == step_before + 1


def test_slot_states_keep_tasks_and_next_options() -> None:
    kwargs = {"tasks": TASKS}
    with EnvPool(MULTITASK_ENV_ID, num_envs=2, num_workers=2, env_kwargs=kwargs) as pool:
        pool.reset(seeds=21, options=[{"task": "long"}, {"task": "short"}])
        pool.step(["left", "right"])
        pool.set_next_options(0, {"task": "short"})
        pool.set_next_options(1, {"task": "long"})
        states = pool.slot_states()
        expected = [pool.step(["right", "right"]) for _ in range(8)]
        tasks = [pool.episode_task(i) for i in range(2)]
    with EnvPool(MULTITASK_ENV_ID, num_envs=2, env_kwargs=kwargs, in_process=True) as resumed:
        resumed.restore_slots(states)
        assert [resumed.episode_task(i) for i in range(2)] == ["long", "short"]
        assert resumed.next_options(0) == {"task": "short"} and resumed.next_options(1) == {"task": "long"}
        got = [resumed.step(["right", "right"]) for _ in range(8)]
        assert [[r[0].text for r in step] for step in got] == [[r[0].text for r in step] for step in expected]
        assert [[r[4].get("task") for r in step] for step in got] == [
            [r[4].get("task") for r in step] for step in expected
        ]
        assert [resumed.episode_task(i) for i in range(2)] == tasks
    other = {"tasks": {"short": TASKS["short"]}}
    with EnvPool(MULTITASK_ENV_ID, num_envs=2, env_kwargs=other, in_process=True) as wrong:
        with pytest.raises(EnvStateError, match="same tasks"):
            wrong.restore_slots(states)


def test_set_next_options_checks_its_input() -> None:
    with EnvPool(MULTITASK_ENV_ID, num_envs=2, env_kwargs={"tasks": TASKS}, in_process=True) as pool:
        with pytest.raises(IndexError, match="out of range"):
            pool.set_next_options(2, {"task": "long"})
        with pytest.raises(TypeError, match="dict or None"):
            pool.set_next_options(0, "long")
        options = {"task": "long"}
        pool.set_next_options(0, options)
        options["task"] = "short"  # the pool keeps its own copy
        assert pool.next_options(0) == {"task": "long"}
        pool.set_next_options(0, None)
        assert pool.next_options(0) is None
