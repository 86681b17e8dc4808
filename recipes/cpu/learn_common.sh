# The stages every CPU learning recipe shares (learn_babyai.sh, learn_babaisai.sh, learn_crafter.sh): sourced, never
# run alone. A recipe sets its game's defaults (the variables below that have no default here), then sources this
# file with "$@"; this file parses the arguments, checks the settings, records them, and defines the stages:
#
#   start model (demos -> SFT, or a format-only warm start) -> eval start -> [start bound] -> PPO, dual GAE -> eval
#   -> optional comparisons on the same start, budget and seeds: PPO with the iteration boundary cut (no bootstrap),
#   PPO with single-discount GAE -> results (verlog report learning: markdown, JSON, learning curve)
#
# What a recipe sets before sourcing (required):
#   RECIPE          its name (log lines, run names)
#   ENV_CONFIG      the env config group of `verlog train` (configs/env/<name>.yaml)
#   ENV_ID          the env id in every stage
#   ENV_KWARGS_JSON the env's keyword arguments as JSON, the same in demos, PPO and evaluation (EVAL_ENV_KWARGS_JSON,
#                   when set, replaces it in evaluation: e.g. Crafter scores its own reward, without the format penalty)
#   START           demos (scripted expert -> SFT) or warm_start (format-only: random valid answers)
#   DEFAULT_OUTPUT_DIR, DEFAULT_RESULTS
# Optional: PPO_ENV_OVERRIDES, an array of env.kwargs.* overrides that make PPO's env (the config group's) the one of
#                 ENV_KWARGS_JSON where that sets keys the config group does not
# and any default below (a recipe's own defaults win over these: every line is VAR="${VAR:-default}"). A recipe
# sources cpu_common.sh and calls smoke_budgets before its own defaults, so SMOKE=1 keeps the tiny budgets there.
#
# Checks before anything runs (exit 2, one line naming the fix): overlapping seed ranges; LONG_HORIZON=1 with
# PPO_TURNS not below MAX_STEPS (no episode would span iterations); after the start model's evaluation, a start
# above START_BOUND (success rate) when START_BOUND is set.
# The whole recipe must be one { ... } block (see learn_babyai.sh): bash reads it all before running it.

declare -p PPO_ENV_OVERRIDES >/dev/null 2>&1 || PPO_ENV_OVERRIDES=()
source "$ROOT/recipes/common.sh" # recipe_arguments: --dry-run, --help
unknown_argument() {
    echo "[$RECIPE] unknown argument '$1': the settings are environment variables (see --help)" >&2
    exit 2
}
recipe_arguments unknown_argument "$@"

source "$ROOT/recipes/cpu/cpu_common.sh"
SMOKE="${SMOKE:-0}"
if [ "$SMOKE" = 1 ]; then
    OUTPUT_DIR="${OUTPUT_DIR:-$DEFAULT_OUTPUT_DIR-smoke}"
    RESULTS="${RESULTS:-$OUTPUT_DIR/results.md}"
    smoke_budgets # a recipe that called it already set them (the user's and the recipe's earlier settings win)
    START_BOUND="${START_BOUND:-}"
