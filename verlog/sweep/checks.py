"""A search space checked against verlog train's config before anything starts: its keys, then every trial.

:func:`check_space_keys` composes the space's ``base`` and each swept key with verlog train's own composition
(:func:`verlog.config.compose.load_config`), so a misspelt key gets the message ``verlog train key=value`` would give
("unknown config key ... Did you mean ...?"). :func:`check_trials` then composes each trial as ``verlog train`` composes
it (:func:`compose_trial`: the same overrides list, :func:`verlog.config.compose.load_config` and
:func:`verlog.config.preflight.preflight`), checks it as ``verlog train --dry-run`` does
(:func:`verlog.trainer.dry_run.describe_run`, which merges a ``verl:`` section into verl's config) and that the
objective's metric will be logged. The trial then runs ``python -m verlog.train`` with exactly those arguments
(:func:`train_arguments`): no copy of the typed config travels, the trial's own ``verlog train`` composes it again the
same way. No Ray, no model, no process starts here.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from verlog.config.schema import TrainConfig
from verlog.errors import VerlogError
from verlog.sweep.folder import starts_fresh
from verlog.sweep.space import (
    EVAL_METRIC_PREFIX,
    SearchSpace,
    SweepSpaceError,
    Trial,
    describe_params,
    format_override,
    grid_size,
)

HF_MODEL_CONTENTS = "verl.actor_rollout_ref.actor.checkpoint.save_contents=[model,optimizer,extra,hf_model]"
"""What a trial's checkpoint must hold for ``verlog eval`` to load the trained model (a Hugging Face folder)."""
MAX_TRIALS = 2000
"""The most trials a sweep runs. Each is a ``verlog train`` run, and each is checked before anything starts (about
0.15 s a trial on a 2-core CPU: 2,000 trials take about 5 minutes, with progress lines); a larger grid is refused with
the fix (fewer values, or random sampling)."""
PROGRESS_AFTER_S = 3.0
"""A trial check that runs longer than this prints a progress line, then one every :data:`PROGRESS_EVERY_S`."""
PROGRESS_EVERY_S = 10.0


@dataclass(frozen=True)
class CheckedTrial:
    """A trial that passed verlog train's checks: its overrides (with its own ``output_dir``), the arguments its
    ``python -m verlog.train`` gets (``train_args``: the config folder, the imports, the overrides), the typed config
    that verlog train's composition gives for them, and the command that reproduces it by hand."""

    trial: Trial
    overrides: tuple[str, ...]
    config: TrainConfig
    command: str
    train_args: tuple[str, ...] = ()


def train_arguments(space: SearchSpace, overrides: Sequence[str]) -> list[str]:
    """What ``python -m verlog.train`` gets for a trial of ``space`` with ``overrides``: ``--config-dir``, one
    ``--import`` per module of ``imports``, then the overrides (the order of ``verlog train --dry-run``'s command)."""
    args = [*(f"--import={m}" for m in space.imports), *overrides]
    return args if space.config_dir is None else ["--config-dir", space.config_dir, *args]


def compose_trial(space: SearchSpace, overrides: Sequence[str], overwrite: bool) -> TrainConfig:
    """The typed, checked config of a trial: verlog train's own composition (:func:`verlog.config.compose.load_config`
    over configs/ and ``config_dir`` with the overrides, then :func:`verlog.config.preflight.preflight`), as the
    trial's ``verlog train`` composes it from :func:`train_arguments`."""
    from verlog.config.compose import load_config
    from verlog.config.preflight import preflight

    return preflight(load_config(overrides, space.config_dir), space.imports, overwrite=overwrite)


def one_line(text: str) -> str:
    """``text`` with its lines joined by spaces (a multi-line config error as one line)."""
    return " ".join(line.strip() for line in str(text).splitlines() if line.strip())


