"""What the ``verlog`` subcommands share: ``--import``, checked argument types, env and folder checks.

Every bad input a subcommand can see is refused before any model or engine loads, with a :class:`UsageError` whose
message names the input and the fix; :func:`verlog.cli.main` prints it as ``verlog COMMAND: error: ...`` and exits
with :data:`EXIT_USAGE` (2), without a traceback. Argument types (:func:`int_at_least`, :func:`seed`,
:func:`seed_list`) fail inside argparse, which also exits with 2. docs/errors.md lists each case and its test.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from verlog.errors import VerlogError
from verlog.run.output_folder import creation_problem

EXIT_USAGE = 2
"""Exit code of every refused input (argparse's too)."""
EXIT_FAULT = 1
"""Exit code of a fault during the work (an inference server died or did not start, a checkpoint could not be
written): not a bad input (docs/reliability.md)."""
EXIT_INTERRUPTED = 130
"""Exit code after Ctrl-C (128 + SIGINT, the shell's convention)."""
MAX_SEED = 2**32 - 1
"""Largest seed every built-in env accepts (NumPy's legacy seeding range)."""


class UsageError(VerlogError, ValueError):
    """A bad command-line input: the message names it and the fix; the command exits with 2."""


def report(command: str, exc: BaseException) -> int:
    """Print ``exc`` as ``verlog COMMAND: error: ...`` on stderr; returns :data:`EXIT_USAGE`."""
    print(f"verlog {command}: error: {exc}", file=sys.stderr, flush=True)
    return EXIT_USAGE


# ------------------------------------------------------------------------------------------------ argument types
def int_at_least(low: int, meaning: str = "") -> Any:
    """An argparse ``type``: an integer >= ``low`` (``meaning`` says what the number is, for the message)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < low:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer >= {low}{meaning}")
        return value

    parse.__name__ = f"integer >= {low}"
    return parse


def float_in(low: float, high: float | None = None, *, low_open: bool = False) -> Any:
    """An argparse ``type``: a number in ``[low, high]`` (``(low, high]`` with ``low_open``)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = None
        ok = value is not None and value == value and (value > low if low_open else value >= low)
        ok = ok and (high is None or value <= high)  # type: ignore[operator]
        if not ok:
            left = "(" if low_open else "["
            right = f"{high}]" if high is not None else "inf)"
            raise argparse.ArgumentTypeError(f"{text!r} is not a number in {left}{low}, {right}")
        return value  # type: ignore[return-value]

    parse.__name__ = "number"
    return parse


def seed(text: str) -> int:
    """An argparse ``type``: an env seed, an integer in ``[0, 2**32 - 1]``."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a seed: give an integer in [0, {MAX_SEED}]") from None
    if not 0 <= value <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"{value} is not a seed: seeds are integers in [0, {MAX_SEED}]")
    return value


def seed_list(text: str) -> tuple[int, ...]:
    """An argparse ``type``: comma-separated seeds (``0,1,2``), each in ``[0, 2**32 - 1]``, none repeated."""
    items = [item.strip() for item in text.split(",")]
    if not any(items):
        raise argparse.ArgumentTypeError("no seeds given: write comma-separated integers, e.g. 0,1,2")
    out: list[int] = []
    for item in items:
        if not item:
            continue
        try:
            value = int(item)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{item!r} in {text!r} is not a seed: write comma-separated integers in [0, {MAX_SEED}], e.g. 0,1,2"
            ) from None
        if not 0 <= value <= MAX_SEED:
            raise argparse.ArgumentTypeError(
                f"seed {value} in {text!r} is {'negative' if value < 0 else 'too large'}: seeds are integers in "
                f"[0, {MAX_SEED}]"
            )
        if value in out:
            raise argparse.ArgumentTypeError(f"seed {value} appears twice in {text!r}: each episode needs its own")
        out.append(value)
    return tuple(out)


def accept_negative_lists(parser: argparse.ArgumentParser) -> None:
    """Let option values such as ``-1,2`` through to their type (argparse takes them for options), so that the type
    can say what is wrong with them."""
    matcher = getattr(parser, "_negative_number_matcher", None)
    if matcher is not None:
        parser._negative_number_matcher = re.compile(r"^-\d+$|^-\d*\.\d+$|^-\d+(,\s*-?\d*)+$")


def json_object(option: str, text: str) -> dict[str, Any]:
    """``text`` parsed as a JSON object, or UsageError naming ``option``."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{option} is not JSON ({exc}): {text!r}; write e.g. '{{\"max_steps\": 64}}'") from None
    if not isinstance(value, dict):
        raise UsageError(f"{option} must be a JSON object, got {text!r}; write e.g. '{{\"max_steps\": 64}}'")
    return value


