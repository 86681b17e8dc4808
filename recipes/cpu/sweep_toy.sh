#!/usr/bin/env bash
# The CPU showcase of `verlog sweep` (docs/sweeps.md): 24 trials of PPO on toy/delayed over actor lr, critic
# warm-up, format penalty, advantage level and token gamma/lambda (recipes/cpu/sweep_toy.yaml), then the bootstrap
# diagnosis of which settings matter and which values are robustly best.
#
# 1. builds the start model the space names, outputs/sweep-toy/model (a tiny Qwen2 with a format-only warm start on
#    toy/delayed, as the quick start's; about a minute; kept for later runs);
# 2. runs the sweep into outputs/sweep-toy/sweep, one trial at a time (each a `verlog train` of 8 iterations plus its
#    evaluation; about 2-3 minutes each on a 2-core CPU); killed, the same command resumes it (finished trials stay);
# 3. writes the report: docs/results/sweep-toy/report.md with its plots (REPORT_DIR=... to write it elsewhere).
#
#   bash recipes/cpu/sweep_toy.sh
#   bash recipes/cpu/sweep_toy.sh --dry-run      # builds the start model if missing, prints the checked trials
#   bash recipes/cpu/sweep_toy.sh --parallel 2   # any option of `verlog sweep`
#
# Full command: python -m verlog sweep recipes/cpu/sweep_toy.yaml --out outputs/sweep-toy/sweep "$@", then
# python -m verlog sweep report outputs/sweep-toy/sweep --out docs/results/sweep-toy
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
source "$ROOT/recipes/cpu/cpu_common.sh"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
SPACE="recipes/cpu/sweep_toy.yaml"
MODEL="outputs/sweep-toy/model"  # the space's model.path (relative to the repository root)
SWEEP_DIR="outputs/sweep-toy/sweep"
REPORT_DIR="${REPORT_DIR:-docs/results/sweep-toy}"

toy_recipe_setup sweep_toy "$@"
if [ ! -f "$MODEL/verlog_warm_start.done" ]; then
    echo "[sweep_toy] building the start model (format-only warm start on toy/delayed) in $MODEL"
    build_toy_start_model "$MODEL"
fi
status=0
"$PYTHON" -m verlog sweep "$SPACE" --out "$SWEEP_DIR" "$@" || status=$?
if [ "$DRY_RUN" = 0 ]; then
    "$PYTHON" -m verlog sweep report "$SWEEP_DIR" --out "$REPORT_DIR"
fi
exit "$status"
