"""Evaluation inside training without Ray: config checks (seeds disjoint from training's), verl keys, metrics."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from envs.pool import drawn_seeds
from verlog.config.compose import load_config
from verlog.config.preflight import preflight
from verlog.eval.runner import EpisodeRecord
from verlog.eval.stats import balrog_mean_se
from verlog.prompting.memory import MemoryConfig
from verlog.rollout.generator import Generation
from verlog.trainer.config import TrainConfigError, check_config, verl_overrides
from verlog.trainer.evaluation import (
    RESERVED_SEED_START,
    TrainingEvaluator,
    eval_metrics,
    steps_per_slot,
)

ON = ["evaluation.every=2", "evaluation.episodes=8"]


def test_evaluation_is_off_by_default_and_maps_onto_verls_validation_hook():
    cfg = load_config([])
    assert cfg.evaluation.every == 0 and cfg.evaluation.seed_start == RESERVED_SEED_START == 2**31
    assert {"trainer.test_freq=-1", "trainer.val_before_train=False"} <= set(verl_overrides(check_config(cfg)))
    on = check_config(load_config(ON))
    assert {"trainer.test_freq=2", "trainer.val_before_train=True"} <= set(verl_overrides(on))
    no_start = check_config(load_config([*ON, "evaluation.before_train=false"]))
    assert "trainer.val_before_train=False" in verl_overrides(no_start)
    # the evaluation samples like training unless told otherwise
    assert load_config(["sampling.temperature=0.7"]).evaluation.temperature == 0.7


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["evaluation.every=-1"], "evaluation.every must be >= 0"),
        ([*ON, "evaluation.episodes=0"], "evaluation.episodes must be >= 1"),
        ([*ON, "evaluation.temperature=-0.5"], "evaluation.temperature must be >= 0"),
        ([*ON, f"evaluation.seed_start={2**32 - 4}"], r"evaluation: seeds must lie in \[0, 4294967295\]"),
        # explicit overlap with the seeds training's 4 slots start with (seed .. seed + 3)
        (
            [*ON, "seed=100", "evaluation.seed_start=97"],
            r"include 100, 101, 102, 103, the seed\(s\) training's slots start with",
        ),
        ([*ON, f"seed={2**31 + 5}"], r"include 2147483653, 2147483654, 2147483655"),
        # the env cannot be built with these settings
        ([*ON, "+env.kwargs.no_such_setting=1"], "evaluation cannot run: building env 'babyai/goto'"),
    ],
)
def test_bad_evaluation_settings_are_errors_before_training(overrides, message):
    with pytest.raises(TrainConfigError, match=message):
        check_config(load_config(overrides))
    if "evaluation.every=-1" not in overrides:  # the dry run checks them too (the env itself first)
        env_fault = any("no_such_setting" in o for o in overrides)
        with pytest.raises(TrainConfigError, match="no keyword argument 'no_such_setting'" if env_fault else message):
            preflight(load_config(overrides))


def test_seeds_a_training_slot_can_draw_are_rejected():
    cfg = load_config([*ON, "seed=3", "iterations=5", "rollout.turns_per_slot=4"])
    assert steps_per_slot(cfg) == 20
    # slot 2 starts with seed 5; its 20th draw is the seed of its 21st episode, reachable within 20 steps
    reachable = int(drawn_seeds(5, 20)[-1])
    with pytest.raises(TrainConfigError, match=rf"include {reachable}, which training's slots can draw"):
        check_config(load_config([*ON, "seed=3", "iterations=5", f"evaluation.seed_start={reachable - 3}"]))
    # beyond the run's steps that draw cannot happen: a seed range that only meets later draws is accepted
    later = int(drawn_seeds(5, 21)[-1])
    if later not in set(drawn_seeds(5, 20).tolist()):
        check_config(load_config([*ON, "seed=3", "iterations=5", f"evaluation.seed_start={later}"]))
    # the critic warm-up's larger rollout counts: 4 turns x (5 iterations + 3) steps
    warm = load_config([*ON, "iterations=5", "algorithm.warmup_rollout_multiplier=3"])
    assert steps_per_slot(warm) == 32


def test_memory_settings_come_from_training_config():
    cfg = load_config([*ON, "memory.n=2", "memory.keep_reasoning_turns=0", "memory.answer_format=action"])
    assert TrainingEvaluator.from_config(cfg).memory == MemoryConfig(
        n=2, keep_reasoning_turns=0, answer_format="action"
    )


def _record(i: int, success: bool, ret: float, valid: int, steps: int = 4) -> EpisodeRecord:
    return EpisodeRecord(
        "babyai/goto", i, 100 + i, episode_return=ret, num_steps=steps, success=success,
        progression=float(success), valid_actions=valid,
    )  # fmt: skip


def test_eval_metrics_are_balrog_means_and_standard_errors():
    records = [_record(0, True, 1.0, 4), _record(1, False, -0.2, 2), _record(2, False, 0.0, 3, steps=6)]
    m = eval_metrics(records)
    assert m["eval/episodes"] == 3 and m["eval/length"] == pytest.approx(14 / 3)
    success = balrog_mean_se([1, 0, 0])
    assert (m["eval/success"], m["eval/success_se"]) == pytest.approx((success.mean, success.se))
    assert m["eval/return"] == pytest.approx(0.8 / 3)
    assert m["eval/valid_action_rate"] == pytest.approx((1 + 0.5 + 0.5) / 3)
    for key in ("progression", "return", "valid_action_rate"):
        assert m[f"eval/{key}_se"] > 0


class _ForwardGenerator:
    """Always answers ``ACTION: go forward``; keeps the prompts it saw."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.prompts: list[str] = []

    def generate(self, requests, sampling):
        ids = [*self.tokenizer.encode("ACTION: go forward", add_special_tokens=False), self.tokenizer.eos_token_id]
        self.prompts += [self.tokenizer.decode(r.prompt_ids) for r in requests]
        return [Generation(token_ids=list(ids)) for _ in requests]


