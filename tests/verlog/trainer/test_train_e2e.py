"""End to end: PPO through verl 0.9.1 on this CPU with verlog's rollout, dual GAE and checkpoints.

One run of 3 iterations on babyai/goto (4 slots x 4 turns, actor and critic on 2 FSDP ranks, an env crash injected
in iteration 2, evaluation inside training before iteration 1 and after iterations 2 and 3), then a second process
resuming from the iteration-2 checkpoint (evaluating after its one iteration). Both share one tiny model.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

# two training processes of 3-6 minutes each on an idle 2-core machine (much longer when the machine is shared)
pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(2700)]

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]


def _train(out: Path, model: Path, *overrides: str, env: dict | None = None) -> subprocess.CompletedProcess:
    args = [
        sys.executable,
        "-m",
        "verlog.train",
        f"output_dir={out}",
        f"model.path={model}",
        "env.id=crashy_env:make",
        "iterations=3",
        "rollout.num_slots=4",
        "rollout.turns_per_slot=4",
        "rollout.max_prompt_tokens=512",
        "rollout.max_response_tokens=16",
        "hardware.n_gpus_per_node=2",
        "algorithm.critic_warmup=1",
        "algorithm.ppo_epochs=2",
        "algorithm.mini_batches=2",
        "algorithm.actor_lr=1e-3",
        "algorithm.critic_lr=1e-3",
        "checkpoint.save_freq=2",
        f"hardware.ray.temp_dir={out.parent / 'ray'}",
        *overrides,
    ]
    full_env = {**os.environ, "PYTHONPATH": f"{HERE}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", **(env or {})}
    proc = subprocess.run(args, cwd=REPO, env=full_env, capture_output=True, text=True, timeout=1200)
    (out.parent / f"{out.name}.log").write_text(proc.stdout + proc.stderr)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    return proc


EVAL_EPISODES = 4
EVAL_KEYS = ("success", "progression", "return", "valid_action_rate")


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _iterations(path: Path) -> list[dict]:
    """The PPO iterations' records of a metrics.jsonl (not the evaluation before training, at step 0)."""
    return [r for r in _records(path) if "training/global_step" in r]


@pytest.fixture(scope="module")
def runs(tiny_model, tmp_path_factory):
    base = tmp_path_factory.mktemp("train_e2e")
    # evaluation before training, after iteration 2 (every=2) and after the last one; the injected crash counts
    # training steps only (crashy_env), so it lands in iteration 2's rollout
    evaluation = ["evaluation.every=2", f"evaluation.episodes={EVAL_EPISODES}"]
    first = _train(base / "run1", tiny_model, *evaluation, env={"VERLOG_TEST_CRASH_AT_STEP": "22"})
    ckpt = base / "run1" / "checkpoints" / "global_step_2"
    second = _train(
        base / "run2",
        tiny_model,
        f"checkpoint.resume={ckpt}",
        "evaluation.every=1",
        f"evaluation.episodes={EVAL_EPISODES}",
    )
    return base, first, second


