"""Bad env outputs and bad states end or refuse only what they concern (issue 15; docs/errors.md).

- an observation that is not text, a non-finite reward, an info that is not a dict: that slot's episode is truncated
  with ``info["env_error"]`` starting ``EnvOutputError:`` (counted in ``stats["env_errors"]``), the others go on;
- ``TextEnv.set_state`` checks a checksum, the env's kind and id, and leaves the env unchanged when it refuses;
- ``EnvPool.restore_slots`` refuses a state of another env id or a corrupted one, restoring all slots or none;
- ``EnvPool.reset`` names the slot of a bad seed.
"""

from __future__ import annotations

import pickle

import bad_envs
import faulty_envs
import pytest

import envs
from envs.core import STATE_HEADER
from envs.errors import EnvStateError
from envs.pool import EnvPool

faulty_envs.register_test_envs()


def _texts(results: list) -> list[str]:
    return [r[0].text for r in results]


def _flip(data: bytes, at: int = -20) -> bytes:
    """``data`` with one bit flipped near its end."""
    out = bytearray(data)
    out[at] ^= 0x01
    return bytes(out)


@pytest.mark.parametrize("in_process", [True, False], ids=["in_process", "workers"])
def test_bad_outputs_end_only_their_slot(in_process: bool) -> None:
    n = 6
    kwargs = {"in_process": in_process, "num_workers": 1 if in_process else 2}
    with (
        EnvPool(bad_envs.BadOutputCorridor, num_envs=n, **kwargs) as pool,
        EnvPool(faulty_envs.Corridor, num_envs=n, in_process=True) as reference,
    ):
        assert _texts(pool.reset(seeds=3)) == [obs.text for obs, _ in reference.reset(seeds=3)]
        actions = ["right", "intobs", "nanreward", "infreward", "noneinfo", "strobs"]
        got = pool.step(actions)
        want = reference.step(["right", "left", "left", "left", "left", "left"])
        expected = {
            1: "EnvOutputError: the env's step() returned an observation of type int (42)",
            2: "EnvOutputError: the env's step() returned a non-finite reward (nan)",
            3: "EnvOutputError: the env's step() returned a non-finite reward (inf)",
            4: "EnvOutputError: the env's step() returned an info of type NoneType, not a dict",
        }
        for slot, message in expected.items():
            obs, reward, terminated, truncated, info = got[slot]
            assert info["env_error"].startswith(message), info["env_error"]
            assert (reward, terminated, truncated) == (0.0, False, True)
            assert info["final_info"]["env_error"] == info["env_error"]
            assert "episode_step" in info and obs.text.startswith("You are in cell")  # a fresh episode started
        for slot in (0, 5):  # untouched; a plain str observation is wrapped in a TextObservation
            assert "env_error" not in got[slot][4]
            assert got[slot][0].text == want[slot][0].text and got[slot][1:4] == want[slot][1:4]
        assert pool.stats["env_errors"] == 4
        after = pool.step(["right"] * n)
        assert not any("env_error" in r[4] for r in after)
        assert after[0][0].text == reference.step(["right"] * n)[0][0].text


def test_reset_names_the_slot_of_a_bad_seed() -> None:
    with EnvPool("test/corridor", num_envs=2, in_process=True) as pool:
        with pytest.raises(ValueError, match=r"the seed of slot 0 \(test/corridor\) is -1: seeds are integers >= 0"):
            pool.reset(seeds=[-1, 0])
        with pytest.raises(ValueError, match=r"slot 1 .* is 'x'"):
            pool.reset(seeds=[0, "x"])
        with pytest.raises(ValueError, match=r"reset\(seeds=...\) is -5"):
            pool.reset(seeds=-5)
        assert len(pool.reset(seeds=[0, 1])) == 2  # the pool is still usable
    with pytest.raises(ValueError, match=r"EnvPool\(seed=...\) is -1"):
        EnvPool("test/corridor", num_envs=1, in_process=True, seed=-1)


# ------------------------------------------------------------------------------------------------ TextEnv states
def _playing(env_id: str, seed: int = 0, steps: int = 2, **kwargs):
    env = envs.make(env_id, **kwargs)
    env.reset(seed=seed)
    for _ in range(steps):
        env.step(env.actions[0])
    return env


def _unchanged(env, action: str) -> None:
    """``env`` still plays the episode it had: a twin restored from a state taken before steps the same."""
    twin = envs.make(env.env_id)
    twin.set_state(env.get_state())
    assert env.step(action)[:4] == twin.step(action)[:4]


