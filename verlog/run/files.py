"""Files a kill cannot leave half-written: JSON-lines logs and atomic writes (docs/reliability.md).

- :func:`append_jsonl` writes each record as one ``write`` of a whole line (a kill tears at most the line being
  written, never interleaves two).
- Reading (:func:`json_lines`, :func:`read_jsonl`, :func:`parse_lines`) follows one rule: a file's final line that
  has no newline and is not valid JSON is *torn* (its writer was killed in the middle of it, or is still writing it):
  it is skipped and reported; any other line that is not valid JSON (a whole line, ended by its newline) raises
  :class:`JsonLinesError` naming ``file:line``.
- :func:`write_atomically` writes a temporary file in the same folder, flushes it to disk and renames it over the
  target: a reader sees the old file or the new one, never a part.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verlog.errors import VerlogError


class JsonLinesError(VerlogError, ValueError):
    """A line of a JSON-lines file that is not valid JSON and is not its torn last line (the message says
    ``file:line``): the file was not written by verlog, or was edited."""


@dataclass(frozen=True)
class TornLine:
    """The torn last line of a JSON-lines file: ``number`` (1-based), and ``kept``, the whole records before it."""

    path: Path
    number: int
    kept: int

    def __str__(self) -> str:
        return f"{self.path}: line {self.number} is torn (a writer was killed while writing it): skipped"


@dataclass(frozen=True)
class Line:
    """One non-blank line of a JSON-lines file: its number (1-based), its bytes (without the newline) and its value
    (None when ``torn``)."""

    number: int
    raw: bytes
    value: Any
    torn: bool = False


def _parse(raw: bytes) -> Any:
    """The JSON value of one line; ValueError (JSONDecodeError, UnicodeDecodeError) when it is not JSON."""
    return json.loads(raw.decode("utf-8"))


def lines_of(data: bytes, path: str | Path) -> list[Line]:
    """The non-blank lines of a JSON-lines file's content ``data`` under the module's rule (the final one, when it
    has no newline, may be ``torn``).

    Raises:
        JsonLinesError: a whole line (ended by its newline) is not valid JSON.
    """
    pieces = data.split(b"\n")  # the last piece: what follows the final newline (b"" in a file that ends with one)
    out: list[Line] = []
    for number, raw in enumerate(pieces, start=1):
        if not raw.strip():
            continue
        try:
            out.append(Line(number, raw, _parse(raw)))
        except ValueError as exc:
            if number == len(pieces):
                out.append(Line(number, raw, None, torn=True))
                break
            raise JsonLinesError(f"{path}:{number}: not valid JSON ({_reason(exc)})") from exc
    return out


def _reason(exc: ValueError) -> str:
    return exc.msg if isinstance(exc, json.JSONDecodeError) else "not UTF-8 text"


def json_lines(path: str | Path, on_torn: Callable[[TornLine], None] | None = None) -> Iterator[tuple[int, Any]]:
    """(line number, value) of each whole line of the JSON-lines file ``path``; a torn last line is handed to
    ``on_torn`` (when given) and skipped.

    Raises:
        OSError: the file cannot be read (a missing one included).
        JsonLinesError: a bad line before the last.
    """
    p = Path(path)
    lines = lines_of(p.read_bytes(), p)
    for line in lines:
        if line.torn:
            if on_torn is not None:
                on_torn(TornLine(p, line.number, len(lines) - 1))
            return
        yield line.number, line.value


def read_jsonl(path: str | Path, warn: Callable[[str], None] | None = None) -> list[Any]:
    """The records of a JSON-lines file ([] when it is missing); a torn last line is skipped and reported through
    ``warn`` (one line).

    Raises:
        JsonLinesError: a bad line before the last (``file:line``).
    """
    p = Path(path)
    if not p.exists():
        return []
    on_torn = (lambda torn: warn(str(torn))) if warn is not None else None
    return [value for _number, value in json_lines(p, on_torn)]


def parse_lines(data: bytes, path: str | Path, first_number: int = 1) -> list[tuple[int, Any]]:
    """(line number, value) of complete lines ``data`` (each ended by a newline, as a reader that follows a growing
    file hands them over, the first numbered ``first_number``).

    Raises:
        JsonLinesError: a line is not valid JSON (a whole line is never torn).
    """
    out = []
    for number, raw in enumerate(data.split(b"\n"), start=first_number):
        if not raw.strip():
            continue
        try:
            out.append((number, _parse(raw)))
        except ValueError as exc:
            raise JsonLinesError(f"{path}:{number}: not valid JSON ({_reason(exc)})") from exc
    return out


def append_jsonl(path: str | Path, records: Iterable[Any], default: Callable[[Any], Any] | None = None) -> None:
    """Append each record as one JSON line, each line one ``write`` (created with its folder if missing). A file
    that ends inside a line (torn by a killed writer) gets its newline first, so the records appended stay whole.
    ``default``: :func:`json.dumps`' hook for values JSON has no type for (numpy scalars, ...)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            os.write(fd, b"\n")
        for record in records:
            data = (json.dumps(record, ensure_ascii=False, default=default) + "\n").encode("utf-8")
            while data:
                data = data[os.write(fd, data) :]
    finally:
        os.close(fd)


def write_atomically(path: str | Path, data: str | bytes) -> None:
    """Write ``data`` (text as UTF-8) to a temporary file beside ``path``, flush it to disk, and rename it over
    ``path`` (its folder is created if missing)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o644)  # mkstemp's 0600 would hide the file from the run's other readers
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def nested_value(data: Any, key: str, missing: Any = None) -> Any:
    """The value at the dotted ``key`` (``"algorithm.step_gamma"``) of nested dicts, as a saved ``config.yaml`` or
    ``summary.json`` reads; ``missing`` when a part of the key is absent or its parent is not a dict."""
    value = data
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            return missing
        value = value[part]
    return value
