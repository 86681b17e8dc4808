#!/usr/bin/env bash
# Verlog's BabyAI run: Qwen2.5-3B-Instruct, multi-turn PPO on one BabyAI task, one node with 4 x A40 (48 GB).
# 32 env slots x 8 turns = 256 turns per iteration, 2 mini-batches of 128; prompt 1024 / response 512 tokens;
# binary reward, 0.1 format penalty, memory n = 1; critic warm-up on a 40x first rollout with 5 critic-only updates;
# 300 iterations (Verlog: about 24 h). Verlog's numbers and how to compare: docs/reproducing.md.
#
#   bash recipes/babyai/qwen2.5-3b_4xa40.sh --dry-run           # print the command and resolved config only
#   TASK=pickup OUTPUT_DIR=runs/babyai-pickup bash recipes/babyai/qwen2.5-3b_4xa40.sh
#   MODEL_PATH=/models/Qwen2.5-3B-Instruct GPUS_PER_NODE=8 bash recipes/babyai/qwen2.5-3b_4xa40.sh logger=[console,wandb]
#   RAY_ADDRESS=10.0.0.1:6379 NNODES=2 bash recipes/babyai/qwen2.5-3b_4xa40.sh   # on a Ray cluster
# Environment: MODEL_PATH GPUS_PER_NODE NNODES OUTPUT_DIR TASK ITERATIONS RAY_ADDRESS PYTHON (recipes/common.sh).
#
# Full command (defaults filled in):
#   python -m verlog.train env=babyai env.task=goto model=qwen2.5-3b-instruct model.path=Qwen/Qwen2.5-3B-Instruct \
#     hardware=4xa40 hardware.n_gpus_per_node=4 hardware.nnodes=1 rollout.num_slots=32 rollout.turns_per_slot=8 \
#     rollout.max_prompt_tokens=1024 rollout.max_response_tokens=512 algorithm.mini_batches=2 memory.n=1 \
#     algorithm.critic_warmup=0 algorithm.warmup_rollout_multiplier=40 algorithm.warmup_critic_updates=5 \
#     iterations=300 checkpoint.save_freq=20 output_dir=outputs/babyai-goto-qwen2.5-3b run_name=babyai-goto-qwen2.5-3b \
#     verl.actor_rollout_ref.actor.checkpoint.save_contents=[model,optimizer,extra,hf_model]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"

TASK="${TASK:-goto}"
verlog_ppo_recipe babyai-qwen2.5-3b_4xa40 "babyai-$TASK-qwen2.5-3b" env=babyai env.task="$TASK" -- \
    model=qwen2.5-3b-instruct model_path=Qwen/Qwen2.5-3B-Instruct hardware=4xa40 gpus=4 \
    slots=32 turns=8 prompt_tokens=1024 response_tokens=512 \
    warmup_rollout_multiplier=40 warmup_critic_updates=5 iterations=300 save_freq=20 \
    -- "$@"