def test_babyai_state_of_another_task_is_refused_and_the_env_is_unchanged() -> None:
    goto, pickup = _playing("babyai/goto"), _playing("babyai/pickup", seed=1)
    before = pickup.last_observation
    with pytest.raises(EnvStateError, match=r"saved by env 'babyai/goto', this env is 'babyai/pickup'"):
        pickup.set_state(goto.get_state())
    assert pickup.last_observation == before and "pick up" in pickup.instruction
    _unchanged(pickup, "go forward")
    # built without the registry (no env id), the task is still checked: it is part of the env's kind
    from envs.babyai.env import BabyAITextEnv

    bare = BabyAITextEnv("pickup")
    with pytest.raises(EnvStateError, match=r"BabyAITextEnv\[goto\] env"):
        bare.set_state(goto.get_state())


def test_a_state_of_another_game_is_refused() -> None:
    pytest.importorskip("crafter")
    crafter, babyai = _playing("crafter/default", steps=1), _playing("babyai/goto")
    with pytest.raises(EnvStateError, match=r"saved by env 'crafter/default', this env is 'babyai/goto'"):
        babyai.set_state(crafter.get_state())
    _unchanged(babyai, "turn left")
    babyai.env_id = None  # built without the registry: the kind (class) still differs
    with pytest.raises(EnvStateError, match=r"the state is of a envs\.crafter\..* env \(id 'crafter/default'\)"):
        babyai.set_state(crafter.get_state())


@pytest.mark.parametrize("env_id", ["babaisai/two_room-goto_win", "crafter/default", "babyai/goto"])
def test_a_corrupted_state_is_refused(env_id: str) -> None:
    env = _playing(env_id, steps=1)
    state = env.get_state()
    assert state.startswith(STATE_HEADER)
    for at in (-1, len(STATE_HEADER) + 40, len(state) // 2):
        with pytest.raises(EnvStateError, match=r"corrupted .*checksum"):
            envs.make(env_id).set_state(_flip(state, at))
    envs.make(env_id).set_state(state)  # the intact state loads


def test_a_state_missing_keys_is_refused_and_a_failing_restore_is_undone() -> None:
    env = _playing("babyai/goto", seed=3)
    with pytest.raises(EnvStateError, match="not a TextEnv state"):
        env.set_state(pickle.dumps({"game": {}, "episode_step": 1}))
    with pytest.raises(EnvStateError, match="a state is the bytes get_state"):
        env.set_state({"game": {}})  # type: ignore[arg-type]
    # a well-formed state whose game part the game cannot take: the restore fails half-way and is rolled back
    other = _playing("babyai/goto", seed=9)
    payload = pickle.loads(other.get_state()[len(STATE_HEADER) + 32 :])
    del payload["game"]["solved"]
    import hashlib

    body = pickle.dumps(payload)
    broken = STATE_HEADER + hashlib.sha256(body).digest() + body
    mission = env.mission
    with pytest.raises(EnvStateError, match=r"KeyError.*the env is unchanged"):
        env.set_state(broken)
    assert env.mission == mission and env.episode_step == 2
    _unchanged(env, "go forward")


# ------------------------------------------------------------------------------------------------ pool states
def test_pool_refuses_a_state_of_another_env_id_or_a_corrupted_one() -> None:
    with (
        EnvPool(["test/corridor", "test/faulty"], in_process=True) as saved,
        EnvPool(["test/faulty", "test/corridor"], in_process=True) as pool,
        EnvPool(["test/faulty", "test/corridor"], in_process=True) as reference,
    ):
        saved.reset(seeds=5)
        states = saved.slot_states()  # slot 0: test/corridor, slot 1: test/faulty
        corridor_env_state = envs.make("test/corridor")
        corridor_env_state.reset(seed=1)
        pool.reset(seeds=7)
        reference.reset(seeds=7)
        with pytest.raises(EnvStateError, match=r"slot 0 was saved from env 'test/corridor', but slot 0 holds"):
            pool.restore_slots(states)
        with pytest.raises(EnvStateError, match="the state for slot 0 is corrupted"):
            pool.restore_slots([_flip(states[1])], slots=[0])
        # all or nothing: slot 1 takes a good state, slot 0's env refuses a TextEnv state of another env; the pool
        # rolls slot 1 back, so both slots go on with the episodes they had
        with pytest.raises(EnvStateError, match=r"set_state failed for slot 0 \(test/faulty\)"):
            pool.restore_slots([corridor_env_state.get_state(), states[0]])
        for _ in range(3):
            assert _texts(pool.step(["right", "right"])) == _texts(reference.step(["right", "right"]))
        pool.restore_slots([states[1], states[0]])  # matching states load
        assert _texts(pool.step(["right", "right"])) == _texts(saved.step(["right", "right"]))[::-1]
