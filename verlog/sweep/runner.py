"""A sweep's trials on Ray Tune: its scheduler (early stopping), its resources (trials at once) and its result store
(what resumes a killed sweep).

The driver starts a small local Ray for Tune alone (``ray.init(num_cpus=parallel, num_gpus=0,
include_dashboard=False)``) and gives each trial one of its logical CPUs, so that at most ``parallel`` trials run at
once; each trial's ``verlog train`` then starts its own Ray cluster for verl, in its own process
(:mod:`verlog.sweep.trial`). Tune sees the sampled trials as a grid over their ids (``tune.grid_search``), so the
trials it runs are exactly the ones ``--dry-run`` printed. Its experiment lives in ``DIR/tune``: a second ``verlog
sweep`` of the same space restores it (:meth:`ray.tune.Tuner.restore`), which runs the trials not yet ended and those
that failed, never the ones that ended (and :func:`verlog.sweep.trial.run_trial` refuses to rerun a trial whose
result.json says it finished or was stopped).
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
from collections.abc import Callable, Sequence
from typing import Any

from verlog.sweep.checks import CheckedTrial
from verlog.sweep.folder import SweepFolder, read_json, write_json
from verlog.sweep.space import EvalSettings, Scheduler, SearchSpace, Trial, describe_params
from verlog.sweep.trial import STOPPED_NOTE, TrialJob, run_trial

TUNE_OBJECT_STORE_BYTES = 200 * 1024**2
"""Tune's Ray keeps only its own small state in the object store (verl's cluster has its own)."""


def eval_arguments(run_dir: str, settings: EvalSettings, out_dir: str, imports: Sequence[str]) -> tuple[str, ...]:
    """``verlog eval``'s options for a trial's trained model: ``--run`` its folder (its last checkpoint, evaluated
    with the settings it trained with: ``verlog.eval.from_run``), ``settings``' episodes and seeds, and its
    temperature where it gives one (else the in-training evaluation's)."""
    temperature = () if settings.temperature is None else ("--temperature", str(settings.temperature))
    args = [
        "--run", run_dir,
        "--episodes", str(settings.episodes),
        "--seed-start", str(settings.seed_start),
        *temperature,
        "--resume",
        "--out", out_dir,
    ]  # fmt: skip
    return (*args, *(f"--import={m}" for m in imports), *settings.args)


def build_jobs(
    space: SearchSpace, checked: Sequence[CheckedTrial], folder: SweepFolder, cwd: str, env: dict[str, str]
) -> dict[str, TrialJob]:
    """One :class:`TrialJob` per checked trial (its train overrides, its eval options, the sweep's environment)."""
    jobs = {}
    for c in checked:
        trial_dir = folder.trial_dir(c.trial.id).absolute()
        settings = space.eval
        jobs[c.trial.id] = TrialJob(
            id=c.trial.id,
            folder=str(trial_dir),
            train_args=c.train_args,  # the arguments whose composition the checks typed (c.config)
            eval_args=None
            if settings is None
            else eval_arguments(str(trial_dir), settings, str(trial_dir / "eval"), space.imports),
            objective=space.objective.metric,
            scheduler_metric=space.scheduler.metric if space.scheduler is not None else None,
            cwd=cwd,
            env=env,
        )
    return jobs


def write_trial_files(folder: SweepFolder, space: SearchSpace, checked: Sequence[CheckedTrial]) -> None:
    """Each trial's trial.json (its keys, overrides and hand command), keeping the attempts of an earlier run."""
    for c in checked:
        path = folder.trial_dir(c.trial.id) / "trial.json"
        info = read_json(path) or {}
        info.update(c.trial.as_dict())
        info.update({"overrides": list(c.overrides), "command": c.command})
        info.setdefault("attempts", [])
        write_json(path, info)


def tune_scheduler(scheduler: Scheduler | None, mode: str) -> Any:
    """Tune's scheduler for the space's ``scheduler:`` section (None: run every trial to its end)."""
    if scheduler is None:
        return None
    from ray.tune.schedulers import ASHAScheduler, MedianStoppingRule

    if scheduler.kind == "asha":
        return ASHAScheduler(
            time_attr="iteration",
            metric=scheduler.metric,
            mode=mode,
            max_t=10**9,  # trials end by themselves (iterations); ASHA only cuts them
            grace_period=scheduler.grace_period,
            reduction_factor=scheduler.reduction_factor,
        )
    return MedianStoppingRule(
        time_attr="iteration",
        metric=scheduler.metric,
        mode=mode,
        grace_period=scheduler.grace_period,
        min_samples_required=scheduler.min_samples_required,
    )


def _tune_trainable(config: dict[str, Any], jobs: dict[str, TrialJob]) -> None:
    """What a Tune worker runs: the trial named by ``config["trial"]``."""
    from ray import tune

    run_trial(jobs[config["trial"]], tune.report)


def _progress_callback(
    space: SearchSpace, folder: SweepFolder, trials: Sequence[Trial], say: Callable[[str], None]
) -> Any:
    """A Tune callback that prints one line when a trial starts, ends or fails, and marks a trial the scheduler
    stopped (its worker ends before it can say so)."""
    from ray.tune import Callback

    from verlog.sweep.results import trial_result

    by_id = {t.id: t for t in trials}

    class ProgressLines(Callback):
        def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
            trial_id = trial.config["trial"]
            say(f"[sweep] trial {trial_id} started: {describe_params(by_id[trial_id].params)}")

        def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
            trial_id = trial.config["trial"]
            if space.scheduler is not None and read_json(folder.result_file(trial_id)) is None:
                write_json(folder.result_file(trial_id), {"status": "stopped", "note": STOPPED_NOTE})
            self._ended(trial_id)

        def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
            self._ended(trial.config["trial"])

        def _ended(self, trial_id: str) -> None:
            r = trial_result(folder, space, by_id[trial_id])
            outcome = "no value" if r.outcome is None else f"{r.outcome:.3f}"
            minutes = "" if r.wall_time_s is None else f" after {r.wall_time_s / 60:.1f} min"
            note = f" ({r.note})" if r.note else ""
            say(f"[sweep] trial {trial_id} {r.status}{minutes}: {space.objective.metric} {outcome}{note}")

    return ProgressLines()


def run_sweep(
    space: SearchSpace,
    trials: Sequence[Trial],
    jobs: dict[str, TrialJob],
    folder: SweepFolder,
    *,
    parallel: int,
    say: Callable[[str], None] = print,
) -> None:
    """Run ``jobs`` (one per trial of ``trials``) on Ray Tune, ``parallel`` at a time, resuming ``folder``'s Tune
    experiment when it has one; returns when every trial has ended (or the sweep was interrupted)."""
    import ray
    from ray import tune

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")  # Tune's new console output prints a banner even when silent
    logging.getLogger("ray.tune").setLevel(logging.ERROR)
    ray.init(
        num_cpus=parallel,
        num_gpus=0,
        include_dashboard=False,
        object_store_memory=TUNE_OBJECT_STORE_BYTES,
        log_to_driver=False,
        logging_level=logging.WARNING,
    )
    try:
        trainable = tune.with_resources(tune.with_parameters(_tune_trainable, jobs=jobs), {"cpu": 1})
        callback = _progress_callback(space, folder, trials, say)
        path = folder.tune_dir.absolute()
        if tune.Tuner.can_restore(str(path)):
            tuner = tune.Tuner.restore(str(path), trainable, resume_unfinished=True, resume_errored=True)
        else:
            shutil.rmtree(path, ignore_errors=True)  # an experiment killed before Tune saved its state
            tuner = tune.Tuner(
                trainable,
                param_space={"trial": tune.grid_search([t.id for t in trials])},
                tune_config=tune.TuneConfig(
                    scheduler=tune_scheduler(space.scheduler, space.objective.mode),
                    trial_name_creator=lambda t: str(t.config["trial"]),
                    trial_dirname_creator=lambda t: str(t.config["trial"]),
                ),
                run_config=tune.RunConfig(
                    name=path.name,
                    storage_path=str(path.parent),
                    verbose=0,
                    callbacks=[callback],
                    failure_config=tune.FailureConfig(max_failures=0),
                ),
            )
        tuner.fit()
    finally:
        ray.shutdown()
    sys.stdout.flush()
