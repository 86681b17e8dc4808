"""``verlog view``: write one self-contained HTML page of a training run or an evaluation (docs/viewer.md).

Example::

    verlog view outputs/verlog-train                 # -> outputs/verlog-train/view.html
    verlog view runs/goto --out /tmp/goto.html --max-episodes 100
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from verlog.commands.common import int_at_least
    from verlog.viewer.build import DEFAULT_MAX_EPISODES

    parser.add_argument(
        "run_dir", metavar="RUN_DIR", help="a `verlog train` output_dir or a `verlog eval --out` folder"
    )
    parser.add_argument("--out", default=None, help="the HTML file to write (default: RUN_DIR/view.html)")
    parser.add_argument(
        "--max-episodes",
        type=int_at_least(0),
        default=DEFAULT_MAX_EPISODES,
        help=f"embed the turns of at most this many episodes, evenly spaced (default {DEFAULT_MAX_EPISODES})",
    )
    parser.add_argument("--no-frames", action="store_true", help="leave the env frames out (a smaller file)")


def run(args: argparse.Namespace) -> int:
    from verlog.commands.common import UsageError
    from verlog.run.output_folder import creation_problem
    from verlog.viewer import ViewError, build_view

    if args.out is not None:
        folder = Path(args.out).parent
        problem = creation_problem(folder)
        if problem is not None or Path(args.out).is_dir():
            why = problem if problem is not None else f"{args.out} is a folder"
            raise UsageError(f"--out {args.out!r} cannot be written: {why}: give the path of an HTML file")
    try:
        result = build_view(args.run_dir, args.out, max_episodes=args.max_episodes, frames=not args.no_frames)
    except ViewError as exc:
        raise UsageError(str(exc)) from None
    for warning in result.warnings:  # a torn last line: the page says so too, the console must not stay silent
        print(f"verlog view: warning: {warning}", file=sys.stderr, flush=True)
    size = result.bytes / 1024
    print(
        f"wrote {result.path} ({size:,.0f} KiB: {result.episodes} episodes, turns of {result.embedded} embedded, "
        f"{result.turns} turns read, {result.seconds:.1f} s); open it in a browser (file://{result.path.resolve()})"
    )
    return 0
