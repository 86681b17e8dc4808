#!/usr/bin/env bash
# Verlog's Crafter run: Qwen2.5-7B-Instruct, multi-turn PPO on Crafter (BALROG's text, v1 observation text as in
# Verlog), one node with 8 x H100 (80 GB).
# 128 env slots x 16 turns = 2048 turns per iteration, 2 mini-batches of 1024; prompt 4096 / response 512 tokens;
# crafter's own reward (not binary), 0.1 format penalty, memory n = 1; critic warm-up on a 20x first rollout with
# 20 critic-only updates; 170 iterations (Verlog: about 36 h). Verlog's numbers: docs/reproducing.md.
#
#   bash recipes/crafter/qwen2.5-7b_8xh100.sh --dry-run            # print the command and resolved config only
#   MODEL_PATH=/models/Qwen2.5-7B-Instruct OUTPUT_DIR=runs/crafter bash recipes/crafter/qwen2.5-7b_8xh100.sh
#   RAY_ADDRESS=10.0.0.1:6379 NNODES=2 GPUS_PER_NODE=4 bash recipes/crafter/qwen2.5-7b_8xh100.sh   # Ray cluster
# Environment: MODEL_PATH GPUS_PER_NODE NNODES OUTPUT_DIR TASK ITERATIONS RAY_ADDRESS PYTHON (recipes/common.sh).
#
# Full command (defaults filled in):
#   python -m verlog.train env=crafter env.task=default env.kwargs.text_variant=v1 model=qwen2.5-7b-instruct \
#     model.path=Qwen/Qwen2.5-7B-Instruct hardware=8xh100 hardware.n_gpus_per_node=8 hardware.nnodes=1 \
#     rollout.num_slots=128 rollout.turns_per_slot=16 rollout.max_prompt_tokens=4096 rollout.max_response_tokens=512 \
#     algorithm.mini_batches=2 memory.n=1 algorithm.critic_warmup=0 algorithm.warmup_rollout_multiplier=20 \
#     algorithm.warmup_critic_updates=20 iterations=170 checkpoint.save_freq=10 \
#     output_dir=outputs/crafter-qwen2.5-7b run_name=crafter-qwen2.5-7b \
#     verl.actor_rollout_ref.actor.checkpoint.save_contents=[model,optimizer,extra,hf_model]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"

TASK="${TASK:-default}"
verlog_ppo_recipe crafter-qwen2.5-7b_8xh100 crafter-qwen2.5-7b env=crafter env.task="$TASK" env.kwargs.text_variant=v1 -- \
    model=qwen2.5-7b-instruct model_path=Qwen/Qwen2.5-7B-Instruct hardware=8xh100 gpus=8 \
    slots=128 turns=16 prompt_tokens=4096 response_tokens=512 \
    warmup_rollout_multiplier=20 warmup_critic_updates=20 iterations=170 save_freq=10 \
    -- "$@"
