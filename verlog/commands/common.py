"""What the ``verlog`` subcommands share: ``--import``, checked argument types, env and folder checks.

Every bad input a subcommand can see is refused before any model or engine loads, with a :class:`UsageError` whose
message names the input and the fix; :func:`verlog.cli.main` prints it as ``verlog COMMAND: error: ...`` and exits
with :data:`EXIT_USAGE` (2), without a traceback. Argument types (:func:`int_at_least`, :func:`seed`,
:func:`seed_list`) fail inside argparse, which also exits with 2. docs/errors.md lists each case and its test.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import functools
import inspect
import json
import os
import re
import sys
import traceback
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from verlog.errors import VerlogError

EXIT_USAGE = 2
"""Exit code of every refused input (argparse's too)."""
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


def add_answer_format_argument(parser: Any, help_suffix: str = "") -> None:
    """``--answer-format {cot,action}`` (default cot), the choices from :data:`verlog.memory.ANSWER_FORMATS`."""
    from verlog.memory import ANSWER_FORMATS

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
def check_env_id(env_id: str, option: str = "env id") -> None:
    """``env_id`` is a registered id or an importable ``package.module:factory``, or UsageError with close ids."""
    import envs

    if ":" in env_id:
        _entry_point(env_id, option)
        return
    known = envs.list_envs()
    if env_id in known:
        return
    close = difflib.get_close_matches(env_id, known, n=3, cutoff=0.5)
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    raise UsageError(
        f"{option} {env_id!r} is not a registered env.{hint} `verlog envs` lists them; an env of your own needs "
        "--import MODULE (the module that calls envs.register) or the form package.module:factory"
    )


def register_entry_point(env_id: str, option: str = "env id") -> None:
    """Register a ``package.module:factory`` env id under that name (so ``envs.make`` builds it); others stay."""
    import envs

    if ":" in env_id and env_id not in envs.list_envs():
        envs.register(env_id, _entry_point(env_id, option))


def _entry_point(env_id: str, option: str) -> Any:
    from verlog.rollout.manager import resolve_env_factory

    try:
        return resolve_env_factory(env_id)
    except ValueError as exc:
        raise UsageError(f"{option}: {exc}") from None


def _factory(env_id: str) -> Any:
    import envs

    if ":" in env_id:
        return _entry_point(env_id, "env id")
    try:
        return envs.registered_factory(env_id)
    except envs.EnvError as exc:  # an unknown id, or an entry point that cannot be loaded
        raise UsageError(str(exc)) from None


def accepted_kwargs(factory: Any) -> list[str] | None:
    """The keyword arguments ``factory`` takes (following ``**kwargs`` up a class's ``__init__`` chain), or None
    when they cannot be known (a function that passes ``**kwargs`` on)."""
    bound: set[str] = set()
    positional = 0
    target = factory
    while isinstance(target, functools.partial):
        bound |= set(target.keywords)
        positional += len(target.args)
        target = target.func
    chain = [c for c in target.__mro__ if "__init__" in c.__dict__] if isinstance(target, type) else [target]
    names: list[str] = []
    for depth, item in enumerate(chain):
        try:
            params = list(inspect.signature(item.__init__ if isinstance(item, type) else item).parameters.values())
        except (TypeError, ValueError):
            return None
        params = [p for p in params if p.name != "self"]
        if depth == 0:  # the partial's positional arguments fill the first parameters
            params = [p for k, p in enumerate(params) if k >= positional or p.kind is p.KEYWORD_ONLY]
        names += [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in names]
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            return [n for n in names if n not in bound]
        if not isinstance(target, type):
            return None
    return None


def build_env(env_id: str, kwargs: dict[str, Any], origin: str, *, reset: bool = True, seed: int = 0) -> Any:
    """Build ``env_id`` with ``kwargs`` (and reset it with ``seed``), or UsageError naming the input at fault.

    ``origin`` says where the kwargs come from (``--env-arg``, ``env.kwargs``, ``--env-kwargs``) for the message;
    an argument the env does not take is named with the close ones it takes.
    """
    factory = _factory(env_id)
    env = None
    try:
        env = factory(**kwargs)
        if reset:
            env.reset(seed=seed)
        return env
    except TypeError as exc:
        _close(env)
        match = re.search(r"unexpected keyword argument '(\w+)'", str(exc))
        if match is None or match.group(1) not in kwargs:  # not one of the given arguments: the factory's own error
            raise UsageError(_build_failure(env_id, kwargs, origin, exc)) from None
        bad = match.group(1)
        accepted = accepted_kwargs(factory)
        lines = [f"env {env_id!r} takes no keyword argument {bad!r} (from {origin}: {bad}={kwargs.get(bad)!r})."]
        if accepted:
            close = difflib.get_close_matches(bad, accepted, n=1, cutoff=0.6)
            if close:
                lines.append(f"Did you mean {close[0]!r}?")
            lines.append(f"It takes: {', '.join(accepted)}.")
        raise UsageError(" ".join(lines)) from None
    except Exception as exc:  # the factory or reset raised on these settings
        _close(env)
        raise UsageError(_build_failure(env_id, kwargs, origin, exc)) from None


def _close(env: Any) -> None:
    if env is not None:
        with contextlib.suppress(Exception):
            env.close()


def _build_failure(env_id: str, kwargs: dict[str, Any], origin: str, exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    at = f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    return (
        f"building env {env_id!r} with {origin} {kwargs} and resetting it failed: {type(exc).__name__}: {exc}{at}; "
        f"check {origin}"
    )


# ------------------------------------------------------------------------------------------------ folders
def check_output_folder(path: str | os.PathLike, option: str, *, force: bool, what: str) -> Path:
    """The folder ``path`` to write ``what`` into: refused when it is empty text, a file, or (without ``force``) a
    non-empty folder, so that nothing is overwritten silently."""
    text = os.fspath(path)
    if not text.strip():
        raise UsageError(f"{option} is empty: give the folder to write {what} into")
    folder = Path(text)
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"{option} {text!r} is a file, not a folder: give a folder to write {what} into")
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
