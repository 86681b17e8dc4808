#!/usr/bin/env bash
# Does the self-evolving curriculum shift the sampling? Multi-task PPO on the learnability env at three lengths
# (env=toy_lengths: families len2, len4, len8; the reward for the episode's choices comes at its last turn), once
# with uniform task sampling and once with SEC, at the same budget, seeds and starting model; then the results
# (verlog report curriculum): how the sampling shifted and each family's success before and after, on held-out seeds.
#
#   bash recipes/cpu/curriculum_toy.sh               # about 25 minutes on an idle 2-core machine
#   SMOKE=1 bash recipes/cpu/curriculum_toy.sh       # 2 iterations of each run: checks the chain in minutes
#   OUTPUT_DIR=/tmp/cur ITERATIONS=20 bash recipes/cpu/curriculum_toy.sh
#
# Settings (environment variables, defaults in brackets):
#   OUTPUT_DIR   run folder: model/, uniform/, sec/, logs [outputs/curriculum-toy; smoke: outputs/curriculum-toy-smoke]
#   RESULTS      the markdown the results writer produces [docs/results/curriculum.md; smoke: $OUTPUT_DIR/results.md]
#   ITERATIONS   PPO iterations of each run [30; smoke 2]
#   SLOTS, TURNS env slots x turns per slot = rows per iteration [16 x 8]
#   SEC_ALPHA, SEC_TAU   the SEC run's curriculum.alpha and curriculum.tau [0.5, 1.0: Chen et al. 2025's defaults]
#   EVAL_EVERY, EVAL_EPISODES   in-training evaluation every K iterations, episodes per family [10, 32]
#   PYTHON       [.venv/bin/python of the repository]
# Each run is skipped when its last checkpoint exists (a rerun continues where it stopped: checkpoint.resume=auto).
set -euo pipefail
{

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
source "$ROOT/recipes/cpu/cpu_common.sh"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
SMOKE="${SMOKE:-0}"
if [ "$SMOKE" = 1 ]; then
    OUTPUT_DIR="${OUTPUT_DIR:-$ROOT/outputs/curriculum-toy-smoke}"
    RESULTS="${RESULTS:-$OUTPUT_DIR/results.md}"
    ITERATIONS="${ITERATIONS:-2}"
    EVAL_EVERY="${EVAL_EVERY:-1}"
    EVAL_EPISODES="${EVAL_EPISODES:-4}"
fi
OUTPUT_DIR="${OUTPUT_DIR:-$ROOT/outputs/curriculum-toy}"
RESULTS="${RESULTS:-$ROOT/docs/results/curriculum.md}"
ITERATIONS="${ITERATIONS:-30}"
SLOTS="${SLOTS:-16}"
TURNS="${TURNS:-8}"
SEC_ALPHA="${SEC_ALPHA:-0.5}"
SEC_TAU="${SEC_TAU:-1.0}"
EVAL_EVERY="${EVAL_EVERY:-10}"
EVAL_EPISODES="${EVAL_EPISODES:-32}"
case "$OUTPUT_DIR" in /*) ;; *) OUTPUT_DIR="$PWD/$OUTPUT_DIR" ;; esac
case "$RESULTS" in /*) ;; *) RESULTS="$PWD/$RESULTS" ;; esac

cpu_environment
require_python curriculum
cd "$ROOT"
mkdir -p "$OUTPUT_DIR/logs"
{
    echo "ITERATIONS=$ITERATIONS"
    echo "SLOTS=$SLOTS"
    echo "TURNS=$TURNS"
    echo "SEC_ALPHA=$SEC_ALPHA"
    echo "SEC_TAU=$SEC_TAU"
    echo "EVAL_EVERY=$EVAL_EVERY"
    echo "EVAL_EPISODES=$EVAL_EPISODES"
    echo "SMOKE=$SMOKE"
} >"$OUTPUT_DIR/settings.env"

MODEL="$OUTPUT_DIR/model"
if [ ! -f "$MODEL/verlog_warm_start.done" ]; then
    echo "[curriculum] a tiny model with a format-only warm start on toy/delayed in $MODEL"
    build_toy_start_model "$MODEL" 2>&1 | tee "$OUTPUT_DIR/logs/model.log"
fi

# run NAME KIND [OVERRIDES...]: one multi-task PPO run; the two differ only in curriculum.*
run() {
    local name="$1" kind="$2"
    shift 2
    local done_file="$OUTPUT_DIR/$name/checkpoints/latest_checkpointed_iteration.txt"
    if [ -f "$done_file" ] && [ "$(tr -d '[:space:]' <"$done_file")" = "$ITERATIONS" ]; then
        echo "[curriculum] run $name: done ($done_file), skipped"
        return 0
    fi
    echo "[curriculum] run $name: curriculum.kind=$kind $*"
    "$PYTHON" -m verlog.train \
        output_dir="$OUTPUT_DIR/$name" run_name="curriculum-toy-$name" iterations="$ITERATIONS" seed=1000 \
        env=toy_lengths model.path="$MODEL" model.build_tiny=false hardware=cpu \
        rollout.num_slots="$SLOTS" rollout.turns_per_slot="$TURNS" \
        rollout.max_prompt_tokens=320 rollout.max_response_tokens=24 \
        algorithm.critic_warmup=1 algorithm.actor_lr=3e-4 algorithm.critic_lr=2e-4 algorithm.mini_batches=2 \
        evaluation.every="$EVAL_EVERY" evaluation.episodes="$EVAL_EPISODES" \
        checkpoint.save_freq=5 checkpoint.resume=auto \
        hardware.ray.temp_dir="${RAY_TMPDIR:-/tmp/verlog-ray}" \
        curriculum.kind="$kind" "$@" 2>&1 | tee -a "$OUTPUT_DIR/logs/$name.log"
}

run uniform uniform
run sec sec curriculum.alpha="$SEC_ALPHA" curriculum.tau="$SEC_TAU"

"$PYTHON" -m verlog report curriculum "$OUTPUT_DIR" --out "$RESULTS"
echo "[curriculum] done: $RESULTS (run folder $OUTPUT_DIR)"
exit 0
}
