"""``verlog sft [CONFIG.yaml] [key=value ...]``: the SFT warm start with verl's SFT trainer (verlog.sft)."""

from __future__ import annotations

import argparse
import shlex
import sys

EXAMPLE = "verlog sft configs/sft/cpu.yaml data.train=outputs/demos/babyai-goto"
"""A whole ``verlog sft`` command line (configs/sft/cpu.yaml's own example), named when no config is given."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(  # dest "overrides": verlog.cli.main adds key=value pairs given after an option to it
        "overrides",
        nargs="*",
        metavar="CONFIG_OR_OVERRIDE",
        help="an SFT YAML config (e.g. configs/sft/cpu.yaml), then key=value overrides (e.g. train.steps=20 "
        "data.train=outputs/demos/goto; data.train may also be tapes: a run's or an evaluation's folder, a "
        "`verlog play --record` folder, with data.tapes.* filters); docs/sft.md lists the keys",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="check the data (tapes are converted into <output_dir>/data), print the torchrun command, stop",
    )
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="show verl's SFT trainer output on the terminal (by default it goes to <output_dir>/logs/sft.log)",
    )


def run(args: argparse.Namespace) -> int:
    from verlog.commands.common import UsageError
    from verlog.config.compose import moved_config_note, moved_config_path
    from verlog.sft import SFTConfigError, SFTDataError, SFTRunError, load_config, run_sft

    items = list(args.overrides)  # `verlog sft CONFIG --dry-run k=v`: the k=v after the option are here too
    if not items:
        raise UsageError(
            "no SFT config and no settings given: verlog sft needs an SFT YAML (the model, the data, the training "
            f"length), then key=value overrides, e.g. {EXAMPLE}; docs/sft.md lists the keys"
        )
    path = items.pop(0) if "=" not in items[0] else None
    bad = [item for item in items if "=" not in item]
    if bad:
        raise UsageError(
            f"{bad[0]!r} is not key=value; only the first argument may be a config file, the others are overrides "
            "such as train.steps=20"
        )
    moved = moved_config_path(path) if path is not None else None
    if moved is not None:  # a path typed before the configs moved to configs/ (issue 25)
        print(moved_config_note(path, moved), file=sys.stderr, flush=True)
        path = str(moved)
    try:
        config = load_config(path, items)
        result = run_sft(config, dry_run=args.dry_run, verbose=getattr(args, "verbose", False))
    except (SFTConfigError, SFTDataError) as exc:  # a bad input, found before anything was launched
        raise UsageError(str(exc)) from None
    except SFTRunError as exc:  # verl's trainer failed: not an input the command could check
        print(f"verlog sft: error: {exc}", file=sys.stderr)
        return 1
    if isinstance(result, list):
        print(shlex.join(result))
        return 0
    last = f"{result.losses[-1]:.4f}" if result.losses else "n/a"
    first = f"{result.losses[0]:.4f}" if result.losses else "n/a"
    print(f"[verlog sft] {result.steps} steps, train/loss {first} -> {last}, model: {result.model_dir}")
    return 0