fi
OUTPUT_DIR="${OUTPUT_DIR:-$DEFAULT_OUTPUT_DIR}"
RESULTS="${RESULTS:-$DEFAULT_RESULTS}"
TIME_LIMIT="${TIME_LIMIT:-terminate}"
ANSWER_FORMAT="${ANSWER_FORMAT:-action}"
FORMAT_PENALTY="${FORMAT_PENALTY:-0.2}"
MEMORY_N="${MEMORY_N:-1}"
DEMO_EPISODES="${DEMO_EPISODES:-1000}"
DEMO_VAL_EPISODES="${DEMO_VAL_EPISODES:-20}"
DEMO_SEED_START="${DEMO_SEED_START:-0}"
MODEL_HIDDEN="${MODEL_HIDDEN:-128}"
MODEL_LAYERS="${MODEL_LAYERS:-2}"
MODEL_HEADS="${MODEL_HEADS:-2}"
MODEL_KV_HEADS="${MODEL_KV_HEADS:-1}"
MODEL_FFN="${MODEL_FFN:-256}"
MODEL_VOCAB="${MODEL_VOCAB:-1024}"
TOKENIZER_FROM_DATA="${TOKENIZER_FROM_DATA:-false}" # true: the tiny tokenizer also learns the demos' (or the env's) words
SFT_STEPS="${SFT_STEPS:-60}"
SFT_BATCH="${SFT_BATCH:-32}"
SFT_LR="${SFT_LR:-1e-3}"
SFT_WARMUP_RATIO="${SFT_WARMUP_RATIO:-0.33}"
# SFT_SCAN: SFT lengths to choose the start from (e.g. "100 150 200 300 400"; empty: SFT_STEPS, no scan). SFT runs
# to the longest, checkpointing each; each is evaluated on SCAN_EPISODES validation episodes from SCAN_SEED_START;
# the start model is the longest below START_BOUND with 95% confidence (verlog report learning --pick-start)
SFT_SCAN="${SFT_SCAN:-}"
SCAN_SEED_START="${SCAN_SEED_START:-2000000}"
WARM_START_STEPS="${WARM_START_STEPS:-250}"
EPISODES="${EPISODES:-200}"
SCAN_EPISODES="${SCAN_EPISODES:-$EPISODES}"
EVAL_SEED_START="${EVAL_SEED_START:-1000000}"
EVAL_TEMPERATURE="${EVAL_TEMPERATURE:-1.0}"
START_BOUND="${START_BOUND:-}"
LONG_HORIZON="${LONG_HORIZON:-0}"
PPO_ITERATIONS="${PPO_ITERATIONS:-40}"
PPO_SLOTS="${PPO_SLOTS:-16}"
PPO_TURNS="${PPO_TURNS:-12}"
PPO_SEED="${PPO_SEED:-500000}"
PPO_RANKS="${PPO_RANKS:-2}"
ACTOR_LR="${ACTOR_LR:-3e-4}"
CRITIC_LR="${CRITIC_LR:-2e-4}"
CRITIC_WARMUP="${CRITIC_WARMUP:-3}"
# Verlog's critic warm-up: one first rollout WARMUP_ROLLOUT_MULTIPLIER times PPO_TURNS long, then WARMUP_CRITIC_UPDATES
# critic-only updates on it, before the first iteration [1: none, 0]
WARMUP_ROLLOUT_MULTIPLIER="${WARMUP_ROLLOUT_MULTIPLIER:-1}"
WARMUP_CRITIC_UPDATES="${WARMUP_CRITIC_UPDATES:-0}"
ADVANTAGE_LEVEL="${ADVANTAGE_LEVEL:-turn}"
EVAL_EVERY="${EVAL_EVERY:-10}"
EVAL_EPISODES_IN_TRAINING="${EVAL_EPISODES_IN_TRAINING:-64}"
PPO_EPOCHS="${PPO_EPOCHS:-1}"
MINI_BATCHES="${MINI_BATCHES:-4}"
ENTROPY_COEFF="${ENTROPY_COEFF:-0.001}" # the actor loss's entropy bonus (algorithm.entropy_coeff)
KL_COEF="${KL_COEF:-0.001}" # KL penalty to the start model in the reward; 0: none (and no reference model to compute)
SINGLE_GAE="${SINGLE_GAE:-1}"
BOUNDARY_CUT="${BOUNDARY_CUT:-0}"
STEP_GAMMA="${STEP_GAMMA:-0.99}"
STEP_LAM="${STEP_LAM:-0.95}"
MAX_RESPONSE_TOKENS="${MAX_RESPONSE_TOKENS:-8}"
MAX_PROMPT_TOKENS="${MAX_PROMPT_TOKENS:-1024}"
PPO_PROMPT_TOKENS="${PPO_PROMPT_TOKENS:-352}"
PPO_SAVE_FREQ="${PPO_SAVE_FREQ:-5}"
# vision (learn_visual.sh): VISION=1 starts from the tiny vision-language model (tiny-model --vision); IMAGE_HISTORY
# newest observations are shown with their image in warm start, PPO and evaluation (memory.max_image_history, 0: text
# only); TEXT_CONTROL=1 adds the control: the same PPO and evaluation with text-only prompts (ppo_text, eval_ppo_text)
VISION="${VISION:-0}"
IMAGE_HISTORY="${IMAGE_HISTORY:-0}"
TEXT_CONTROL="${TEXT_CONTROL:-0}"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"

