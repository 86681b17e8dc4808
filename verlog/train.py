"""``python -m verlog.train [key=value ...]``: train with the Hydra configs in ``configs/`` (see configs/train.yaml).

Overrides are Hydra's: ``env=babyai_goto iterations=10 rollout.num_slots=8 output_dir=runs/x``; a misspelt key is an
error. ``--config-dir DIR`` adds a folder of configs of one's own (``DIR/env/my_env.yaml`` is then ``env=my_env``), or
replaces verlog's configs/ when it holds the root config; ``--config-name NAME`` picks another root.
``--import MODULE`` imports a module that registers envs of one's own (the current folder is importable).

Before anything starts (no Ray, no model), a run checks: the overrides, the env (``env.id`` resolves, the env builds
with ``env.kwargs`` and resets) and the output folder: a fresh run (``checkpoint.resume=disable``, or ``auto`` with
no checkpoint to resume) refuses an ``output_dir`` that holds another run's outputs unless ``--overwrite`` is given.
Every refusal is one ``verlog train: error: ...`` line naming the fix, exit code 2.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from omegaconf import DictConfig

DEFAULT_CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"
RUN_OUTPUTS = (
    "metrics.jsonl",
    "rollout.jsonl",
    "checkpoints",
    "tapes",
    "eval",
    "config.yaml",
    "verl_config.yaml",
    "learning_curve.png",
    "view.html",
)
"""What a training run writes into its output_dir (``--overwrite`` removes these, and only these)."""
RUN_DATA = RUN_OUTPUTS[:5]
"""The outputs that mean a run took place there (a run that failed while starting leaves only its config files)."""


def load_config(
    overrides: Sequence[str] = (), config_dir: str | os.PathLike | None = None, config_name: str = "train"
) -> DictConfig:
    """Compose verlog's training config from ``config_dir`` (default: the repository's configs/) with ``overrides``.

    A ``config_dir`` without ``{config_name}.yaml`` is a folder of configs of one's own, searched before verlog's
    configs/ (e.g. ``config_dir/env/my_env.yaml`` is the option ``env=my_env``).
    """
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from verlog.overrides import ConfigKeyError

    folder, extra = DEFAULT_CONFIG_DIR, None
    if config_dir is not None:
        given = Path(config_dir)
        if not given.is_dir():
            raise ConfigKeyError(f"--config-dir {str(config_dir)!r} is not a folder")
        if (given / f"{config_name}.yaml").exists():
            folder = given
        else:
            extra = given.resolve()
    if not (folder / f"{config_name}.yaml").exists():
        raise ConfigKeyError(
            f"no {config_name}.yaml in {folder}: give --config-name of a root config there (e.g. a run's "
            "--config-name config), or leave --config-name out"
        )
    from hydra.errors import ConfigCompositionException, MissingConfigException

    from verlog.overrides import explain_unknown_keys, group_choices, prepare_overrides

    overrides = prepare_overrides(overrides)
    folders = [folder] if extra is None else [extra, folder]
    search = [] if extra is None else [f"hydra.searchpath=[file://{extra}]"]
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(folder.resolve()), version_base=None):
            try:
                return compose(config_name=config_name, overrides=search + list(overrides))
            except (ConfigCompositionException, MissingConfigException) as exc:
                # name the closest valid key / option (Hydra only says "Could not override")
                base = compose(config_name=config_name, overrides=search + group_choices(overrides, folders))
                error = explain_unknown_keys(overrides, base, folders)
                if error is None:
                    raise
                raise error from exc
    finally:
        GlobalHydra.instance().clear()


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="python -m verlog.train", description=__doc__)
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. iterations=10 rollout.num_slots=8")
    parser.add_argument(
        "--config-dir",
        default=None,
        help="a folder of configs of your own: DIR/env/NAME.yaml is then env=NAME (verlog's configs/ stay the "
        f"defaults); a folder holding the root config replaces verlog's ({DEFAULT_CONFIG_DIR})",
    )
    parser.add_argument("--config-name", default="train", help="root config name (default: train)")
    parser.add_argument("--print-config", action="store_true", help="print the composed config and exit")
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="check and print the resolved config, the command and verl's derived keys; start nothing",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="start a fresh run in an output_dir that holds another run: its outputs (metrics.jsonl, rollout.jsonl, "
        "checkpoints/, tapes/, eval/, config.yaml, ...) are deleted first",
    )
    from verlog.commands.common import add_import_argument

    add_import_argument(parser)
    return parser


def import_env_modules(cfg: DictConfig, modules: Sequence[str]) -> None:
    """Import ``--import`` modules and ``env.imports``; the first are added to ``env.imports`` (so the run's
    config.yaml records them and a resume from it imports them again)."""
    from omegaconf import open_dict

    from verlog.commands.common import import_user_modules

    listed = [str(m) for m in (cfg.env.get("imports") or [])]
    import_user_modules(listed, "env.imports")
    if modules:
        with open_dict(cfg):
            cfg.env.imports = listed + [m for m in modules if m not in listed]


def check_env(cfg: DictConfig) -> None:
    """``env.id`` resolves and the env builds with ``env.kwargs`` and resets (in this process), or UsageError."""
    from omegaconf import OmegaConf

    from verlog.commands.common import UsageError, build_env, check_env_id

    env_id = OmegaConf.select(cfg, "env.id", default=None)
    if env_id is None or not str(env_id).strip():
        raise UsageError(
            "env.id is not set: give env.id=<a registered id (`verlog envs`), or package.module:factory>; an id your "
            "module registers also needs --import MODULE"
        )
    env_id = str(env_id)
    check_env_id(env_id, "env.id")
    kwargs = cfg.env.get("kwargs")
    kwargs = dict(OmegaConf.to_container(kwargs, resolve=True)) if kwargs is not None else {}
    try:
        build_env(env_id, kwargs, "env.kwargs", seed=int(cfg.seed)).close()
    except UsageError as exc:
        bad = re.search(r"takes no keyword argument '(\w+)'", str(exc))
        if bad is None:
            raise
        raise UsageError(
            f"{exc} The env config (env.name={cfg.env.get('name')}) sets env.kwargs {sorted(kwargs)}: drop this "
            f"one with ~env.kwargs.{bad.group(1)}, or for an env of your own start from env=custom (no kwargs but "
            "the ones you add: +env.kwargs.NAME=VALUE) or an env config of your own (--config-dir DIR with "
            "DIR/env/NAME.yaml)"
        ) from None


def check_output_dir(cfg: DictConfig, overwrite: bool = False) -> list[Path]:
    """Refuse a fresh run into an ``output_dir`` that holds another run's outputs (or, with ``overwrite``, delete
    those outputs first; returns what was deleted).

    A run is fresh with ``checkpoint.resume=disable``, or ``auto`` when ``output_dir`` has no checkpoint to resume.
    """
    import shutil

    from verlog.commands.common import UsageError

    out = Path(str(cfg.output_dir))
    resume = str(cfg.checkpoint.resume)
    if out.exists() and not out.is_dir():
        raise UsageError(f"output_dir={out} is a file, not a folder: give a folder for the run's outputs")
    latest = out / "checkpoints" / "latest_checkpointed_iteration.txt"
    if resume not in ("auto", "disable"):
        if overwrite:
            raise UsageError(
                f"--overwrite starts a fresh run and deletes output_dir's checkpoints; it does not go with "
                f"checkpoint.resume={resume}: drop one of them"
            )
        return []
    found = [out / name for name in RUN_DATA if (out / name).exists()]
    if not found or (resume == "auto" and latest.is_file() and not overwrite):
        return []
    if overwrite:
        found = [out / name for name in RUN_OUTPUTS if (out / name).exists()]
        for path in found:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
        return found
    names = ", ".join(p.name for p in found)
    if resume == "disable":
        why = "checkpoint.resume=disable starts a fresh run, which would mix its outputs into that run's"
        if latest.is_file():
            why += (
                f"; to continue that run (its checkpoints reach iteration {latest.read_text().strip()}), use "
                "checkpoint.resume=auto"
            )
    else:
        why = "it has no checkpoint for checkpoint.resume=auto to continue, so a fresh run would mix its outputs in"
    raise UsageError(
        f"output_dir={out} holds another run ({names}); {why}. To start clean: a new output_dir=..., or --overwrite "
        "(deletes that run's outputs first). Nothing was started."
    )


def run(args: argparse.Namespace) -> int:
    from omegaconf import OmegaConf

    from verlog.commands.common import import_user_modules
    from verlog.errors import VerlogError

    try:
        import_user_modules(getattr(args, "imports", []))  # also makes the current folder importable
        cfg = load_config(args.overrides, args.config_dir, args.config_name)
        if args.print_config:
            print(OmegaConf.to_yaml(cfg, resolve=True))
            return 0
        import_env_modules(cfg, getattr(args, "imports", []))
        check_env(cfg)
        if getattr(args, "dry_run", False):
            from verlog.dry_run import describe_run

            imports = [f"--import={m}" for m in getattr(args, "imports", [])]  # in the command it prints
            print(describe_run(cfg, [*imports, *args.overrides], args.config_dir, args.config_name), flush=True)
            return 0
        removed = check_output_dir(cfg, getattr(args, "overwrite", False))
        if removed:
            print(f"[verlog] --overwrite: removed {', '.join(str(p) for p in removed)}", flush=True)
    except VerlogError as exc:
        print(f"verlog train: error: {exc}", file=sys.stderr)
        return 2
    from verlog.trainer.config import TrainConfigError
    from verlog.trainer.runner import train

    try:
        train(cfg)
    except TrainConfigError as exc:  # a setting verl would fail on later: the message names it and the fix
        print(f"verlog train: error: {exc}", file=sys.stderr)
        return 2
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if any(e.startswith("-") for e in extra):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.overrides.extend(extra)  # overrides on both sides of an option: a=1 --dry-run b=2
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
