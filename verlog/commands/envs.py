"""``verlog envs``: list the registered environment ids (``--import MODULE`` adds the ids your module registers)."""

from __future__ import annotations

import argparse

from verlog.commands.common import UsageError, add_import_argument, import_user_modules


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--prefix", default="", help="only ids starting with this, e.g. babyai/")
    add_import_argument(parser)


def run(args: argparse.Namespace) -> int:
    import envs

    import_user_modules(args.imports)
    ids = envs.list_envs()
    shown = [env_id for env_id in ids if env_id.startswith(args.prefix)]
    if not shown:
        families = sorted({env_id.partition("/")[0] + "/" for env_id in ids})
        raise UsageError(
            f"no env id starts with {args.prefix!r}; the families are {', '.join(families)} (an env of your own "
            "shows up with --import MODULE, the module that registers it)"
        )
    for env_id in shown:
        print(env_id)
    return 0