SETTINGS=(SMOKE OUTPUT_DIR RESULTS ENV_ID START MAX_STEPS TIME_LIMIT ANSWER_FORMAT FORMAT_PENALTY MEMORY_N DEMO_EPISODES
    DEMO_VAL_EPISODES DEMO_SEED_START MODEL_HIDDEN MODEL_LAYERS MODEL_HEADS MODEL_KV_HEADS MODEL_FFN MODEL_VOCAB
    TOKENIZER_FROM_DATA SFT_STEPS SFT_BATCH SFT_LR SFT_WARMUP_RATIO SFT_SCAN SCAN_SEED_START SCAN_EPISODES
    WARM_START_STEPS EPISODES EVAL_SEED_START ADVANTAGE_LEVEL EVAL_EVERY EVAL_EPISODES_IN_TRAINING EVAL_TEMPERATURE
    START_BOUND LONG_HORIZON PPO_ITERATIONS
    PPO_SLOTS PPO_TURNS PPO_SEED PPO_RANKS ACTOR_LR CRITIC_LR CRITIC_WARMUP WARMUP_ROLLOUT_MULTIPLIER
    WARMUP_CRITIC_UPDATES PPO_EPOCHS MINI_BATCHES ENTROPY_COEFF KL_COEF SINGLE_GAE
    BOUNDARY_CUT STEP_GAMMA STEP_LAM MAX_RESPONSE_TOKENS MAX_PROMPT_TOKENS PPO_PROMPT_TOKENS PPO_SAVE_FREQ
    VISION IMAGE_HISTORY TEXT_CONTROL
    ${EXTRA_SETTINGS[@]+"${EXTRA_SETTINGS[@]}"})

