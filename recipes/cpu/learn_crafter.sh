#!/usr/bin/env bash
# Long-horizon learning on Crafter (issue 22), on a 2-core CPU, in one command:
#
#   format-only warm start (random valid answers: Crafter has no expert) -> eval warm start
#   -> PPO, dual-discount GAE, 100-turn episodes each spanning 10 iterations (bootstrapped with V(s_T)) -> eval
#   -> optional: PPO with the iteration boundary cut (BOUNDARY_CUT=1), single-discount GAE (SINGLE_GAE=1)
#   -> results (verlog report learning: mean return, each achievement's unlock rate, the Crafter score, intervals)
#
#   bash recipes/cpu/learn_crafter.sh                # the real run
#   SMOKE=1 bash recipes/cpu/learn_crafter.sh        # tiny budgets: checks the chain end to end
#   bash recipes/cpu/learn_crafter.sh --dry-run      # print every stage's command; run nothing
#
# The run folder and stages are the other CPU recipes' (recipes/cpu/learn_common.sh lists every setting):
# warm_start/, eval_warm_start/, ppo_dual/, eval_ppo_dual/, ... A stage whose output exists is skipped (resume).
#
# What this recipe sets (environment variables; defaults in brackets):
#   MAX_STEPS           the step limit of an episode, a truncation bootstrapped with V [100; smoke 6] (BALROG: 10,000
#                       turns; 100 keeps an evaluation of 100 episodes near 10 minutes here)
#   PPO_SLOTS x PPO_TURNS  rows per iteration [16 x 10]: a 100-turn episode spans 10 iterations
#   WARM_START_STEPS    steps of the format-only warm start [250]; TOKENIZER_FROM_DATA [true]: the tiny tokenizer
#                       also learns Crafter's words (instruction 709 -> 433 tokens, an observation 96 -> 71)
#   FORMAT_PENALTY      in PPO [0.1, Verlog's]; the evaluation scores Crafter's own reward (no penalty; an invalid
#                       answer still runs Noop), so the reported return is never a shaped one
#   EPISODES            evaluation episodes [100] on seeds EVAL_SEED_START.. [1000000]
#   PPO_ITERATIONS [100], EVAL_EVERY [25] with EVAL_EPISODES_IN_TRAINING [16], PPO_PROMPT_TOKENS [768]
#   BOUNDARY_CUT, SINGLE_GAE  the comparisons [0, 0]
set -euo pipefail
# one { ... } block: bash reads the whole script before running it (see learn_babyai.sh)
{

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
RECIPE=learn-crafter
source "$ROOT/recipes/cpu/cpu_common.sh"
smoke_budgets # SMOKE=1: the tiny budgets (cpu_common.sh); the settings below are the full run's
TASK=default
MAX_STEPS="${MAX_STEPS:-100}"
TIME_LIMIT="${TIME_LIMIT:-truncate}"
FORMAT_PENALTY="${FORMAT_PENALTY:-0.1}"
LONG_HORIZON=1
START=warm_start
TOKENIZER_FROM_DATA="${TOKENIZER_FROM_DATA:-true}"
EPISODES="${EPISODES:-100}"
PPO_SLOTS="${PPO_SLOTS:-16}"
PPO_TURNS="${PPO_TURNS:-10}"
PPO_PROMPT_TOKENS="${PPO_PROMPT_TOKENS:-768}"
PPO_ITERATIONS="${PPO_ITERATIONS:-100}"
EVAL_EVERY="${EVAL_EVERY:-25}"
EVAL_EPISODES_IN_TRAINING="${EVAL_EPISODES_IN_TRAINING:-16}"
SINGLE_GAE="${SINGLE_GAE:-0}"
BOUNDARY_CUT="${BOUNDARY_CUT:-0}"
ENV_CONFIG=crafter
ENV_ID="crafter/$TASK"
DEFAULT_OUTPUT_DIR=outputs/learn-crafter
DEFAULT_RESULTS=docs/results/crafter/latest.md
EXTRA_SETTINGS=(TASK)
ENV_KWARGS_JSON=$(json_object parse_mode=strict format_penalty="$FORMAT_PENALTY" max_steps="$MAX_STEPS" time_limit="$TIME_LIMIT")
EVAL_ENV_KWARGS_JSON=$(json_object parse_mode=strict format_penalty=0.0 max_steps="$MAX_STEPS" time_limit="$TIME_LIMIT")
source "$ROOT/recipes/cpu/learn_common.sh"
run_all warm_start
exit 0
}
