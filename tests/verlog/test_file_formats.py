"""The names of verlog's file and state formats are part of what it has written: checkpoints (memory, slots,
curriculum), data folders (demos, SFT tapes), tapes, evaluation summaries, exports, sweeps and viewer pages carry
them, and readers refuse any other. Moving a module must not rename them (a renamed format would refuse every
checkpoint and data folder written before), so this list is fixed by hand."""

from __future__ import annotations

import importlib

import pytest

FORMATS = [
    ("verlog.prompting.memory", "STATE_FORMAT", "verlog.memory/1"),
    ("verlog.rollout.slots", "STATE_FORMAT", "verlog.rollout/1"),
    ("verlog.algorithms.curriculum", "_STATE_FORMAT", "verlog.curriculum/1"),
    ("verlog.sft.demos", "FORMAT", "verlog.demos/1"),
    ("verlog.sft.tapes", "FORMAT", "verlog.sft-tapes/1"),
    ("verlog.tapes.record", "FORMAT_PREFIX", "verlog.turnlog/"),
    ("verlog.eval.report", "SUMMARY_FORMAT", "verlog.eval/1"),
    ("verlog.trainer.export", "EXPORT_FORMAT", "verlog.export/1"),
    ("verlog.sweep.folder", "SWEEP_FORMAT", "verlog.sweep/1"),
    ("verlog.viewer.build", "PAYLOAD_FORMAT", "verlog.view/1"),
]


@pytest.mark.parametrize(("module", "name", "value"), FORMATS, ids=[f[2] for f in FORMATS])
def test_a_format_keeps_the_name_it_was_written_with(module: str, name: str, value: str) -> None:
    assert getattr(importlib.import_module(module), name) == value
