"""What every report reads in a recipe's run folder besides evaluations: JSON-lines logs, ``settings.env``,
``notes.md``; and :func:`shown_path`, which keeps machine-specific folders out of committed pages."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from verlog.errors import VerlogError
from verlog.run.files import read_jsonl as read_run_log

SETTINGS_FILE = "settings.env"
NOTES_FILE = "notes.md"
REPO = Path(__file__).resolve().parents[2]
"""The repository (where the recipes run): paths inside it are shown relative to it."""


class ReportError(VerlogError, ValueError):
    """A run folder whose files cannot be read as its recipe writes them (the message names the file and the fix)."""


def existing_run(run_dir: str | Path, recipe: str) -> Path:
    """``run_dir`` as a path, checked to be a folder (a :class:`ReportError` naming ``recipe`` if it is not)."""
    run = Path(run_dir)
    if not run.is_dir():
        raise ReportError(f"run folder {str(run)!r} does not exist: run {recipe} (OUTPUT_DIR=...) first")
    return run


def read_log(path: str | Path, tag: str, *, missing_ok: bool = False) -> list[dict[str, Any]]:
    """The JSON objects of a JSON-lines file (blank lines skipped; a torn last line, left by a killed writer, skipped
    with a ``[tag]`` warning on stderr: :func:`verlog.run.files.read_jsonl`); ``[]`` for a missing file when
    ``missing_ok``.

    Raises:
        ReportError: the file is missing (unless ``missing_ok``), a line before the last is not JSON, or a record is
            not a JSON object.
    """
    path = Path(path)
    if not path.is_file():
        if missing_ok:
            return []
        raise ReportError(f"{path}: no such file; is this the run folder the recipe wrote?")
    try:
        records = read_run_log(path, warn=lambda line: print(f"[{tag}] {line}", file=sys.stderr))
    except ValueError as exc:
        raise ReportError(f"{exc}; was the file cut by a crash?") from exc
    for number, item in enumerate(records, start=1):
        if not isinstance(item, dict):
            raise ReportError(f"{path}: record {number} is a {type(item).__name__}, not a JSON object")
    return records


def read_settings(run_dir: str | Path) -> dict[str, str]:
    """The recipe's settings (``settings.env``: ``KEY=VALUE`` lines, ``#`` comments; empty when the file is
    missing)."""
    path = Path(run_dir) / SETTINGS_FILE
    if not path.is_file():
        return {}
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            key, sep, value = line.partition("=")
            if not sep:
                raise ReportError(f"{path}: {line!r} is not KEY=VALUE")
            out[key.strip()] = value.strip()
    return out


def read_notes(run_dir: str | Path) -> str:
    """The run folder's ``notes.md`` (what was tried before the run, written by hand), or ``""``."""
    path = Path(run_dir) / NOTES_FILE
    return path.read_text(encoding="utf-8") if path.is_file() else ""


def shown_path(value: str | Path) -> str:
    """``value`` relative to the repository when it lies inside it (committed results name no machine's folders)."""
    text = str(value)
    path = Path(text)
    if path.is_absolute():
        try:
            return str(path.resolve().relative_to(REPO))
        except ValueError:
            return text
    return text


def shown_settings(settings: dict[str, str]) -> dict[str, str]:
    """``settings`` with every absolute path shown by :func:`shown_path`."""
    return {k: shown_path(v) if v.startswith("/") else v for k, v in settings.items()}