def key_message(text: str) -> str:
    """verlog train's unknown-key message on one line: the key and the closest one ("Did you mean ...?"), or the keys
    of its section when none is close, and the fix in a search space."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines or not lines[0].startswith("unknown config key"):
        return one_line(text)
    return f"{' '.join(lines[:2])}; rename it in the search space (docs/configuration.md lists every key)"


def import_space_modules(space: SearchSpace) -> None:
    """Import the space's ``imports`` (modules that register envs of one's own), or SweepSpaceError."""
    import envs
    from envs.errors import EnvImportError

    try:
        envs.import_modules(list(space.imports))
    except EnvImportError as exc:
        raise SweepSpaceError(f"{space.source}: imports: {exc}") from None


def check_metric_names(space: SearchSpace) -> None:
    """The objective's and the scheduler's metrics are metrics verlog train logs (:mod:`verlog.sweep.metrics`), so a
    misspelt one is refused now rather than found missing after every trial; SweepSpaceError with the closest
    names."""
    from verlog.sweep.metrics import metric_problem

    for what, metric in (("objective.metric", space.objective.metric), ("scheduler.metric", _scheduler_metric(space))):
        if metric is None or metric.startswith(EVAL_METRIC_PREFIX):  # verlog eval's summary fields: checked already
            continue
        problem = metric_problem(metric)
        if problem is not None:
            raise SweepSpaceError(
                f"{space.source}: {what} {problem} (docs/metrics.md lists them); name one in the search space"
            )


def check_trial_count(space: SearchSpace) -> int:
    """The number of trials of ``space`` (configurations times training seeds), counted without building them; a space
    of more than :data:`MAX_TRIALS` is a SweepSpaceError saying how to make it smaller."""
    seeds = len(space.seeds) if space.seeds is not None else 1
    if space.method == "random":
        count = space.trials * seeds
        if count > MAX_TRIALS:
            raise SweepSpaceError(
                f"{space.source}: {space.trials} configurations x {seeds} seed(s) = {count} trials, more than a sweep "
                f"runs (at most {MAX_TRIALS}: each is a verlog train run, and each is checked before anything "
                f"starts); lower sampling.trials to at most {MAX_TRIALS // seeds}"
            )
        return count
    configurations = grid_size(space, limit=MAX_TRIALS // seeds + 1)
    count = configurations * seeds
    if count > MAX_TRIALS:
        exact = not any(p.when for p in space.params)  # then the count is a product, never cut short
        sizes = " x ".join(f"{p.grid_count():,} ({p.key})" for p in space.params)
        held = f"{count:,} trials: {sizes}" if exact else f"more than {MAX_TRIALS} trials"
        held += f" x {seeds} seeds" if exact and seeds > 1 else ""
        raise SweepSpaceError(
            f"{space.source}: the grid holds {held}, more than a sweep runs (at most {MAX_TRIALS}: each trial is a "
            "verlog train run, checked before anything starts); give the keys fewer values (fewer choices, fewer "
            f"points), or sample the space at random: sampling: {{method: random, trials: 100}}"
        )
    return count


def check_space_keys(space: SearchSpace) -> None:
    """Every key of ``base`` and ``params`` is a key of verlog train's config (every choice of a config group, such
    as ``env``, an option of it); SweepSpaceError with the config's own message and the closest key."""
    from verlog.config.compose import ConfigKeyError, load_config

    def compose(overrides: Sequence[str], where: str) -> None:
        try:
            load_config(overrides, space.config_dir)
        except ConfigKeyError as exc:
            raise SweepSpaceError(f"{space.source}: {where}: {key_message(str(exc))}") from None

    compose(space.base, "base")
    for p in space.params:
        parents = [format_override(key, allowed[0]) for key, allowed in p.when]
        # every choice (a config group's options each name a file); a range's low end (the key is what is checked)
        values = list(p.values) if p.kind == "choice" else [int(p.low) if p.kind == "int" else p.low]
        for value in values:
            compose([*space.base, *parents, format_override(p.key, value)], f"params.{p.key}")