def test_evaluator_runs_the_protocol_with_training_settings(tiny_model: Path, tmp_path: Path, capsys):
    from transformers import AutoTokenizer

    from verlog.prompting.memory import ACTION_FORMAT_INSTRUCTION

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model))
    cfg = load_config(
        [
            *ON,
            "evaluation.episodes=3",
            "env.kwargs.max_steps=4",
            "memory.answer_format=action",
            "rollout.max_response_tokens=8",
            f"output_dir={tmp_path}",
        ]
    )
    evaluator = TrainingEvaluator.from_config(cfg)
    assert evaluator.sampling.max_tokens == 8 and evaluator.protocol.env_kwargs["max_steps"] == 4
    generator = _ForwardGenerator(tokenizer)
    metrics = evaluator.run(generator, tokenizer, iteration=6)
    assert metrics["eval/episodes"] == 3 and metrics["eval/valid_action_rate"] == 1.0
    assert 1 <= metrics["eval/length"] <= 4
    assert all(ACTION_FORMAT_INSTRUCTION in p for p in generator.prompts)  # training's answer format
    lines = [json.loads(x) for x in (tmp_path / "eval" / "episodes.jsonl").read_text().splitlines()]
    assert [(x["iteration"], x["seed"]) for x in lines] == [(6, 2**31), (6, 2**31 + 1), (6, 2**31 + 2)]
    out = capsys.readouterr().out
    assert "[verlog] eval at iteration 6: success " in out and "over 3 episodes" in out
    # a second evaluation appends the same seeds under its own iteration
    evaluator.run(generator, tokenizer, iteration=8)
    lines = (tmp_path / "eval" / "episodes.jsonl").read_text().splitlines()
    assert [json.loads(x)["iteration"] for x in lines] == [6, 6, 6, 8, 8, 8]


def test_a_failing_evaluation_does_not_stop_training(tmp_path: Path, monkeypatch, capsys):
    import verlog.eval.runner

    def broken(*args, **kwargs):
        raise RuntimeError("env exploded")

    monkeypatch.setattr(verlog.eval.runner, "run_episodes", broken)
    evaluator = TrainingEvaluator.from_config(load_config([*ON, f"output_dir={tmp_path}"]))
    assert evaluator.run(object(), object(), iteration=2) == {"eval/failed": 1.0}
    assert "[verlog] warning: eval at iteration 2 failed (RuntimeError: env exploded)" in capsys.readouterr().err


def test_multi_task_runs_evaluate_each_family_on_its_own():
    from verlog.trainer.evaluation import family_metrics, family_protocols

    cfg = load_config(["env=toy_lengths", "evaluation.every=2", "evaluation.episodes=3"])
    protocols = dict(family_protocols(cfg))
    assert list(protocols) == ["len2", "len4", "len8"]
    assert protocols["len8"].tasks == ("toy/delayed",) and protocols["len8"].env_kwargs["length"] == 8
    assert protocols["len2"].env_kwargs["parse_mode"] == "strict"  # env.kwargs shared, the family's over them
    assert protocols["len2"].seed_list() == protocols["len8"].seed_list()  # the same held-out seeds
    assert family_protocols(load_config(["env=toy_delayed"])) == ()
    records = [
        EpisodeRecord(env_id="toy/delayed", episode_index=i, seed=i, success=i == 0, episode_return=r, num_steps=2,
                      valid_actions=v)
        for i, (r, v) in enumerate([(1.0, 2), (0.5, 1)])
    ]  # fmt: skip
    assert family_metrics("len2", records) == {
        "eval/len2/success": 0.5,
        "eval/len2/return": 0.75,
        "eval/len2/valid_action_rate": 0.75,
        "eval/len2/episodes": 2.0,
    }
