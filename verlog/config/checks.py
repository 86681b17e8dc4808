"""Typing and checking ``verlog train``'s config: every problem at once, each with its fix.

:func:`typed_config` gives a composed (untyped) config the types of :class:`~verlog.config.schema.TrainConfig`,
collecting each key whose value does not fit (``seed=abc``) or that the schema lacks. :func:`check_values` checks
each key's range and choices, :func:`check_sizes` the keys that depend on each other (rows split into mini-batches
and over the ranks, the advantage estimator's own checks from its registry entry in verlog/algorithms/estimators.py,
tapes). Nothing here starts Ray, loads a model or builds an env; :mod:`verlog.config.preflight` does the checks that
look outside the config (env, model, checkpoint, prompt budget). A check returns a list of :class:`Problem`;
:class:`TrainConfigError` carries them all.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable, Iterable
from typing import Any

from omegaconf import DictConfig, OmegaConf

from verlog.config import schema
from verlog.config.compose import MOVED_KEYS
from verlog.config.env_backend import env_backend_problems
from verlog.config.problems import Problem
from verlog.config.schema import LOGGERS, OFF_CHOICES, RESUME_MODES, ROLLOUT_IS_MODES, TrainConfig
from verlog.config.trackers import missing_tracker_packages
from verlog.config.verl_section import VERL_CORRECTION, is_true, verl_setting
from verlog.errors import VerlogError
from verlog.run.folder import STEP_PREFIX


class TrainConfigError(VerlogError, ValueError):
    """Training settings that are out of range or contradict each other; ``problems`` lists each with its fix."""

    def __init__(self, problems: str | Iterable[Problem]) -> None:
        self.problems = [Problem("config", problems)] if isinstance(problems, str) else list(problems)
        if isinstance(problems, str):
            text = problems
        elif len(self.problems) == 1:
            text = str(self.problems[0])
        else:
            lines = [f"{len(self.problems)} problems in the config (nothing was started):"]
            text = "\n".join(lines + [f"  - {p}" for p in self.problems])
        super().__init__(text)


def raise_if(problems: list[Problem]) -> None:
    """Raise :class:`TrainConfigError` when ``problems`` is not empty."""
    if problems:
        raise TrainConfigError(problems)


# ------------------------------------------------------------------------------------------------ typing
def field_types(cls: type = TrainConfig, prefix: str = "") -> dict[str, str]:
    """Dotted key -> the annotation of its field (e.g. ``"rollout.num_slots" -> "int"``), sections included."""
    out: dict[str, str] = {}
    for f in dataclasses.fields(cls):
        name, annotation = f"{prefix}{f.name}", str(f.type)
        out[name] = annotation
        nested = getattr(schema, annotation, None)
        if dataclasses.is_dataclass(nested):
            out.update(field_types(nested, name + "."))
    return out


def typed_config(cfg: DictConfig | dict[str, Any]) -> tuple[TrainConfig, list[Problem]]:
    """``cfg`` as a :class:`TrainConfig`, and a problem for each value of the wrong type or key the schema lacks.

    Interpolations are resolved first. A key with a problem keeps the schema's default, so the other checks can run.
    """
    problems: list[Problem] = []
    data = cfg
    if isinstance(cfg, DictConfig):
        try:
            data = OmegaConf.to_container(cfg, resolve=True)
        except Exception as exc:  # an interpolation that does not resolve: omegaconf raises several kinds
            text = " ".join(str(exc).split())
            return TrainConfig(), [Problem("config", f"{text}; fix or remove that ${{...}} reference")]
    node = OmegaConf.structured(TrainConfig)
    data = _without_moved_keys(data, problems)
    _fill(node, data, "", problems, field_types())
    typed = OmegaConf.to_object(node)
    assert isinstance(typed, TrainConfig)  # OmegaConf.to_object of a structured TrainConfig gives one
    return typed, problems


def _without_moved_keys(data: Any, problems: list[Problem]) -> Any:
    """``data`` without the keys of :data:`MOVED_KEYS`, one problem naming the spelling to write for each given."""
    out = dict(data)
    for key, new in MOVED_KEYS.items():
        section, _, name = key.partition(".")
        if isinstance(out.get(section), dict) and name in out[section]:
            out[section] = {k: v for k, v in out[section].items() if k != name}
            problems.append(Problem(key, f"{key} is set by {new} in the training config: write {new}=N"))
    return out


def _fill(node: DictConfig, data: Any, prefix: str, problems: list[Problem], types: dict[str, str]) -> None:
    for key, value in dict(data).items():
        name = f"{prefix}{key}"
        if key not in node:
            keys = ", ".join(str(k) for k in node.keys())
            close = difflib.get_close_matches(str(key), [str(k) for k in node.keys()], n=1, cutoff=0.6)
            hint = f" Did you mean {prefix}{close[0]}?" if close else ""
            extra = ""
            if prefix == "env.":  # an env config's own key, e.g. one that env.id is built from
                extra = "; a value that env.id is built from goes in env.task (id: family/${.task})"
            problems.append(Problem(name, f"verlog's config has no such key.{hint} Keys here: {keys}{extra}"))
            continue
        child = node._get_node(key)
        if isinstance(value, dict) and isinstance(child, DictConfig) and _is_section(child):
            _fill(child, value, name + ".", problems, types)
            continue
        if value is False and name in OFF_CHOICES:  # YAML 1.1: an unquoted off (or no, false) reads as False
            value = "off"
        if types.get(name) == "bool" and not isinstance(value, bool):  # OmegaConf would take 1, "yes", "on"
            problems.append(Problem(name, f"{value!r} is not true or false: write {name}=true or {name}=false"))
            continue
        try:
            node[key] = value
        except Exception as exc:  # omegaconf's ValidationError and friends: the value does not fit the type
            del exc
            default = OmegaConf.select(OmegaConf.structured(TrainConfig), name)
            default = OmegaConf.to_container(default) if OmegaConf.is_config(default) else default
            problems.append(
                Problem(
                    name,
                    f"{value!r} is not of type {types.get(name, '?')}: write {name}=<{types.get(name)}> "
                    f"(default {default!r})",
                )
            )


def _is_section(node: DictConfig) -> bool:
    return dataclasses.is_dataclass(OmegaConf.get_type(node))


# ------------------------------------------------------------------------------------------------ values
Rule = tuple[str, Callable[[Any], bool], str]


def _rules() -> list[Rule]:
    """(key, test, requirement) for each key with a range; the requirement is what the message asks for.

    The ``evaluation`` and ``tapes`` sections are checked by their own modules (verlog/eval/training.py,
    verlog/tapes/recorders.py), through :func:`check_evaluation` and :func:`check_tapes`.
    """
    at_least_0 = ("an integer >= 0", lambda v: v >= 0)
    at_least_1 = ("an integer >= 1", lambda v: v >= 1)
    unit = ("in [0, 1]", lambda v: 0.0 <= v <= 1.0)
    positive = ("> 0", lambda v: v > 0)
    non_negative = (">= 0", lambda v: v >= 0)
    table: list[tuple[str, tuple[str, Callable[[Any], bool]], str]] = [
        ("iterations", at_least_1, "PPO iterations"),
        ("seed", at_least_0, "the first slot's env seed"),
        ("rollout.num_slots", at_least_1, "env slots"),
        ("rollout.turns_per_slot", at_least_1, "turns per slot and iteration"),
        ("rollout.max_prompt_tokens", at_least_1, "the prompt budget in tokens"),
        ("rollout.max_response_tokens", at_least_1, "the longest answer in tokens"),
        ("rollout.generation_retries", at_least_0, "retries of a failed generation"),
        ("rollout.group_size", at_least_1, "slots per group"),
        ("rollout.pipeline_groups", ("an integer >= 2", lambda v: v >= 2), "slot groups of async_mode=pipeline"),
        ("rollout.max_lag", at_least_1, "policy versions a row of async_mode=in_flight may lag"),
        ("memory.n", at_least_0, "past turns in the prompt"),
        ("memory.keep_reasoning_turns", at_least_0, "past turns shown with their reasoning"),
        ("memory.max_image_history", at_least_0, "newest observations shown with their image; 0 = text only"),
        ("sampling.temperature", non_negative, "0 is greedy"),
        ("sampling.top_p", ("in (0, 1]", lambda v: 0.0 < v <= 1.0), "1 switches nucleus sampling off"),
        ("sampling.top_k", ("-1, 0 (off) or an integer >= 1", lambda v: v >= -1), "-1 switches it off"),
        ("checkpoint.save_freq", ("-1 (never) or an integer >= 1", lambda v: v == -1 or v >= 1), "iterations"),
        ("algorithm.step_gamma", unit, "discount across turns"),
        ("algorithm.step_lam", unit, "GAE lambda across turns"),
        ("algorithm.token_gamma", unit, "discount within a turn"),
        ("algorithm.token_lam", unit, "GAE lambda within a turn"),
        ("algorithm.gigpo_step_gamma", unit, "GiGPO's step discount"),
        ("algorithm.gigpo_omega", non_negative, "weight of GiGPO's step advantage"),
        ("algorithm.kl_coef", non_negative, "KL coefficient"),
        ("algorithm.clip_ratio", positive, "PPO's policy clip"),
        ("algorithm.cliprange_value", positive, "PPO's value clip"),
        ("algorithm.grad_clip", positive, "gradient norm clip"),
        ("algorithm.ppo_epochs", at_least_1, "passes over each iteration's rows"),
        ("algorithm.mini_batches", at_least_1, "mini-batches per PPO epoch"),
        ("algorithm.actor_lr", non_negative, "learning rate"),
        ("algorithm.critic_lr", non_negative, "learning rate"),
        ("algorithm.critic_warmup", at_least_0, "critic-only iterations"),
        ("algorithm.warmup_rollout_multiplier", at_least_1, "1 = no warm-up rollout"),
        ("algorithm.warmup_critic_updates", at_least_0, "critic updates on the warm-up rollout"),
        ("algorithm.first_position_weight", non_negative, "weight of V(s_t) in the critic loss"),
        ("algorithm.rollout_is_threshold", ("> 1", lambda v: v > 1), "upper clip of the importance weights"),
        ("hardware.n_gpus_per_node", at_least_1, "training ranks per node; CPU ranks with hardware.cpu"),
        ("hardware.nnodes", at_least_1, "nodes"),
        ("hardware.micro_batch_size_per_gpu", at_least_1, "rows per forward pass and rank"),
        ("hardware.rollout_tp", at_least_1, "vLLM tensor parallel size"),
        ("hardware.rollout_gpu_memory_utilization", ("in (0, 1]", lambda v: 0.0 < v <= 1.0), "vLLM's share"),
        ("hardware.vllm_kv_cache_gib", positive, "GiB of KV cache"),
    ]
    return [(key, test, f"must be {requirement} ({meaning})") for key, (requirement, test), meaning in table]


def _get(cfg: TrainConfig, key: str) -> Any:
    value: Any = cfg
    for part in key.split("."):
        value = getattr(value, part)
    return value


def _choice(key: str, value: str, options: Iterable[str], meaning: str = "") -> Problem | None:
    options = list(options)
    if value in options:
        return None
    close = difflib.get_close_matches(str(value), options, n=1, cutoff=0.5)
    hint = f" Did you mean {key}={close[0]}?" if close else ""
    extra = f" ({meaning})" if meaning else ""
    return Problem(key, f"{value!r} is not one of {', '.join(options)}{extra}.{hint}")


def check_values(cfg: TrainConfig, skip: Iterable[str] = ()) -> list[Problem]:
    """Each key's range and choices (keys in ``skip`` already have a problem, e.g. the wrong type)."""
    from envs.actions import PARSE_MODES
    from verlog.algorithms.dual_gae import ADVANTAGE_LEVELS, BOUNDARIES, TURN_TRACES
    from verlog.algorithms.estimators import choices_meaning, estimator_names
    from verlog.algorithms.group_advantage import GROUP_NORMS
    from verlog.config.async_modes import LOCKSTEP, mode_names
    from verlog.prompting.memory import ANSWER_FORMATS

    skipped = set(skip)
    defaults = TrainConfig()
    problems = []
    for key, test, requirement in _rules():
        value = _get(cfg, key)
        if key not in skipped and not test(value):
            problems.append(Problem(key, f"{value!r} {requirement}: e.g. {key}={_get(defaults, key)} (the default)"))
    choices = [
        _choice("memory.answer_format", cfg.memory.answer_format, ANSWER_FORMATS, "cot: THINK then ACTION"),
        _choice("algorithm.estimator", cfg.algorithm.estimator, estimator_names(), choices_meaning()),
        _choice("algorithm.group_norm", cfg.algorithm.group_norm, GROUP_NORMS),
        _choice("algorithm.advantage_level", cfg.algorithm.advantage_level, ADVANTAGE_LEVELS),
        _choice("algorithm.boundary", cfg.algorithm.boundary, BOUNDARIES, "bootstrap: V(s_T), verlog's"),
        _choice("rollout.async_mode", cfg.rollout.async_mode, mode_names(), f"{LOCKSTEP}: lockstep"),
        _choice("algorithm.rollout_is", cfg.algorithm.rollout_is, ROLLOUT_IS_MODES, "verl's importance weights"),
        _choice("algorithm.turn_trace", cfg.algorithm.turn_trace, TURN_TRACES, "vtrace: cut by min(1, rho)"),
    ]
    mode = cfg.env.kwargs.get("parse_mode")
    if mode is not None:
        choices.append(_choice("env.kwargs.parse_mode", str(mode), PARSE_MODES, "strict: BALROG's ACTION: parsing"))
    for name in cfg.logger:
        choices.append(_choice("logger", str(name), LOGGERS, "verl's tracking backends"))
    problems += [p for p in choices if p is not None and p.key not in skipped]
    if not cfg.logger and "logger" not in skipped:
        problems.append(Problem("logger", "logger is empty: give at least one tracking backend, e.g. logger=[console]"))
    if "logger" not in skipped and not any(p.key == "logger" for p in problems):
        problems += [Problem("logger", line) for line in missing_tracker_packages([str(n) for n in cfg.logger])]
    resume = cfg.checkpoint.resume
    if resume not in RESUME_MODES and "/" not in resume and STEP_PREFIX not in resume:
        close = difflib.get_close_matches(resume, RESUME_MODES, n=1, cutoff=0.5)
        hint = f" Did you mean checkpoint.resume={close[0]}?" if close else ""
        problems.append(
            Problem(
                "checkpoint.resume",
                f"{resume!r} is neither auto, disable nor a path to a checkpoint folder "
                f".../checkpoints/global_step_K.{hint}",
            )
        )
    if cfg.env.id is None or not cfg.env.id.strip():
        problems.append(
            Problem(
                "env.id",
                "env.id is not set: give env.id=<a registered id (`verlog envs`), or package.module:factory>; an id "
                "your module registers also needs --import MODULE",
            )
        )
    if not cfg.model.path.strip():
        problems.append(Problem("model.path", "model.path is empty: give a local model folder or a Hugging Face id"))
    if not str(cfg.output_dir).strip():
        problems.append(
            Problem(
                "output_dir",
                "output_dir is empty (its checkpoints would go to /checkpoints): give the run's folder, e.g. "
                "output_dir=outputs/my-run",
            )
        )
    if cfg.rollout.max_lag > MAX_LAG:
        problems.append(
            Problem(
                "rollout.max_lag",
                f"{cfg.rollout.max_lag} iterations ahead: the rollout would hold that many iterations of rows and "
                f"train on rows of policies that many updates old; give at most {MAX_LAG} (1-2 is usual)",
            )
        )
    return problems


