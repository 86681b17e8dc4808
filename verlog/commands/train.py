"""``verlog train [key=value ...]``: multi-turn PPO through verl with the Hydra configs in configs/."""

from __future__ import annotations

import argparse

from verlog import train as train_module


def add_arguments(parser: argparse.ArgumentParser) -> None:
    train_module.build_parser(parser)


def run(args: argparse.Namespace) -> int:
    return train_module.run(args)