def trial_overrides(space: SearchSpace, trial: Trial, run_dir: Path) -> list[str]:
    """The overrides ``verlog train`` gets for ``trial``: the trial's own, its ``output_dir`` (``run_dir``), and
    ``checkpoint.resume=auto`` (a killed trial continues from its last checkpoint); with an ``eval:`` section, a
    checkpoint at the last iteration holding the Hugging Face model (unless the space sets ``checkpoint.save_freq``)."""
    out = [*trial.overrides(space), f"output_dir={run_dir}", "checkpoint.resume=auto"]
    if space.eval is not None:
        set_keys = {line.lstrip("+").split("=", 1)[0] for line in out}
        if "checkpoint.save_freq" not in set_keys:
            out.append("checkpoint.save_freq=${iterations}")
        if HF_MODEL_CONTENTS.split("=", 1)[0] not in set_keys:
            out.append(HF_MODEL_CONTENTS)
    return out


def check_trials(
    space: SearchSpace,
    trials: Sequence[Trial],
    run_dirs: dict[str, Path],
    say: Callable[[str], None] | None = None,
) -> list[CheckedTrial]:
    """Each trial of ``trials`` (whose output folders are ``run_dirs``) checked as ``verlog train --dry-run`` checks
    it; SweepSpaceError naming the first trial that fails and what verlog train says, and how many fail. A check that
    runs longer than :data:`PROGRESS_AFTER_S` seconds tells ``say`` how far it got, every :data:`PROGRESS_EVERY_S`."""
    from verlog.trainer.dry_run import describe_run

    checked: list[CheckedTrial] = []
    failures: list[str] = []
    start = time.monotonic()
    next_line = start + PROGRESS_AFTER_S
    for done, trial in enumerate(trials):
        now = time.monotonic()
        if say is not None and done and now >= next_line:
            left = (now - start) / done * (len(trials) - done)
            say(
                f"[sweep] checking the trials as verlog train --dry-run does: {done} of {len(trials)} "
                f"({now - start:.0f} s, about {left:.0f} s left)"
            )
            next_line = now + PROGRESS_EVERY_S
        overrides = trial_overrides(space, trial, run_dirs[trial.id])
        try:
            fresh = starts_fresh(run_dirs[trial.id])  # as the trial will run: --overwrite when it starts afresh
            cfg = compose_trial(space, overrides, overwrite=fresh)
            _check_metrics(space, cfg)
            described = describe_run(cfg, [*(f"--import={m}" for m in space.imports), *overrides], space.config_dir)
        except VerlogError as exc:
            params = describe_params(trial.params) or "the base settings"
            failures.append(f"trial {trial.id} ({params}) fails verlog train's checks: {one_line(str(exc))}")
            continue
        command = next(line for line in described.splitlines() if line.startswith("# command: "))
        args = tuple(train_arguments(space, overrides))
        checked.append(CheckedTrial(trial, tuple(overrides), cfg, command.removeprefix("# command: "), args))
    if failures:
        more = f" ({len(failures)} of {len(trials)} trials fail; the first is shown)" if len(failures) > 1 else ""
        raise SweepSpaceError(f"{space.source}: {failures[0]}{more}")
    return checked


def _check_metrics(space: SearchSpace, cfg: TrainConfig) -> None:
    """The objective's and the scheduler's metrics will be logged by this trial."""
    from verlog.sweep.metrics import condition_problem

    for what, metric in (("objective.metric", space.objective.metric), ("scheduler.metric", _scheduler_metric(space))):
        if metric is not None and metric.startswith("eval/") and cfg.evaluation.every == 0:
            raise SweepSpaceError(
                f"{what} {metric} is the in-training evaluation, which is off (evaluation.every=0); set "
                f"evaluation.every in base (e.g. evaluation.every: {cfg.iterations}, evaluation at the last iteration)"
            )
        problem = None if metric is None else condition_problem(metric, cfg)
        if problem is not None:
            raise SweepSpaceError(f"{what} {problem} (docs/metrics.md, column logged); judge the trials by another")
    if space.eval is not None and cfg.env.tasks:
        raise SweepSpaceError(
            "the eval: section evaluates one env id and this trial trains several task families (env.tasks); drop "
            "eval: and judge trials by the in-training evaluation (objective.metric: eval/success)"
        )
    if space.objective.metric.startswith(EVAL_METRIC_PREFIX) and space.eval is None:
        raise SweepSpaceError(f"objective.metric {space.objective.metric} needs the eval: section")


def _scheduler_metric(space: SearchSpace) -> str | None:
    return space.scheduler.metric if space.scheduler is not None else None
