"""The search-space parser (verlog/sweep/space_file.py) and the trials drawn with Ray Tune (verlog/sweep/space.py) on
hand cases: kinds, conditions, bad inputs named with their fix, random and grid sampling, the same trials from the same
seed (and from Tune's own generator), overrides that Hydra reads back, the fingerprint."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from verlog.sweep.space import (
    SweepSpaceError,
    format_override,
    format_value,
    grid_size,
    ray_space,
    sample_configurations,
    sample_trials,
)
from verlog.sweep.space_file import load_space, parse_space


def _space(**changes) -> dict:
    data = {
        "base": {"env": "toy_delayed", "iterations": 4, "evaluation.every": 4},
        "params": {
            "algorithm.actor_lr": {"loguniform": [1.0e-4, 1.0e-3]},
            "algorithm.critic_warmup": [0, 1, 2],
            "algorithm.token_lam": {"uniform": [0.9, 1.0]},
        },
        "sampling": {"trials": 6, "seed": 0},
    }
    data.update(changes)
    return data


def test_a_space_parses_with_its_defaults() -> None:
    space = parse_space(_space(), "s.yaml")
    assert space.base == ("env=toy_delayed", "iterations=4", "evaluation.every=4")
    kinds = {p.key: p.kind for p in space.params}
    assert kinds == {
        "algorithm.actor_lr": "loguniform",
        "algorithm.critic_warmup": "choice",
        "algorithm.token_lam": "uniform",
    }
    assert space.param("algorithm.critic_warmup").values == (0, 1, 2)
    assert (space.method, space.trials, space.sampling_seed, space.seeds) == ("random", 6, 0, None)
    assert (space.objective.metric, space.objective.mode) == ("eval/success", "max")
    assert space.scheduler is None and space.eval is None and space.parallel == 1
    assert space.name == "s"


def test_numbers_pyyaml_reads_as_strings_are_numbers(tmp_path: Path) -> None:
    # PyYAML reads 1e-4 (no dot) as the string "1e-4"; a range bound must still be a number
    path = tmp_path / "space.yaml"
    path.write_text("params:\n  algorithm.actor_lr: {loguniform: [1e-4, 1e-3]}\nsampling: {trials: 2}\n")
    space = load_space(path)
    assert (space.params[0].low, space.params[0].high) == (1e-4, 1e-3)


def test_base_as_a_list_of_overrides_and_the_scheduler_and_eval_sections() -> None:
    space = parse_space(
        _space(
            base=["env=toy_delayed", "verl.actor_rollout_ref.actor.checkpoint.save_contents=[model,hf_model]"],
            scheduler={"kind": "median", "grace_period": 2, "metric": "env/return_mean"},
            eval={"episodes": 8, "temperature": 0},
            objective={"metric": "verlog_eval/success_rate", "mode": "max"},
        )
    )
    assert space.base[1] == "verl.actor_rollout_ref.actor.checkpoint.save_contents=[model,hf_model]"
    assert space.scheduler is not None
    assert (space.scheduler.kind, space.scheduler.grace_period, space.scheduler.metric) == (
        "median",
        2,
        "env/return_mean",
    )
    assert space.eval is not None and (space.eval.episodes, space.eval.temperature) == (8, 0.0)
    assert space.eval.seed_start == 1_000_000


def test_the_scheduler_judges_on_the_objective_by_default() -> None:
    space = parse_space(_space(scheduler={"kind": "asha"}, objective={"metric": "eval/progression"}))
    assert space.scheduler is not None
    assert (space.scheduler.metric, space.scheduler.grace_period, space.scheduler.reduction_factor) == (
        "eval/progression",
        1,
        2.0,
    )


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"sampln": {}}, "unknown key 'sampln' in the search space. Did you mean sampling?"),
        ({"params": {}}, "params is empty; list the keys to sweep"),
        ({"params": {"a.b": {"choise": [1, 2]}}}, "unknown key params.a.b.'choise' in the search space. Did you mean"),
        ({"params": {"a.b": {"uniform": [1.0, 1.0]}}}, "params.a.b.uniform [1.0, 1.0] is an empty range"),
        ({"params": {"a.b": {"int": [3, 1]}}}, "params.a.b.int [3, 1] is an empty range"),
        ({"params": {"a.b": []}}, "params.a.b is an empty choice"),
        ({"params": {"a.b": [1, 1]}}, "params.a.b lists 1 twice"),
        ({"params": {"a.b": {"loguniform": [0, 1]}}}, "a log-uniform range needs low > 0"),
        ({"params": {"a.b": {"int": [0.5, 2]}}}, "bounds [0.5, 2] are not integers"),
        ({"params": {"a.b": {"uniform": [0, 1], "choice": [1]}}}, "needs exactly one of choice, uniform"),
        ({"params": {"a.b": 3}}, "a single value; a fixed value goes in base"),
        ({"params": {"a.b": {"uniform": ["x", 1]}}}, "params.a.b.uniform is 'x', not a number"),
        ({"params": {"a.b": {"uniform": [0, 1], "points": 1}}}, "params.a.b.points is 1, not an integer >= 2"),
        ({"params": {"a.b": {"choice": [1, 2], "when": {"c.d": 1}}}}, "when names 'c.d', which is not a swept key"),
        (
            {"params": {"c.d": {"uniform": [0, 1]}, "a.b": {"choice": [1, 2], "when": {"c.d": 0.5}}}},
            "a continuous range that never takes an exact value",
        ),
        (
            {"params": {"c.d": ["x", "y"], "a.b": {"choice": [1, 2], "when": {"c.d": "z"}}}},
            "when asks c.d to be 'z', which it never takes",
        ),
        (
            {"params": {"c.d": {"choice": [1, 2], "when": {"a.b": 1}}, "a.b": {"choice": [1, 2], "when": {"c.d": 1}}}},
            "depend on each other in a circle",
        ),
        ({"base": {"output_dir": "x"}}, "base sets output_dir, which the sweep sets for each trial"),
        ({"base": ["iterations"]}, "base entry 'iterations' is not key=value"),
        ({"params": {"checkpoint.resume": ["auto", "disable"]}}, "params sweeps checkpoint.resume"),
        ({"sampling": {"method": "grid"}}, "a loguniform range in a grid needs points: N"),
        ({"sampling": {"method": "grid", "trials": 3}}, "sampling.trials is set with method: grid"),
        ({"sampling": {"method": "gird"}}, "sampling.method is 'gird', not one of random, grid. Did you mean grid?"),
        ({"sampling": {"trials": 0}}, "sampling.trials is 0, not an integer >= 1"),
        ({"sampling": {"trials": 2, "seeds": [0, 0]}}, "sampling.seeds [0, 0] repeats a seed"),
        ({"sampling": {"trials": 2, "seeds": []}}, "sampling.seeds is empty"),
        ({"base": {"seed": 3}, "sampling": {"trials": 2, "seeds": [0, 1]}}, "base sets seed and sampling.seeds"),
        ({"objective": {"metric": "success"}}, "objective.metric 'success' is not a metric name"),
        ({"objective": {"metric": "eval/success", "mode": "maximum"}}, "objective.mode is 'maximum', not one of max"),
        ({"objective": {"metric": "verlog_eval/success_rate"}}, "there is no eval: section"),
        (
            {"objective": {"metric": "verlog_eval/success"}, "eval": {}},
            "verlog eval's summary has success_rate, mean_return",
        ),
        ({"scheduler": {"kind": "ashaa"}}, "scheduler.kind is 'ashaa', not one of asha, median. Did you mean asha?"),
        (
            {"scheduler": {"kind": "asha", "reduction_factor": 1}},
            "scheduler.reduction_factor is 1.0; give a number > 1",
        ),
        (
            {"scheduler": {"kind": "asha", "metric": "verlog_eval/success_rate"}, "eval": {}},
            "is known only after training",
        ),
        ({"eval": {"episodes": 0}}, "eval.episodes is 0, not an integer >= 1"),
        ({"parallel": 0}, "parallel is 0, not an integer >= 1"),
    ],
)
def test_bad_spaces_name_the_key_and_the_fix(changes: dict, message: str) -> None:
    data = _space(**changes)
    if "params" in changes and changes["params"] and "sampling" not in changes:
        data["sampling"] = {"trials": 2}
    with pytest.raises(SweepSpaceError) as info:
        parse_space(data, "s.yaml")
    text = str(info.value)
    assert text.startswith("s.yaml: ")
    assert message in text
    assert "\n" not in text


def test_load_space_names_a_missing_file_and_a_yaml_error_with_its_line(tmp_path: Path) -> None:
    with pytest.raises(SweepSpaceError, match="no such file; give the YAML file of the space"):
        load_space(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("params:\n  a: [1, 2\nsampling: {trials: 2}\n")
    with pytest.raises(SweepSpaceError, match=r"bad.yaml: not valid YAML at line \d+ .*fix the file's syntax"):
        load_space(bad)
    with pytest.raises(SweepSpaceError, match="a search space is a YAML mapping"):
        parse_space([1, 2], "list.yaml")


def test_random_sampling_is_seeded_in_range_and_rounded() -> None:
    space = parse_space(_space(sampling={"trials": 200, "seed": 7}))
    first, again = sample_configurations(space), sample_configurations(space)
    assert first == again
    other = sample_configurations(parse_space(_space(sampling={"trials": 200, "seed": 8})))
    assert other != first
    for config in first:
        lr, warmup, lam = config["algorithm.actor_lr"], config["algorithm.critic_warmup"], config["algorithm.token_lam"]
        assert 1e-4 <= lr <= 1e-3 and 0.9 <= lam <= 1.0 and warmup in (0, 1, 2)
        assert float(f"{lr:.3g}") == lr and float(f"{lam:.3g}") == lam  # 3 significant digits
    assert {c["algorithm.critic_warmup"] for c in first} == {0, 1, 2}


def test_log_uniform_draws_are_uniform_in_log_space() -> None:
    space = parse_space({"params": {"x.y": {"loguniform": [1e-4, 1e-2]}}, "sampling": {"trials": 4000, "seed": 0}})
    values = np.array([c["x.y"] for c in sample_configurations(space)])
    below = float(np.mean(values < 1e-3))  # the geometric midpoint: half the draws below it
    assert 0.46 < below < 0.54
    assert float(np.mean(values < 5.5e-3)) > 0.8  # a uniform draw would put only 45% below 5.5e-3


def test_integer_ranges_include_both_ends() -> None:
    space = parse_space({"params": {"x.y": {"int": [1, 3]}}, "sampling": {"trials": 300}})
    assert {c["x.y"] for c in sample_configurations(space)} == {1, 2, 3}
    assert all(isinstance(c["x.y"], int) for c in sample_configurations(space))


def test_a_conditional_key_is_set_exactly_where_its_condition_holds() -> None:
    space = parse_space(
        {
            "params": {
                "algorithm.gigpo_omega": {"uniform": [0.5, 1.5], "when": {"algorithm.estimator": "gigpo"}},
                "algorithm.estimator": ["dual_gae", "grpo", "gigpo"],
                "rollout.group_size": {"choice": [2, 4], "when": {"algorithm.estimator": ["grpo", "gigpo"]}},
            },
            "sampling": {"trials": 60, "seed": 3},
        }
    )
    assert [p.key for p in space.params] == ["algorithm.estimator", "algorithm.gigpo_omega", "rollout.group_size"]
    configs = sample_configurations(space)
    for config in configs:
        estimator = config["algorithm.estimator"]
        assert ("algorithm.gigpo_omega" in config) == (estimator == "gigpo")
        assert ("rollout.group_size" in config) == (estimator != "dual_gae")
    assert {c["algorithm.estimator"] for c in configs} == {"dual_gae", "grpo", "gigpo"}


def test_a_condition_may_name_an_integer_key() -> None:
    space = parse_space(
        {
            "params": {"a.n": {"int": [1, 3]}, "a.x": {"uniform": [0, 1], "when": {"a.n": [2, 3]}}},
            "sampling": {"trials": 40},
        }
    )
    assert all(("a.x" in c) == (c["a.n"] >= 2) for c in sample_configurations(space))
    with pytest.raises(SweepSpaceError, match=r"when asks a\.n to be 4, which it never takes"):
        parse_space(
            {
                "params": {"a.n": {"int": [1, 3]}, "a.x": {"choice": [1, 2], "when": {"a.n": 4}}},
                "sampling": {"trials": 2},
            }
        )


def test_the_grid_is_the_product_of_the_active_keys() -> None:
    space = parse_space(
        {
            "params": {
                "a.kind": ["x", "y"],
                "a.n": {"choice": [1, 2, 3], "when": {"a.kind": "y"}},
                "a.lr": {"loguniform": [1e-4, 1e-2], "points": 3},
            },
            "sampling": {"method": "grid"},
        }
    )
    configs = sample_configurations(space)
    assert len(configs) == 3 + 3 * 3
    # Ray's grid order: the keys sorted, the first varying fastest; a nested branch expands in place
    assert configs[:5] == [
        {"a.kind": "x", "a.lr": 1e-4},
        {"a.kind": "y", "a.lr": 1e-4, "a.n": 1},
        {"a.kind": "y", "a.lr": 1e-4, "a.n": 2},
        {"a.kind": "y", "a.lr": 1e-4, "a.n": 3},
        {"a.kind": "x", "a.lr": 1e-3},
    ]
    assert sorted({c["a.lr"] for c in configs}) == [1e-4, 1e-3, 1e-2]  # geometric points of a log-uniform range
    assert len({tuple(sorted(c.items())) for c in configs}) == len(configs)
    uniform = parse_space({"params": {"u.v": {"uniform": [0, 1], "points": 5}}, "sampling": {"method": "grid"}})
    assert [c["u.v"] for c in sample_configurations(uniform)] == [0.0, 0.25, 0.5, 0.75, 1.0]
    ints = parse_space({"params": {"i.j": {"int": [2, 5]}}, "sampling": {"method": "grid"}})
    assert [c["i.j"] for c in sample_configurations(ints)] == [2, 3, 4, 5]


def test_trials_repeat_each_configuration_per_training_seed() -> None:
    space = parse_space(_space(sampling={"trials": 2, "seed": 0, "seeds": [0, 5]}))
    trials = sample_trials(space)
    assert [t.id for t in trials] == ["000-s0", "000-s5", "001-s0", "001-s5"]
    assert trials[0].params == trials[1].params and trials[0].config == trials[1].config == 0
    overrides = trials[1].overrides(space)
    assert overrides[: len(space.base)] == list(space.base)
    assert overrides[-1] == "seed=5"
    assert f"algorithm.critic_warmup={trials[1].params['algorithm.critic_warmup']}" in overrides
    assert [t.id for t in sample_trials(parse_space(_space()))][:2] == ["000", "001"]


@pytest.mark.parametrize(
    "value",
    [0, 1.5e-05, 3e-4, 0.0003, -2, True, False, None, "toy/delayed", "1.5", "true", "null", "x y", "it's", "a,b",
     "", [1, 2], ["model", "hf_model"], {"max_steps": 64}],
)  # fmt: skip
def test_overrides_read_back_as_the_same_value(value) -> None:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_override(format_override("a.b", value)).value()
    assert parsed == value and type(parsed) is type(value)


def test_format_value_quotes_only_what_needs_it() -> None:
    assert format_value("toy_delayed") == "toy_delayed"
    assert format_value("1e-4") == "'1e-4'"
    assert format_value(1e-4) == "0.0001"


def test_the_fingerprint_follows_what_decides_the_trials() -> None:
    space = parse_space(_space(scheduler={"kind": "asha"}, objective={"metric": "eval/progression"}))
    again = parse_space(space.as_dict(), "copy")
    assert again.fingerprint() == space.fingerprint()
    assert sample_trials(again) == sample_trials(space)
    same = parse_space({**space.as_dict(), "parallel": 4, "name": "other"})
    assert same.fingerprint() == space.fingerprint()
    changed = _space(scheduler={"kind": "asha"}, objective={"metric": "eval/progression"})
    changed["params"]["algorithm.critic_warmup"] = [0, 1]
    assert parse_space(changed).fingerprint() != space.fingerprint()


def test_the_order_of_params_counts() -> None:
    data = _space()
    reordered = _space(params=dict(reversed(list(data["params"].items()))))
    space, other = parse_space(data), parse_space(reordered)
    assert [p.key for p in other.params] == list(reversed([p.key for p in space.params]))
    assert other.fingerprint() != space.fingerprint()  # random sampling draws the keys in file order
    assert sample_configurations(other) != sample_configurations(space)


def _conditional_space(method: str = "random") -> dict:
    sampling = {"method": method, "seeds": [0, 3]}
    if method == "random":
        sampling.update(trials=12, seed=5)
    points = {"points": 2} if method == "grid" else {}
    return {
        "params": {
            "algorithm.actor_lr": {"loguniform": [1.0e-4, 1.0e-3], **points},
            "algorithm.estimator": ["dual_gae", "grpo", "gigpo"],
            "rollout.group_size": {"choice": [2, 4], "when": {"algorithm.estimator": ["grpo", "gigpo"]}},
            "algorithm.gigpo_omega": {"uniform": [0.5, 1.5], **points, "when": {"algorithm.estimator": "gigpo"}},
            # chained, and with two conditions: set only for gigpo with groups of 4
            "algorithm.gigpo_step_gamma": {
                "choice": [0.9, 0.95],
                "when": {"rollout.group_size": 4, "algorithm.estimator": "gigpo"},
            },
        },
        "sampling": sampling,
    }  # fmt: skip


@pytest.mark.parametrize("method", ["random", "grid"])
def test_two_generations_with_the_same_seed_give_the_same_trial_list(tmp_path: Path, method: str) -> None:
    file = tmp_path / "space.yaml"
    file.write_text(yaml.safe_dump(_conditional_space(method), sort_keys=False))
    first, second = sample_trials(load_space(file)), sample_trials(load_space(file))  # two parses, two generators
    assert first == second and len(first) > 4
    assert [t.id for t in first[:2]] == ["000-s0", "000-s3"] and first[0].params == first[1].params
    if method == "random":
        other = _conditional_space(method)
        other["sampling"]["seed"] = 6
        assert sample_trials(parse_space(other)) != first


def test_the_trials_are_the_variants_of_ray_tunes_own_generator() -> None:
    """Tune's BasicVariantGenerator, given the same param space and random state, yields the variants the trials
    hold (before verlog unsets inactive keys and rounds floats)."""
    from ray.tune.experiment import Experiment
    from ray.tune.search import BasicVariantGenerator

    space = parse_space(_conditional_space())
    generator = BasicVariantGenerator(random_state=space.sampling_seed, constant_grid_search=True)
    generator.add_configurations([Experiment("x", run=lambda config: None, config=ray_space(space), num_samples=12)])
    variants = []
    while (trial := generator.next_trial()) is not None:
        variants.append(trial.config)
    trials = sample_trials(space)
    assert len(variants) == len(trials) == 24
    for variant, trial in zip(variants, trials):
        assert variant["seed"] == trial.seed
        for key, value in trial.params.items():
            kind = space.param(key).kind
            assert value == (float(f"{variant[key]:.3g}") if kind in ("uniform", "loguniform") else variant[key])


@pytest.mark.parametrize("method", ["random", "grid"])
def test_conditions_chain_and_combine_as_documented(method: str) -> None:
    space = parse_space(_conditional_space(method))
    configs = sample_configurations(space)
    for c in configs:
        estimator = c["algorithm.estimator"]
        assert ("rollout.group_size" in c) == (estimator != "dual_gae")
        assert ("algorithm.gigpo_omega" in c) == (estimator == "gigpo")
        assert ("algorithm.gigpo_step_gamma" in c) == (estimator == "gigpo" and c.get("rollout.group_size") == 4)
    if method == "grid":  # each point once, with its active keys: 2 lr x (dual_gae + 2 grpo + gigpo's 2 + 2 x 2)
        assert len(configs) == 2 * (1 + 2 + (2 + 2 * 2)) == grid_size(space)
        assert len({json.dumps(c, sort_keys=True) for c in configs}) == len(configs)
    else:
        assert {c["algorithm.estimator"] for c in configs} == {"dual_gae", "grpo", "gigpo"}
        assert any("algorithm.gigpo_step_gamma" in c for c in configs)
