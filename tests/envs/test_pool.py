"""EnvPool on real envs: same results as in-process stepping, auto-reset, injected faults, states, no leftovers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import faulty_envs
import psutil
import pytest

import envs
from envs.errors import EnvStateError, UnknownEnvError
from envs.pool import EnvPool, EnvPoolError

faulty_envs.register_test_envs()
HERE = Path(__file__).resolve().parent


def _available(env_id: str) -> bool:
    try:
        return env_id in envs.list_envs()
    except Exception:  # a game package still being written must not break the pool tests
        return False


def _walk(step: int, n: int) -> list[str]:
    """A fixed, varied action pattern: mostly right, some left."""
    return ["left" if (step * 7 + i * 3) % 5 == 0 else "right" for i in range(n)]


def _alive(pids: list[int]) -> list[int]:
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            pass
    return out


def _texts(results: list) -> list[str]:
    return [r[0].text for r in results]


@pytest.fixture(scope="module")
def faulty_pool():
    """4 faulty corridors in 2 workers (slots 0,1 in worker 0; 2,3 in worker 1), shared by the fault tests."""
    with EnvPool("test/faulty", num_envs=4, num_workers=2, step_timeout=3.0) as pool:
        yield pool


def test_subprocess_pool_matches_in_process_with_autoreset() -> None:
    ids = ["test/corridor"] * 3 + ["test/frozen_lake"] * 3
    with EnvPool(ids, num_workers=2) as pool, EnvPool(ids, in_process=True) as local:
        assert _texts_reset(pool.reset(seeds=11)) == _texts_reset(local.reset(seeds=11))
        ended = 0
        for step in range(40):
            actions = _walk(step, 6)
            actions[3:] = ["right", "down", "up"] if step % 3 else ["down", "right", "left"]
            got, want = pool.step(actions), local.step(actions)
            assert _texts(got) == _texts(want)
            assert [r[1:4] for r in got] == [r[1:4] for r in want]
            for _, _, terminated, truncated, info in got:
                if terminated or truncated:
                    ended += 1
                    assert isinstance(info["final_observation"], envs.TextObservation)
                    assert info["final_info"]["episode_step"] >= 1 and "success" in info["final_info"]
                    assert info["episode_step"] == 0  # obs and info start the next episode
                else:
                    assert "final_observation" not in info
        assert ended >= 5


def _texts_reset(results: list) -> list[str]:
    return [obs.text for obs, _ in results]


def test_autoreset_keeps_final_observation_and_seeds_next_episode() -> None:
    with EnvPool("test/corridor", num_envs=2, in_process=True, env_kwargs={"length": 3}) as pool:
        pool.reset(seeds=[5, 6])
        single = envs.make("test/corridor", length=3)
        single.reset(seed=5)
        for _ in range(10):
            obs, reward, terminated, _, info = pool.step(["right", "left"])[0]
            s_obs, s_reward, s_term, _, _ = single.step("right")
            assert reward == s_reward and terminated == s_term
            if terminated:
                assert info["final_observation"] == s_obs
                assert info["final_info"]["success"] is True and info["final_info"]["raw_action"] == "right"
                break
            assert obs == s_obs
        else:
            pytest.fail("the corridor episode never ended")
        # The next episode's seed comes from a stream seeded with 5: the same in a second pool.
        with EnvPool("test/corridor", num_envs=2, in_process=True, env_kwargs={"length": 3}) as again:
            again.reset(seeds=[5, 6])
            while not again.step(["right", "left"])[0][2]:
                pass
            assert again.step(["left", "left"])[0][0] == pool.step(["left", "left"])[0][0]


def test_injected_crash_ends_only_that_episode(faulty_pool: EnvPool) -> None:
    _check_fault(faulty_pool, fault="crash", slot=1, error_text="RuntimeError: injected crash")
    assert faulty_pool.stats == {"worker_restarts": 0, "env_errors": 1}


def test_injected_exit_restarts_worker_and_neighbours_continue(faulty_pool: EnvPool) -> None:
    before = faulty_pool.worker_pids()
    _check_fault(faulty_pool, fault="exit", slot=0, error_text="died (exit code 3)")
    after = faulty_pool.worker_pids()
    assert after[0] != before[0] and after[1] == before[1]
    assert not _alive([before[0]])


def test_injected_hang_times_out_and_neighbours_continue(faulty_pool: EnvPool) -> None:
    before = faulty_pool.worker_pids()
    start = time.monotonic()
    _check_fault(faulty_pool, fault="hang", slot=3, error_text="step_timeout=3.0s")
    assert time.monotonic() - start < 20
    after = faulty_pool.worker_pids()
    assert after[1] != before[1] and after[0] == before[0]
    assert not _alive([before[1]])


def test_timeout_is_per_env_call_not_per_batch(faulty_pool: EnvPool) -> None:
    """Two 0.6 s steps in one worker's batch (1.2 s) under a 1 s step_timeout: slow, not hung."""
    faulty_pool.reset(seeds=2)
    faulty_pool.step_timeout = 1.0
    try:
        result = faulty_pool.step(["slow", "slow", "left", "left"])
    finally:
        faulty_pool.step_timeout = 3.0
    assert all("env_error" not in r[4] for r in result)
    assert [r[4]["action"] for r in result] == ["slow", "slow", "left", "left"]


