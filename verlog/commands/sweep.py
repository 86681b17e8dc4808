"""``verlog sweep SPACE.yaml --out DIR`` and ``verlog sweep report DIR``: hyperparameter sweeps (docs/sweeps.md).

``verlog sweep SPACE.yaml --out DIR`` samples the space's trials, checks the space and every trial as ``verlog train
--dry-run`` does, then runs each trial as ``verlog train`` (and ``verlog eval`` with an ``eval:`` section) on Ray
Tune, ``--parallel`` at a time, and prints the summary table (also DIR/summary.md). Run again with the same space and
folder, it resumes: finished trials stay as they are, the others run. ``--dry-run`` prints the trials and their
commands and starts nothing. ``verlog sweep report DIR`` writes the statistical diagnosis (DIR/report/report.md and
its plots, or ``--out``).

Bad input (a malformed space, an unknown key, an empty range, a trial verlog train would refuse, a folder holding
another space's sweep) is refused before anything starts: one line, exit code 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from verlog.commands.common import UsageError, int_at_least

if TYPE_CHECKING:
    from verlog.sweep.checks import CheckedTrial
    from verlog.sweep.folder import SweepFolder
    from verlog.sweep.space import SearchSpace


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.usage = (
        "verlog sweep SPACE.yaml --out DIR [--dry-run] [--parallel N]\n"
        "       verlog sweep report DIR [--out FOLDER] [--resamples B] [--seed S]"
    )
    parser.add_argument(
        "target", nargs="+", metavar="SPACE.yaml | report DIR", help="the search space, or `report` and a sweep folder"
    )
    parser.add_argument("--out", default=None, help="the sweep folder (a sweep); the report's folder (report)")
    parser.add_argument(
        "--dry-run", action="store_true", help="print the trials and their commands after checking them; start nothing"
    )
    parser.add_argument(
        "--parallel",
        type=int_at_least(1, " (trials at once)"),
        default=None,
        help="trials run at once (default: the space's parallel, 1 if unset); each trial's verlog train uses its own "
        "CPU ranks, so on a 2-core machine keep 1",
    )
    parser.add_argument(
        "--resamples",
        type=int_at_least(100, " (bootstrap resamples)"),
        default=2000,
        help="report: bootstrap resamples and permutations (default 2000)",
    )
    parser.add_argument("--seed", type=int_at_least(0), default=0, help="report: seed of the resampling (default 0)")
    return parser


def run(args: argparse.Namespace) -> int:
    from verlog.errors import VerlogError

    target = list(args.target)
    try:
        if target[0] == "report":
            if len(target) != 2:
                raise UsageError("report takes one sweep folder: verlog sweep report DIR")
            return _report(args, target[1])
        if len(target) != 1:
            raise UsageError(
                f"one search space expected, got {' '.join(target)}; write verlog sweep SPACE.yaml --out DIR, or "
                "verlog sweep report DIR"
            )
        return _sweep(args, target[0])
    except UsageError:
        raise
    except VerlogError as exc:
        raise UsageError(str(exc)) from None


def _report(args: argparse.Namespace, root: str) -> int:
    from verlog.sweep.report import build_report, write_report

    report = build_report(root, n_resamples=args.resamples, seed=args.seed)
    out = Path(args.out) if args.out else Path(root) / "report"
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {str(out)!r} is a file, not a folder: give the folder to write the report into")
    path = write_report(report, out)
    scored = len(report.scored)
    print(f"[sweep] report of {len(report.results)} trials ({scored} with an outcome) written to {path}")
    if report.recommended:
        from verlog.sweep.space import describe_params

        print(f"[sweep] recommended: {describe_params(report.recommended)}")
    return 0


def _sweep(args: argparse.Namespace, space_path: str) -> int:
    from verlog.sweep.checks import (
        check_metric_names,
        check_space_keys,
        check_trial_count,
        check_trials,
        import_space_modules,
    )
    from verlog.sweep.folder import check_folder, read_json, read_sweep
    from verlog.sweep.space import sample_trials
    from verlog.sweep.space_file import load_space

    if args.out is None:
        raise UsageError(
            "--out is missing: give the folder to write the sweep into (verlog sweep SPACE.yaml --out DIR)"
        )
    space = load_space(space_path)
    parallel = args.parallel or space.parallel
    folder, resumed = check_folder(args.out, space)
    if resumed:
        started_in = (read_json(folder.sweep_file) or {}).get("cwd")
        if started_in and Path(started_in).resolve() != Path.cwd().resolve():
            raise UsageError(
                f"the sweep in {args.out} was started in {started_in}, where its relative paths point; run this "
                "command from there"
            )
    check_metric_names(space)
    check_trial_count(space)
    import_space_modules(space)
    check_space_keys(space)
    # a resumed sweep runs the trials its folder lists, as they were drawn (docs/sweeps.md, "The trials")
    trials = read_sweep(folder.root)[2] if resumed else sample_trials(space)
    run_dirs = {t.id: folder.run_dir(t.id) for t in trials}
    checked = check_trials(space, trials, run_dirs, say=lambda line: print(line, file=sys.stderr, flush=True))
    if args.dry_run:
        print(_dry_run_text(space, checked, folder, resumed, parallel), flush=True)
        return 0
    return _run(space, space_path, checked, folder, resumed, parallel)


def _dry_run_text(
    space: SearchSpace, checked: Sequence[CheckedTrial], folder: SweepFolder, resumed: bool, parallel: int
) -> str:
    from verlog.sweep.results import status_counts, trial_results
    from verlog.sweep.space import format_value

    keys = [p.key for p in space.params]
    where = f"{folder.root} (new)"
    if resumed:
        counts = status_counts(trial_results(folder, space, [c.trial for c in checked]))
        where = f"{folder.root} (resumes it: " + ", ".join(f"{n} {s}" for s, n in counts.items()) + ")"
    scheduler = "none (every trial runs to its end)"
    if space.scheduler is not None:
        scheduler = f"{space.scheduler.kind} on {space.scheduler.metric}, grace period {space.scheduler.grace_period}"
    lines = [
        "# verlog sweep --dry-run: nothing was started",
        f"# search space: {space.source} (fingerprint {space.fingerprint()}), {space.method} sampling, "
        f"{len(checked)} trials",
        f"# objective: {space.objective.metric} ({space.objective.mode}); early stopping: {scheduler}",
        f"# folder: {where}; {parallel} trial(s) at once",
        "# every trial passes verlog train's checks (as verlog train --dry-run)"
        + ("; each then runs verlog eval" if space.eval else ""),
        "",
        "\t".join(["trial", *keys, *(["seed"] if space.seeds is not None else [])]),
    ]
    for c in checked:
        values = [format_value(c.trial.params[k]) if k in c.trial.params else "-" for k in keys]
        lines.append("\t".join([c.trial.id, *values, *([str(c.trial.seed)] if space.seeds is not None else [])]))
    lines += ["", "# each trial's command (run by hand, it trains that trial alone):"]
    lines += [f"# {c.trial.id}: {c.command}" for c in checked]
    return "\n".join(lines)


def _run(
    space: SearchSpace,
    space_path: str,
    checked: Sequence[CheckedTrial],
    folder: SweepFolder,
    resumed: bool,
    parallel: int,
) -> int:
    from verlog.sweep.folder import create_folder
    from verlog.sweep.results import status_counts, summary_table, trial_results
    from verlog.sweep.runner import build_jobs, run_sweep, write_trial_files

    trials = [c.trial for c in checked]
    if resumed:
        counts = status_counts(trial_results(folder, space, trials))
        print(f"[sweep] resuming {folder.root}: " + ", ".join(f"{n} {s}" for s, n in counts.items()), flush=True)
    else:
        create_folder(folder, space, trials, Path(space_path).read_text(encoding="utf-8"))
        print(f"[sweep] {len(trials)} trials into {folder.root}, {parallel} at a time", flush=True)
    write_trial_files(folder, space, checked)
    jobs = build_jobs(space, checked, folder, os.getcwd(), dict(os.environ))
    run_sweep(space, trials, jobs, folder, parallel=parallel, say=lambda line: print(line, flush=True))
    results = trial_results(folder, space, trials)
    table = summary_table(space, results)
    (folder.root / "summary.md").write_text(table + "\n", encoding="utf-8")
    print(table)
    counts = status_counts(results)
    print(
        "[sweep] " + ", ".join(f"{n} {s}" for s, n in counts.items()) + f"; report: verlog sweep report {folder.root}"
    )
    left = sum(n for s, n in counts.items() if s in ("failed", "unfinished", "pending"))
    if left:
        print(
            f"[sweep] {left} trial(s) did not finish: run the same command again to resume (finished trials stay)",
            file=sys.stderr,
        )
        return 1
    return 0
