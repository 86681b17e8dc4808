"""``verlog report``: write a CPU recipe's results page (docs/results/) from its run folder (verlog/reports/).

The recipes run it as their last stage; rerun it by hand to refresh a page::

    verlog report learning outputs/learn-babyai --out docs/results/babyai-goto.md   # + _curve.png and .json
    verlog report self-improve outputs/self-improve-babyai --out docs/results/self-improve.md   # + .json
    verlog report curriculum outputs/curriculum-toy --out docs/results/curriculum.md
    verlog report learning RUN --check-start sft --start-bound 0.5   # the learning recipes' start-model checks
    verlog report learning RUN --pick-start --start-bound 0.5
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

KINDS = {
    "learning": "PPO against its start model (recipes/cpu/learn_babyai.sh, learn_babaisai.sh, learn_crafter.sh)",
    "self-improve": "rounds of SFT on the model's own successes (recipes/cpu/self_improve_babyai.sh)",
    "curriculum": "SEC against uniform task sampling (recipes/cpu/curriculum_toy.sh)",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from verlog.commands.common import float_in, int_at_least

    kinds = parser.add_subparsers(dest="kind", metavar="KIND", required=True)
    for kind, help_text in KINDS.items():
        sub = kinds.add_parser(kind, help=help_text, description=f"the results page of {help_text}")
        sub.add_argument("run_dir", metavar="RUN_DIR", help="the recipe's run folder (its OUTPUT_DIR)")
        sub.add_argument("--out", metavar="PAGE.md", help="the markdown to write (the JSON and the plot go next to it)")
        if kind == "curriculum":
            continue
        resamples = int_at_least(1, " (bootstrap resamples)")
        sub.add_argument("--bootstrap-resamples", type=resamples, default=10_000, help="resamples of every interval")
        sub.add_argument("--bootstrap-seed", type=int, default=0, help="seed of the bootstrap resampling")
    learning = kinds.choices["learning"]
    learning.add_argument(
        "--check-start",
        metavar="EVAL",
        help="only check that the start model's evaluation (the run folder's eval_EVAL) has a success rate of at "
        "most --start-bound; exit 2 with one line when it is above",
    )
    learning.add_argument(
        "--pick-start",
        action="store_true",
        help="only choose the start model from the SFT-length scan (the run folder's scan/step_N evaluations): the "
        "longest SFT below --start-bound with 95%% confidence, copied to scan/model; exit 2 with one line when none is",
    )
    learning.add_argument(
        "--start-bound", type=float_in(0.0, 1.0), default=0.5, help="the bound of --check-start and --pick-start"
    )


def run(args: argparse.Namespace) -> int:
    from verlog.commands.common import UsageError
    from verlog.errors import VerlogError

    run_dir = Path(args.run_dir)
    if not run_dir.is_dir():
        raise UsageError(f"run folder {str(run_dir)!r} does not exist: give the OUTPUT_DIR of a {args.kind} recipe run")
    if args.kind == "learning" and (args.check_start or args.pick_start):
        return _start_model(args)
    if not args.out:
        raise UsageError(f"--out is missing: give the markdown page to write, e.g. --out docs/results/{args.kind}.md")
    out = Path(args.out)
    _check_out(out)
    try:
        return _write(args, run_dir, out)
    except (VerlogError, ValueError, OSError) as exc:  # a run folder's file that cannot be read as the recipe writes
        raise UsageError(str(exc)) from None


def _check_out(out: Path) -> None:
    from verlog.commands.common import UsageError
    from verlog.run.output_folder import creation_problem

    problem = creation_problem(out.parent) or (f"{out} is a folder" if out.is_dir() else None)
    if problem is not None:
        raise UsageError(f"--out {str(out)!r} cannot be written: {problem}: give the path of a markdown file")


def _start_model(args: argparse.Namespace) -> int:
    """``--check-start`` / ``--pick-start``: 0 within the bound, 2 (one line) above it, 1 without an evaluation."""
    from verlog.commands.common import UsageError
    from verlog.reports.learning import check_start, pick_start

    if args.check_start and args.pick_start:
        raise UsageError("--check-start and --pick-start do not go together: give one")
    if args.check_start:
        return check_start(args.run_dir, args.check_start, args.start_bound)
    return pick_start(args.run_dir, args.start_bound)


def _write(args: argparse.Namespace, run_dir: Path, out: Path) -> int:
    """Write the page of ``args.kind`` (and its JSON, and the learning curve), print it and where it went."""
    if args.kind == "learning":
        from verlog.reports.learning import write_results

        md, png = write_results(run_dir, out, n_resamples=args.bootstrap_resamples, seed=args.bootstrap_seed)
        print(md.read_text(encoding="utf-8"))
        curve = f" and {png}" if png else " (no PPO rollout episode has ended yet: no learning curve)"
        print(f"[learning] wrote {md}{curve}")
        return 0
    if args.kind == "self-improve":
        from verlog.reports import self_improve

        results = self_improve.collect(run_dir, n_resamples=args.bootstrap_resamples, seed=args.bootstrap_seed)
        text = self_improve.render_markdown(results)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")
        out.with_suffix(".json").write_text(json.dumps(self_improve.as_dict(results), indent=2) + "\n", "utf-8")
        print(text)
        print(f"[self-improve] wrote {out} and {out.with_suffix('.json')}")
        return 0
    from verlog.reports.curriculum import render

    text = render(run_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    print(text)
    print(f"[curriculum] wrote {out}")
    return 0
