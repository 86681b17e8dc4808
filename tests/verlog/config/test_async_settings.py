"""The settings of asynchronous rollouts and their off-policy corrections (rollout.async_mode, pipeline_groups,
max_lag; algorithm.rollout_is, rollout_is_threshold, turn_trace): choices, ranges, YAML's unquoted ``off``, and the
combinations the async modes cannot honour, each refused before launch with its fix."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from verlog.config.async_modes import mode_names
from verlog.config.checks import check_async, check_config, check_values, typed_config, verl_setting
from verlog.config.compose import DEFAULT_CONFIG_DIR, load_config
from verlog.config.schema import TrainConfig

ASYNC_MODES = mode_names()
ASYNC = [m for m in ASYNC_MODES if m != "off"]


def _cfg(**changes) -> TrainConfig:
    cfg = OmegaConf.structured(TrainConfig)
    for dotted, value in changes.items():
        OmegaConf.update(cfg, dotted.replace("__", "."), value, merge=False)
    typed = OmegaConf.to_object(cfg)
    assert isinstance(typed, TrainConfig)
    return typed


def _problems(cfg: TrainConfig) -> dict[str, str]:
    return {p.key: p.message for p in [*check_values(cfg), *check_async(cfg)]}


def test_the_defaults_pass() -> None:
    cfg = TrainConfig()
    assert (cfg.rollout.async_mode, cfg.algorithm.rollout_is, cfg.algorithm.turn_trace) == ("off", "token", "full")
    assert _problems(cfg) == {}
    for mode in ASYNC:
        assert _problems(_cfg(rollout__async_mode=mode)) == {}, mode
    assert _problems(_cfg(rollout__async_mode="in_flight", algorithm__turn_trace="vtrace")) == {}
    both = _cfg(rollout__async_mode="one_step_off", algorithm__turn_trace="vtrace", algorithm__rollout_is="off")
    assert _problems(both) == {}  # rollout_is=off with vtrace is fine


@pytest.mark.parametrize(
    ("key", "value", "text"),
    [
        ("rollout.async_mode", "async", "'async' is not one of off, pipeline, one_step_off, in_flight (off: lockstep)"),
        ("rollout.async_mode", "inflight", "Did you mean rollout.async_mode=in_flight?"),
        ("algorithm.rollout_is", "seq", "'seq' is not one of token, sequence, off"),
        ("algorithm.turn_trace", "v-trace", "Did you mean algorithm.turn_trace=vtrace?"),
        ("rollout.pipeline_groups", 1, "1 must be an integer >= 2 (slot groups of async_mode=pipeline)"),
        ("rollout.max_lag", 0, "0 must be an integer >= 1"),
        ("algorithm.rollout_is_threshold", 1.0, "1.0 must be > 1 (upper clip of the importance weights)"),
    ],
)
def test_choices_and_ranges(key: str, value: object, text: str) -> None:
    problems = _problems(_cfg(**{key.replace(".", "__"): value}))
    assert list(problems) == [key] and text in problems[key]


def test_pipeline_groups_must_fit_the_slots_with_pipeline_only() -> None:
    assert _problems(_cfg(rollout__pipeline_groups=6)) == {}  # not pipelined: unused
    assert _problems(_cfg(rollout__async_mode="pipeline", rollout__pipeline_groups=4)) == {}  # num_slots 4
    problems = _problems(_cfg(rollout__async_mode="pipeline", rollout__pipeline_groups=6))
    assert problems == {
        "rollout.pipeline_groups": "6 slot groups for 4 slots (rollout.num_slots): a group needs a slot; set "
        "rollout.pipeline_groups=4 or raise rollout.num_slots"
    }


def test_an_unquoted_off_in_yaml_is_off(tmp_path: Path) -> None:
    """YAML 1.1 reads ``async_mode: off`` as False (OmegaConf and Hydra do); Hydra's command line keeps ``off`` a
    string. Both, and ``false``, arrive as "off"."""
    assert OmegaConf.create("async_mode: off").async_mode is False
    assert load_config(["rollout.async_mode=off"]).rollout.async_mode == "off"
    configs = tmp_path / "configs"
    shutil.copytree(DEFAULT_CONFIG_DIR, configs)
    train = configs / "train.yaml"
    train.write_text(train.read_text().replace('async_mode: "off"', "async_mode: off"))
    algorithm = configs / "algorithm" / "verlog.yaml"
    algorithm.write_text(algorithm.read_text().replace("rollout_is: token", "rollout_is: off"))
    composed = load_config([], config_dir=configs)
    assert composed.rollout.async_mode is False and composed.algorithm.rollout_is is False
    typed, problems = typed_config(composed)
    assert not problems and (typed.rollout.async_mode, typed.algorithm.rollout_is) == ("off", "off")
    for override in ("rollout.async_mode=off", "rollout.async_mode=false", "rollout.async_mode='off'"):
        typed, problems = typed_config(load_config([override]))
        assert not problems and typed.rollout.async_mode == "off", override
    check_config(load_config(["rollout.async_mode=false"]))
    # a YAML true is no mode: refused with the choices
    _, problems = typed_config(load_config(["rollout.async_mode=true"]))
    assert not problems
    with pytest.raises(ValueError, match="'True' is not one of off, pipeline"):
        check_config(load_config(["rollout.async_mode=true"]))


@pytest.mark.parametrize("mode", ASYNC)
@pytest.mark.parametrize("estimator", ["grpo", "gigpo"])
def test_group_estimators_need_lockstep_rollouts(mode: str, estimator: str) -> None:
    cfg = _cfg(rollout__async_mode=mode, algorithm__estimator=estimator, rollout__group_size=2)
    problems = _problems(cfg)
    assert list(problems) == ["rollout.async_mode"]
    assert problems["rollout.async_mode"] == (
        f"{mode} runs on persistent slots, but algorithm.estimator={estimator} needs group rollouts (whole episodes "
        "of a group in each iteration): set rollout.async_mode=off, or algorithm.estimator=dual_gae"
    )
    assert _problems(_cfg(algorithm__estimator=estimator, rollout__group_size=2)) == {}


SLEEP = "actor_rollout_ref.rollout.enable_sleep_mode"
FREE = "actor_rollout_ref.rollout.free_cache_engine"


@pytest.mark.parametrize("mode", ASYNC)
def test_verl_sleep_mode_and_cache_freeing_need_lockstep_rollouts(mode: str) -> None:
    nested = {"actor_rollout_ref": {"rollout": {"enable_sleep_mode": True, "free_cache_engine": "true"}}}
    cfg = _cfg(rollout__async_mode=mode, verl=nested)
    problems = _problems(cfg)
    assert list(problems) == [f"verl.{SLEEP}", f"verl.{FREE}"]
    assert problems[f"verl.{SLEEP}"] == (
        "verl's sleep mode frees the inference server's weights outside verl's own generation step, and with "
        f"rollout.async_mode={mode} the background rollout is using them then: set verl.{SLEEP}=false, or "
        "rollout.async_mode=off"
    )
    assert "verl's cache freeing" in problems[f"verl.{FREE}"]
    flat = _cfg(rollout__async_mode=mode, verl={SLEEP: True, "actor_rollout_ref": {"rollout.free_cache_engine": 1}})
    assert list(_problems(flat)) == [f"verl.{SLEEP}"]  # a dotted name counts too; only true is true
    off = {"actor_rollout_ref": {"rollout": {"enable_sleep_mode": False, "free_cache_engine": False}}}
    assert _problems(_cfg(rollout__async_mode=mode, verl=off)) == {}
    assert _problems(_cfg(verl=nested)) == {}  # lockstep: verl's hybrid engine as it is


def test_rejection_sampling_is_refused_and_bypass_mode_needs_lockstep() -> None:
    rs = {"algorithm": {"rollout_correction": {"rollout_rs": "seq_sum_k1"}}}
    for mode in ASYNC_MODES:
        problems = _problems(_cfg(rollout__async_mode=mode, verl=rs))
        assert list(problems) == ["verl.algorithm.rollout_correction.rollout_rs"], mode
        assert "edits the response mask and can strand a row's reward token outside it" in next(iter(problems.values()))
    unset = {"algorithm": {"rollout_correction": {"rollout_rs": None, "bypass_mode": False}}}
    assert _problems(_cfg(rollout__async_mode="in_flight", verl=unset)) == {}
    bypass = {"algorithm.rollout_correction.bypass_mode": True}
    assert _problems(_cfg(verl=bypass)) == {}
    problems = _problems(_cfg(rollout__async_mode="one_step_off", verl=bypass))
    assert list(problems) == ["verl.algorithm.rollout_correction.bypass_mode"]
    assert "decoupled mode" in problems["verl.algorithm.rollout_correction.bypass_mode"]


def test_vtrace_needs_an_async_mode() -> None:
    problems = _problems(_cfg(algorithm__turn_trace="vtrace"))
    assert problems == {
        "algorithm.turn_trace": "vtrace cuts the trace at turns sampled by an older policy, but with "
        "rollout.async_mode=off every turn is sampled by the policy being trained (nothing is off-policy): set "
        "algorithm.turn_trace=full, or an async mode that runs ahead (rollout.async_mode=one_step_off|in_flight)"
    }
    # the pipeline's rows are on-policy too (no weight update inside an iteration)
    problems = _problems(_cfg(algorithm__turn_trace="vtrace", rollout__async_mode="pipeline"))
    assert (
        list(problems) == ["algorithm.turn_trace"]
        and "async_mode=pipeline every turn" in problems["algorithm.turn_trace"]
    )
    # a misspelt mode is reported once, not taken for off
    assert list(_problems(_cfg(algorithm__turn_trace="vtrace", rollout__async_mode="of"))) == ["rollout.async_mode"]


def test_verl_setting_reads_nested_and_dotted_keys() -> None:
    cfg = _cfg(verl={"a": {"b": {"c": 1}, "b.d": 2}, "e.f": 3})
    assert (verl_setting(cfg, "a.b.c"), verl_setting(cfg, "a.b.d"), verl_setting(cfg, "e.f")) == (1, 2, 3)
    assert verl_setting(cfg, "a.b") is None and verl_setting(TrainConfig(), "a") is None


@pytest.mark.parametrize("mode", ASYNC_MODES)
def test_verl_rollout_correction_only_for_rows_sampled_by_an_older_policy(mode):
    from verlog.trainer.config import verl_overrides

    overrides = verl_overrides(_cfg(rollout__async_mode=mode))
    corrected = [o for o in overrides if o.startswith("algorithm.rollout_correction.")]
    if mode in ("one_step_off", "in_flight"):
        assert corrected == [
            "algorithm.rollout_correction.rollout_is=token",
            "algorithm.rollout_correction.rollout_is_threshold=2.0",
        ]
    else:  # lockstep and pipeline rows are on-policy: verl's correction stays off
        assert corrected == []
    off = verl_overrides(_cfg(rollout__async_mode=mode, algorithm__rollout_is="off"))
    assert not [o for o in off if o.startswith("algorithm.rollout_correction.")]
