"""docs/errors.md: every test it names exists (so each row of its tables is backed by a test)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "errors.md"


def test_every_row_names_existing_tests() -> None:
    rows = [line for line in DOC.read_text().splitlines() if line.startswith("| ") and not line.startswith("| input")]
    assert len(rows) >= 30
    for row in rows:
        named = re.findall(r"`(tests/[\w/]+\.py)::(\w+)`", row)
        assert named, f"a row of docs/errors.md names no test: {row[:80]}"
        for path, name in named:
            source = (REPO / path).read_text()
            assert re.search(rf"^def {name}\(", source, re.M), f"{path}::{name} (docs/errors.md) does not exist"


def test_the_docs_link_to_it() -> None:
    assert "docs/errors.md" in (REPO / "docs" / "adding-an-env.md").read_text()
    assert "docs/errors.md" in (REPO / "README.md").read_text()
