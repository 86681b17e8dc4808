"""Run rows of ``python -m verlog ARGS`` one after the other in this one process, for tests/verlog/test_bad_inputs.py.

``python tests/verlog/console_rows.py ROWS.json RESULTS.json``: ROWS is a JSON list of argument lists; each row runs
the ``verlog`` package as ``__main__`` (what ``python -m verlog`` runs: verlog/__main__.py) with ``sys.argv`` set,
its stdout and stderr captured at the file-descriptor level, its exit code taken from ``SystemExit``, and any
exception that escapes printed as a traceback into its stderr. RESULTS is a JSON list of ``{"code", "stdout",
"stderr", "changed"}``, ``changed`` the paths under the current folder that the row created, changed or removed.
One process for the whole table: the imports are paid once.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import tempfile
import traceback


def snapshot(folder: str) -> dict[str, tuple[int, int]]:
    """Every path under ``folder`` with its size and modification time."""
    out = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = os.path.join(root, name)
            info = os.lstat(path)
            out[os.path.relpath(path, folder)] = (info.st_size, info.st_mtime_ns)
    return out


def run_row(argv: list[str]) -> dict[str, object]:
    """``python -m verlog *argv`` in this process: its exit code, stdout, stderr and the paths it changed."""
    before = snapshot(os.getcwd())
    captured = [tempfile.TemporaryFile(mode="w+b"), tempfile.TemporaryFile(mode="w+b")]
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    os.dup2(captured[0].fileno(), 1)
    os.dup2(captured[1].fileno(), 2)
    code: object = None
    try:
        sys.argv = ["verlog", *argv]
        runpy.run_module("verlog", run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        code = 0 if exc.code is None else exc.code
    except BaseException:  # what a user would see as a traceback
        traceback.print_exc()
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved:
            os.close(fd)
    texts = []
    for f in captured:
        f.seek(0)
        texts.append(f.read().decode("utf-8", errors="replace"))
        f.close()
    after = snapshot(os.getcwd())
    changed = sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))
    return {"code": code, "stdout": texts[0], "stderr": texts[1], "changed": changed}


def main(rows_path: str, results_path: str) -> None:
    with open(rows_path, encoding="utf-8") as f:
        rows = json.load(f)
    results = [run_row(argv) for argv in rows]
    with open(results_path, "w", encoding="utf-8") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main(*sys.argv[1:3])
