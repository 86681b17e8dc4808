"""The metric names a sweep may be judged by: what ``verlog train`` logs to metrics.jsonl (docs/metrics.md).

A sweep's ``objective.metric`` and ``scheduler.metric`` are read from each trial's metrics.jsonl only after the trial
has trained; a name that is never logged would be found after every trial had run. :func:`metric_problem` checks the
name before anything starts:

- verlog's own metrics (:data:`VERLOG_METRICS`: the table of docs/metrics.md, ``<family>`` standing for one task
  family's name; tests/verlog/sweep/test_sweep_metrics.py keeps the two equal) must be named exactly;
- verl's own metrics (``actor/``, ``critic/``, ``training/``, ...: :data:`VERL_NAMESPACES`) are many and verl's to
  name: any well-formed name under them is taken;
- any other namespace is refused, with the closest names.

:func:`condition_problem` then checks, for one trial's config, that the metric is logged under its settings (an
``eval/`` metric needs the in-training evaluation, an ``adv/anchor_groups`` needs ``algorithm.estimator=gigpo``, ...).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping
from typing import Any

from verlog.config.async_modes import REGISTRY, AsyncMode, WeightSyncPolicy, mode_names

FAMILY = "<family>"
"""In a metric name of :data:`VERLOG_METRICS`: one task family's name (``env.tasks``; docs/curriculum.md)."""

VERLOG_METRICS: Mapping[str, str] = {
    # always
    **dict.fromkeys(
        (
            "env/episodes",
            "rollout/turns",
            "rollout/valid_action_ratio",
            "rollout/turn_reward_mean",
            "rollout/prompt_tokens/mean",
            "rollout/prompt_tokens/max",
            "rollout/memory_turns_kept/mean",
            "rollout/prompt_truncated_frac",
            "rollout/response_tokens_mean",
            "rollout/response_tokens_max",
            "rollout/env_errors",
            "rollout/generation_failures",
            "rollout/generation_retries",
            "timing_s/rollout_generate",
            "timing_s/rollout_env",
            "adv/mean",
            "adv/std",
            "progress/iteration",
            "progress/elapsed_s",
            "progress/eta_s",
        ),
        "always",
    ),
    **dict.fromkeys(
        (
            "env/return_mean",
            "env/length_mean",
            "env/success_rate",
            "env/progression_mean",
            "env/valid_action_ratio",
            "env/truncated_ratio",
            "env/prompt_tokens_mean",
            "env/response_tokens_mean",
        ),
        "episodes",
    ),
    **dict.fromkeys(
        (
            "rollout/idle_rows",
            "rollout/unfinished_rows",
            "adv/trained_rows",
            "adv/untrained_rows",
            "adv/episodes",
            "adv/groups",
            "adv/singleton_groups",
        ),
        "group",
    ),
    **dict.fromkeys(
        (
            "adv/max",
            "adv/min",
            "adv/turn_mean",
            "adv/linked_rows",
            "adv/bootstrap_rows",
            "check/bootstrap_value_gap",
            "adv/next_value_mean",
        ),
        "dual_gae",
    ),
    **dict.fromkeys(
        (
            "check/prefix_sharing_log_probs_gap",
            "check/prefix_sharing_values_gap",
            "prefix/rows_per_group",
            "prefix/computed_token_share",
            "prefix/shared_prefix_tokens",
        ),
        "prefix_sharing",
    ),
    **dict.fromkeys(("check/lora_server_gap", "check/lora_base_gap"), "lora"),
    **dict.fromkeys(("rollout/image_rows", "rollout/images_per_row"), "images"),
    **dict.fromkeys(("adv/trace_weight_mean", "adv/trace_weight_min"), "vtrace"),
    **dict.fromkeys(
        ("adv/episode_mean_abs", "adv/step_mean_abs", "adv/anchor_groups", "adv/anchor_shared_ratio"), "gigpo"
    ),
    **dict.fromkeys(
        (
            "async/wait_s",
            "async/overlap_ratio",
            "async/trainer_idle_ratio",
            "async/rollout_idle_ratio",
            "async/lag_mean",
            "async/lag_max",
            "async/rows_over_lag",
            "async/turn_versions_mean",
            "async/turns_multi_version",
            "async/tokens_per_version",
        ),
        "async",
    ),
    "async/in_flight_updates": "in_flight",
    "timing_s/rollout_overlap": "pipeline",
    "rollout/pipelined": "pipeline",
    "eval/policy_version": "async, evaluation",
    **dict.fromkeys(
        (
            "eval/success",
            "eval/progression",
            "eval/return",
            "eval/valid_action_rate",
            "eval/success_se",
            "eval/progression_se",
            "eval/return_se",
            "eval/valid_action_rate_se",
            "eval/episodes",
            "eval/length",
            "eval/generation_failures",
            "eval/time_s",
        ),
        "evaluation",
    ),
    **dict.fromkeys(
        (
            f"curriculum/{FAMILY}/prob",
            f"curriculum/{FAMILY}/q",
            f"curriculum/{FAMILY}/draws",
            f"curriculum/{FAMILY}/reward",
            f"family/{FAMILY}/episodes",
            f"family/{FAMILY}/row_share",
            f"family/{FAMILY}/success_rate",
            f"family/{FAMILY}/return_mean",
            f"eval/{FAMILY}/success",
            f"eval/{FAMILY}/return",
            f"eval/{FAMILY}/valid_action_rate",
            f"eval/{FAMILY}/episodes",
        ),
        "multi-task",
    ),
    "eval/failed": "eval failure",
}
"""verlog's metric names (docs/metrics.md's table) -> when they are logged (its "logged" column)."""

