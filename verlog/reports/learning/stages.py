"""The stages of a learning recipe's run folder (recipes/cpu/learn_*.sh), the models and comparisons a report shows,
and each task's target (issues 13 and 22)."""

from __future__ import annotations

from dataclasses import dataclass

from verlog.run.folder import ROLLOUT_LOG

# stage folders of a run, in the order the recipe runs them
DEMOS, SFT, EVAL_SFT = "demos", "sft", "eval_sft"
PPO_DUAL, EVAL_DUAL = "ppo_dual", "eval_ppo_dual"
PPO_SINGLE, EVAL_SINGLE = "ppo_single", "eval_ppo_single"
PPO_CUT, EVAL_CUT = "ppo_cut", "eval_ppo_cut"  # the iteration-boundary ablation (algorithm.boundary=cut)
PPO_TEXT, EVAL_TEXT = "ppo_text", "eval_ppo_text"  # a visual task's control: the same PPO with text-only prompts
WARM, EVAL_WARM = "warm_start", "eval_warm_start"  # START=warm_start: the format-only warm start instead of SFT
# SFT_SCAN: scan/step_<N>/ (each SFT length's validation evaluation), scan/choice.json, scan/model/ (the chosen one)
SCAN, SCAN_CHOICE = "scan", "choice.json"
STAGES = (
    *(DEMOS, SFT, SCAN, EVAL_SFT, WARM, EVAL_WARM, PPO_DUAL, EVAL_DUAL),
    *(PPO_CUT, EVAL_CUT, PPO_SINGLE, EVAL_SINGLE, PPO_TEXT, EVAL_TEXT),
)
# model label -> evaluation folder
MODELS = {
    "SFT": EVAL_SFT,
    "PPO, dual GAE": EVAL_DUAL,
    "PPO, boundary cut": EVAL_CUT,
    "PPO, single GAE": EVAL_SINGLE,
    "PPO, text only": EVAL_TEXT,
}
PPO_RUNS = {"dual GAE": PPO_DUAL, "boundary cut": PPO_CUT, "single GAE": PPO_SINGLE, "text only": PPO_TEXT}
START_MODELS = {"SFT": EVAL_SFT, "warm start": EVAL_WARM}
"""The start model of a run (the baseline of "SFT" in :data:`COMPARISONS`): SFT from demonstrations, or the
format-only warm start (``START=warm_start``, e.g. Crafter, where there is no expert)."""
# the comparisons reported, treatment - baseline, where both are evaluated ("SFT": the run's start model)
COMPARISONS = (
    ("PPO, dual GAE", "SFT"),
    ("PPO, single GAE", "SFT"),
    ("PPO, dual GAE", "PPO, single GAE"),
    ("PPO, boundary cut", "SFT"),
    ("PPO, dual GAE", "PPO, boundary cut"),
    ("PPO, text only", "SFT"),
    ("PPO, dual GAE", "PPO, text only"),
)


@dataclass(frozen=True)
class Target:
    """Issue 13's target for PPO with dual GAE over the SFT model on one BabyAI task: a success gain of at least
    ``gain`` with the paired 95% interval above zero, within ``ppo_minutes`` of PPO wall time (the ppo_dual stage),
    and, where set, at least ``valid_actions`` valid actions and a success rate of at least ``success`` after PPO."""

    gain: float
    ppo_minutes: float
    valid_actions: float | None = None
    success: float | None = None
    measure: str = "success"  # or "return" (the gain in mean episode return, e.g. Crafter's)


TARGETS = {
    "babyai/goto": Target(gain=0.40, ppo_minutes=20.0, valid_actions=0.90),
    # issue 22: BabaIsAI with episodes spanning iterations (recipes/cpu/learn_babaisai.sh)
    "babaisai/two_room-goto_win": Target(gain=0.25, ppo_minutes=45.0, valid_actions=0.90),
    "babaisai/goto_win-distr_obj": Target(gain=0.25, ppo_minutes=45.0, valid_actions=0.90),
    # issue 22: Crafter, episodes of 100+ turns (recipes/cpu/learn_crafter.sh): mean return +1.0 over the start
    "crafter/default": Target(gain=1.0, ppo_minutes=60.0, measure="return"),
    # issue 35: the tiny VLM on toy/visual (recipes/cpu/learn_visual.sh), from chance (1/3) to >= 0.9 in 20 minutes
    "toy/visual": Target(gain=0.5, ppo_minutes=20.0, success=0.9),
}
"""Per env id (the recipe's ``ENV_ID``); every other task (Verlog's harder ones: pickup, open) gets
:data:`HARDER_TARGET`."""

HARDER_TARGET = Target(gain=0.20, ppo_minutes=45.0)

TIMINGS_FILE = "timings.jsonl"
ROLLOUT_FILE = ROLLOUT_LOG
