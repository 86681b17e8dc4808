"""``verlog envs``: list the registered environment ids."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--prefix", default="", help="only ids starting with this, e.g. babyai/")


def run(args: argparse.Namespace) -> int:
    import envs

    for env_id in envs.list_envs():
        if env_id.startswith(args.prefix):
            print(env_id)
    return 0
