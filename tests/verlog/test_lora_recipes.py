"""The GPU LoRA settings (docs/lora.md, "GPU settings"): each GPU recipe with its LoRA model config resolves at
--dry-run, keeps the recipe's numbers, and hands verl the LoRA keys."""

from __future__ import annotations

import pytest
from test_recipes import VERLOG_SETTINGS, dry_run

LORA_MODELS = {
    "recipes/babyai/qwen2.5-3b_4xa40.sh": "qwen2.5-3b-instruct-lora",
    "recipes/babaisai/qwen2.5-3b_4xa40.sh": "qwen2.5-3b-instruct-lora",
    "recipes/crafter/qwen2.5-7b_8xh100.sh": "qwen2.5-7b-instruct-lora",
}


@pytest.mark.parametrize("script", sorted(LORA_MODELS))
def test_gpu_recipe_with_lora_resolves(script):
    want = VERLOG_SETTINGS[script]
    cfg, out = dry_run(script, f"model={LORA_MODELS[script]}", "algorithm.actor_lr=1e-5")
    lora = cfg["model"]["lora"]
    assert cfg["model"]["path"] == want["model"]
    assert (lora["rank"], lora["alpha"], lora["target_modules"], lora["critic"]) == (64, 128, "all-linear", False)
    assert cfg["algorithm"]["actor_lr"] == 1e-5 and cfg["algorithm"]["critic_lr"] == 1e-5
    ro = cfg["rollout"]
    assert (ro["num_slots"], ro["turns_per_slot"]) == (want["slots"], want["turns"])  # the recipe's numbers stay
    for key in ("lora_rank=64", "lora_alpha=128", "target_modules=all-linear"):
        assert f"#   actor_rollout_ref.model.{key}" in out
    assert "critic.model.lora_rank" not in out  # the critic trains in full
