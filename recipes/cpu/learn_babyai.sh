#!/usr/bin/env bash
# Does verlog learn? The whole chain on BabyAI "go to", on a 2-core CPU, in one command (issue 9):
#
#   demos (expert, train seeds) -> SFT -> eval SFT model -> PPO, dual-discount GAE (from the SFT model) -> eval
#   -> PPO, single-discount GAE (same SFT model, budget and seeds) -> eval -> results (markdown + learning curve)
#
#   bash recipes/cpu/learn_babyai.sh                 # the real run: about 1.5 h on an idle 2-core machine
#   SMOKE=1 bash recipes/cpu/learn_babyai.sh         # tiny budgets: checks the chain end to end in minutes
#   bash recipes/cpu/learn_babyai.sh --dry-run       # print every stage's command; run nothing
#   OUTPUT_DIR=/tmp/learn PPO_ITERATIONS=40 bash recipes/cpu/learn_babyai.sh
#
# Every stage writes into one run folder ($OUTPUT_DIR): demos/, sft/ (sft/model is the SFT model), eval_sft/,
# ppo_dual/, eval_ppo_dual/, ppo_single/, eval_ppo_single/, logs/<stage>.log, timings.jsonl (wall time of each
# stage run), settings.env (the settings below) and the results. A stage whose output exists is skipped, so an
# interrupted run continues where it stopped (PPO resumes from its last checkpoint, evaluation from its last
# episode). Change a setting? Use a new OUTPUT_DIR, or delete the stages it affects.
#
# Settings (environment variables; defaults in brackets, SMOKE=1 values after "smoke:"):
#   OUTPUT_DIR          the run folder [outputs/learn-babyai; smoke: outputs/learn-babyai-smoke]
#   RESULTS             the markdown written at the end [docs/results.md; smoke: $OUTPUT_DIR/results.md]; the
#                       learning curve PNG goes next to it (<name>_curve.png), the numbers to <name>.json
#   TASK                BabyAI task kind [goto]
#   MAX_STEPS           step limit of every episode, in PPO and in evaluation [12; smoke 6]
#   DEMO_EPISODES, DEMO_VAL_EPISODES, DEMO_SEED_START   expert episodes, of which the last K for validation, first
#                       seed [400, 20, 0; smoke 24, 0]
#   MODEL_HIDDEN, MODEL_LAYERS, MODEL_HEADS, MODEL_KV_HEADS, MODEL_FFN, MODEL_VOCAB   the random-weight Qwen2 that
#                       SFT starts from [384, 6, 6, 2, 1024, 1024 = about 11M parameters; smoke 128, 2, 2, 1, 256, 1024]
#   SFT_STEPS, SFT_BATCH, SFT_LR   [60, 16, 1e-3; smoke 3, 8]
#   EPISODES            evaluation episodes per model [200; smoke 4]
#   EVAL_SEED_START     first evaluation seed [1000000]; seeds EVAL_SEED_START .. + EPISODES - 1
#   EVAL_TEMPERATURE    evaluation sampling temperature [1.0, as in the rollout and BALROG]
#   PPO_ITERATIONS      PPO iterations of each PPO run [18; smoke 2]
#   PPO_SLOTS, PPO_TURNS  env slots x turns per slot = rows per iteration [8 x 12; smoke 2 x 4]
#   PPO_SEED            seed of the first PPO episodes (slot i: PPO_SEED + i) [500000]
#   PPO_RANKS           CPU training ranks [2]
#   ACTOR_LR, CRITIC_LR, CRITIC_WARMUP, PPO_EPOCHS, MINI_BATCHES   [1e-4, 2e-4, 1, 1, 4; smoke warm-up 0]
#   STEP_GAMMA, STEP_LAM  discount and lambda between turns [0.99, 0.95]; the dual run keeps token gamma = lambda
#                       = 1 (Verlog's), the single run sets token gamma/lambda = STEP_GAMMA/STEP_LAM (ordinary GAE)
#   MAX_RESPONSE_TOKENS, MAX_PROMPT_TOKENS   [48, 1024] (a demo answer is about 36 tokens with the tiny tokenizer)
#   PPO_PROMPT_TOKENS   prompt budget of PPO rows [448]: every row is padded to it (plus MAX_RESPONSE_TOKENS) on the
#                       CPU, where verl runs without padding removal; prompts here are 270-380 tokens
#   PPO_SAVE_FREQ       checkpoint every this many iterations (for resuming) [5]
#   PYTHON              [.venv/bin/python of the repository]
#
# How these were chosen (docs/results.md has the measured run and the earlier attempts):
# - Model: 384 hidden x 6 layers (about 11M parameters, vocab 1024) is the size shared/STACK.md measured for SFT on
#   this CPU (about 1.4k tokens/s fp32, learns the THINK/ACTION format within about 20 steps). Measured here: a PPO
#   iteration of 96 rows padded to 496 tokens takes about 105 s (15 s of it generation) in fp32 (verl's bf16 defaults
#   were 5x slower, docs/design.md), plus a 2-3 minute start-up.
# - SFT length: 60 steps of 16 rows (about half an epoch of the 1800 expert turns; about 5-6 min) instead of
#   configs/sft/cpu.yaml's 100, so that the format is learnt but the policy is not: the SFT model must stay clearly
#   below the ceiling for RL to have room (measured: 16% success under 12 steps). If the SFT evaluation reads above
#   about 70% success, rerun with a new OUTPUT_DIR and fewer SFT_STEPS (or DEMO_EPISODES); if it never writes a
#   valid action, more.
# - MAX_STEPS=12 is about 2.5 times the expert's mean episode (4.7 turns; the expert won 399 of 400 episodes under
#   it): short episodes end often, so PPO sees more of them; success is measured under that limit for every model.
# - PPO: 8 slots x 12 turns = 96 rows, so each slot plays a whole episode per iteration and most rows' advantages
#   come from returns inside the batch, not from a bootstrap value at the batch boundary (with 4 turns per slot
#   against 20-turn episodes, an earlier attempt's advantages were mostly critic noise). 18 iterations (about 30-33
#   minutes with the start-up; about 150 finished episodes), 4 mini-batches, 1 epoch, critic warm-up 1 iteration
#   (the value head starts random). Learning rates are far above Verlog's 1e-6 (a 3B model): this 11M model was
#   fine-tuned at 1e-3; 5e-5 over 64 actor steps left the policy where it was in an earlier attempt, hence 1e-4.
#   KL and entropy coefficients are Verlog's. Sampling temperature 1.0 (PPO needs the sampling policy's log-probs)
#   and evaluation at the same temperature.
# - Seeds: demos 0-399 (the last 20 for validation), PPO slots start at 500000 (later PPO episodes draw 31-bit
#   seeds from the env pool's generator), evaluation 1000000-1000199; the recipe refuses overlapping ranges. The
#   same evaluation seeds for every model, so the differences are paired by seed.
set -euo pipefail
# the whole script is one { ... } block: bash reads it completely before running, so editing this file during a
# (long) run cannot change or break the running copy
{

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"

DRY_RUN=0
for arg in "$@"; do
    case "$arg" in
    --dry-run) DRY_RUN=1 ;;
    -h | --help)
        sed -n '2,/^set -euo/p' "$0" | sed '$d'
        exit 0
        ;;
    *)
        echo "[learn] unknown argument '$arg': the settings are environment variables (see --help)" >&2
        exit 2
        ;;
    esac
