#!/usr/bin/env bash
# The simplest self-improvement loop on BabyAI "go to", on a 2-core CPU (issue 26): keep the successful episodes of
# the current policy, fine-tune on them, repeat; tapes are the data.
#
#   start model (expert demos -> SFT) -> eval start
#   -> per round r: collect_r (the current model plays training seeds, with tapes: verlog eval --log-turns)
#                   -> self_sft_r (verlog sft on collect_r's successful episodes, from the current model)
#                   -> eval_self_r (the same evaluation episodes as every other model)
#   -> results (verlog report self-improve: success and return with 95% bootstrap intervals, gains paired by seed)
#
#   bash recipes/cpu/self_improve_babyai.sh                  # the real run (not measured yet; see docs/sft.md)
#   SMOKE=1 bash recipes/cpu/self_improve_babyai.sh          # tiny budgets: checks the chain end to end in minutes
#   bash recipes/cpu/self_improve_babyai.sh --dry-run        # print every stage's command; run nothing
#   START_MODEL_PATH=outputs/learn-babyai/sft/model bash recipes/cpu/self_improve_babyai.sh   # start from a model
#
# Every stage writes into one run folder ($OUTPUT_DIR): demos/, sft/ (the start model), eval_sft/, collect_<r>/,
# self_sft_<r>/ (self_sft_<r>/model; self_sft_<r>/data: the rows made from the tapes and tapes.json, what was kept),
# eval_self_<r>/, logs/<stage>.log, timings.jsonl, settings.env and the results. A stage whose output exists is
# skipped, so an interrupted run continues where it stopped. Change a setting? Use a new OUTPUT_DIR.
#
# Settings (environment variables; defaults in brackets, SMOKE=1 values after "smoke:"); the start model's, the
# evaluation's and the env's are the learning recipe's (recipes/cpu/learn_common.sh, learn_babyai.sh: TASK,
# MAX_STEPS, ANSWER_FORMAT, MEMORY_N, FORMAT_PENALTY, DEMO_*, MODEL_*, SFT_STEPS, SFT_BATCH, SFT_LR, EPISODES,
# EVAL_SEED_START, EVAL_TEMPERATURE, MAX_RESPONSE_TOKENS, MAX_PROMPT_TOKENS), plus:
#   OUTPUT_DIR          the run folder [outputs/self-improve-babyai; smoke: outputs/self-improve-babyai-smoke]
#   RESULTS             the markdown written at the end [docs/results/self-improve.md; smoke: $OUTPUT_DIR/results.md]
#   START_MODEL_PATH    start from this model folder instead of demos -> SFT [unset]
#   ROUNDS              rounds of collect -> SFT -> evaluate [2; smoke 1]
#   COLLECT_EPISODES    episodes the current model plays per round [400; smoke 8]
#   COLLECT_SEED_START  first seed of round 1; round r plays COLLECT_SEED_START + (r-1) * COLLECT_EPISODES onwards
#                       [2000000]
#   SELF_SFT_STEPS, SELF_SFT_LR, SELF_SFT_WARMUP_RATIO   each round's SFT from the current model: steps of SFT_BATCH
#                       rows, constant lr after a linear warm-up [40, 5e-4, 0.1; smoke 2]
#   SUCCESS_ONLY        keep only successful episodes (data.tapes.success_only) [true; smoke false: a 3-step SFT model
#                       wins no episode, and the smoke checks the chain, not the gain]
#   VALID_ONLY          leave out the turns whose answer named no valid action (data.tapes.valid_only) [true; smoke
#                       false]
#
# How it is meant to be read: the start model is the learning recipe's SFT model (about 30% success on goto within
# 12 steps, docs/results/babyai-goto.md), far from the ceiling; its successful episodes are its own best behaviour,
# so SFT on them sharpens the policy towards it (rejection-sampling fine-tuning). The evaluation seeds are never
# collected on: seeds of demos [0, 1000), collection [2000000, ...), evaluation [1000000, 1000200); the recipe
# refuses overlaps.
set -euo pipefail
# the whole script is one { ... } block: bash reads it completely before running, so editing this file during a
# (long) run cannot change or break the running copy
{

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
RECIPE=self-improve-babyai
source "$ROOT/recipes/cpu/cpu_common.sh"
smoke_budgets # SMOKE=1: the tiny budgets (cpu_common.sh); the settings below are the full run's
TASK="${TASK:-goto}"
MAX_STEPS="${MAX_STEPS:-12}"
FORMAT_PENALTY="${FORMAT_PENALTY:-0.2}"
ENV_CONFIG=babyai_goto
ENV_ID="babyai/$TASK"
START=demos
DEFAULT_OUTPUT_DIR=outputs/self-improve-babyai
DEFAULT_RESULTS=docs/results/self-improve.md
if [ "${SMOKE:-0}" = 1 ]; then
    ROUNDS="${ROUNDS:-1}"
    COLLECT_EPISODES="${COLLECT_EPISODES:-8}"
    SELF_SFT_STEPS="${SELF_SFT_STEPS:-2}"
    SUCCESS_ONLY="${SUCCESS_ONLY:-false}"
    VALID_ONLY="${VALID_ONLY:-false}"
fi
ROUNDS="${ROUNDS:-2}"
COLLECT_EPISODES="${COLLECT_EPISODES:-400}"
COLLECT_SEED_START="${COLLECT_SEED_START:-2000000}"
SELF_SFT_STEPS="${SELF_SFT_STEPS:-40}"
SELF_SFT_LR="${SELF_SFT_LR:-5e-4}"
SELF_SFT_WARMUP_RATIO="${SELF_SFT_WARMUP_RATIO:-0.1}"
SUCCESS_ONLY="${SUCCESS_ONLY:-true}"
VALID_ONLY="${VALID_ONLY:-true}"
START_MODEL_PATH="${START_MODEL_PATH:-}"
EXTRA_SETTINGS=(TASK ROUNDS COLLECT_EPISODES COLLECT_SEED_START SELF_SFT_STEPS SELF_SFT_LR SELF_SFT_WARMUP_RATIO
    SUCCESS_ONLY VALID_ONLY START_MODEL_PATH)
# the env's settings, the same in demos, collection and evaluation (learn_babyai.sh's, with the step limit)
ENV_KWARGS_JSON=$(json_object parse_mode=strict format_penalty="$FORMAT_PENALTY" binary_reward=true max_steps="$MAX_STEPS" \
    time_limit=terminate)
# the settings, checks and stages (stage, start_model, evaluate) of the CPU recipes
source "$ROOT/recipes/cpu/learn_common.sh"

[ "$ROUNDS" -ge 1 ] 2>/dev/null || fail "ROUNDS=$ROUNDS is not an integer >= 1"
COLLECT_SEEDS=("$COLLECT_SEED_START" $((COLLECT_SEED_START + ROUNDS * COLLECT_EPISODES)))
if overlap "${COLLECT_SEEDS[@]}" "${EVAL_SEEDS[@]}" || overlap "${COLLECT_SEEDS[@]}" "${DEMO_SEEDS[@]}"; then
    fail "seed ranges overlap: collection [${COLLECT_SEEDS[0]}, ${COLLECT_SEEDS[1]}), evaluation" \
        "[${EVAL_SEEDS[0]}, ${EVAL_SEEDS[1]}), demos [${DEMO_SEEDS[0]}, ${DEMO_SEEDS[1]}): move COLLECT_SEED_START"
fi
[ "$DRY_RUN" = 1 ] && echo "# collection [${COLLECT_SEEDS[0]}, ${COLLECT_SEEDS[1]}) in $ROUNDS round(s)"

# collect R MODEL: the current model plays round R's training seeds, every turn taped (turns.jsonl)
collect() {
    local start=$((COLLECT_SEED_START + ($1 - 1) * COLLECT_EPISODES))
    stage "collect_$1" "$RUN/collect_$1/summary.json" "" -- \
        "$PYTHON" -m verlog eval --model "$2" --tasks "$ENV_ID" --episodes "$COLLECT_EPISODES" \
        --seed-start "$start" --max-steps "$MAX_STEPS" --env-kwargs "$ENV_KWARGS_JSON" \
        --temperature "$EVAL_TEMPERATURE" --max-tokens "$MAX_RESPONSE_TOKENS" --max-prompt-tokens "$MAX_PROMPT_TOKENS" \
        --memory-n "$MEMORY_N" --answer-format "$ANSWER_FORMAT" --log-turns --resume --out "$RUN/collect_$1"
}

# self_sft R MODEL: SFT from MODEL on round R's tapes, the prompts rebuilt with the evaluation's memory settings
self_sft() {
    stage "self_sft_$1" "$RUN/self_sft_$1/model/config.json" "" -- \
        "$PYTHON" -m verlog sft configs/sft/learn_babyai.yaml \
        output_dir="$RUN/self_sft_$1" run_name="$RECIPE-round-$1" model.path="$2" model.build_tiny=false \
        data.train="$RUN/collect_$1" data.max_length="$MAX_PROMPT_TOKENS" \
        data.tapes.success_only="$SUCCESS_ONLY" data.tapes.valid_only="$VALID_ONLY" \
        data.tapes.memory.n="$MEMORY_N" data.tapes.memory.keep_reasoning_turns=1 \
        data.tapes.memory.answer_format="$ANSWER_FORMAT" data.tapes.max_prompt_tokens="$MAX_PROMPT_TOKENS" \
        train.steps="$SELF_SFT_STEPS" train.batch_size="$SFT_BATCH" train.lr="$SELF_SFT_LR" \
        train.warmup_ratio="$SELF_SFT_WARMUP_RATIO" train.lr_scheduler=constant resume=true
}

if [ -n "$START_MODEL_PATH" ]; then
    START_MODEL="$START_MODEL_PATH"
else
    start_model
fi
evaluate sft "$START_MODEL"
MODEL="$START_MODEL"
for round in $(seq 1 "$ROUNDS"); do
    collect "$round" "$MODEL"
    self_sft "$round" "$MODEL"
    MODEL="$RUN/self_sft_$round/model"
    evaluate "self_$round" "$MODEL"
done
# the results: always rewritten from what the run folder holds (cheap)
RESULTS_CMD=("$PYTHON" -m verlog report self-improve "$RUN" --out "$RESULTS")
if [ "$DRY_RUN" = 1 ]; then
    echo "# stage results (always runs)"
    printf '%q ' "${RESULTS_CMD[@]}"
    printf '\n'
    exit 0
fi
"${RESULTS_CMD[@]}"
echo "[$RECIPE] done: results in $RESULTS, run folder $RUN"
exit 0
}