def add_memory_arguments(parser: Any) -> None:
    """``--memory-n`` and ``--keep-reasoning-turns``: training's ``memory.n`` and ``memory.keep_reasoning_turns``,
    with its defaults, so that a command builds the prompts training builds."""
    from verlog.prompting.memory import MemoryConfig

    defaults = MemoryConfig()
    parser.add_argument(
        "--memory-n",
        type=int_at_least(0),
        default=defaults.n,
        help=f"past turns in each prompt (training's memory.n, default {defaults.n}, Verlog's)",
    )
    parser.add_argument(
        "--keep-reasoning-turns",
        type=int_at_least(0),
        default=defaults.keep_reasoning_turns,
        help="newest past turns shown with the full model output, older ones with the action alone (training's "
        f"memory.keep_reasoning_turns, default {defaults.keep_reasoning_turns})",
    )


def add_answer_format_argument(parser: Any, help_suffix: str = "") -> None:
    """``--answer-format {cot,action}`` (default cot), the choices from
    :data:`verlog.prompting.memory.ANSWER_FORMATS`."""
    from verlog.prompting.memory import ANSWER_FORMATS

    parser.add_argument(
        "--answer-format",
        choices=list(ANSWER_FORMATS),
        default="cot",
        help="the answer format the prompt asks for: cot (THINK then ACTION, default) or action (the ACTION line "
        "alone)" + help_suffix,
    )


# ------------------------------------------------------------------------------------------------ --import
def add_import_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="MODULE",
        help="import MODULE first, e.g. your module that calls envs.register (repeatable; the current folder is "
        "importable)",
    )


def import_user_modules(modules: Iterable[str] = (), option: str = "--import") -> None:
    """Make the current folder importable and import ``modules`` (``--import``), or UsageError with the fix."""
    import envs
    from envs.errors import EnvImportError

    try:
        envs.import_modules(list(modules))
    except EnvImportError as exc:
        raise UsageError(f"{option}: {exc}") from None


# ------------------------------------------------------------------------------------------------ envs
# The checks themselves live in envs.registry (the one place env ids are resolved); here their errors become
# UsageErrors, with the same message.
@contextlib.contextmanager
def _as_usage_error() -> Iterator[None]:
    from envs.errors import EnvError

    try:
        yield
    except EnvError as exc:
        raise UsageError(str(exc)) from None


def check_env_id(env_id: str, option: str = "env id") -> None:
    """``env_id`` is a registered id or an importable ``package.module:factory``, or UsageError with close ids
    (:func:`envs.registry.check_env_id`)."""
    from envs import registry

    with _as_usage_error():
        registry.check_env_id(env_id, option)


def register_entry_point(env_id: str, option: str = "env id") -> None:
    """Register a ``package.module:factory`` env id under that name (so ``envs.make`` builds it); others stay
    (:func:`envs.registry.register_entry_point`)."""
    from envs import registry

    with _as_usage_error():
        registry.register_entry_point(env_id, option)


def build_env(env_id: str, kwargs: dict[str, Any], origin: str, *, reset: bool = True, seed: int = 0) -> Any:
    """Build ``env_id`` with ``kwargs`` (and reset it with ``seed``), or UsageError naming the input at fault
    (:func:`envs.registry.build_env`; ``origin`` says where the kwargs come from)."""
    from envs import registry

    with _as_usage_error():
        return registry.build_env(env_id, kwargs, origin, reset=reset, seed=seed)


def build_env_with_images(env_id: str, kwargs: dict[str, Any], origin: str, label: str, fix: str, seed: int = 0) -> Any:
    """``env_id`` built (and reset with ``seed``) drawing its images (``images=True``), or UsageError
    ``LABEL: the env draws no images (its provides_images is False): FIX`` for an env without images."""
    env = build_env(env_id, kwargs, origin, reset=False)
    draws = bool(getattr(env, "provides_images", False))
    env.close()
    if not draws:
        raise UsageError(f"{label}: the env draws no images (its provides_images is False): {fix}")
    return build_env(env_id, {**kwargs, "images": True}, origin, seed=seed)


# ------------------------------------------------------------------------------------------------ folders
def check_output_folder(path: str | os.PathLike, option: str, *, force: bool, what: str) -> Path:
    """The folder ``path`` to write ``what`` into: refused when it is empty text, a file, under a file or not
    writable (:func:`verlog.run.output_folder.creation_problem`), or (without ``force``) a non-empty folder, so that
    nothing is overwritten silently."""
    text = os.fspath(path)
    if not text.strip():
        raise UsageError(f"{option} is empty: give the folder to write {what} into")
    folder = Path(text)
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"{option} {text!r} is a file, not a folder: give a folder to write {what} into")
    problem = creation_problem(folder)
    if problem is not None:  # e.g. a file where a folder above it should be
        raise UsageError(
            f"{option} {text!r} cannot be created: {problem}: give a folder to write {what} into, under one you can "
            "write to"
        )
    if folder.is_dir() and not force:
        entries = sorted(p.name for p in folder.iterdir())
        if entries:
            shown = ", ".join(entries[:3]) + (", ..." if len(entries) > 3 else "")
            count = f"{len(entries)} {'entry' if len(entries) == 1 else 'entries'}"
            raise UsageError(
                f"{option} {text!r} is not empty ({count}: {shown}); pass --force to write {what} into it anyway "
                "(files of the same name are replaced), or give a new or empty folder"
            )
    return folder
