"""``verlog train [key=value ...]`` (= ``python -m verlog.train``): multi-turn PPO through verl.

The config is composed with Hydra from configs/ (installed with the package as verlog/configs/; see configs/train.yaml):
``env=babyai_goto iterations=10 rollout.num_slots=8 output_dir=runs/x``; a misspelt key is an error.
``--config-dir DIR`` adds a folder of configs of one's own (``DIR/env/my_env.yaml`` is then ``env=my_env``), or
replaces verlog's configs when it holds the root config; ``--config-name NAME`` picks another root.
``--import MODULE`` imports a module that registers envs of one's own (the current folder is importable).

Before anything starts (no Ray, no model) the config is typed and checked (verlog.config.preflight): every bad
setting is reported at once, each with its fix, exit code 2. A fresh run (``checkpoint.resume=disable``, or ``auto``
with no checkpoint to resume) refuses an ``output_dir`` that holds another run's outputs unless ``--overwrite`` is
given.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from verlog.commands.common import EXIT_FAULT, EXIT_USAGE


def resume_hint(cfg: object) -> str:
    """How to go on after a fault: the run's last complete checkpoint, if any."""
    from verlog.run.folder import RunFolder

    out = getattr(cfg, "output_dir", None)
    step = RunFolder(out).latest_step() if out else None
    if step is None:
        return "no checkpoint was saved, so start the run again (--overwrite replaces its outputs)"
    return f"resume from the last complete checkpoint (iteration {step}) with checkpoint.resume=auto"


def log_note(exc: BaseException) -> str:
    """`` (full log: PATH)`` for an error raised while the run's log was being written (:func:`train_quietly` marks
    it), else ''."""
    log = getattr(exc, "verlog_log", None)
    return f" (full log: {log})" if log else ""


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    from verlog.commands.common import add_import_argument
    from verlog.config.compose import DEFAULT_CONFIG_DIR

    parser.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. iterations=10 rollout.num_slots=8")
    parser.add_argument(
        "--config-dir",
        default=None,
        help="a folder of configs of your own: DIR/env/NAME.yaml is then env=NAME (verlog's configs stay the "
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
        "--verbose",
        action="store_true",
        help="show the logs of Ray's workers, verl and vLLM on the terminal (by default they go to "
        "OUTPUT_DIR/logs/train.log and the terminal shows verlog's own lines)",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="start a fresh run in an output_dir that holds another run: its outputs (metrics.jsonl, rollout.jsonl, "
        "checkpoints/, tapes/, eval/, config.yaml, ...) are deleted first",
    )
    add_import_argument(parser)
    return parser


def run(args: argparse.Namespace) -> int:
    """Compose, check (every problem at once), then dry-run or train; 2 on a bad config, 0 after training."""
    from omegaconf import OmegaConf

    from verlog.commands.common import import_user_modules
    from verlog.config.compose import load_config, moved_config_note, moved_config_path
    from verlog.config.preflight import check_output_dir, preflight
    from verlog.errors import RunFault, VerlogError
    from verlog.run.folder import RunFolderError, RunLock, check_writable, in_use, lock_holder

    imports = list(getattr(args, "imports", []))
    lock = RunLock(".")  # replaced by the run folder's once the config is known; released on every way out
    cfg = None  # the checked config (resume_hint reads its output_dir)
    moved = moved_config_path(args.config_dir) if args.config_dir is not None else None
    if moved is not None:  # a path typed before the configs moved to configs/ (issue 25)
        print(moved_config_note(args.config_dir, moved), file=sys.stderr, flush=True)
        args.config_dir = str(moved)
    try:
        import_user_modules(imports)  # also makes the current folder importable
        composed = load_config(args.overrides, args.config_dir, args.config_name)
        if args.print_config:
            print(OmegaConf.to_yaml(composed, resolve=True))
            return 0
        cfg = preflight(composed, imports, overwrite=getattr(args, "overwrite", False))
        lock = RunLock(cfg.output_dir)
        if getattr(args, "dry_run", False):
            holder = lock_holder(cfg.output_dir)
            if holder is not None:  # the launch would stop there
                raise RunFolderError(in_use(cfg.output_dir, holder))
            from verlog.trainer.dry_run import describe_run

            shown = [f"--import={m}" for m in imports]  # in the command it prints
            print(describe_run(cfg, [*shown, *args.overrides], args.config_dir, args.config_name), flush=True)
            return 0
        # the run folder's lock (verlog/run/folder.py) before anything in the folder is read for the launch or
        # deleted (--overwrite): a second run into a folder in use stops here, naming the process that holds it
        check_writable(cfg.output_dir)
        took_over = lock.acquire()
        if took_over:
            print(f"[verlog] {took_over}", flush=True)
        removed = check_output_dir(cfg, getattr(args, "overwrite", False))
        if removed:
            print(f"[verlog] --overwrite: removed {', '.join(str(p) for p in removed)}", flush=True)
        train_quietly(cfg, verbose=getattr(args, "verbose", False))
    except RunFault as exc:  # a fault during the run (docs/reliability.md): what died, and how to resume
        print(f"verlog train: error: {exc}; {resume_hint(cfg)}{log_note(exc)}", file=sys.stderr)
        return EXIT_FAULT
    except VerlogError as exc:  # a bad setting, a folder in use; or one verl would fail on later (the verl: section)
        print(f"verlog train: error: {exc}{log_note(exc)}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        lock.release()
    return 0


def train_quietly(cfg: Any, verbose: bool = False) -> None:
    """Train ``cfg`` with the logs of Ray, verl and vLLM in ``OUTPUT_DIR/logs/train.log`` (verlog.console), one line
    naming it; when the run fails, the log's last lines and its path on the terminal (then the error goes on up)."""
    from verlog.console import QuietConsole, say
    from verlog.errors import VerlogError
    from verlog.run.folder import RunFolder
    from verlog.trainer import runner

    log = RunFolder(cfg.output_dir).train_log
    console = QuietConsole(log, verbose=verbose, title=f"verlog train, output_dir {cfg.output_dir}")
    try:
        with console:
            if console.active:
                say(f"[verlog] logs of Ray's workers, verl and vLLM: {log} (--verbose shows them here)")
            runner.train(cfg)
    except VerlogError as exc:  # the command's one line says what happened, and names the log (log_note)
        if not verbose:
            exc.verlog_log = str(log)  # type: ignore[attr-defined]
        raise
    except Exception:
        if not verbose:
            say(f"[verlog] the run failed; the last lines of {log}:", err=True)
            for line in console.tail():
                say(f"    {line[:400]}", err=True)
        raise


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m verlog.train``: the same command as ``verlog train`` (Ctrl-C exits 130 with one line)."""
    from verlog.commands.common import EXIT_INTERRUPTED

    parser = add_arguments(argparse.ArgumentParser(prog="python -m verlog.train", description=__doc__))
    args, extra = parser.parse_known_args(argv)
    if any(e.startswith("-") for e in extra):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.overrides.extend(extra)  # overrides on both sides of an option: a=1 --dry-run b=2
    try:
        return run(args)
    except KeyboardInterrupt:
        print("\nverlog train: interrupted", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
