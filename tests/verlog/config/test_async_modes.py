"""The async-mode registry (verlog/config/async_modes.py): one entry per ``rollout.async_mode``, what each declares,
that docs/async.md's table is the registry's, that an entry contradicting itself is refused, and that no module outside
the registry compares the mode with a string."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from verlog.algorithms.estimators import Grouping
from verlog.config.async_modes import (
    REGISTRY,
    AsyncMode,
    WeightSyncPolicy,
    get_async_mode,
    mode_names,
    register_async_mode,
    table_rows,
)
from verlog.config.schema import AlgorithmConfig, RolloutConfig

ROOT = Path(__file__).resolve().parents[3]


def test_the_modes_and_what_they_declare() -> None:
    assert mode_names() == ("off", "pipeline", "one_step_off", "in_flight")
    rollout = RolloutConfig(max_lag=3, pipeline_groups=2)
    declared = {
        name: (m.capacity(rollout), m.weight_sync, m.correction, m.pipeline_groups(rollout), m.keeps_rows_ahead)
        for name, m in REGISTRY.items()
    }
    assert declared == {
        "off": (0, WeightSyncPolicy.EACH_ITERATION, False, None, False),
        "pipeline": (0, WeightSyncPolicy.EACH_ITERATION, False, 2, False),
        "one_step_off": (1, WeightSyncPolicy.DEFER, True, None, True),
        "in_flight": (3, WeightSyncPolicy.INTERRUPT, True, None, True),
    }
    assert mode_names(lambda m: Grouping.GROUPS in m.groupings) == ("off",)  # group estimators run in lockstep only
    assert get_async_mode("in_flight").corrects(AlgorithmConfig())
    assert not get_async_mode("in_flight").corrects(AlgorithmConfig(rollout_is="off"))
    assert not get_async_mode("pipeline").corrects(AlgorithmConfig())
    with pytest.raises(ValueError, match="no async mode 'inflight'; registered: off, pipeline"):
        get_async_mode("inflight")


def test_docs_async_table_is_the_registry() -> None:
    text = (ROOT / "docs" / "async.md").read_text(encoding="utf-8")
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert rows[: len(REGISTRY)] == table_rows()


def test_an_entry_that_contradicts_itself_or_repeats_a_name_is_refused() -> None:
    off = REGISTRY["off"]
    with pytest.raises(ValueError, match="registered already"):
        register_async_mode(off)
    for changes in (
        {"keeps_rows_ahead": True},  # nothing collected ahead, yet rows ahead in the checkpoint
        {"capacity": lambda rollout: 1},  # collects ahead with verl's own sync and no rows in the checkpoint
        {"weight_sync": WeightSyncPolicy.DEFER},
    ):
        with pytest.raises(ValueError, match="with a capacity ahead keeps those rows"):
            register_async_mode(dataclasses.replace(off, name="made_up", **changes))
    assert "made_up" not in REGISTRY and isinstance(off, AsyncMode)


def _mentions_mode(node: ast.AST) -> bool:
    return any(
        (isinstance(n, ast.Attribute) and n.attr in ("async_mode", "_mode"))
        or (isinstance(n, ast.Name) and n.id in ("async_mode", "mode"))
        for n in ast.walk(node)
    )


def _mode_names_in(node: ast.AST) -> set[str]:
    return {c.value for c in ast.walk(node) if isinstance(c, ast.Constant) and isinstance(c.value, str)} & set(REGISTRY)


def _mode_comparisons(path: Path) -> list[str]:
    """``x.async_mode == "..."`` / ``in (...)`` / ``mode == "one_step_off"``: comparisons of a mode with mode names;
    and look-ups of a mode in a table of mode names (``{"one_step_off": 1, ...}.get(ro.async_mode, 0)``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        hit = False
        if isinstance(node, ast.Compare):
            hit = _mentions_mode(node) and bool(_mode_names_in(node))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            table = node.func.value
            hit = isinstance(table, ast.Dict) and bool(_mode_names_in(table)) and any(map(_mentions_mode, node.args))
        elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Dict):
            hit = bool(_mode_names_in(node.value)) and _mentions_mode(node.slice)
        if hit:
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_no_string_comparisons_on_the_mode_outside_the_registry() -> None:
    found = [
        hit
        for path in sorted((ROOT / "verlog").rglob("*.py"))
        if path.name != "async_modes.py"
        for hit in _mode_comparisons(path)
    ]
    assert not found, (
        "compare the entry's properties (verlog/config/async_modes.py), not the mode's name: " + ", ".join(found)
    )