done

SMOKE="${SMOKE:-0}"
if [ "$SMOKE" = 1 ]; then
    OUTPUT_DIR="${OUTPUT_DIR:-$ROOT/outputs/learn-babyai-smoke}"
    RESULTS="${RESULTS:-$OUTPUT_DIR/results.md}"
    MAX_STEPS="${MAX_STEPS:-6}"
    DEMO_EPISODES="${DEMO_EPISODES:-24}"
    DEMO_VAL_EPISODES="${DEMO_VAL_EPISODES:-0}"
    MODEL_HIDDEN="${MODEL_HIDDEN:-128}" MODEL_LAYERS="${MODEL_LAYERS:-2}" MODEL_HEADS="${MODEL_HEADS:-2}"
    MODEL_KV_HEADS="${MODEL_KV_HEADS:-1}" MODEL_FFN="${MODEL_FFN:-256}"
    SFT_STEPS="${SFT_STEPS:-3}"
    SFT_BATCH="${SFT_BATCH:-8}"
    EPISODES="${EPISODES:-4}"
    PPO_ITERATIONS="${PPO_ITERATIONS:-2}"
    PPO_SLOTS="${PPO_SLOTS:-2}"
    PPO_TURNS="${PPO_TURNS:-4}" # 2 iterations x 4 turns > MAX_STEPS: some episodes end (a learning curve)
    CRITIC_WARMUP="${CRITIC_WARMUP:-0}"
