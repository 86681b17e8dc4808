#!/usr/bin/env bash
# CPU quick start (placeholder until `verlog train` lands): builds a tiny model and lists the environments.
# Usage: bash recipes/cpu/quickstart.sh [OUTPUT_DIR]
set -euo pipefail
OUT="${1:-${VERLOG_OUTPUT_DIR:-outputs/quickstart}}"
mkdir -p "$OUT"
echo "[quickstart] training is not implemented yet; building a tiny model and listing the environments instead"
python -m verlog tiny-model "$OUT/tiny_model"
python -m verlog envs
echo "[quickstart] outputs in $OUT"
