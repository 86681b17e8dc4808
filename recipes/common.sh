# Shared by the GPU recipes in recipes/<env>/: sourced, not run. Reads the run's settings from the environment and
# the recipe's arguments, and launches (or, with --dry-run, only prints) `python -m verlog.train`. The CPU learning
# recipes (recipes/cpu/learn_common.sh) take their arguments with its recipe_arguments too.
#
# Arguments of every recipe:  [--dry-run] [--help] [Hydra override ...]
#   --dry-run   print the command and the resolved config (checked like a real launch) and start nothing:
#               no GPU, Ray or model weights needed
#   overrides   any key of configs/train.yaml, applied after the recipe's own (docs/configuration.md)
#
# Environment variables (all optional):
#   MODEL_PATH      a local Hugging Face folder or a hub id (default: the recipe's model)
#   GPUS_PER_NODE   GPUs per node (default: the recipe's)
#   NNODES          nodes (default 1); more than one needs a Ray cluster (RAY_ADDRESS)
#   OUTPUT_DIR      checkpoints, metrics.jsonl, rollout.jsonl, config.yaml (default: outputs/<recipe name>);
#                   on a multi-node run it must be a folder every node can write (shared file system)
#   TASK            the env task (default: the recipe's), e.g. TASK=pickup for BabyAI
#   ITERATIONS      PPO iterations (default: the recipe's, Verlog's number)
#   RAY_ADDRESS     attach to a running Ray cluster (host:6379, or "auto" on a cluster node); unset: a local Ray
#                   on this node (or the cluster `ray start --head` started on this node, which Ray finds itself)
#   PYTHON          the Python with verlog installed (default: .venv/bin/python of the repository if present,
#                   else python3 on PATH)
#
# A Ray cluster (2 nodes):
#   head node:    ray start --head --port=6379
#   other nodes:  ray start --address=<head-ip>:6379
#   then, on the head node:  RAY_ADDRESS=<head-ip>:6379 NNODES=2 bash recipes/<env>/<recipe>.sh
# Every node needs the same verlog install and access to MODEL_PATH (a shared folder, or a hub id it can download).

VERLOG_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# recipe_arguments ON_OTHER ARG...: a recipe's arguments, in their order: --dry-run sets DRY_RUN=1 (DRY_RUN=0
# without it), -h/--help prints the recipe's header (its lines from the second to `set -euo pipefail`) and exits 0,
# and any other argument is handed to the command ON_OTHER (which may add it to its caller's list, or refuse it)
recipe_arguments() {
    local on_other="$1" arg
    shift
    DRY_RUN=0
    for arg in "$@"; do
        case "$arg" in
        --dry-run) DRY_RUN=1 ;;
        -h | --help)
            sed -n '2,/^set -euo/p' "$0" | sed '$d'
            exit 0
            ;;
        *) "$on_other" "$arg" ;;
        esac
    done
}

# verlog_recipe NAME DEFAULT_OUTPUT -- RECIPE_OVERRIDES... -- "$@"
# Parses the user's arguments (after the second --), then runs or dry-runs verlog.train with
# the recipe's overrides followed by the user's.
verlog_recipe() {
    local name="$1"
    shift
    local recipe=()
    while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do
        recipe+=("$1")
        shift
    done
    [ "$#" -gt 0 ] && shift # the "--" between the recipe's overrides and the user's arguments
    local user=()
    # the user's Hydra overrides, after the recipe's (bash's dynamic scope: this appends to the local list above)
    _user_override() { user+=("$1"); }
    recipe_arguments _user_override "$@"

    local python="${PYTHON:-}"
    if [ -z "$python" ]; then
        if [ -x "$VERLOG_ROOT/.venv/bin/python" ]; then
            python="$VERLOG_ROOT/.venv/bin/python"
        else
            python="$(command -v python3 || true)"
        fi
    fi
    if [ -z "$python" ]; then
        echo "[$name] no Python found: install verlog (docs/install.md) and set PYTHON=/path/to/python" >&2
        return 1
    fi

    local nnodes="${NNODES:-1}"
    if [ -n "${RAY_ADDRESS:-}" ]; then
        export RAY_ADDRESS
    elif [ "$nnodes" != "1" ] && [ "$DRY_RUN" = 0 ]; then
        echo "[$name] NNODES=$nnodes needs a Ray cluster: run 'ray start --head --port=6379' on one node and" \
            "'ray start --address=<head-ip>:6379' on the others, then set RAY_ADDRESS=<head-ip>:6379" >&2
        return 1
    fi
    export RAY_USAGE_STATS_ENABLED="${RAY_USAGE_STATS_ENABLED:-0}"
    export VLLM_NO_USAGE_STATS="${VLLM_NO_USAGE_STATS:-1}"
    export TOKENIZERS_PARALLELISM="${TOKENIZERS_PARALLELISM:-false}"

    local cmd=("$python" -m verlog.train "${recipe[@]}" "${user[@]}")
    if [ "$DRY_RUN" = 1 ]; then
        echo "# recipe: $name (dry run)"
        if [ -n "${RAY_ADDRESS:-}" ]; then
            echo "# ray: attach to the cluster at $RAY_ADDRESS"
        else
            echo "# ray: a local Ray on this node (or the cluster 'ray start --head' started on it)"
        fi
        printf '# command:'
        printf ' %q' "${cmd[@]}"
        printf '\n'
        "${cmd[@]}" --dry-run
        return $?
    fi
    echo "[$name] ${cmd[*]}"
    "${cmd[@]}"
}

