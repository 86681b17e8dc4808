"""Fault-injection points: named moments of a training run where a test may hold the run to kill it there.

- ``rollout``: an iteration's rollout is about to start (``step``: the iteration);
- ``checkpoint``: the checkpoint of iteration ``step`` is written but not yet made the latest.

:func:`reached` calls the hook that ``VERLOG_FAULT_HOOK=<module>:<function>`` names (imported on the first call,
then kept) with ``(where, step, run_folder)``; in every ordinary run the variable is unset and nothing happens.
The kill tests' hook, which pauses the run until the test kills it, lives with them
(tests/verlog/trainer/pause_hook.py).
"""

from __future__ import annotations

import functools
import importlib
import os
from collections.abc import Callable
from pathlib import Path

from verlog.errors import VerlogError

HOOK_ENV = "VERLOG_FAULT_HOOK"
"""``<module>:<function>``, the function called at each fault point (unset: none)."""

FaultHook = Callable[[str, int, Path], None]


class FaultHookError(VerlogError):
    """``VERLOG_FAULT_HOOK`` does not name an importable ``<module>:<function>``."""


def reached(where: str, step: int, run_folder: str | Path) -> None:
    """The run is at fault point ``where`` of iteration ``step``: call the installed hook, if any."""
    hook = _hook(os.environ.get(HOOK_ENV, ""))
    if hook is not None:
        hook(where, step, Path(run_folder))


@functools.cache
def _hook(spec: str) -> FaultHook | None:
    if not spec:
        return None
    module, _, name = spec.partition(":")
    try:
        hook = getattr(importlib.import_module(module), name) if name else None
    except (ImportError, AttributeError) as exc:
        raise FaultHookError(f"{HOOK_ENV}={spec}: {exc}; give <module>:<function>, or unset it") from exc
    if not callable(hook):
        raise FaultHookError(f"{HOOK_ENV}={spec} names no function: give <module>:<function>, or unset it")
    return hook
