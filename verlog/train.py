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
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(folder.resolve()), version_base=None):
            return compose(config_name=config_name, overrides=list(overrides))
    finally:
        GlobalHydra.instance().clear()


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="python -m verlog.train", description=__doc__)
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. iterations=10 rollout.num_slots=8")
    parser.add_argument("--config-dir", default=None, help=f"config folder (default: {DEFAULT_CONFIG_DIR})")
    parser.add_argument("--config-name", default="train", help="root config name (default: train)")
    parser.add_argument("--print-config", action="store_true", help="print the composed config and exit")
    return parser


def run(args: argparse.Namespace) -> int:
    from omegaconf import OmegaConf

    cfg = load_config(args.overrides, args.config_dir, args.config_name)
    if args.print_config:
        print(OmegaConf.to_yaml(cfg, resolve=True))
        return 0
    from verlog.trainer.runner import train

    train(cfg)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