MAX_LAG = 8
"""The most iterations ``rollout.async_mode=in_flight`` may run ahead (``rollout.max_lag``)."""


# ------------------------------------------------------------------------------------------------ sizes
def check_sizes(cfg: TrainConfig, skip: Iterable[str] = ()) -> list[Problem]:
    """Keys that depend on each other: the rows of an iteration split into mini-batches and over the ranks, the
    rollout engine over the ranks, and the checks of ``algorithm.estimator``'s registry entry
    (verlog/algorithms/estimators.py: how it groups the rollout's slots).

    Runs only on sizes that passed :func:`check_values` (a size below 1 is reported there, not divided by here).
    """
    bad = set(skip) | {p.key for p in check_values(cfg)}
    sizes = ("rollout.num_slots", "rollout.turns_per_slot", "algorithm.mini_batches", "hardware.n_gpus_per_node")
    if bad & {*sizes, "hardware.nnodes", "hardware.rollout_tp"}:
        return []
    problems = []
    rows, minis, ranks = cfg.rows_per_iteration, cfg.algorithm.mini_batches, cfg.ranks
    ro = cfg.rollout
    if rows % minis:
        problems.append(
            Problem(
                "algorithm.mini_batches",
                f"the {rows} rows of an iteration (num_slots {ro.num_slots} x turns_per_slot {ro.turns_per_slot}) "
                f"must split into algorithm.mini_batches={minis} equal mini-batches: change one of them",
            )
        )
    elif cfg.mini_batch_rows % ranks:
        problems.append(
            Problem(
                "hardware",
                f"a mini-batch of {cfg.mini_batch_rows} rows must divide by the {ranks} training ranks "
                "(hardware.n_gpus_per_node x hardware.nnodes): change rollout.num_slots, turns_per_slot or "
                "algorithm.mini_batches",
            )
        )
    workers = cfg.env.num_workers
    if workers is not None and not 1 <= workers <= ro.num_slots:
        problems.append(
            Problem(
                "env.num_workers",
                f"{workers} must be null (one per CPU, at most one per slot) or an integer in [1, rollout.num_slots="
                f"{ro.num_slots}] (env-pool worker processes; each runs a block of the slots): e.g. "
                f"env.num_workers={min(max(workers, 1), ro.num_slots)}",
            )
        )
    if ranks % cfg.hardware.rollout_tp:
        problems.append(
            Problem(
                "hardware.rollout_tp",
                f"{cfg.hardware.rollout_tp} must divide the {ranks} ranks (each vLLM replica takes rollout_tp of "
                "them): change hardware.rollout_tp or hardware.n_gpus_per_node",
            )
        )
    if "algorithm.estimator" not in bad and "rollout.group_size" not in bad:
        from verlog.algorithms.estimators import get_estimator

        # the estimator's own (verlog/algorithms/estimators.py)
        problems += get_estimator(cfg.algorithm.estimator).checks(cfg)
    return problems


