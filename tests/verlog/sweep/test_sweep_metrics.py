"""The metric names a sweep may be judged by (verlog/sweep/metrics.py) against docs/metrics.md's table, and what they
accept and refuse."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace

import pytest

from verlog.sweep.metrics import VERLOG_METRICS, condition_problem, metric_problem

DOC_READER = Path(__file__).resolve().parents[1] / "trainer" / "metrics_doc.py"


def _documented() -> dict[str, str]:
    spec = importlib.util.spec_from_file_location("metrics_doc_for_sweeps", DOC_READER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.documented_metrics()


def test_the_list_is_docs_metrics_table() -> None:
    """Every metric of docs/metrics.md is one a sweep can name, with the same "logged" condition (a metric added to
    the doc goes into verlog/sweep/metrics.py too)."""
    assert dict(VERLOG_METRICS) == _documented()


@pytest.mark.parametrize(
    "name",
    ["eval/success", "env/return_mean", "eval/goto/success", "curriculum/pickup/prob", "timing_s/rollout_env",
     "actor/pg_loss", "critic/vf_explained_var", "timing_s/step", "rollout_corr/kl", "perf/throughput"],
)  # fmt: skip
def test_verlogs_metrics_and_verls_namespaces_are_taken(name: str) -> None:
    assert metric_problem(name) is None


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("eval/sucess", "'eval/sucess' is not a metric verlog train logs. Did you mean eval/success"),
        ("rollout/turnz", "Did you mean rollout/turns"),
        ("timing_s/rollout_gen", "'timing_s/rollout_gen' is not a metric verlog train logs"),
        ("loss/total", "no metric is logged under loss/. Metrics are logged under actor/, adv/"),
    ],
)
def test_unknown_names_are_refused_with_the_closest(name: str, message: str) -> None:
    problem = metric_problem(name)
    assert problem is not None and message in problem


def _cfg(**changes: object) -> SimpleNamespace:
    cfg = SimpleNamespace(
        algorithm=SimpleNamespace(estimator="dual_gae", turn_trace="full"),
        rollout=SimpleNamespace(async_mode="off"),
        evaluation=SimpleNamespace(every=2),
        env=SimpleNamespace(tasks={}),
        hardware=SimpleNamespace(prefix_sharing=True),
        model=SimpleNamespace(lora=SimpleNamespace(rank=0)),
        memory=SimpleNamespace(max_image_history=0),
    )
    for key, value in changes.items():
        section, name = key.split("__")
        setattr(getattr(cfg, section), name, value)
    return cfg


def test_a_metric_the_trials_settings_never_log_is_named() -> None:
    assert condition_problem("adv/anchor_groups", _cfg(algorithm__estimator="gigpo")) is None
    assert "it is gigpo's and algorithm.estimator=dual_gae" in str(condition_problem("adv/anchor_groups", _cfg()))
    assert "evaluation.every=0" in str(condition_problem("eval/success", _cfg(evaluation__every=0)))
    assert "rollout.async_mode=in_flight, not off" in str(condition_problem("async/in_flight_updates", _cfg()))
    assert "env.tasks is empty" in str(condition_problem("eval/goto/success", _cfg()))
    tasks = {"goto": "babyai/goto", "pickup": "babyai/pickup"}
    assert condition_problem("eval/goto/success", _cfg(env__tasks=tasks)) is None
    assert "model.lora.rank=0" in str(condition_problem("check/lora_server_gap", _cfg()))
    lora = _cfg()
    lora.model.lora.rank = 8
    assert condition_problem("check/lora_server_gap", lora) is None
    assert "memory.max_image_history=0" in str(condition_problem("rollout/image_rows", _cfg()))
    assert condition_problem("rollout/images_per_row", _cfg(memory__max_image_history=2)) is None
    assert "Did you mean eval/pickup/success?" in str(condition_problem("eval/pikup/success", _cfg(env__tasks=tasks)))
    assert condition_problem("actor/pg_loss", _cfg()) is None and condition_problem("env/episodes", _cfg()) is None
