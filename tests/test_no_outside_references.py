"""The repository stands on its own: no tracked file sends the reader to notes outside it, and the committed docs
hold no absolute paths of the machine they were written on.

- No tracked text file names a Markdown file under a ``shared`` folder, or one of the project's internal notes by its
  bare file name: what a reader needs from them is written in docs/ (docs/stack.md, docs/text-envs.md,
  docs/babaisai.md, docs/reproducing.md, docs/learnability.md).
- The ``.md`` and ``.json`` files under ``docs/`` (the committed results in docs/results/ among them) hold
  repository-relative paths such as ``outputs/learn-babyai-v5``, never ``/work/...`` or ``/home/...``.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
THIS = Path(__file__).resolve().relative_to(ROOT).as_posix()

# "shared" then "/" then a Markdown file name (the pattern is split so that this file does not match it).
OUTSIDE_NOTE = re.compile(r"\bshared" + "/" + r"[\w.-]*\.md\b")
# The internal notes by bare name (none of them is a file of this repository).
INTERNAL_NOTES = re.compile(r"(?<![\w/.-])(STACK|REFERENCE|STYLE|ARCHITECTURE|balrog-text-spec|babaisai-spec)\.md\b")
MACHINE_PATH = re.compile(r"(?<![\w.-])/(work|home|Users|root)/[\w.-]")


def tracked_files() -> list[str]:
    try:
        proc = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        pytest.skip("not a git checkout (or git is missing)")
    return [name for name in proc.stdout.decode().split("\0") if name]


def text_of(name: str) -> str | None:
    """The file's text, or None for a binary file or one missing from the work tree (e.g. mid-rename)."""
    path = ROOT / name
    if not path.is_file() or path.is_symlink():
        return None
    data = path.read_bytes()
    if b"\0" in data[:8192]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def hits(pattern: re.Pattern[str], names: list[str]) -> list[str]:
    found = []
    for name in names:
        text = text_of(name)
        if text is None:
            continue
        for number, line in enumerate(text.splitlines(), start=1):
            for match in pattern.finditer(line):
                found.append(f"{name}:{number}: {match.group(0)}")
    return found


def test_no_tracked_file_points_to_notes_outside_the_repository() -> None:
    names = [name for name in tracked_files() if name != THIS]
    found = hits(OUTSIDE_NOTE, names) + hits(INTERNAL_NOTES, names)
    assert not found, "point to a page under docs/ instead (write the fact there if it is missing):\n" + "\n".join(
        found
    )


def test_docs_hold_no_absolute_machine_paths() -> None:
    names = [name for name in tracked_files() if re.fullmatch(r"docs/.+\.(md|json)", name)]
    assert names, "no docs/*.md or docs/*.json tracked"
    found = hits(MACHINE_PATH, names)
    assert not found, "write repository-relative paths (outputs/...) in committed docs:\n" + "\n".join(found)


def test_the_patterns_catch_what_they_are_for() -> None:
    assert OUTSIDE_NOTE.search("see " + "shared" + "/STACK.md, section 2")
    assert OUTSIDE_NOTE.search("(" + "shared" + "/babaisai-spec.md)")
    assert not OUTSIDE_NOTE.search("OUTPUT_DIR=/nfs/runs/babyai")
    assert INTERNAL_NOTES.search("(STACK.md: 1e-3 collapsed it)")
    assert INTERNAL_NOTES.search("balrog-text-spec.md section 4.3")
    assert not INTERNAL_NOTES.search("docs/stack.md and docs/reproducing.md")
    assert MACHINE_PATH.search("| `OUTPUT_DIR` | /work/main/outputs/learn-babyai-v5 |")
    assert MACHINE_PATH.search('"RESULTS": "/home/me/verlog/outputs/x/results.md"')
    assert not MACHINE_PATH.search("| `OUTPUT_DIR` | outputs/learn-babyai-v5 |")
    assert not MACHINE_PATH.search("verlog tiny-model /tmp/toy-model")