# paths in the run folder and the results are kept as given when relative (the stages run from the repository root),
# so committed results name repository-relative folders, never this machine's
case "$OUTPUT_DIR" in
/*) RUN="$OUTPUT_DIR" ;;
*) RUN="$ROOT/$OUTPUT_DIR" ;;
esac
case "$RESULTS" in
/*) ;;
*) RESULTS="$ROOT/$RESULTS" ;;
esac

# ---------------------------------------------------------------------------------------------- checks
fail() {
    echo "[$RECIPE] $*" >&2
    exit 2
}
# [start, end) of each stage's seeds; overlapping ranges would evaluate on training layouts
DEMO_SEEDS=("$DEMO_SEED_START" $((DEMO_SEED_START + DEMO_EPISODES)))
PPO_SEEDS=("$PPO_SEED" $((PPO_SEED + PPO_SLOTS)))
EVAL_SEEDS=("$EVAL_SEED_START" $((EVAL_SEED_START + EPISODES)))
overlap() { [ "$1" -lt "$4" ] && [ "$3" -lt "$2" ]; }
if overlap "${PPO_SEEDS[@]}" "${EVAL_SEEDS[@]}" || { [ "$START" = demos ] && {
    overlap "${DEMO_SEEDS[@]}" "${EVAL_SEEDS[@]}" || overlap "${DEMO_SEEDS[@]}" "${PPO_SEEDS[@]}"
}; }; then
    fail "seed ranges overlap: demos [${DEMO_SEEDS[0]}, ${DEMO_SEEDS[1]}), PPO first episodes" \
        "[${PPO_SEEDS[0]}, ${PPO_SEEDS[1]}), evaluation [${EVAL_SEEDS[0]}, ${EVAL_SEEDS[1]}): move DEMO_SEED_START," \
        "PPO_SEED or EVAL_SEED_START apart"
fi
if [ "$LONG_HORIZON" = 1 ] && [ "$PPO_TURNS" -ge "$MAX_STEPS" ]; then
    fail "PPO_TURNS=$PPO_TURNS is not below the step limit MAX_STEPS=$MAX_STEPS: no episode would span iterations," \
        "which this long-horizon recipe is about; lower PPO_TURNS (or raise MAX_STEPS)"
fi
case "$START" in demos | warm_start) ;; *) fail "START=$START is not demos or warm_start" ;; esac
if [ "$VISION" = 1 ] && [ "$START" != warm_start ]; then
    fail "VISION=1 starts from the tiny vision-language model's format-only warm start: set START=warm_start"
fi
if [ "$IMAGE_HISTORY" != 0 ] && [ "$VISION" != 1 ]; then
    fail "IMAGE_HISTORY=$IMAGE_HISTORY needs VISION=1 (a text model reads no images): set VISION=1 or IMAGE_HISTORY=0"
fi
if [ "$TEXT_CONTROL" = 1 ] && [ "$IMAGE_HISTORY" = 0 ]; then
    fail "TEXT_CONTROL=1 compares PPO with images to PPO without: set IMAGE_HISTORY to 1 or more"
fi
# the SFT-length scan: SFT runs to the longest length, checkpointing every SCAN_EVERY steps (the lengths' gcd)
SCAN_EVERY=0
if [ -n "$SFT_SCAN" ]; then
    [ "$START" = demos ] || fail "SFT_SCAN needs START=demos (it chooses among SFT lengths); unset it"
    [ -n "$START_BOUND" ] || fail "SFT_SCAN chooses the longest SFT below START_BOUND: set START_BOUND (e.g. 0.5)"
    previous=0
    for steps in $SFT_SCAN; do
        [[ "$steps" =~ ^[1-9][0-9]*$ ]] && [ "$steps" -gt "$previous" ] ||
            fail "SFT_SCAN='$SFT_SCAN' is not increasing positive step counts (e.g. SFT_SCAN='100 200 300')"
        a="$steps" b="$SCAN_EVERY"
        while [ "$b" -ne 0 ]; do read -r a b <<<"$b $((a % b))"; done
        SCAN_EVERY="$a" previous="$steps"
    done
    SFT_STEPS="$previous"
    SCAN_SEEDS=("$SCAN_SEED_START" $((SCAN_SEED_START + SCAN_EPISODES)))
    for other in DEMO_SEEDS PPO_SEEDS EVAL_SEEDS; do
        declare -n range="$other"
        if overlap "${SCAN_SEEDS[@]}" "${range[@]}"; then
            what=evaluation
            [ "$other" = DEMO_SEEDS ] && what=demos
            [ "$other" = PPO_SEEDS ] && what="PPO first episodes"
            fail "seed ranges overlap: the scan's validation [${SCAN_SEEDS[0]}, ${SCAN_SEEDS[1]}) and the $what" \
                "[${range[0]}, ${range[1]}): move SCAN_SEED_START apart"
        fi
        unset -n range
    done
fi
[ "$DRY_RUN" = 1 ] || require_python "$RECIPE"

cpu_environment
export VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-1}"

# ---------------------------------------------------------------------------------------------- stages
# stage NAME DONE_FILE EXPECTED -- COMMAND...: run COMMAND unless DONE_FILE exists (and, when EXPECTED is not
# empty, holds exactly EXPECTED); log to logs/NAME.log and append the wall time to timings.jsonl.
stage() {
    local name="$1" done_file="$2" expected="$3"
    shift 4
    local state=todo
    if [ -f "$done_file" ] && { [ -z "$expected" ] || [ "$(tr -d '[:space:]' <"$done_file")" = "$expected" ]; }; then
        state=done
    fi
    if [ "$DRY_RUN" = 1 ]; then
        local what="would run"
        [ "$state" = done ] && what="output exists: would be skipped"
        printf '# stage %s (%s)\n' "$name" "$what"
        printf '%q ' "$@"
        printf '\n'
        return 0
    fi
    if [ "$state" = done ]; then
        echo "[$RECIPE] stage $name: output exists ($done_file), skipped"
        return 0
    fi
    echo "[$RECIPE] stage $name: $*"
    local start end
    start=$(date +%s.%N)
    "$@" 2>&1 | tee -a "$RUN/logs/$name.log"
    end=$(date +%s.%N)
    printf '{"stage": "%s", "seconds": %s, "finished_at": "%s"}\n' "$name" \
        "$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
        >>"$RUN/timings.jsonl"
    echo "[$RECIPE] stage $name done"
}

if [ "$DRY_RUN" = 1 ]; then
    echo "# $RECIPE: run folder $RUN (dry run: nothing is started)"
    echo "# seeds: demos [${DEMO_SEEDS[0]}, ${DEMO_SEEDS[1]}), PPO first episodes [${PPO_SEEDS[0]}, ${PPO_SEEDS[1]})," \
        "evaluation [${EVAL_SEEDS[0]}, ${EVAL_SEEDS[1]})"
else
    mkdir -p "$RUN/logs"
    for key in "${SETTINGS[@]}"; do
        printf '%s=%s\n' "$key" "${!key}"
    done >"$RUN/settings.env"
    echo "[$RECIPE] run folder $RUN ($([ "$SMOKE" = 1 ] && echo "SMOKE: tiny budgets" || echo "full budgets"))"
fi
cd "$ROOT"

# the start model: $RUN/sft/model (demos -> SFT) or $RUN/warm_start/model (format-only warm start)
start_model() {
    if [ "$START" = demos ]; then
        # --force: the stage runs only while demos.json is missing (an interrupted stage's leftovers are replaced)
        stage demos "$RUN/demos/demos.json" "" -- \
            "$PYTHON" -m verlog demos "$ENV_ID" --episodes "$DEMO_EPISODES" --seed-start "$DEMO_SEED_START" \
            --val-episodes "$DEMO_VAL_EPISODES" --memory-n "$MEMORY_N" --keep-reasoning-turns 1 \
            --env-kwargs "$ENV_KWARGS_JSON" --answer-format "$ANSWER_FORMAT" --out "$RUN/demos" --force
        stage sft "$RUN/sft/model/config.json" "" -- \
            "$PYTHON" -m verlog sft configs/sft/learn_babyai.yaml \
            output_dir="$RUN/sft" run_name="$RECIPE" data.train="$RUN/demos" \
            model.tiny.hidden_size="$MODEL_HIDDEN" model.tiny.num_layers="$MODEL_LAYERS" \
            model.tiny.num_heads="$MODEL_HEADS" model.tiny.num_kv_heads="$MODEL_KV_HEADS" \
            model.tiny.intermediate_size="$MODEL_FFN" model.tiny.vocab_size="$MODEL_VOCAB" \
            model.tokenizer_from_data="$TOKENIZER_FROM_DATA" data.max_length="$MAX_PROMPT_TOKENS" \
            train.steps="$SFT_STEPS" train.batch_size="$SFT_BATCH" train.lr="$SFT_LR" \
            train.warmup_ratio="$SFT_WARMUP_RATIO" train.lr_scheduler=constant resume=true \
            ${SFT_SCAN:+train.save_freq="$SCAN_EVERY"}
        START_MODEL="$RUN/sft/model"
        [ -z "$SFT_SCAN" ] || scan_sft_lengths
    else
        local tokenizer_env=() vision=()
        [ "$TOKENIZER_FROM_DATA" = true ] && tokenizer_env=(--tokenizer-env "$ENV_ID")
        [ "$VISION" = 1 ] && vision=(--vision --max-image-history "$IMAGE_HISTORY")
        stage warm_start "$RUN/warm_start/model/config.json" "" -- \
            "$PYTHON" -m verlog tiny-model "$RUN/warm_start/model" --force --warm-start "$ENV_ID" \
            ${tokenizer_env[@]+"${tokenizer_env[@]}"} ${vision[@]+"${vision[@]}"} \
            --warm-start-steps "$WARM_START_STEPS" --answer-format "$ANSWER_FORMAT" --memory-n "$MEMORY_N" \
            --hidden-size "$MODEL_HIDDEN" --num-layers "$MODEL_LAYERS" --num-heads "$MODEL_HEADS" \
            --num-kv-heads "$MODEL_KV_HEADS" --intermediate-size "$MODEL_FFN" --vocab-size "$MODEL_VOCAB" \
            --max-prompt-tokens "$MAX_PROMPT_TOKENS"
        START_MODEL="$RUN/warm_start/model"
    fi
}

# evaluate NAME MODEL [SEED_START EPISODES OUT]: the same episodes (seeds, step limit, env settings, sampling) for
# every model; the scan passes its validation seeds and folder
evaluate() {
    local name="eval_$1" out="$RUN/eval_$1"
    [ -z "${5:-}" ] || name="$1" out="$5"
    stage "$name" "$out/summary.json" "" -- \
        "$PYTHON" -m verlog eval --model "$2" --tasks "$ENV_ID" --episodes "${4:-$EPISODES}" \
        --seed-start "${3:-$EVAL_SEED_START}" --max-steps "$MAX_STEPS" \
        --env-kwargs "${EVAL_ENV_KWARGS_JSON:-$ENV_KWARGS_JSON}" --temperature "$EVAL_TEMPERATURE" \
        --max-tokens "$MAX_RESPONSE_TOKENS" --max-prompt-tokens "$MAX_PROMPT_TOKENS" --memory-n "$MEMORY_N" \
        --answer-format "$ANSWER_FORMAT" --resume --out "$out" \
        $([ "$IMAGE_HISTORY" = 0 ] || echo --max-image-history "$IMAGE_HISTORY")
}

# scan_sft_lengths: evaluate each SFT_SCAN checkpoint on the validation seeds; the longest below START_BOUND (95%
# confidence) becomes the start model, copied to scan/model (stops with exit 2 when every length is above it)
scan_sft_lengths() {
    local steps
    for steps in $SFT_SCAN; do
        local checkpoint="$RUN/sft/checkpoints/global_step_$steps/huggingface"
        if [ "$DRY_RUN" = 0 ] && [ ! -f "$RUN/scan/step_$steps/summary.json" ] && [ ! -f "$checkpoint/config.json" ]; then
            fail "the SFT in $RUN/sft has no checkpoint at $steps steps (it ran with other SFT_SCAN lengths, or" \
                "without SFT_SCAN): use a new OUTPUT_DIR"
        fi
        evaluate "scan_$steps" "$checkpoint" "$SCAN_SEED_START" "$SCAN_EPISODES" "$RUN/scan/step_$steps"
    done
    # choice.json is written last, after scan/model is in place; an above-bound scan ends the recipe with exit 2
    stage scan_pick "$RUN/scan/choice.json" "" -- \
        "$PYTHON" -m verlog report learning "$RUN" --pick-start --start-bound "$START_BOUND"
    START_MODEL="$RUN/scan/model"
}

# check_start EVAL_NAME: stop (exit 2) when the start model's success is above START_BOUND
check_start() {
    [ -n "$START_BOUND" ] || return 0
    local cmd=("$PYTHON" -m verlog report learning "$RUN" --check-start "$1" --start-bound "$START_BOUND")
    if [ "$DRY_RUN" = 1 ]; then
        echo "# check: the start model's success <= $START_BOUND"
        printf '%q ' "${cmd[@]}"
        printf '\n'
        return 0
    fi
    "${cmd[@]}" || exit 2
}

# ppo NAME TOKEN_GAMMA TOKEN_LAM [OVERRIDE...]: PPO from the start model; the runs differ only in what is passed here
ppo() {
    local name="$1" token_gamma="$2" token_lam="$3"
    shift 3
    stage "$name" "$RUN/$name/checkpoints/latest_checkpointed_iteration.txt" "$PPO_ITERATIONS" -- \
        "$PYTHON" -m verlog.train \
        output_dir="$RUN/$name" run_name="$RECIPE-$name" iterations="$PPO_ITERATIONS" seed="$PPO_SEED" \
        env="$ENV_CONFIG" env.id="$ENV_ID" env.kwargs.max_steps="$MAX_STEPS" env.kwargs.time_limit="$TIME_LIMIT" \
        env.kwargs.format_penalty="$FORMAT_PENALTY" \
        model=tiny-cpu model.name=start model.path="$START_MODEL" model.build_tiny=false \
        hardware=cpu hardware.n_gpus_per_node="$PPO_RANKS" hardware.ray.temp_dir="${RAY_TMPDIR:-/tmp/verlog-ray}" \
        rollout.num_slots="$PPO_SLOTS" rollout.turns_per_slot="$PPO_TURNS" \
        rollout.max_prompt_tokens="$PPO_PROMPT_TOKENS" rollout.max_response_tokens="$MAX_RESPONSE_TOKENS" \
        memory.n="$MEMORY_N" memory.keep_reasoning_turns=1 memory.answer_format="$ANSWER_FORMAT" \
        algorithm.step_gamma="$STEP_GAMMA" algorithm.step_lam="$STEP_LAM" \
        algorithm.token_gamma="$token_gamma" algorithm.token_lam="$token_lam" \
        algorithm.actor_lr="$ACTOR_LR" algorithm.critic_lr="$CRITIC_LR" algorithm.critic_warmup="$CRITIC_WARMUP" \
        algorithm.ppo_epochs="$PPO_EPOCHS" algorithm.mini_batches="$MINI_BATCHES" \
        algorithm.entropy_coeff="$ENTROPY_COEFF" \
        algorithm.kl_in_reward="$([ "$KL_COEF" = 0 ] && echo false || echo true)" algorithm.kl_coef="$KL_COEF" \
        algorithm.warmup_rollout_multiplier="$WARMUP_ROLLOUT_MULTIPLIER" \
        algorithm.warmup_critic_updates="$WARMUP_CRITIC_UPDATES" \
        algorithm.advantage_level="$ADVANTAGE_LEVEL" \
        evaluation.every="$EVAL_EVERY" evaluation.episodes="$EVAL_EPISODES_IN_TRAINING" \
        checkpoint.save_freq="$PPO_SAVE_FREQ" checkpoint.resume=auto \
        $([ "$IMAGE_HISTORY" = 0 ] || echo memory.max_image_history="$IMAGE_HISTORY") \
        "verl.actor_rollout_ref.actor.checkpoint.save_contents=[model,optimizer,extra,hf_model]" \
        "${PPO_ENV_OVERRIDES[@]}" "$@"
}

# run_all START_EVAL_NAME: the whole chain after the recipe's settings (start model, PPO runs, evaluations, results)
run_all() {
    start_model
    evaluate "$1" "$START_MODEL"
    check_start "$1"
    ppo ppo_dual 1.0 1.0
    evaluate ppo_dual "$RUN/ppo_dual/checkpoints"
    if [ "$BOUNDARY_CUT" = 1 ]; then # the ablation: the iteration boundary ends the return (no V(s_T))
        ppo ppo_cut 1.0 1.0 algorithm.boundary=cut
        evaluate ppo_cut "$RUN/ppo_cut/checkpoints"
    fi
    if [ "$SINGLE_GAE" = 1 ]; then
        ppo ppo_single "$STEP_GAMMA" "$STEP_LAM"
        evaluate ppo_single "$RUN/ppo_single/checkpoints"
    fi
    if [ "$TEXT_CONTROL" = 1 ]; then # the control of a visual task: the same PPO, prompts without images
        IMAGE_HISTORY=0 ppo ppo_text 1.0 1.0 env.kwargs.images=false
        IMAGE_HISTORY=0 evaluate ppo_text "$RUN/ppo_text/checkpoints"
    fi
    # the results: always rewritten from what the run folder holds (cheap)
    local cmd=("$PYTHON" -m verlog report learning "$RUN" --out "$RESULTS")
    if [ "$DRY_RUN" = 1 ]; then
        echo "# stage results (always runs)"
        printf '%q ' "${cmd[@]}"
        printf '\n'
        return 0
    fi
    "${cmd[@]}"
    echo "[$RECIPE] done: results in $RESULTS, run folder $RUN"
}
