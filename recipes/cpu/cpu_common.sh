# Shared by the CPU recipes (quickstart.sh, sweep_toy.sh, curriculum_toy.sh, and the learning recipes, which source
# it first and learn_common.sh last): sourced, never run alone. It defines functions and runs nothing.

# cpu_environment: the settings every CPU run exports: Ray without an auth token and without usage reporting,
# Hugging Face offline (the models are built here), no vLLM usage reporting, single-threaded tokenizers
cpu_environment() {
    export RAY_AUTH_MODE="${RAY_AUTH_MODE:-disabled}"
    export RAY_USAGE_STATS_ENABLED=0
    export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
    export VLLM_NO_USAGE_STATS=1 TOKENIZERS_PARALLELISM=false
}

# json_object KEY=VALUE...: the JSON object of the pairs, on stdout (the learning recipes' ENV_KWARGS_JSON): a
# VALUE that is a JSON number, true, false or null stays as it is; any other VALUE becomes a string
json_object() {
    local pair key value out="" number='^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?$'
    for pair in "$@"; do
        key="${pair%%=*}"
        value="${pair#*=}"
        if ! [[ "$value" =~ $number || "$value" == true || "$value" == false || "$value" == null ]]; then
            value="${value//\\/\\\\}"
            value="\"${value//\"/\\\"}\""
        fi
        out+="${out:+, }\"$key\": $value"
    done
    printf '{%s}\n' "$out"
}

# require_python NAME: stop (exit 1) with one line unless $PYTHON is an executable; NAME tags the line
require_python() {
    if [ ! -x "$PYTHON" ]; then
        echo "[$1] no Python at $PYTHON: create .venv ('make install', docs/install.md) or set PYTHON=..." >&2
        exit 1
    fi
}

# build_toy_start_model MODEL: the toy recipes' start model in MODEL (replaced): a tiny Qwen2 (hidden size 128,
# 2 layers) with a format-only warm start on toy/delayed; MODEL/verlog_warm_start.done marks it finished
build_toy_start_model() {
    rm -rf "$1"
    "$PYTHON" -m verlog tiny-model "$1" --hidden-size 128 --num-layers 2 --num-heads 2 --intermediate-size 256 \
        --warm-start toy/delayed --max-prompt-tokens 320
    touch "$1/verlog_warm_start.done"
}

# toy_recipe_setup NAME ARG...: how the toy recipes (quickstart.sh, sweep_toy.sh) begin: cpu_environment, then
# require_python NAME, then the repository root as the working folder, and DRY_RUN=1 when ARG... holds --dry-run (0
# otherwise; the arguments themselves go on to the command the recipe runs)
toy_recipe_setup() {
    local name="$1" arg
    shift
    cpu_environment
    require_python "$name"
    cd "$ROOT"
    DRY_RUN=0
    for arg in "$@"; do [ "$arg" = "--dry-run" ] && DRY_RUN=1; done
    return 0
}

# smoke_budgets: with SMOKE=1, the learning recipes' tiny budgets, which check a chain end to end in minutes; each
# only where still unset, so the user's settings win, and so does what a recipe set before calling this (a recipe's
# own defaults after the call, VAR="${VAR:-default}", are its full run's). Without SMOKE=1 it sets nothing.
smoke_budgets() {
    [ "${SMOKE:-0}" = 1 ] || return 0
    MAX_STEPS="${MAX_STEPS:-6}"
    DEMO_EPISODES="${DEMO_EPISODES:-24}"
    DEMO_VAL_EPISODES="${DEMO_VAL_EPISODES:-0}"
    SFT_STEPS="${SFT_STEPS:-3}"
    SFT_BATCH="${SFT_BATCH:-8}"
    WARM_START_STEPS="${WARM_START_STEPS:-3}"
    EPISODES="${EPISODES:-4}"
    PPO_ITERATIONS="${PPO_ITERATIONS:-2}"
    PPO_SLOTS="${PPO_SLOTS:-2}"
    PPO_TURNS="${PPO_TURNS:-4}"
    CRITIC_WARMUP="${CRITIC_WARMUP:-0}"
    EVAL_EVERY="${EVAL_EVERY:-0}"
}