# ------------------------------------------------------------------------------------------------ async rollouts
def check_async(cfg: TrainConfig, skip: Iterable[str] = ()) -> list[Problem]:
    """What the asynchronous rollouts (``rollout.async_mode``) cannot honour, and the off-policy settings that need
    them (docs/configuration.md): each a :class:`Problem` naming the fix. The mode's own problems come from its
    registry entry (verlog/config/async_modes.py). Runs on choices that passed :func:`check_values`."""
    from verlog.config.async_modes import get_async_mode

    bad = set(skip) | {p.key for p in check_values(cfg)}
    problems = []
    rs = verl_setting(cfg, f"{VERL_CORRECTION}.rollout_rs")
    if rs not in (None, "", "null", "None", False):
        problems.append(
            Problem(
                f"verl.{VERL_CORRECTION}.rollout_rs",
                f"{rs!r}: verl's rejection sampling edits the response mask and can strand a row's reward token "
                f"outside it: drop verl.{VERL_CORRECTION}.rollout_rs (verlog corrects with algorithm.rollout_is)",
            )
        )
    if "rollout.async_mode" in bad:
        return problems
    return problems + get_async_mode(cfg.rollout.async_mode).problems(cfg, bad)


# ------------------------------------------------------------------------------------------------ prefix sharing
PREFIX_SHARING_CONFLICTS: tuple[tuple[str, str], ...] = (
    ("actor_rollout_ref.actor.use_dynamic_bsz", "dynamic batch sizes reorder the rows into micro-batches by length"),
    ("actor_rollout_ref.ref.log_prob_use_dynamic_bsz", "dynamic batch sizes reorder the rows by length"),
    ("actor_rollout_ref.rollout.log_prob_use_dynamic_bsz", "dynamic batch sizes reorder the rows by length"),
    ("critic.use_dynamic_bsz", "dynamic batch sizes reorder the rows into micro-batches by length"),
    (
        "actor_rollout_ref.model.enable_gradient_checkpointing",
        "activation checkpointing drops the prefix's keys/values",
    ),
    ("critic.model.enable_gradient_checkpointing", "activation checkpointing drops the prefix's keys/values"),
    ("actor_rollout_ref.model.use_fused_kernels", "fused kernels compute log-probs at every position"),
)
"""``verl:`` keys that turned on conflict with ``hardware.prefix_sharing`` -> why (docs/row-cost.md)."""
SEQUENCE_PARALLEL_KEYS = (
    "actor_rollout_ref.actor.ulysses_sequence_parallel_size",
    "actor_rollout_ref.ref.ulysses_sequence_parallel_size",
    "critic.ulysses_sequence_parallel_size",
)