def test_unpicklable_info_is_reported_once_and_the_slot_goes_on(faulty_pool: EnvPool) -> None:
    """(More bad env outputs: tests/envs/test_pool_faults.py.)"""
    with EnvPool("test/corridor", num_envs=4, in_process=True) as reference:
        faulty_pool.reset(seeds=1)
        reference.reset(seeds=1)
        with pytest.warns(RuntimeWarning, match=r"slot 1 \(test/faulty\): info values \['callback'\]"):
            got = faulty_pool.step(["right", "unpicklable", "right", "right"])
        assert _texts(got) == _texts(reference.step(["right", "left", "right", "right"]))  # it moved left
        assert got[1][4]["callback"] == "<not picklable: function>" and "env_error" not in got[1][4]
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # reported once: no second warning for that slot
            got = faulty_pool.step(["right", "unpicklable", "right", "right"])
        assert _texts(got) == _texts(reference.step(["right", "left", "right", "right"]))
        assert faulty_pool.stats["info_not_picklable"] == 2
        del faulty_pool.stats["info_not_picklable"]  # the shared pool's other tests count from here


def _check_fault(pool: EnvPool, fault: str, slot: int, error_text: str) -> None:
    """Step a few times, inject ``fault`` in ``slot``, then check every other slot against an in-process reference."""
    with EnvPool("test/corridor", num_envs=4, in_process=True) as reference:
        assert _texts_reset(pool.reset(seeds=100)) == _texts_reset(reference.reset(seeds=100))
        for step in range(3):
            actions = _walk(step, 4)
            assert _texts(pool.step(actions)) == _texts(reference.step(actions))
        actions = _walk(3, 4)
        before = pool.step(["left"] * 4)  # remember the faulty slot's last observation
        reference.step(["left"] * 4)
        faulty_actions = list(actions)
        faulty_actions[slot] = fault
        got = pool.step(faulty_actions)
        want = reference.step(actions)
        for i in range(4):
            if i == slot:
                obs, reward, terminated, truncated, info = got[i]
                assert (reward, terminated, truncated) == (0.0, False, True)
                assert error_text in info["env_error"] and error_text in info["final_info"]["env_error"]
                assert info["final_observation"] == before[i][0]
                assert info["final_info"]["raw_action"] == fault and info["episode_step"] == 0
                assert obs.text.startswith("You are in cell")
            else:
                assert got[i][0] == want[i][0] and got[i][1:4] == want[i][1:4]
                assert "env_error" not in got[i][4]
        # The pool goes on: the faulty slot plays its new episode, the others theirs.
        for step in range(3):
            result = pool.step(_walk(step, 4))
            assert all("env_error" not in r[4] for r in result)


def test_worker_killed_from_outside_is_replaced_and_episodes_replayed() -> None:
    ids = ["test/corridor", "test/corridor", "test/frozen_lake", "test/corridor"]
    kwargs = [{}, {}, {"parse_mode": "strict"}, {}]
    with (
        EnvPool(ids, num_workers=2, env_kwargs=kwargs) as pool,
        EnvPool(ids, env_kwargs=kwargs, in_process=True) as ref,
    ):
        pool.reset(seeds=7)
        ref.reset(seeds=7)
        for step in range(5):
            actions = ["right", "left", "down" if step % 2 else "right", "right"]
            assert _texts(pool.step(actions)) == _texts(ref.step(actions))
        old = pool.worker_pids()
        os.kill(old[1], signal.SIGKILL)
        psutil.Process(old[1]).wait(5)
        actions = ["right", "right", "down", "left"]
        got, want = pool.step(actions), ref.step(actions)
        # No slot was stepping when the worker died: every episode is rebuilt by replay and goes on unchanged.
        assert _texts(got) == _texts(want) and all("env_error" not in r[4] for r in got)
        assert pool.worker_pids()[1] != old[1]


