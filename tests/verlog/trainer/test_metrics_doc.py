"""docs/metrics.md against what the trainer logs: the metric names each estimator's registry entry declares
(verlog/algorithms/estimators.py), and the group estimators' advantage metrics on real rows through the advantage step
(the dual-GAE and rollout metrics are checked on a real run in test_train_e2e)."""

from __future__ import annotations

import pytest
from metrics_doc import documented_metrics, is_verlog_metric, undocumented
from test_group_estimators import _rows, _step

from verlog.algorithms.estimators import REGISTRY, Grouping


def test_the_table_parses_and_names_each_metric_once():
    doc = documented_metrics()
    assert len(doc) > 40
    assert doc["rollout/prompt_tokens/mean"] == "always" and doc["adv/anchor_groups"] == "gigpo"
    assert all(is_verlog_metric(name) for name in doc)
    assert set(doc.values()) <= {
        "always",
        "episodes",
        "dual_gae",
        "vtrace",
        "group",
        "gigpo",
        "evaluation",
        "eval failure",
        "multi-task",
        "async",
        "in_flight",
        "pipeline",
        "async, evaluation",
        "prefix_sharing",
        "lora",
        "images",
    }


@pytest.mark.slow
@pytest.mark.parametrize("estimator", ["grpo", "gigpo"])
def test_group_estimator_metrics_match_the_doc(estimator):
    _, data = _rows()
    _, metrics, _ = _step(estimator, data)
    assert set(metrics) <= set(REGISTRY[estimator].metrics), "logged but not declared in the registry entry"
    logged = {k for k in metrics if is_verlog_metric(k)}
    doc = documented_metrics()
    assert not undocumented(logged, doc), f"logged but not in docs/metrics.md: {undocumented(logged, doc)}"
    wanted = {"group", "gigpo"} if estimator == "gigpo" else {"group"}
    expected = {k for k, when in doc.items() if k.startswith("adv/") and when in wanted | {"always"}}
    assert expected <= logged, f"in docs/metrics.md but not logged: {sorted(expected - logged)}"


def _conditions(name: str) -> set[str]:
    """The "logged" conditions of docs/metrics.md under which the estimator ``name`` logs a metric."""
    entry = REGISTRY[name]
    vtrace = {"vtrace"} if name == "dual_gae" else set()  # algorithm.turn_trace=vtrace cuts dual_gae's trace
    return {"always", name} | vtrace | ({"group"} if entry.grouping is Grouping.GROUPS else set())


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_every_estimator_declares_the_adv_metrics_the_doc_lists_for_it(name):
    """Each registry entry's ``metrics`` against docs/metrics.md's table: every declared name is listed there under a
    condition that holds for that estimator, and every ``adv/`` name listed for it is declared."""
    doc = documented_metrics()
    declared = set(REGISTRY[name].metrics)
    assert not undocumented(declared, doc), (
        f"{name} declares metrics docs/metrics.md lacks: {undocumented(declared, doc)}"
    )
    wrong = sorted(m for m in declared if doc[m] not in _conditions(name))
    assert not wrong, f"{name} declares metrics docs/metrics.md logs only under other conditions: {wrong}"
    listed = {m for m, when in doc.items() if m.startswith("adv/") and when in _conditions(name)}
    assert listed <= declared, f"docs/metrics.md lists adv/ metrics for {name} it does not declare: {listed - declared}"