def check_prefix_sharing(cfg: TrainConfig) -> list[Problem]:
    """The ``verl:`` settings ``hardware.prefix_sharing=true`` cannot honour, each a :class:`Problem` naming the fix.

    ``use_remove_padding`` is not among them: the shared passes lay out their own batch (docs/row-cost.md)."""
    if not cfg.hardware.prefix_sharing:
        return []
    problems = []
    fix = "or hardware.prefix_sharing=false (verl's per-row passes)"
    for key, why in PREFIX_SHARING_CONFLICTS:
        if is_true(verl_setting(cfg, key)):
            problems.append(
                Problem(
                    f"verl.{key}",
                    f"{why}, which hardware.prefix_sharing=true cannot honour: set verl.{key}=false {fix}",
                )
            )
    for key in SEQUENCE_PARALLEL_KEYS:
        value = verl_setting(cfg, key)
        if value not in (None, 1, "1"):
            problems.append(
                Problem(
                    f"verl.{key}",
                    f"{value}: sequence parallelism splits each row across ranks, which hardware.prefix_sharing=true "
                    f"cannot honour (a prefix and its rows must sit on one rank): set verl.{key}=1 {fix}",
                )
            )
    if verl_setting(cfg, "trainer.balance_batch") is not None and not is_true(
        verl_setting(cfg, "trainer.balance_batch")
    ):
        problems.append(
            Problem(
                "verl.trainer.balance_batch",
                "with hardware.prefix_sharing=true verlog orders the rows into micro-batches of shared prefixes in "
                f"verl's batch-balancing step: drop verl.trainer.balance_batch=false {fix}",
            )
        )
    return problems