VERLOG_NAMESPACES = ("env/", "rollout/", "adv/", "progress/", "eval/", "curriculum/", "family/", "check/", "async/",
                     "prefix/", "timing_s/rollout_")  # fmt: skip
"""Prefixes of verlog's own metrics: a name under one of them must be one of :data:`VERLOG_METRICS`."""

VERL_NAMESPACES = (
    "actor/",
    "critic/",
    "training/",
    "timing_s/",
    "timing_per_token_ms/",
    "perf/",
    "response_length/",
    "response_length_non_aborted/",
    "prompt_length/",
    "response/",
    "rollout_corr/",
    "global_seqlen/",
    "num_turns/",
    "val-core/",
    "val-aux/",
)
"""Prefixes of verl's own metrics (its PPO trainer names them; any name under them is taken)."""

_PATTERNS = {
    name: re.compile("^" + re.escape(name).replace(re.escape(FAMILY), "[^/]+") + "$") for name in VERLOG_METRICS
}


def verlog_metric(name: str) -> str | None:
    """The entry of :data:`VERLOG_METRICS` that ``name`` is (``eval/goto/success`` is ``eval/<family>/success``), or
    None."""
    if name in VERLOG_METRICS:
        return name
    return next((entry for entry, pattern in _PATTERNS.items() if FAMILY in entry and pattern.match(name)), None)


def metric_problem(name: str) -> str | None:
    """Why ``name`` is not a metric verlog train logs (its namespace is neither verlog's nor verl's, or a verlog
    namespace has no such name), with the closest names; None when it is one."""
    if verlog_metric(name) is not None:
        return None
    if name.startswith(VERLOG_NAMESPACES):
        close = difflib.get_close_matches(name, list(VERLOG_METRICS), n=3, cutoff=0.6)
        namespace = next(p for p in VERLOG_NAMESPACES if name.startswith(p))
        hint = f"Did you mean {', '.join(close)}?" if close else _under(namespace)
        return f"{name!r} is not a metric verlog train logs. {hint}"
    if name.startswith(VERL_NAMESPACES):
        return None
    close = difflib.get_close_matches(name, list(VERLOG_METRICS), n=3, cutoff=0.6)
    namespaces = ", ".join(sorted({p.split("/")[0] + "/" for p in (*VERLOG_NAMESPACES, *VERL_NAMESPACES)}))
    hint = f"Did you mean {', '.join(close)}? " if close else ""
    return f"{name!r} is not a metric verlog train logs: no metric is logged under {name.split('/')[0]}/. {hint}" + (
        f"Metrics are logged under {namespaces}"
    )


def _under(namespace: str) -> str:
    names = sorted(n for n in VERLOG_METRICS if n.startswith(namespace))
    shown = ", ".join(names[:8]) + (", ..." if len(names) > 8 else "")
    return f"Under {namespace} it logs {shown}"


def condition_problem(name: str, cfg: Any) -> str | None:
    """Why verlog train would never log ``name`` with the trial's typed config ``cfg`` (a
    :class:`verlog.config.schema.TrainConfig`), or None when it would (or the name is verl's)."""
    entry = verlog_metric(name)
    if entry is None:
        return None
    when = VERLOG_METRICS[entry]
    estimator = str(cfg.algorithm.estimator)
    async_mode = str(cfg.rollout.async_mode)
    mode = REGISTRY.get(async_mode)  # its entry's declarations say which of the async metrics it logs

    def needs(what: Callable[[AsyncMode], bool]) -> tuple[bool, str]:
        names = mode_names(what)
        wanted = f"={names[0]}" if len(names) == 1 else " " + " or ".join(names)
        return mode is None or not what(mode), f"it needs rollout.async_mode{wanted}, not {async_mode}"

    unmet = {
        "evaluation": (cfg.evaluation.every == 0, "the in-training evaluation is off (evaluation.every=0)"),
        "dual_gae": (estimator != "dual_gae", f"it is dual_gae's and algorithm.estimator={estimator}"),
        "group": (estimator not in ("grpo", "gigpo"), f"it is grpo's and gigpo's and algorithm.estimator={estimator}"),
        "gigpo": (estimator != "gigpo", f"it is gigpo's and algorithm.estimator={estimator}"),
        "vtrace": (
            str(cfg.algorithm.turn_trace) != "vtrace",
            f"it needs algorithm.turn_trace=vtrace, not {cfg.algorithm.turn_trace}",
        ),
        "async": needs(lambda m: m.keeps_rows_ahead),
        "in_flight": needs(lambda m: m.weight_sync is WeightSyncPolicy.INTERRUPT),
        "pipeline": needs(lambda m: m.pipelined),
        "multi-task": (not cfg.env.tasks, "it is logged per task family and env.tasks is empty"),
        "prefix_sharing": (not cfg.hardware.prefix_sharing, "hardware.prefix_sharing is false"),
        "lora": (int(cfg.model.lora.rank) == 0, "it is logged by LoRA runs and model.lora.rank=0"),
        "images": (
            int(cfg.memory.max_image_history) == 0,
            "it is logged when prompts carry images and memory.max_image_history=0",
        ),
    }
    for condition in (c.strip() for c in when.split(",")):
        never, why = unmet.get(condition, (False, ""))
        if never:
            return f"{name} is never logged in this trial: {why}"
    if FAMILY in entry and cfg.env.tasks:
        family, families = name.split("/")[1], [str(k) for k in cfg.env.tasks]
        if family not in families:
            close = difflib.get_close_matches(family, families, n=1, cutoff=0.5)
            hint = f" Did you mean {entry.replace(FAMILY, close[0])}?" if close else ""
            return f"{name} names the task family {family!r}, which env.tasks lacks ({', '.join(families)}).{hint}"
    return None
