"""docs/errors.md and docs/reliability.md: every row of their tables names tests, and every test named exists (so each
promised behaviour is backed by a test)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("doc", "header", "least"), [("errors.md", "| input", 30), ("reliability.md", "| fault", 10)])
def test_every_row_names_existing_tests(doc: str, header: str, least: int) -> None:
    lines = (REPO / "docs" / doc).read_text().splitlines()
    rows = [line for line in lines if line.startswith("| ") and not line.startswith(header)]
    assert len(rows) >= least
    for row in rows:
        named = re.findall(r"`(tests/[\w/]+\.py)::(\w+)`", row)
        assert named, f"a row of docs/{doc} names no test: {row[:80]}"
        for path, name in named:
            source = (REPO / path).read_text()
            assert re.search(rf"^def {name}\(", source, re.M), f"{path}::{name} (docs/{doc}) does not exist"


def test_the_docs_link_to_them() -> None:
    assert "docs/errors.md" in (REPO / "docs" / "adding-an-env.md").read_text()
    readme = (REPO / "README.md").read_text()
    assert "docs/errors.md" in readme and "docs/reliability.md" in readme
