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
#   TASK=pickup SFT_STEPS=75 PPO_ITERATIONS=100 EVAL_EVERY=20 SINGLE_GAE=0 OUTPUT_DIR=outputs/learn-pickup \
#       RESULTS=docs/results/babyai-pickup.md bash recipes/cpu/learn_babyai.sh  # the harder task
#
# Every stage writes into one run folder ($OUTPUT_DIR): demos/, sft/ (sft/model is the SFT model), eval_sft/,
# ppo_dual/, eval_ppo_dual/, ppo_single/, eval_ppo_single/, logs/<stage>.log, timings.jsonl (wall time of each
# stage run), settings.env (the settings below) and the results. A stage whose output exists is skipped, so an
# interrupted run continues where it stopped (PPO resumes from its last checkpoint, evaluation from its last
# episode). Change a setting? Use a new OUTPUT_DIR, or delete the stages it affects.
#
# Settings (environment variables; defaults in brackets, SMOKE=1 values after "smoke:"):
#   OUTPUT_DIR          the run folder [outputs/learn-babyai; smoke: outputs/learn-babyai-smoke]
#   RESULTS             the markdown written at the end [docs/results/babyai-goto/latest.md; smoke:
#                       $OUTPUT_DIR/results.md]; the learning curve PNG goes next to it (<name>_curve.png), the numbers
#                       to <name>.json
#   TASK                BabyAI task kind [goto]
#   MAX_STEPS           step limit of every episode, in PPO and in evaluation [12; smoke 6]
#   TIME_LIMIT          what the step limit means in PPO: terminate (failed, as BALROG scores it) or truncate
#                       (bootstrapped with V) [terminate]
#   ANSWER_FORMAT       action (the ACTION line alone) or cot (THINK then ACTION), in demos, SFT, PPO, evaluation
#                       [action]
#   FORMAT_PENALTY      subtracted from an invalid answer's reward (added to the env's reward) [0.2]
#   DEMO_EPISODES, DEMO_VAL_EPISODES, DEMO_SEED_START   expert episodes, of which the last K for validation, first
#                       seed [1000, 20, 0; smoke 24, 0]
#   MODEL_HIDDEN, MODEL_LAYERS, MODEL_HEADS, MODEL_KV_HEADS, MODEL_FFN, MODEL_VOCAB   the random-weight Qwen2 that
#                       SFT starts from [128, 2, 2, 1, 256, 1024 = about 0.4M parameters]
#   SFT_STEPS, SFT_BATCH, SFT_LR, SFT_WARMUP_RATIO   constant lr after a linear warm-up [60, 32, 1e-3, 0.33; smoke 3, 8]
#   EPISODES            evaluation episodes per model [200; smoke 4]
#   EVAL_SEED_START     first evaluation seed [1000000]; seeds EVAL_SEED_START .. + EPISODES - 1
#   EVAL_TEMPERATURE    evaluation sampling temperature [1.0, as in the rollout and BALROG]
#   PPO_ITERATIONS      PPO iterations of each PPO run [40; smoke 2]
#   PPO_SLOTS, PPO_TURNS  env slots x turns per slot = rows per iteration [16 x 12; smoke 2 x 4]
#   PPO_SEED            seed of the first PPO episodes (slot i: PPO_SEED + i) [500000]
#   PPO_RANKS           CPU training ranks [2]
#   ACTOR_LR, CRITIC_LR, CRITIC_WARMUP, PPO_EPOCHS, MINI_BATCHES   [3e-4, 2e-4, 3, 1, 4; smoke warm-up 0]
#   ADVANTAGE_LEVEL     token or turn (algorithm.advantage_level) [turn]
#   EVAL_EVERY, EVAL_EPISODES_IN_TRAINING   in-training evaluation every K PPO iterations on held-out seeds
#                       (evaluation.every; 0 = off) and its episodes [10, 64; smoke 0]
#   SINGLE_GAE          1: also run PPO with single-discount GAE (the comparison); 0: only dual GAE [1]
#   STEP_GAMMA, STEP_LAM  discount and lambda between turns [0.99, 0.95]; the dual run keeps token gamma = lambda
#                       = 1 (Verlog's), the single run sets token gamma/lambda = STEP_GAMMA/STEP_LAM (ordinary GAE)
#   MAX_RESPONSE_TOKENS, MAX_PROMPT_TOKENS   [8, 1024] (an action-only answer is about 6 tokens with EOS)
#   PPO_PROMPT_TOKENS   prompt budget of PPO rows [352]: every row is padded to it (plus MAX_RESPONSE_TOKENS) on the
#                       CPU, where verl runs without padding removal; prompts here are about 270-340 tokens
#   PPO_SAVE_FREQ       checkpoint every this many iterations (for resuming) [5]
#   PYTHON              [.venv/bin/python of the repository]
#
# How these were chosen (docs/results/babyai-goto.md has the measured runs, the earlier attempts and the same notes
# at length; docs/learnability.md, "Earlier trials", the trial they come from):
# - Reward: binary success plus a 0.2 format penalty, ADDED to the env's reward (it used to replace it, which
#   made PPO learn the format instead of the task). 0.2 rather than 0.1: valid actions after PPO 91.3% against
#   88.8% (v5 vs v4 in docs/results/babyai-goto.md; the issue asks for 90%).
# - Answers: the action alone (about 6 tokens with EOS instead of about 36), so PPO trains on the decision and a
#   192-row iteration costs about 15 s; memory n = 1, prompts of about 270-340 tokens.
# - Model: 128 hidden x 2 layers (about 0.4M parameters), about 7x faster per row than the earlier 11M model.
# - SFT: 60 steps of 32 expert rows at lr 1e-3 (constant after warm-up): about 25% success under the 12-step limit
#   (the trial: 17/25/45/89% after 50/60/65/100 steps), far from the ceiling and above random (10%). If the SFT
#   evaluation reads above 50%, rerun with a new OUTPUT_DIR and fewer SFT_STEPS; near 0 valid answers, more.
# - Step limit 12 as termination (BALROG's scoring): learnt faster than the bootstrapped limit in the trial.
# - PPO: 16 slots x 12 turns (whole episodes each iteration), turn-level advantages, actor lr 3e-4, critic lr 2e-4,
#   3 critic-only warm-up iterations, 4 mini-batches, 40 iterations (about 15 minutes with the start-up); the
#   single-discount run differs only in token gamma/lambda = 0.99/0.95. In-training evaluation every 10 iterations.
#   Measured: token-level advantages with lr 2e-4 reached 75% (v3), turn-level with 3e-4 81.5% (v4), same SFT start.
# - Seeds: demos 0-999 (the last 20 for validation), PPO slots start at 500000 (later PPO episodes draw 31-bit
#   seeds from the env pool's generator), evaluation 1000000-1000199, in-training evaluation from 2^31; the recipe
#   refuses overlapping ranges. The same evaluation seeds for every model, so the differences are paired by seed.
set -euo pipefail
# the whole script is one { ... } block: bash reads it completely before running, so editing this file during a
# (long) run cannot change or break the running copy
{

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
RECIPE=learn-babyai
source "$ROOT/recipes/cpu/cpu_common.sh"
smoke_budgets # SMOKE=1: the tiny budgets (cpu_common.sh); the settings below are the full run's
TASK="${TASK:-goto}"
MAX_STEPS="${MAX_STEPS:-12}"
TIME_LIMIT="${TIME_LIMIT:-terminate}"
FORMAT_PENALTY="${FORMAT_PENALTY:-0.2}"
ENV_CONFIG=babyai_goto
ENV_ID="babyai/$TASK"
START=demos
DEFAULT_OUTPUT_DIR=outputs/learn-babyai
DEFAULT_RESULTS=docs/results/babyai-goto/latest.md
EXTRA_SETTINGS=(TASK)
# the env's settings, the same in demos, PPO and evaluation (configs/env/babyai_goto.yaml's, with the step limit)
ENV_KWARGS_JSON=$(json_object parse_mode=strict format_penalty="$FORMAT_PENALTY" binary_reward=true max_steps="$MAX_STEPS" \
    time_limit="$TIME_LIMIT")
# the stages (demos -> SFT -> evaluations -> PPO runs -> results) are the CPU recipes' common ones
source "$ROOT/recipes/cpu/learn_common.sh"
run_all sft
exit 0
}
