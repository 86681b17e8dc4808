"""The ``verlog`` console command: ``verlog <subcommand> ...``.

Thin by design: each subcommand lives in ``verlog/commands/<name>.py`` with ``add_arguments(parser)`` and
``run(args) -> int``, imported only when that subcommand runs (so ``verlog --help`` is fast and needs no GPU stack).
"""

from __future__ import annotations

import argparse
import importlib
import os
import runpy
import sys
from collections.abc import Sequence
from typing import NoReturn

from verlog.version import __version__

# name -> (module, one-line help). Add a subcommand by adding a line here and a module in verlog/commands/.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "envs": ("verlog.commands.envs", "list the registered environment ids"),
    "tiny-model": ("verlog.commands.tiny_model", "build a tiny random-weight Qwen2 model for smoke runs"),
    "train": ("verlog.commands.train", "train an LLM agent with multi-turn PPO through verl (Hydra configs)"),
    "play": ("verlog.commands.play", "play a registered env in the terminal: instruction, observation, action"),
    "demos": ("verlog.commands.demos", "record scripted-expert demonstrations as SFT parquet (babyai/*, babaisai/*)"),
    "sft": ("verlog.commands.sft", "supervised warm start on demonstrations with verl's SFT trainer"),
    "eval": ("verlog.commands.eval", "evaluate a model BALROG-style: results table, summary JSON, episode records"),
    "export": ("verlog.commands.export", "a run's policy as a Hugging Face folder (LoRA merged) or a PEFT adapter"),
    "view": ("verlog.commands.view", "one self-contained HTML page of a run: curves, episodes turn by turn"),
    "sweep": ("verlog.commands.sweep", "hyperparameter sweeps of verlog train on Ray Tune, and their diagnosis"),
    "report": ("verlog.commands.report", "a CPU recipe's results page (docs/results/) from its run folder"),
}


class OneLineParser(argparse.ArgumentParser):
    """argparse with its errors on one line, as every bad input of verlog's: ``verlog COMMAND: error: <what>; <the
    fix>`` (argparse prints the usage first), exit code 2; the subcommands' parsers are of this class too."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}; `{self.prog} --help` lists the arguments\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="verlog",
        description="Multi-turn PPO for LLM agents on long-horizon text games (BabyAI, BabaIsAI, Crafter), on verl.",
    )
    parser.add_argument("--version", action="version", version=f"verlog {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in SUBCOMMANDS.items():
        sub_parser = sub.add_parser(name, help=help_text, description=help_text)
        sub_parser.set_defaults(_module=module)
        importlib.import_module(module).add_arguments(sub_parser)
    return parser


def import_envs_package() -> None:
    """Import verlog's ``envs`` package from its own folder, before a folder of the user's can stand in for it.

    A user's own ``envs/`` folder extends verlog's ``envs`` (``--import envs.my_env``; docs/design.md, "The envs
    package name"). Imported by a plain ``import envs``, that folder would be taken for the whole package where
    ``sys.path`` holds its parent: first (``python -m verlog`` puts the current folder there) if it has an
    ``__init__.py``, anywhere if it has none and verlog is an editable install. The loader is the env-pool workers'
    (``envs/pool_spawn.py``, run from its file: importing it would import ``envs`` first).
    """
    if "envs" in sys.modules:
        return
    folder = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "envs")
    loader = os.path.join(folder, "pool_spawn.py")
    if os.path.isfile(loader):
        runpy.run_path(loader, run_name="__envs_loader__")["load_envs_package"](folder)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``verlog`` command; returns the process exit code."""
    import_envs_package()
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and isinstance(getattr(args, "overrides", None), list) and not any(e.startswith("-") for e in extra):
        args.overrides.extend(extra)  # `verlog train a=1 --dry-run b=2`: overrides on both sides of an option
    elif extra:
        name = f"verlog {args.command}" if args.command else "verlog"
        parser.exit(
            2, f"{name}: error: unrecognized arguments: {' '.join(extra)}; `{name} --help` lists the arguments\n"
        )
    if args.command is None:
        parser.print_help()
        return 0
    from verlog.commands.common import EXIT_FAULT, EXIT_INTERRUPTED, UsageError, report
    from verlog.errors import RunFault

    try:
        return int(importlib.import_module(args._module).run(args) or 0)
    except UsageError as exc:  # a bad input, found before anything heavy started: the message names the fix
        return report(args.command, exc)
    except RunFault as exc:  # not a bad input (an engine did not start, a server died): one line, exit 1
        print(f"verlog {args.command}: error: {exc}", file=sys.stderr, flush=True)
        return EXIT_FAULT
    except KeyboardInterrupt:
        print(f"\nverlog {args.command}: interrupted", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
