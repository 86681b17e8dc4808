"""docs/reliability.md: every fault row names tests, and every test it names exists."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "reliability.md"


def test_every_fault_row_names_existing_tests() -> None:
    rows = [line for line in DOC.read_text().splitlines() if line.startswith("| ") and not line.startswith("| fault")]
    assert len(rows) >= 10
    for row in rows:
        named = re.findall(r"`(tests/[\w/]+\.py)::(\w+)`", row)
        assert named, f"a row of docs/reliability.md names no test: {row[:80]}"
        for path, name in named:
            source = (REPO / path).read_text()
            assert re.search(rf"^def {name}\(", source, re.M), f"{path}::{name} (docs/reliability.md) does not exist"
