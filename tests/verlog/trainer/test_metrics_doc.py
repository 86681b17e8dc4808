"""docs/metrics.md against what the trainer logs: the group estimators' advantage metrics on real rows through
VerlogPPOTrainer.compute_advantage (the dual-GAE and rollout metrics are checked on a real run in test_train_e2e)."""

from __future__ import annotations

import pytest
from metrics_doc import documented_metrics, is_verlog_metric, undocumented
from test_group_estimators import _rows, _trainer


def test_the_table_parses_and_names_each_metric_once():
    doc = documented_metrics()
    assert len(doc) > 40
    assert doc["rollout/prompt_tokens/mean"] == "always" and doc["adv/anchor_groups"] == "gigpo"
    assert all(is_verlog_metric(name) for name in doc)
    assert set(doc.values()) <= {
        "always",
        "episodes",
        "dual_gae",
        "group",
        "gigpo",
        "evaluation",
        "eval failure",
        "multi-task",
    }


@pytest.mark.slow
@pytest.mark.parametrize("estimator", ["grpo", "gigpo"])
def test_group_estimator_metrics_match_the_doc(estimator):
    _, data = _rows()
    trainer = _trainer(estimator)
    trainer.compute_advantage(data)
    logged = {k for k in trainer._adv_metrics if is_verlog_metric(k)}
    doc = documented_metrics()
    assert not undocumented(logged, doc), f"logged but not in docs/metrics.md: {undocumented(logged, doc)}"
    wanted = {"group", "gigpo"} if estimator == "gigpo" else {"group"}
    expected = {k for k, when in doc.items() if k.startswith("adv/") and when in wanted | {"always"}}
    assert expected <= logged, f"in docs/metrics.md but not logged: {sorted(expected - logged)}"
