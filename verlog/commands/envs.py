"""``verlog envs``: list the registered environment ids (``--import MODULE`` adds the ids your module registers).

Every id listed on stdout plays as it is listed: ``verlog play ID``, ``verlog eval --tasks ID``, ``env.id=ID``. The ids
that build only with keyword arguments (the wrappers ``slow`` and ``multitask``, an env of your own whose factory has
parameters without defaults) are named after them on stderr, each with what it needs
(:func:`envs.registry.needed_arguments`).
"""

from __future__ import annotations

import argparse
import sys

from verlog.commands.common import UsageError, add_import_argument, import_user_modules


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--prefix", default="", help="only ids starting with this, e.g. babyai/")
    add_import_argument(parser)


def run(args: argparse.Namespace) -> int:
    from envs import registry

    import_user_modules(args.imports)
    ids = registry.list_envs()
    matching = [env_id for env_id in ids if env_id.startswith(args.prefix)]
    if not matching:
        families = sorted({env_id.partition("/")[0] + "/" for env_id in ids if "/" in env_id})
        raise UsageError(
            f"no env id starts with {args.prefix!r}; the families are {', '.join(families)} (an env of your own "
            "shows up with --import MODULE, the module that registers it)"
        )
    needs = {env_id: registry.needed_arguments(env_id) for env_id in matching}
    for env_id in matching:
        if needs[env_id] is None:
            print(env_id)
    others = [f"{env_id} needs {why}" for env_id, why in needs.items() if why is not None]
    if others:
        sys.stdout.flush()
        print(
            "verlog envs: not listed above, as they build only with keyword arguments: " + "; ".join(others),
            file=sys.stderr,
            flush=True,
        )
    return 0