# verlog_ppo_recipe NAME RUN_NAME ENV_OVERRIDE... -- SETTING=VALUE... -- "$@"
# Verlog's multi-turn PPO on GPUs, the shape every recipe in recipes/<env>/ shares: the env's overrides, then the
# recipe's numbers, each SETTING required: model (configs/model/), model_path (MODEL_PATH wins), hardware
# (configs/hardware/), gpus (GPUS_PER_NODE wins), slots x turns (rollout.num_slots, rollout.turns_per_slot),
# prompt_tokens, response_tokens, warmup_rollout_multiplier, warmup_critic_updates, iterations (ITERATIONS wins),
# save_freq (checkpoint.save_freq). Verlog's fixed settings come with them: 2 mini-batches, memory n = 1, no
# critic-only iterations (the warm-up is the larger first rollout), checkpoints with a Hugging Face export;
# nodes from NNODES [1], output_dir from OUTPUT_DIR [outputs/RUN_NAME]. Runs verlog_recipe with the user's arguments.
VERLOG_PPO_SETTINGS=(model model_path hardware gpus slots turns prompt_tokens response_tokens
    warmup_rollout_multiplier warmup_critic_updates iterations save_freq)
verlog_ppo_recipe() {
    local name="$1" run_name="$2"
    shift 2
    local env=()
    while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do
        env+=("$1")
        shift
    done
    [ "$#" -gt 0 ] && shift # the "--" before the settings
    local -A setting=()
    while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do
        setting["${1%%=*}"]="${1#*=}"
        shift
    done
    [ "$#" -gt 0 ] && shift # the "--" before the user's arguments
    local key
    for key in "${VERLOG_PPO_SETTINGS[@]}"; do
        if [ -z "${setting[$key]+set}" ]; then
            echo "[$name] verlog_ppo_recipe: the recipe sets no $key= (it needs ${VERLOG_PPO_SETTINGS[*]})" >&2
            return 1
        fi
    done
    verlog_recipe "$name" "${env[@]}" \
        model="${setting[model]}" model.path="${MODEL_PATH:-${setting[model_path]}}" \
        hardware="${setting[hardware]}" hardware.n_gpus_per_node="${GPUS_PER_NODE:-${setting[gpus]}}" \
        hardware.nnodes="${NNODES:-1}" \
        rollout.num_slots="${setting[slots]}" rollout.turns_per_slot="${setting[turns]}" \
        rollout.max_prompt_tokens="${setting[prompt_tokens]}" rollout.max_response_tokens="${setting[response_tokens]}" \
        algorithm.mini_batches=2 memory.n=1 algorithm.critic_warmup=0 \
        algorithm.warmup_rollout_multiplier="${setting[warmup_rollout_multiplier]}" \
        algorithm.warmup_critic_updates="${setting[warmup_critic_updates]}" \
        iterations="${ITERATIONS:-${setting[iterations]}}" checkpoint.save_freq="${setting[save_freq]}" \
        output_dir="${OUTPUT_DIR:-outputs/$run_name}" run_name="$run_name" \
        verl.actor_rollout_ref.actor.checkpoint.save_contents=[model,optimizer,extra,hf_model] \
        -- "$@"
}