def test_three_iterations_losses_metrics_and_sync(runs):
    base, proc, _ = runs
    metrics = _iterations(base / "run1" / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [1, 2, 3]
    for m in metrics:
        assert math.isfinite(m["critic/vf_loss"])
        for key in ("env/episodes", "rollout/valid_action_ratio", "rollout/prompt_tokens/mean", "adv/mean"):
            assert key in m, key
        assert m["rollout/turns"] == 16
        assert math.isfinite(m["critic/advantages/mean"]) and math.isfinite(m["critic/returns/mean"])
        assert m["adv/linked_rows"] + m["adv/bootstrap_rows"] <= 16
    assert "actor/pg_loss" not in metrics[0]  # critic warm-up: iteration 1 trains the critic only
    for m in metrics[1:]:
        assert math.isfinite(m["actor/pg_loss"])
        assert m["actor/ppo_kl"] != 0.0 or m["actor/pg_clipfrac"] > 0  # the actor moved during its update
    # generation after the sync runs on the new weights: vLLM's token probabilities match the updated FSDP actor's
    # (seen: about 2e-5 with the sync; shared/STACK.md saw 3e-4 to 5e-4 when syncs were skipped on purpose)
    assert metrics[2]["training/rollout_probs_diff_mean"] < 1e-4
    assert "[verlog] iteration 3/3" in proc.stdout
    assert "critic/vf_loss" in proc.stdout  # verl's console logger printed the metrics


def test_logged_metrics_match_docs_metrics_md(runs):
    from metrics_doc import documented_metrics, is_verlog_metric, undocumented

    base, _, _ = runs
    records = _records(base / "run1" / "metrics.jsonl")
    logged = {k for r in records for k in r if is_verlog_metric(k)}
    doc = documented_metrics()
    assert not undocumented(logged, doc), f"logged but not in docs/metrics.md: {undocumented(logged, doc)}"
    # this run: dual GAE, an evaluation every 2 iterations, episodes ending (goto's 64-step limit is never reached in
    # 3 x 4 turns, but the injected crash cuts an episode)
    expected = {k for k, when in doc.items() if when in ("always", "dual_gae", "evaluation", "episodes")}
    assert expected <= logged, f"in docs/metrics.md but never logged: {sorted(expected - logged)}"


def _check_eval(record: dict) -> None:
    assert record["eval/episodes"] == EVAL_EPISODES and "eval/failed" not in record
    for key in EVAL_KEYS:
        assert math.isfinite(record[f"eval/{key}"]) and record[f"eval/{key}_se"] >= 0, key
    assert 0 <= record["eval/success"] <= 1 and 0 <= record["eval/valid_action_rate"] <= 1
    assert 1 <= record["eval/length"] <= 64  # goto's step limit


def test_evaluation_inside_training(runs):
    base, proc, second = runs
    records = _records(base / "run1" / "metrics.jsonl")
    assert [m["step"] for m in records] == [0, 1, 2, 3]
    # before training: the starting model, a record of its own at step 0
    _check_eval(records[0])
    assert not any(k.startswith(("training/", "critic/", "env/")) for k in records[0])
    assert not any(k.startswith("eval/") for k in records[1])  # iteration 1: no evaluation
    for m in records[2:]:  # after iteration 2 (every=2) and the last one, in the iteration's own record
        _check_eval(m)
        assert "critic/vf_loss" in m
    for k in (0, 2, 3):
        assert f"[verlog] eval at iteration {k}: success " in proc.stdout
    episodes = _records(base / "run1" / "eval" / "episodes.jsonl")
    held_out = [2**31 + i for i in range(EVAL_EPISODES)]  # the seeds no training slot can draw
    assert [(e["iteration"], e["seed"]) for e in episodes] == [(k, s) for k in (0, 2, 3) for s in held_out]
    trained = {s for r in _records(base / "run1" / "rollout.jsonl") for s in r["episode_seeds"].values()}
    assert trained and not trained & set(held_out)
    # a resumed run does not evaluate its checkpoint's step again (the saving run logged that step)
    resumed = _records(base / "run2" / "metrics.jsonl")
    assert [m["step"] for m in resumed] == [3]
    _check_eval(resumed[0])
    assert "[verlog] eval at iteration 2" not in second.stdout and "[verlog] eval at iteration 3: " in second.stdout


def test_env_crash_does_not_stop_training(runs):
    base, _, _ = runs
    metrics = _iterations(base / "run1" / "metrics.jsonl")
    assert sum(m["rollout/env_errors"] for m in metrics) == 1


def test_resume_continues_the_same_episodes(runs):
    base, _, proc = runs
    assert (base / "run1" / "checkpoints" / "global_step_2" / "verlog_rollout.pkl").exists()
    first = {r["step"]: r for r in _records(base / "run1" / "rollout.jsonl")}
    resumed = {r["step"]: r for r in _records(base / "run2" / "rollout.jsonl")}
    assert list(resumed) == [3]
    assert resumed[3]["start_episodes"] == first[3]["start_episodes"]
    assert all(turn > 0 for _, turn in first[3]["start_episodes"])
    # every finished episode is logged with the env seed it was reset with (checkable against evaluation seeds)
    finished = [e for r in first.values() for e in r["finished_episodes"]]
    assert finished and all(isinstance(e["seed"], int) for e in finished)
    seeds = {eid: seed for r in first.values() for eid, seed in r["episode_seeds"].items()}
    assert all(seeds[e["id"]] == e["seed"] for e in finished) and all(isinstance(s, int) for s in seeds.values())
    assert "[verlog] resumed 4 env slots" in proc.stdout
