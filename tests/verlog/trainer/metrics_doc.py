"""docs/metrics.md as data: metric name -> the "logged" condition of its table row (tests import this)."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[3] / "docs" / "metrics.md"
VERLOG_NAMESPACES = (
    "env/",
    "rollout/",
    "adv/",
    "progress/",
    "eval/",
    "timing_s/rollout_",
    "curriculum/",
    "family/",
    "check/",
    "async/",
    "prefix/",
)
"""Prefixes of the metrics verlog (not verl) logs: every logged name under them must be documented."""


def documented_metrics(doc: Path = DOC) -> dict[str, str]:
    """Each backticked name of the first column of docs/metrics.md's table, with its "logged" column."""
    out: dict[str, str] = {}
    for line in doc.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].startswith("`"):
            continue
        for name in re.findall(r"`([^`]+)`", cells[0]):
            out[name] = cells[1]
    return out


def is_verlog_metric(name: str) -> bool:
    return name.startswith(VERLOG_NAMESPACES)


def undocumented(logged: set[str], doc: dict[str, str]) -> list[str]:
    """The names of ``logged`` that no documented name matches (``<family>`` in a documented name matches one path
    segment: ``curriculum/<family>/prob`` documents ``curriculum/goto/prob``)."""
    patterns = [re.compile("^" + re.escape(name).replace(re.escape("<family>"), "[^/]+") + "$") for name in doc]
    return sorted(name for name in logged if not any(p.match(name) for p in patterns))