def test_env_that_cannot_be_replayed_loses_its_episode_only() -> None:
    ids = ["test/corridor", "test/unseeded", "test/corridor"]
    with EnvPool(ids, num_workers=1, step_timeout=5) as pool:
        pool.reset(seeds=3)
        pool.step(["right", "right", "left"])
        os.kill(pool.worker_pids()[0], signal.SIGKILL)
        with EnvPool(["test/corridor"] * 3, in_process=True) as ref:
            ref.reset(seeds=3)
            ref.step(["right", "right", "left"])
            got, want = pool.step(["left"] * 3), ref.step(["left"] * 3)
        assert "not deterministic" in got[1][4]["env_error"] and got[1][3] is True
        assert got[0][0] == want[0][0] and got[2][0] == want[2][0]
        assert "env_error" not in got[0][4] and "env_error" not in got[2][4]


def test_interrupted_step_is_undone_on_the_next_call() -> None:
    pool = EnvPool("test/faulty", num_envs=3, in_process=True)
    ref = EnvPool("test/corridor", num_envs=3, in_process=True)
    with pool, ref:
        assert _texts_reset(pool.reset(seeds=9)) == _texts_reset(ref.reset(seeds=9))
        for step in range(3):
            assert _texts(pool.step(_walk(step, 3))) == _texts(ref.step(_walk(step, 3)))
        with pytest.raises(KeyboardInterrupt):
            pool.step(["right", "interrupt", "right"])  # slot 0 has stepped when slot 1 is interrupted
        for step in range(3, 8):
            assert _texts(pool.step(_walk(step, 3))) == _texts(ref.step(_walk(step, 3)))
        assert pool.stats == {"worker_restarts": 1, "env_errors": 0}


def test_slot_states_restore_in_new_processes() -> None:
    ids = ["test/corridor", "test/frozen_lake", "test/corridor"]
    with EnvPool(ids, num_workers=2, seed=1) as pool:
        pool.reset()
        for step in range(4):
            last = pool.step(_walk(step, 3))
        states = pool.slot_states()
        instruction = pool.instruction(1)
        expected = [pool.step(_walk(step, 3)) for step in range(12)]  # crosses episode ends: seeds must match too
        assert pool.get_attr(0, "actions") == ["left", "right"]
    with EnvPool(ids, num_workers=1) as fresh:  # another process layout
        observations = fresh.restore_slots(states)
        assert observations == [r[0] for r in last]
        assert fresh.instruction(1) == instruction
        got = [fresh.step(_walk(step, 3)) for step in range(12)]
    assert [_texts(r) for r in got] == [_texts(r) for r in expected]
    assert [[x[1:4] for x in r] for r in got] == [[x[1:4] for x in r] for r in expected]


def test_api_misuse_gives_clear_errors() -> None:
    pool = EnvPool("test/corridor", num_envs=2, in_process=True)
    with pytest.raises(EnvStateError, match="before reset"):
        pool.step(["left", "left"])
    pool.reset()
    with pytest.raises(ValueError, match=r"one action string per env \(2\), got 3 actions"):
        pool.step(["left"] * 3)
    with pytest.raises(ValueError, match="got a single string"):
        pool.step("left")
    with pytest.raises(TypeError, match="action 1 must be a str"):
        pool.step(["left", 1])
    with pytest.raises(ValueError, match="3 seeds for 2 envs"):
        pool.reset(seeds=[1, 2, 3])
    with pytest.raises(IndexError, match="slot 5 is out of range"):
        pool.instruction(5)
    pool.close()
    pool.close()  # idempotent
    with pytest.raises(EnvStateError, match="closed"):
        pool.step(["left", "left"])
    with pytest.raises(UnknownEnvError, match="test/corridor"):
        EnvPool("test/coridor", num_envs=1)
    with pytest.raises(ValueError, match="cannot be sent to a spawned worker"):
        EnvPool(lambda: faulty_envs.Corridor(), num_envs=1)
    with pytest.raises(ValueError, match="num_workers must be between 1 and the number of envs"):
        EnvPool("test/corridor", num_envs=2, num_workers=3)
    with pytest.raises(EnvPoolError, match="building the env of slot 0 failed"):
        EnvPool("test/corridor", num_envs=1, env_kwargs={"no_such_arg": 1}, in_process=True)


