#!/usr/bin/env bash
# Verlog's BabaIsAI run: Qwen2.5-3B-Instruct, multi-turn PPO on one BabaIsAI task (Verlog's:
# two_room-maybe_break_stop-goto_win), one node with 4 x A40 (48 GB).
# 32 env slots x 8 turns = 256 turns per iteration, 2 mini-batches of 128; prompt 1024 / response 384 tokens;
# binary reward, 0.1 format penalty, memory n = 1; critic warm-up on a 40x first rollout with 10 critic-only updates;
# 300 iterations. Verlog's numbers and how to compare: docs/reproducing.md.
#
#   bash recipes/babaisai/qwen2.5-3b_4xa40.sh --dry-run          # print the command and resolved config only
#   TASK=two_room-goto_win bash recipes/babaisai/qwen2.5-3b_4xa40.sh
#   RAY_ADDRESS=10.0.0.1:6379 NNODES=2 bash recipes/babaisai/qwen2.5-3b_4xa40.sh   # on a Ray cluster
# Environment: MODEL_PATH GPUS_PER_NODE NNODES OUTPUT_DIR TASK ITERATIONS RAY_ADDRESS PYTHON (recipes/common.sh).
#
# Full command (defaults filled in):
#   python -m verlog.train env=babaisai env.task=two_room-maybe_break_stop-goto_win model=qwen2.5-3b-instruct \
#     model.path=Qwen/Qwen2.5-3B-Instruct hardware=4xa40 hardware.n_gpus_per_node=4 hardware.nnodes=1 \
#     rollout.num_slots=32 rollout.turns_per_slot=8 rollout.max_prompt_tokens=1024 rollout.max_response_tokens=384 \
#     algorithm.mini_batches=2 memory.n=1 algorithm.critic_warmup=0 algorithm.warmup_rollout_multiplier=40 \
#     algorithm.warmup_critic_updates=10 iterations=300 checkpoint.save_freq=20 \
#     output_dir=outputs/babaisai-two_room-maybe_break_stop-goto_win-qwen2.5-3b \
#     run_name=babaisai-two_room-maybe_break_stop-goto_win-qwen2.5-3b \
#     verl.actor_rollout_ref.actor.checkpoint.save_contents=[model,optimizer,extra,hf_model]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"

TASK="${TASK:-two_room-maybe_break_stop-goto_win}"
verlog_ppo_recipe babaisai-qwen2.5-3b_4xa40 "babaisai-$TASK-qwen2.5-3b" env=babaisai env.task="$TASK" -- \
    model=qwen2.5-3b-instruct model_path=Qwen/Qwen2.5-3B-Instruct hardware=4xa40 gpus=4 \
    slots=32 turns=8 prompt_tokens=1024 response_tokens=384 \
    warmup_rollout_multiplier=40 warmup_critic_updates=10 iterations=300 save_freq=20 \
    -- "$@"
