"""``python -m verlog.sweep.launch PARENT_PID -- COMMAND ...``: run COMMAND so that it dies with the sweep's trial.

A trial runs ``verlog train`` as a subprocess of a Ray Tune worker. When Tune ends that worker (early stopping, a
killed sweep), the subprocess (and the Ray cluster it started for verl) must end too, not live on as an orphan. This
shim asks Linux to send it SIGTERM when its parent dies (``prctl(PR_SET_PDEATHSIG)``, kept across ``exec``), checks
that the parent is still ``PARENT_PID`` (it may have died before the request), then replaces itself with COMMAND.
verl's own Ray processes share the fate of the process that started them. Elsewhere than Linux it only runs COMMAND.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python -m verlog.sweep.launch PARENT_PID -- COMMAND ...", file=sys.stderr)
        return 2
    parent, command = int(argv[0]), argv[2:]
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the request took effect
            return 143
    os.execvp(command[0], command)
    return 127  # not reached: execvp replaces this process or raises


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
