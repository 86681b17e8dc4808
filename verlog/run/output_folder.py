"""Where a command may write its outputs: a folder that exists or can be created, with no file in the way.

Every command that writes a folder (``verlog eval --out``, ``verlog demos --out``, ``verlog tiny-model OUT``,
``verlog train``'s ``output_dir``) asks :func:`creation_problem` before anything starts, so that a path under a file
is one line naming that file, not a traceback after the work was done.
"""

from __future__ import annotations

import os
from pathlib import Path


def creation_problem(path: str | os.PathLike) -> str | None:
    """Why the folder ``path`` can be neither used nor created, or None when it can.

    Returns:
        ``"<path> is a file, not a folder"``, ``"<parent> is a file, not a folder"`` (the nearest existing path above
        it), ``"<folder> is not writable"``, or None.
    """
    folder = Path(path).expanduser()
    if folder.exists():
        if not folder.is_dir():
            return f"{folder} is a file, not a folder"
        return None if os.access(folder, os.W_OK | os.X_OK) else f"{folder} is not writable"
    parent = next((p for p in folder.absolute().parents if p.exists()), None)
    if parent is None:  # not even the root exists: nothing to say beyond what the OS will
        return None
    if not parent.is_dir():
        return f"{parent} is a file, not a folder"
    return None if os.access(parent, os.W_OK | os.X_OK) else f"{parent} is not writable"
