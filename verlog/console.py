"""The console of verlog's long commands: verlog's own lines on the terminal, everything else in a log file.

``verlog train`` and ``verlog eval`` start Ray, verl's workers and vLLM, which print a few hundred lines a user can do
nothing about (start-up banners, deprecation warnings, every worker's log forwarded by Ray). Inside
:class:`QuietConsole` the process's file descriptors 1 and 2 point at a log file, so that everything written there,
by Python, by C libraries and by child processes that inherit them, lands in the log; verlog's own lines go through
:func:`say`, which writes them to the terminal (and into the log, so that it holds the whole story in order).
Warnings raised from verlog's or the envs' code are said too (a user can act on them), except deprecation notices
(:data:`QUIET_CATEGORIES`); others stay in the log.

Outside a quiet console (``--verbose``, the library used from Python, tests) :func:`say` is a plain print.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import warnings
from pathlib import Path
from types import TracebackType
from typing import Any, TextIO

_ACTIVE: QuietConsole | None = None
_WRITE = threading.Lock()
OWN_CODE = (
    os.sep + "verlog" + os.sep,
    os.sep + "envs" + os.sep,
)
"""Path parts of the files whose warnings are said on the terminal (verlog's and the envs' code)."""
QUIET_CATEGORIES = (DeprecationWarning, PendingDeprecationWarning, FutureWarning)
"""Warnings kept in the log even when raised at a line of verlog's code: a library's deprecation notice points at
the caller (``stacklevel``) and is nothing a user of verlog can act on."""
TAIL_LINES = 15
"""Lines of the log shown on the terminal when a command fails inside a quiet console."""


def say(line: str, *, err: bool = False) -> None:
    """Print one of verlog's own lines: on the terminal, and into the log while a quiet console is on.

    ``err`` puts it on standard error (warnings and errors)."""
    active = _ACTIVE
    if active is None:
        print(line, file=sys.stderr if err else sys.stdout, flush=True)
    else:
        active.say(line, err=err)


class QuietConsole:
    """While entered (unless ``verbose``), file descriptors 1 and 2 of this process write to ``log_path`` (appended);
    :func:`say` reaches the terminal. Not re-entrant: a second one inside the first is a plain pass-through.

    Args:
        log_path: the log file (its folder is created).
        verbose: show everything on the terminal as before; :func:`say` prints, nothing is redirected.
        title: the header line written into the log when the console starts (the command and the time).
    """

    def __init__(self, log_path: str | os.PathLike[str], verbose: bool = False, title: str = "") -> None:
        self.log_path = Path(log_path)
        self.verbose = verbose
        self.title = title
        self._saved: tuple[int, int] | None = None
        self._log_fd: int | None = None
        self._showwarning: Any = None

    @property
    def active(self) -> bool:
        """Whether the output is redirected now."""
        return self._saved is not None

    def __enter__(self) -> QuietConsole:
        global _ACTIVE
        if self.verbose or _ACTIVE is not None:
            return self
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        _flush()
        self._log_fd = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._saved = (os.dup(1), os.dup(2))
        os.dup2(self._log_fd, 1)
        os.dup2(self._log_fd, 2)
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        os.write(self._log_fd, f"\n===== {stamp} {self.title}\n".encode())
        self._showwarning = warnings.showwarning
        warnings.showwarning = self._show_warning
        _ACTIVE = self
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Point the terminal's descriptors back at it (idempotent)."""
        global _ACTIVE
        if self._saved is None:
            return
        _flush()
        out, err = self._saved
        os.dup2(out, 1)
        os.dup2(err, 2)
        os.close(out)
        os.close(err)
        self._saved = None
        if self._log_fd is not None:
            os.close(self._log_fd)
            self._log_fd = None
        warnings.showwarning = self._showwarning
        if _ACTIVE is self:
            _ACTIVE = None

    def say(self, line: str, err: bool = False) -> None:
        """Write ``line`` to the terminal and into the log."""
        if self._saved is None:
            print(line, file=sys.stderr if err else sys.stdout, flush=True)
            return
        data = (line.rstrip("\n") + "\n").encode()
        with _WRITE:
            _flush()  # what Python buffered before this line goes into the log first
            os.write(self._saved[1] if err else self._saved[0], data)
            if self._log_fd is not None:
                os.write(self._log_fd, data)

    def tail(self, lines: int = TAIL_LINES) -> list[str]:
        """The last ``lines`` lines of the log (for the terminal when a command fails)."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                size = f.tell()
                f.seek(max(0, size - 64 * 1024))
                text = f.read().decode("utf-8", errors="replace")
        except OSError:
            return []
        return [line for line in text.splitlines() if line.strip()][-lines:]

    def _show_warning(
        self,
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: TextIO | None = None,
        line: str | None = None,
    ) -> None:
        own = any(part in filename for part in OWN_CODE) and "site-packages" not in filename
        if own and not issubclass(category, QUIET_CATEGORIES):
            self.say(f"[verlog] warning: {message}", err=True)
        elif self._showwarning is not None:
            self._showwarning(message, category, filename, lineno, file, line)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):  # a closed or replaced stream
            pass
