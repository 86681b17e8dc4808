"""``python -m verlog.train [key=value ...]``: train with the Hydra configs in ``configs/`` (see configs/train.yaml).

Overrides are Hydra's: ``env=babyai_goto iterations=10 rollout.num_slots=8 output_dir=runs/x``; a misspelt key is an
error. Pass ``--config-dir DIR`` to compose from another config folder and ``--config-name NAME`` for another root.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from omegaconf import DictConfig

DEFAULT_CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"


def load_config(
    overrides: Sequence[str] = (), config_dir: str | os.PathLike | None = None, config_name: str = "train"
) -> DictConfig:
    """Compose verlog's training config from ``config_dir`` (default: the repository's configs/) with ``overrides``."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    folder = Path(config_dir) if config_dir is not None else DEFAULT_CONFIG_DIR
    if not (folder / f"{config_name}.yaml").exists():
        raise FileNotFoundError(f"no {config_name}.yaml in {folder}; pass --config-dir with verlog's configs/ folder")
    from hydra.errors import ConfigCompositionException, MissingConfigException

    from verlog.overrides import explain_unknown_keys, group_choices, prepare_overrides

    overrides = prepare_overrides(overrides)
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(folder.resolve()), version_base=None):
            try:
                return compose(config_name=config_name, overrides=list(overrides))
            except (ConfigCompositionException, MissingConfigException) as exc:
                # name the closest valid key / option (Hydra only says "Could not override")
                base = compose(config_name=config_name, overrides=group_choices(overrides, folder))
                error = explain_unknown_keys(overrides, base, folder)
                if error is None:
                    raise
                raise error from exc
    finally:
        GlobalHydra.instance().clear()


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="python -m verlog.train", description=__doc__)
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. iterations=10 rollout.num_slots=8")
    parser.add_argument("--config-dir", default=None, help=f"config folder (default: {DEFAULT_CONFIG_DIR})")
    parser.add_argument("--config-name", default="train", help="root config name (default: train)")
    parser.add_argument("--print-config", action="store_true", help="print the composed config and exit")
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="check and print the resolved config, the command and verl's derived keys; start nothing",
    )
    return parser


def run(args: argparse.Namespace) -> int:
    from omegaconf import OmegaConf

    from verlog.errors import VerlogError

    try:
        cfg = load_config(args.overrides, args.config_dir, args.config_name)
        if getattr(args, "dry_run", False):
            from verlog.dry_run import describe_run

            print(describe_run(cfg, args.overrides, args.config_dir, args.config_name), flush=True)
            return 0
    except VerlogError as exc:
        print(f"verlog train: error: {exc}", file=sys.stderr)
        return 2
    if args.print_config:
        print(OmegaConf.to_yaml(cfg, resolve=True))
        return 0
    from verlog.trainer.config import TrainConfigError
    from verlog.trainer.runner import train

    try:
        train(cfg)
    except TrainConfigError as exc:  # a setting verl would fail on later: the message names it and the fix
        print(f"verlog train: error: {exc}", file=sys.stderr)
        return 2
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
