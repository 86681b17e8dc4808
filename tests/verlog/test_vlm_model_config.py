"""configs/model/qwen2.5-vl-3b-instruct.yaml: the GPU recipes with the Qwen2.5-VL-3B model config at --dry-run, and
the image-token numbers its header states (docs/vision.md, "The critic, the warm start and the GPU settings")."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_recipes import VERLOG_SETTINGS, dry_run, run_recipe

VLM = "Qwen/Qwen2.5-VL-3B-Instruct"
RECIPE = "recipes/babyai/qwen2.5-3b_4xa40.sh"  # one recipe: the model config is the same in the Crafter one


def test_gpu_recipe_with_the_vlm_and_images_resolves_with_a_local_folder(tmp_path: Path) -> None:
    """With the model on disk (the tiny VLM stands in for the downloaded folder: same processor family) the recipe
    with images resolves, keeps its numbers, and hands vLLM its image limit."""
    from verlog.models.tiny_vlm import build_tiny_vlm

    folder = build_tiny_vlm(tmp_path / "vlm")
    cfg, out = dry_run(RECIPE, "model=qwen2.5-vl-3b-instruct", "memory.max_image_history=1", MODEL_PATH=str(folder))
    want = VERLOG_SETTINGS[RECIPE]
    assert (cfg["model"]["name"], cfg["model"]["path"]) == ("qwen2.5-vl-3b", str(folder))
    assert cfg["memory"]["max_image_history"] == 1 and cfg["algorithm"]["estimator"] == "dual_gae"  # with a critic
    ro = cfg["rollout"]
    assert (ro["num_slots"], ro["turns_per_slot"]) == (want["slots"], want["turns"])  # the recipe's numbers stay
    assert ro["max_prompt_tokens"] == want["prompt"]
    assert "#   +actor_rollout_ref.rollout.engine_kwargs.vllm.limit_mm_per_prompt={image:1,video:0}" in out
    # the processor normalises the pixels: vLLM's in-model normalisation buffers are noise after a dummy start
    assert "#   +actor_rollout_ref.rollout.engine_kwargs.vllm.mm_device_do_normalize=false" in out


def test_with_images_the_dry_run_needs_the_downloaded_processor() -> None:
    """Here (no downloads) the model's image processor cannot be read, and the launch check says so in one line; on a
    machine with the model (a local folder or the Hugging Face cache) this check passes."""
    proc = run_recipe(RECIPE, "--dry-run", "model=qwen2.5-vl-3b-instruct", "memory.max_image_history=1", MODEL_PATH=VLM)
    assert proc.returncode == 2
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("verlog train: error: memory.max_image_history: the image processor of " + VLM)
    assert "memory.max_image_history=0" in last


@pytest.mark.parametrize(("env_id", "side", "tokens"), [("babyai/goto", 112, 16), ("crafter/default", 256, 81)])
def test_image_tokens_of_a_frame_with_qwen2_5_vl_image_settings(env_id: str, side: int, tokens: int) -> None:
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    import envs
    from verlog.models.vision import image_token_count

    env = envs.make(env_id, images=True)
    try:
        obs, _ = env.reset(seed=0)
    finally:
        env.close()
    assert obs.image.shape == (side, side, 3)
    # Qwen2.5-VL-3B-Instruct's preprocessor_config.json: 14x14 patches, 2 frames a patch, 2x2 merge, these bounds
    processor = Qwen2VLImageProcessorPil(
        min_pixels=3136, max_pixels=12845056, patch_size=14, temporal_patch_size=2, merge_size=2
    )
    assert image_token_count(processor, obs.image) == tokens
    assert image_token_count(processor, np.zeros_like(obs.image)) == tokens  # the size decides, not the pixels