def as_dictconfig(cfg: TrainConfig) -> DictConfig:
    """``cfg`` as a typed DictConfig (for the code that reads the config with OmegaConf: evaluation, tapes)."""
    return OmegaConf.structured(cfg)


def config_problems(cfg: TrainConfig, skip: Iterable[str] = ()) -> list[Problem]:
    """:func:`check_values`, :func:`check_sizes` and :func:`check_tapes` of a typed config (keys in ``skip`` already
    have a problem)."""
    problems = check_values(cfg, skip=skip)
    problems += check_sizes(cfg, skip=skip)
    problems += check_async(cfg, skip=skip)
    problems += check_prefix_sharing(cfg)
    if not any(key.startswith("tapes") for key in [*skip, *(p.key for p in problems)]):
        problems += check_tapes(cfg)
    problems += check_curriculum(cfg)
    problems += [Problem("env", p) for p in env_backend_problems(cfg)]
    return problems


def check_curriculum(cfg: TrainConfig) -> list[Problem]:
    """``env.tasks`` and ``curriculum`` (multi-task training, docs/curriculum.md): entries well formed, the curriculum's
    kind and parameters valid for those families, and no group rollouts mixing tasks within a group."""
    from verlog.algorithms.curriculum import (
        CurriculumSettingsError,
        check_curriculum_settings,
        family_weights,
        parse_task_families,
    )

    if not cfg.env.tasks:
        if cfg.curriculum.kind != "uniform":
            return [
                Problem(
                    "curriculum.kind",
                    f"curriculum.kind={cfg.curriculum.kind} draws among task families, but env.tasks is empty: list "
                    "them (env.tasks.NAME=ENV_ID, or an env config with a tasks: mapping), or drop curriculum.kind",
                )
            ]
        return []
    try:
        families = parse_task_families(cfg.env.tasks)
        check_curriculum_settings(cfg.curriculum, [f.name for f in families], family_weights(families))
    except CurriculumSettingsError as exc:
        return [Problem("curriculum", str(exc))]
    return []


