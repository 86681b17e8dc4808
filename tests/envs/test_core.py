"""The TextEnv contract shared by every game, exercised on a real game (BabyAI goto, cheap to step)."""

from __future__ import annotations

import pickle

import pytest

from envs.babyai import BabyAITextEnv
from envs.core import INFO_KEYS, INVALID_ACTION_FEEDBACK, TextObservation, TextObservationSpace
from envs.errors import EnvStateError


def test_observation_composition() -> None:
    obs = TextObservation.build("a wall 1 step forward", "Your status:\n- health: 9/9")
    assert obs.text == "Your status:\n- health: 9/9\na wall 1 step forward"
    assert TextObservation.build("x").text == "x"
    prefixed = obs.with_prefix("P\n")
    assert prefixed.long_term == "P\na wall 1 step forward" and prefixed.short_term == obs.short_term
    assert prefixed.text == "Your status:\n- health: 9/9\nP\na wall 1 step forward"
    assert TextObservationSpace().contains(obs) and not TextObservationSpace().contains("text")


def test_info_keys_on_reset_step_and_end() -> None:
    env = BabyAITextEnv("goto", max_steps=2)
    obs, info = env.reset(seed=0)
    assert set(INFO_KEYS) <= set(info) and "success" not in info
    assert info["action"] is None and info["raw_action"] is None and info["episode_step"] == 0
    assert env.observation_space.contains(obs) and env.action_space.contains("turn left")
    _, _, _, _, info = env.step("turn left")
    assert set(INFO_KEYS) <= set(info) and "success" not in info
    assert (info["action"], info["raw_action"], info["action_valid"], info["episode_step"]) == (
        "turn left",
        "turn left",
        True,
        1,
    )
    _, _, _, truncated, info = env.step("turn left")
    assert truncated and info["success"] is False and info["episode_step"] == 2


def test_invalid_answer_without_shaping_keeps_the_env_reward_and_text() -> None:
    env, reference = BabyAITextEnv("goto"), BabyAITextEnv("goto")
    env.reset(seed=2)
    reference.reset(seed=2)
    # goto seed 2: the grey key is 2 steps forward; one step forward then facing it solves the task
    out = env.step("go forward please")
    ref = reference.step("go forward")
    assert out[4]["action"] == "go forward" and out[4]["action_valid"] is False
    assert out[0] == ref[0] and out[1] == ref[1] > 0 and out[2] is True
    assert out[4]["progression"] == 1.0


def test_format_penalty_is_added_to_the_reward_so_a_success_stays_rewarded() -> None:
    env, reference = BabyAITextEnv("goto", format_penalty=0.1), BabyAITextEnv("goto")
    env.reset(seed=2)
    reference.reset(seed=2)
    obs, reward, terminated, _, info = env.step("forward!")
    _, ref_reward, _, _, _ = reference.step("go forward")
    assert terminated and info["action_valid"] is False and info["success"] is True
    assert ref_reward > 0.1 and reward == pytest.approx(ref_reward - 0.1)  # the win is kept, the penalty added
    assert not obs.text.startswith("\n\nYour previous output")  # feedback is off by default
    binary = BabyAITextEnv("goto", format_penalty=0.1, binary_reward=True)
    binary.reset(seed=2)
    assert binary.step("forward!")[1] == pytest.approx(0.9)  # binary reward first, then the penalty


def test_feedback_prefix_is_balrogs() -> None:
    assert INVALID_ACTION_FEEDBACK.format(default="Noop") == (
        "\n\nYour previous output did not contain a valid action. Defaulted to action: Noop\n\nObservation:\n"
    )


def test_parsed_output_follows_the_parse_mode() -> None:
    assert BabyAITextEnv("goto").parsed_output("Hmm. ACTION: go forward.") == "go forward"
    assert BabyAITextEnv("goto", parse_mode="naive").parsed_output("1. go") == " go"
    assert BabyAITextEnv("goto", parse_mode="lenient").parsed_output("Action: `turn left`") == "turn left"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"parse_mode": "loose"}, "parse_mode"),
        ({"format_penalty": -1.0}, "format_penalty"),
        ({"max_steps": 0}, "max_steps"),
    ],
)
def test_bad_options_are_rejected(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        BabyAITextEnv("goto", **kwargs)


def test_usage_errors() -> None:
    env = BabyAITextEnv("goto")
    with pytest.raises(EnvStateError, match="reset"):
        env.step("turn left")
    env.reset(seed=0)
    with pytest.raises(TypeError, match="text"):
        env.step(2)  # type: ignore[arg-type]
    with pytest.raises(EnvStateError, match="cannot restore"):
        env.set_state(b"not a state")
    with pytest.raises(EnvStateError, match="cannot restore"):
        env.set_state(pickle.dumps({"something": "else"}))


def test_state_keeps_step_count_limit_and_last_observation() -> None:
    env = BabyAITextEnv("goto", max_steps=5)
    env.reset(seed=0)
    env.step("turn left")
    env.step("turn left")
    state = env.get_state()
    other = BabyAITextEnv("goto")
    other.set_state(state)
    assert other.episode_step == 2 and other.max_steps == 5
    assert other.last_observation == env.last_observation
    for _ in range(3):
        a, b = env.step("go forward"), other.step("go forward")
        assert a[0] == b[0] and a[1:4] == b[1:4]
    assert a[3] is True  # truncated at the restored limit


def test_binary_reward() -> None:
    env = BabyAITextEnv("goto", binary_reward=True)
    env.reset(seed=2)
    _, reward, terminated, _, _ = env.step("go forward")  # goto seed 2: this reaches the grey key
    assert terminated and reward == 1.0
    plain = BabyAITextEnv("goto")
    plain.reset(seed=2)
    assert 0 < plain.step("go forward")[1] < 1.0


@pytest.mark.parametrize("time_limit", ["truncate", "terminate"])
def test_time_limit_truncates_or_terminates(time_limit: str) -> None:
    env = BabyAITextEnv("goto", max_steps=2, time_limit=time_limit)
    env.reset(seed=0)
    first = env.step("turn left")
    _, _, terminated, truncated, info = env.step("turn left")
    assert first[2:4] == (False, False) and "time_limit_reached" not in first[4]
    assert (terminated, truncated) == ((True, False) if time_limit == "terminate" else (False, True))
    assert info["time_limit_reached"] is True and info["success"] is False
    with pytest.raises(EnvStateError):
        env.step("turn left")


def test_a_win_on_the_last_allowed_step_is_not_a_time_limit() -> None:
    env = BabyAITextEnv("goto", max_steps=1, time_limit="terminate")
    env.reset(seed=2)
    _, reward, terminated, truncated, info = env.step("go forward")
    assert terminated and not truncated and reward > 0 and info["success"] is True
    assert "time_limit_reached" not in info


def test_time_limit_must_be_known() -> None:
    with pytest.raises(ValueError, match="time_limit must be one of"):
        BabyAITextEnv("goto", time_limit="stop")


def test_sealed_states_refuse_corruption() -> None:
    from envs.sealed import ChecksumMismatch, seal, unseal

    sealed = seal(b"h\n", b"payload")
    assert unseal(b"h\n", sealed) == b"payload" and unseal(b"other\n", sealed) is None
    with pytest.raises(ChecksumMismatch):
        unseal(b"h\n", sealed[:-1] + b"X")