fi
OUTPUT_DIR="${OUTPUT_DIR:-$ROOT/outputs/learn-babyai}"
RESULTS="${RESULTS:-$ROOT/docs/results.md}"
TASK="${TASK:-goto}"
MAX_STEPS="${MAX_STEPS:-12}"
DEMO_EPISODES="${DEMO_EPISODES:-400}"
DEMO_VAL_EPISODES="${DEMO_VAL_EPISODES:-20}"
DEMO_SEED_START="${DEMO_SEED_START:-0}"
MODEL_HIDDEN="${MODEL_HIDDEN:-384}"
MODEL_LAYERS="${MODEL_LAYERS:-6}"
MODEL_HEADS="${MODEL_HEADS:-6}"
MODEL_KV_HEADS="${MODEL_KV_HEADS:-2}"
MODEL_FFN="${MODEL_FFN:-1024}"
MODEL_VOCAB="${MODEL_VOCAB:-1024}"
SFT_STEPS="${SFT_STEPS:-60}"
SFT_BATCH="${SFT_BATCH:-16}"
SFT_LR="${SFT_LR:-1e-3}"
EPISODES="${EPISODES:-200}"
EVAL_SEED_START="${EVAL_SEED_START:-1000000}"
EVAL_TEMPERATURE="${EVAL_TEMPERATURE:-1.0}"
PPO_ITERATIONS="${PPO_ITERATIONS:-18}"
PPO_SLOTS="${PPO_SLOTS:-8}"
PPO_TURNS="${PPO_TURNS:-12}"
PPO_SEED="${PPO_SEED:-500000}"
PPO_RANKS="${PPO_RANKS:-2}"
ACTOR_LR="${ACTOR_LR:-1e-4}"
CRITIC_LR="${CRITIC_LR:-2e-4}"
CRITIC_WARMUP="${CRITIC_WARMUP:-1}"
PPO_EPOCHS="${PPO_EPOCHS:-1}"
MINI_BATCHES="${MINI_BATCHES:-4}"
STEP_GAMMA="${STEP_GAMMA:-0.99}"
STEP_LAM="${STEP_LAM:-0.95}"
MAX_RESPONSE_TOKENS="${MAX_RESPONSE_TOKENS:-48}"
MAX_PROMPT_TOKENS="${MAX_PROMPT_TOKENS:-1024}"
PPO_PROMPT_TOKENS="${PPO_PROMPT_TOKENS:-448}"
PPO_SAVE_FREQ="${PPO_SAVE_FREQ:-5}"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"

SETTINGS=(SMOKE OUTPUT_DIR RESULTS TASK MAX_STEPS DEMO_EPISODES DEMO_VAL_EPISODES DEMO_SEED_START MODEL_HIDDEN
    MODEL_LAYERS MODEL_HEADS MODEL_KV_HEADS MODEL_FFN MODEL_VOCAB SFT_STEPS SFT_BATCH SFT_LR EPISODES EVAL_SEED_START
    EVAL_TEMPERATURE PPO_ITERATIONS PPO_SLOTS PPO_TURNS PPO_SEED PPO_RANKS ACTOR_LR CRITIC_LR CRITIC_WARMUP PPO_EPOCHS
    MINI_BATCHES STEP_GAMMA STEP_LAM MAX_RESPONSE_TOKENS MAX_PROMPT_TOKENS PPO_PROMPT_TOKENS PPO_SAVE_FREQ)