def check_config(cfg: TrainConfig | DictConfig) -> TrainConfig:
    """Type ``cfg`` and check its values, its sizes and the evaluation's seeds (no model or file is looked at; the
    env is built only to check evaluation seeds when ``evaluation.every`` > 0); raise every problem at once as
    :class:`TrainConfigError`, else return the typed config. :func:`verlog.config.preflight.preflight` does more."""
    typed, problems = (cfg, []) if isinstance(cfg, TrainConfig) else typed_config(cfg)
    problems += config_problems(typed, skip=[p.key for p in problems])
    if not problems:
        problems += check_evaluation(typed)
    raise_if(problems)
    return typed


def check_evaluation(cfg: TrainConfig) -> list[Problem]:
    """Evaluation inside training (:func:`verlog.eval.training.check_evaluation`): seeds out of training's reach, the
    env builds at the last evaluation seed."""
    from verlog.eval.training import check_evaluation as check

    try:
        check(as_dictconfig(cfg), cfg.max_turns_per_slot)
    except VerlogError as exc:
        return [Problem("evaluation", str(exc))]
    return []


def check_tapes(cfg: TrainConfig) -> list[Problem]:
    """The tapes section's own checks (:meth:`verlog.tapes.recorders.TapesConfig.check`, beyond the ranges above)."""
    from verlog.tapes.recorders import TapeConfigError

    try:
        cfg.tapes.check()
    except TapeConfigError as exc:
        return [Problem("tapes", str(exc))]
    return []
