#!/usr/bin/env bash
# Does a vision-language agent learn from images? The tiny VLM on toy/visual, on a 2-core CPU, in one command
# (issue 35, docs/vision.md):
#
#   tiny VLM (random weights) -> format-only warm start with the env's frames -> eval (images)
#   -> PPO, dual GAE, each turn's frame in the prompt -> eval (images)
#   -> the control: the same PPO with text-only prompts -> eval (text) -> results (markdown + learning curve)
#
# toy/visual shows one coloured square a turn; its colour names the action that pays (red: turn left, green: go
# forward, blue: turn right); the text is the same every turn, so a text-only policy scores chance (1/3) and only a
# policy that reads the image can do better. The target: PPO with images from chance to >= 90% success within 20
# minutes of PPO; the text-only control stays at chance.
#
#   bash recipes/cpu/learn_visual.sh                 # the real run
#   SMOKE=1 bash recipes/cpu/learn_visual.sh         # tiny budgets: checks the chain end to end in minutes
#   bash recipes/cpu/learn_visual.sh --dry-run       # print every stage's command; run nothing
#
# Every stage writes into one run folder ($OUTPUT_DIR): warm_start/, eval_warm_start/, ppo_dual/, eval_ppo_dual/,
# ppo_text/, eval_ppo_text/, logs/<stage>.log, timings.jsonl, settings.env and the results; a stage whose output
# exists is skipped, so an interrupted run continues where it stopped.
#
# Settings (environment variables; defaults in brackets): those of learn_babyai.sh (recipes/cpu/learn_common.sh),
# with these defaults here:
#   OUTPUT_DIR          [outputs/learn-visual; smoke: outputs/learn-visual-smoke]
#   RESULTS             [docs/results/visual-toy/latest.md; smoke: $OUTPUT_DIR/results.md]
#   LENGTH              turns per episode [1]: each turn is one picture and one answer
#   MIN_SIDE, MAX_SIDE  the square's side in pixels, drawn from [MIN_SIDE, MAX_SIDE] of the 56x56 picture [56, 56:
#                       the colour fills the picture; smaller squares did not get learnt by the tiny random VLM,
#                       docs/results/visual-toy.md]
#   IMAGE_HISTORY       newest observations shown with their image [1]
#   TEXT_CONTROL        1: also run the text-only control [1]
#   WARM_START_STEPS    format-only warm start steps of 16 rows [150; smoke 3]
#   PPO_ITERATIONS, PPO_SLOTS, PPO_TURNS   [100, 64, 4 = 256 rows an iteration; smoke 2, 2, 4]
#   ACTOR_LR, CRITIC_LR, MINI_BATCHES [5e-4, 1e-3, 2: at 1e-3 with 128 rows an iteration, v7 learnt to 76% and then
#                       one update broke the answer format]; ENTROPY_COEFF [0]; KL_COEF [0: no KL penalty, no
#                       reference model]
#
# Status: these defaults are v8's, the target met: 34.0% -> 98.7% [97.3, 99.7] success on 300 held-out episodes,
# 94.7% already at iteration 60 (13 minutes of PPO); the text-only control stays at chance
# (docs/results/visual-toy.md has every attempt).
#   EPISODES            evaluation episodes per model [300; smoke 4]
#   MODEL_HIDDEN, MODEL_LAYERS, MODEL_HEADS, MODEL_KV_HEADS, MODEL_FFN   the tiny VLM's text model [64, 2, 2, 1, 128]
set -euo pipefail
# one { ... } block: bash reads the whole script before running it (see learn_babyai.sh)
{

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
RECIPE=learn-visual
LENGTH="${LENGTH:-1}"
MIN_SIDE="${MIN_SIDE:-56}"
MAX_SIDE="${MAX_SIDE:-56}"
MAX_STEPS="${MAX_STEPS:-$LENGTH}" # set before the smoke budgets: a smoke run keeps the episode's length
source "$ROOT/recipes/cpu/cpu_common.sh"
smoke_budgets # SMOKE=1: the tiny budgets (cpu_common.sh); the settings below are the full run's
TIME_LIMIT="${TIME_LIMIT:-terminate}"
FORMAT_PENALTY="${FORMAT_PENALTY:-0.1}"
START=warm_start
VISION=1
IMAGE_HISTORY="${IMAGE_HISTORY:-1}"
TEXT_CONTROL="${TEXT_CONTROL:-1}"
MEMORY_N="${MEMORY_N:-0}"
MODEL_HIDDEN="${MODEL_HIDDEN:-64}"
MODEL_LAYERS="${MODEL_LAYERS:-2}"
MODEL_HEADS="${MODEL_HEADS:-2}"
MODEL_KV_HEADS="${MODEL_KV_HEADS:-1}"
MODEL_FFN="${MODEL_FFN:-128}"
WARM_START_STEPS="${WARM_START_STEPS:-150}"
EPISODES="${EPISODES:-300}"
PPO_ITERATIONS="${PPO_ITERATIONS:-100}"
PPO_SLOTS="${PPO_SLOTS:-64}"
PPO_TURNS="${PPO_TURNS:-4}"
PPO_RANKS="${PPO_RANKS:-1}"
ACTOR_LR="${ACTOR_LR:-5e-4}"
CRITIC_LR="${CRITIC_LR:-1e-3}"
CRITIC_WARMUP="${CRITIC_WARMUP:-2}"
MINI_BATCHES="${MINI_BATCHES:-2}"
ENTROPY_COEFF="${ENTROPY_COEFF:-0}"
KL_COEF="${KL_COEF:-0}" # no reference model: one forward pass less a row
EVAL_EVERY=0 # in-training evaluation adds minutes; the recipe evaluates each model after its run
PPO_PROMPT_TOKENS="${PPO_PROMPT_TOKENS:-256}"
MAX_PROMPT_TOKENS="${MAX_PROMPT_TOKENS:-256}"
PPO_SAVE_FREQ="${PPO_SAVE_FREQ:-20}"
SINGLE_GAE=0
BOUNDARY_CUT=0
ENV_CONFIG=toy_visual
ENV_ID=toy/visual
DEFAULT_OUTPUT_DIR=outputs/learn-visual
DEFAULT_RESULTS=docs/results/visual-toy/latest.md
EXTRA_SETTINGS=(LENGTH MIN_SIDE MAX_SIDE)
ENV_KWARGS_JSON=$(json_object parse_mode=strict format_penalty="$FORMAT_PENALTY" length="$LENGTH" min_side="$MIN_SIDE" \
    max_side="$MAX_SIDE" max_steps="$MAX_STEPS" time_limit="$TIME_LIMIT")
PPO_ENV_OVERRIDES=(env.kwargs.min_side="$MIN_SIDE" env.kwargs.max_side="$MAX_SIDE")
source "$ROOT/recipes/cpu/learn_common.sh"
run_all warm_start
exit 0
}