ENV_ID="babyai/$TASK"
case "$OUTPUT_DIR" in
/*) RUN="$OUTPUT_DIR" ;;
*) RUN="$PWD/$OUTPUT_DIR" ;; # the stages run from the repository root
esac
case "$RESULTS" in
/*) ;;
*) RESULTS="$PWD/$RESULTS" ;;
esac
# the env's settings, the same in demos, PPO and evaluation (configs/env/babyai_goto.yaml's, with the step limit)
ENV_KWARGS="{\"parse_mode\": \"strict\", \"format_penalty\": 0.1, \"binary_reward\": true, \"max_steps\": $MAX_STEPS}"

# ---------------------------------------------------------------------------------------------- seed ranges
# [start, end) of each stage's seeds; overlapping ranges would evaluate on training layouts
DEMO_SEEDS=("$DEMO_SEED_START" $((DEMO_SEED_START + DEMO_EPISODES)))
PPO_SEEDS=("$PPO_SEED" $((PPO_SEED + PPO_SLOTS)))
EVAL_SEEDS=("$EVAL_SEED_START" $((EVAL_SEED_START + EPISODES)))
overlap() { [ "$1" -lt "$4" ] && [ "$3" -lt "$2" ]; }
if overlap "${DEMO_SEEDS[@]}" "${EVAL_SEEDS[@]}" || overlap "${PPO_SEEDS[@]}" "${EVAL_SEEDS[@]}" ||
    overlap "${DEMO_SEEDS[@]}" "${PPO_SEEDS[@]}"; then
    echo "[learn] seed ranges overlap: demos [${DEMO_SEEDS[0]}, ${DEMO_SEEDS[1]}), PPO first episodes" \
        "[${PPO_SEEDS[0]}, ${PPO_SEEDS[1]}), evaluation [${EVAL_SEEDS[0]}, ${EVAL_SEEDS[1]}): move DEMO_SEED_START," \
        "PPO_SEED or EVAL_SEED_START apart" >&2
    exit 2
fi

if [ "$DRY_RUN" = 0 ] && [ ! -x "$PYTHON" ]; then
    echo "[learn] no Python at $PYTHON: create .venv (docs/install.md) or set PYTHON=..." >&2
    exit 1
fi

export RAY_AUTH_MODE="${RAY_AUTH_MODE:-disabled}"
export RAY_USAGE_STATS_ENABLED=0
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export VLLM_NO_USAGE_STATS=1 TOKENIZERS_PARALLELISM=false
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
        echo "[learn] stage $name: output exists ($done_file), skipped"
        return 0
    fi
    echo "[learn] stage $name: $*"
    local start end
    start=$(date +%s.%N)
    "$@" 2>&1 | tee -a "$RUN/logs/$name.log"
    end=$(date +%s.%N)
    printf '{"stage": "%s", "seconds": %s, "finished_at": "%s"}\n' "$name" \
        "$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
        >>"$RUN/timings.jsonl"
    echo "[learn] stage $name done"
}

if [ "$DRY_RUN" = 1 ]; then
    echo "# learn_babyai: run folder $RUN (dry run: nothing is started)"
    echo "# seeds: demos [${DEMO_SEEDS[0]}, ${DEMO_SEEDS[1]}), PPO first episodes [${PPO_SEEDS[0]}, ${PPO_SEEDS[1]})," \
        "evaluation [${EVAL_SEEDS[0]}, ${EVAL_SEEDS[1]})"
else
    mkdir -p "$RUN/logs"
    for key in "${SETTINGS[@]}"; do
        printf '%s=%s\n' "$key" "${!key}"
    done >"$RUN/settings.env"
    echo "[learn] run folder $RUN ($([ "$SMOKE" = 1 ] && echo "SMOKE: tiny budgets" || echo "full budgets"))"
fi
cd "$ROOT"

stage demos "$RUN/demos/demos.json" "" -- \
    "$PYTHON" -m verlog demos "$ENV_ID" --episodes "$DEMO_EPISODES" --seed-start "$DEMO_SEED_START" \
    --val-episodes "$DEMO_VAL_EPISODES" --memory-n 1 --keep-reasoning-turns 1 --env-kwargs "$ENV_KWARGS" \
    --out "$RUN/demos"

stage sft "$RUN/sft/model/config.json" "" -- \
    "$PYTHON" -m verlog sft configs/sft/learn_babyai.yaml \
    output_dir="$RUN/sft" data.train="$RUN/demos" \
    model.tiny.hidden_size="$MODEL_HIDDEN" model.tiny.num_layers="$MODEL_LAYERS" model.tiny.num_heads="$MODEL_HEADS" \
    model.tiny.num_kv_heads="$MODEL_KV_HEADS" model.tiny.intermediate_size="$MODEL_FFN" \
    model.tiny.vocab_size="$MODEL_VOCAB" train.steps="$SFT_STEPS" train.batch_size="$SFT_BATCH" train.lr="$SFT_LR" \
    resume=true

# evaluate NAME MODEL: the same episodes (seeds, step limit, env settings, sampling) for every model
evaluate() {
    stage "eval_$1" "$RUN/eval_$1/summary.json" "" -- \
        "$PYTHON" -m verlog eval --model "$2" --tasks "$ENV_ID" --episodes "$EPISODES" \
        --seed-start "$EVAL_SEED_START" --max-steps "$MAX_STEPS" --env-kwargs "$ENV_KWARGS" \
        --temperature "$EVAL_TEMPERATURE" --max-tokens "$MAX_RESPONSE_TOKENS" --max-prompt-tokens "$MAX_PROMPT_TOKENS" \
        --memory-n 1 --resume --out "$RUN/eval_$1"
}

# ppo NAME TOKEN_GAMMA TOKEN_LAM: PPO from the SFT model; the two runs differ only in the token discounts
ppo() {
    stage "$1" "$RUN/$1/checkpoints/latest_checkpointed_iteration.txt" "$PPO_ITERATIONS" -- \
        "$PYTHON" -m verlog.train \
        output_dir="$RUN/$1" run_name="learn-babyai-$1" iterations="$PPO_ITERATIONS" seed="$PPO_SEED" \
        env=babyai_goto env.id="$ENV_ID" env.kwargs.max_steps="$MAX_STEPS" \
        model=tiny-cpu model.name=sft model.path="$RUN/sft/model" model.build_tiny=false \
        hardware=cpu hardware.n_gpus_per_node="$PPO_RANKS" hardware.ray.temp_dir="${RAY_TMPDIR:-/tmp/verlog-ray}" \
        rollout.num_slots="$PPO_SLOTS" rollout.turns_per_slot="$PPO_TURNS" \
        rollout.max_prompt_tokens="$PPO_PROMPT_TOKENS" rollout.max_response_tokens="$MAX_RESPONSE_TOKENS" \
        memory.n=1 memory.keep_reasoning_turns=1 \
        algorithm.step_gamma="$STEP_GAMMA" algorithm.step_lam="$STEP_LAM" \
        algorithm.token_gamma="$2" algorithm.token_lam="$3" \
        algorithm.actor_lr="$ACTOR_LR" algorithm.critic_lr="$CRITIC_LR" algorithm.critic_warmup="$CRITIC_WARMUP" \
        algorithm.ppo_epochs="$PPO_EPOCHS" algorithm.mini_batches="$MINI_BATCHES" \
        checkpoint.save_freq="$PPO_SAVE_FREQ" checkpoint.resume=auto \
        "verl.actor_rollout_ref.actor.checkpoint.save_contents=[model,optimizer,extra,hf_model]"
}

evaluate sft "$RUN/sft/model"
ppo ppo_dual 1.0 1.0
evaluate ppo_dual "$RUN/ppo_dual/checkpoints"
ppo ppo_single "$STEP_GAMMA" "$STEP_LAM"
evaluate ppo_single "$RUN/ppo_single/checkpoints"

# the results: always rewritten from what the run folder holds (cheap)
RESULTS_CMD=("$PYTHON" bench/learning.py "$RUN" --out "$RESULTS")
if [ "$DRY_RUN" = 1 ]; then
    echo "# stage results (always runs)"
    printf '%q ' "${RESULTS_CMD[@]}"
    printf '\n'
    exit 0
fi
"${RESULTS_CMD[@]}"
echo "[learn] done: results in $RESULTS, run folder $RUN"
exit 0
}