def test_thousand_steps_then_close_leaves_no_processes() -> None:
    me = psutil.Process()
    children_before = {p.pid for p in me.children(recursive=True)}
    pool = EnvPool("test/corridor", num_envs=8, num_workers=2)
    pids = [pid for pid in pool.worker_pids() if pid is not None]
    assert len(pids) == 2 and all(pid not in children_before for pid in pids)
    pool.reset(seeds=0)
    for step in range(1000):
        pool.step(_walk(step, 8))
    pool.close()
    assert not _alive(pids)
    left = {p.pid for p in me.children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE} - children_before
    assert not left, f"processes left behind: {left}"


def test_garbage_collection_and_interpreter_exit_stop_workers() -> None:
    script = textwrap.dedent(
        f"""
        import gc, os, sys
        sys.path.insert(0, {str(HERE)!r})
        import faulty_envs
        from envs.pool import EnvPool
        faulty_envs.register_test_envs()
        if __name__ == "__main__":
            dropped = EnvPool("test/corridor", num_envs=2, num_workers=2)
            kept = EnvPool("test/corridor", num_envs=2, num_workers=2)
            kept.reset()
            print(*dropped.worker_pids(), *kept.worker_pids(), flush=True)
            del dropped
            gc.collect()
            stats = [open(f"/proc/{{p}}/stat").read().split() for p in os.listdir("/proc") if p.isdigit()]
            print(*[st[0] for st in stats if st[3] == str(os.getpid()) and st[2] != "Z"])  # live children
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    started, children = (line.split() for line in out.stdout.splitlines())
    dropped, kept = [int(p) for p in started[:2]], [int(p) for p in started[2:]]
    assert not set(children) & {str(p) for p in dropped}  # gone once the pool was garbage collected
    assert {str(p) for p in kept} <= set(children)  # the kept pool's workers were still running
    time.sleep(0.2)
    assert not _alive(dropped + kept)  # and those stopped when the interpreter exited


@pytest.mark.skipif(
    not (_available("babyai/goto") and _available("crafter/default")), reason="babyai/crafter envs not registered yet"
)
def test_real_games_in_one_pool_match_in_process() -> None:
    ids = ["babyai/goto", "babyai/goto", "crafter/default", "babyai/goto"]
    with EnvPool(ids, num_workers=2) as pool, EnvPool(ids, in_process=True) as local:
        assert _texts_reset(pool.reset(seeds=0)) == _texts_reset(local.reset(seeds=0))
        names = [pool.get_attr(i, "actions") for i in range(len(ids))]
        for step in range(30):
            actions = [a[(step * 5 + i) % len(a)] for i, a in enumerate(names)]
            got, want = pool.step(actions), local.step(actions)
            # Crafter can differ across processes after ~10 steps (docs/stack.md): compare it early only.
            slots = range(len(ids)) if step < 5 else [0, 1, 3]
            assert [got[i][0].text for i in slots] == [want[i][0].text for i in slots]
            assert [got[i][1:4] for i in slots] == [want[i][1:4] for i in slots]


def test_drawn_seeds_predicts_every_episode_seed_of_a_slot() -> None:
    """The seeds a slot's episodes get (auto-reset) are ``drawn_seeds(first seed, ...)``: evaluation relies on it to
    keep its seeds out of training's reach (verlog.trainer.config.check_config)."""
    from envs.pool import DRAWN_SEED_END, drawn_seeds

    with EnvPool("test/corridor", num_envs=2, in_process=True, env_kwargs={"length": 2}) as pool:
        pool.reset(seeds=7)
        seen: list[list[int]] = [[pool.episode_seed(0)], [pool.episode_seed(1)]]
        for step in range(30):
            for slot, (_, _, terminated, truncated, _) in enumerate(pool.step(_walk(step, 2))):
                if terminated or truncated:
                    seen[slot].append(pool.episode_seed(slot))
    for slot, seeds in enumerate(seen):
        assert len(seeds) > 3
        assert seeds == [7 + slot, *drawn_seeds(7 + slot, len(seeds) - 1).tolist()]
        assert all(0 <= s < DRAWN_SEED_END for s in seeds[1:])


@pytest.mark.parametrize("in_process", [True, False], ids=["in_process", "workers"])
def test_step_slots_steps_only_the_named_slots(in_process: bool) -> None:
    """Slots 0 and 1 (worker 0 of 2) step alone, across episode ends; slots 2 and 3 stay where a reset left them, and
    worker 1 gets no message."""
    ids = ["test/corridor", "test/frozen_lake", "test/corridor", "test/corridor"]
    layout = {"in_process": True} if in_process else {"num_workers": 2}
    with (
        EnvPool(ids, **layout) as pool,
        EnvPool(ids, in_process=True) as every,
        EnvPool(ids, in_process=True) as never,
    ):
        for p in (pool, every, never):
            p.reset(seeds=4)
        sent: list[str] = []
        if not in_process:
            other = pool._workers[1]
            send = other.send
            other.send = lambda cmd, payload: (sent.append(cmd), send(cmd, payload))[1]
        ended = 0
        for step in range(14):
            actions = _walk(step, 4)
            got = pool.step_slots({1: actions[1], 0: actions[0]})
            want = every.step(actions)
            assert list(got) == [0, 1]
            for i in (0, 1):
                assert got[i][0] == want[i][0] and got[i][1:4] == want[i][1:4]
                assert got[i][4].get("final_info") == want[i][4].get("final_info")
                ended += got[i][2] or got[i][3]
        assert ended >= 2  # the stepped slots auto-reset like step's
        assert sent == []
        assert pool.step_slots({}) == {}
        last = _walk(99, 4)
        got, want = pool.step(last), never.step(last)  # slots 2 and 3: their first step since the reset
        assert _texts(got[2:]) == _texts(want[2:]) and [r[1:4] for r in got[2:]] == [r[1:4] for r in want[2:]]
        assert sent == ([] if in_process else ["step"])  # (the hook sees worker 1's messages)
        with pytest.raises(IndexError, match="slot 4 is out of range"):
            pool.step_slots({4: "left"})
        with pytest.raises(TypeError, match="action 0 must be a str"):
            pool.step_slots({0: 1})


def test_step_slots_recovers_a_crashed_worker_and_replays_its_other_slots() -> None:
    """Slot 0's env kills its worker (slots 0 and 1) while slot 0 steps alone: slot 0's episode ends with env_error,
    slot 1 (not stepped) is rebuilt by replay and goes on unchanged, slots 2 and 3 are untouched."""
    with (
        EnvPool("test/faulty", num_envs=4, num_workers=2, step_timeout=5.0) as pool,
        EnvPool("test/corridor", num_envs=4, in_process=True) as ref,
    ):
        pool.reset(seeds=21)
        ref.reset(seeds=21)
        for step in range(2):
            assert _texts(pool.step(_walk(step, 4))) == _texts(ref.step(_walk(step, 4)))
        before = pool.worker_pids()
        got = pool.step_slots({0: "exit"})
        _, reward, terminated, truncated, info = got[0]
        assert (reward, terminated, truncated) == (0.0, False, True) and "died (exit code 3)" in info["env_error"]
        assert info["final_info"]["raw_action"] == "exit" and info["episode_step"] == 0
        after = pool.worker_pids()
        assert after[0] != before[0] and after[1] == before[1] and pool.stats["worker_restarts"] == 1
        actions = _walk(5, 4)
        got, want = pool.step(actions), ref.step(["left", *actions[1:]])
        assert _texts(got[1:]) == _texts(want[1:]) and all("env_error" not in r[4] for r in got)


def test_step_slots_reports_a_lost_unstepped_slot_at_its_next_step() -> None:
    """A worker restart that cannot replay a slot that was not stepped ends that slot's episode at its own next
    step (truncated, env_error), which does not run the action; the other slots go on."""
    with EnvPool(["test/faulty", "test/unseeded", "test/corridor"], num_workers=1, step_timeout=5.0) as pool:
        pool.reset(seeds=3)
        pool.step(["right", "right", "right"])
        got = pool.step_slots({0: "exit", 2: "left"})
        assert "env_error" in got[0][4] and "env_error" not in got[2][4]
        got = pool.step_slots({1: "right", 2: "left"})
        _, _, terminated, truncated, info = got[1]
        assert truncated and not terminated and "not deterministic" in info["env_error"]
        assert info["final_info"]["raw_action"] == "right" and info["episode_step"] == 0
        assert "env_error" not in got[2][4]
        assert "env_error" not in pool.step_slots({1: "right"})[1][4]  # its new episode plays on
