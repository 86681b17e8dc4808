"""Fixtures shared by the end-to-end training tests of this folder."""

from __future__ import annotations

import pytest
from multitask_run import train_multitask_pipeline  # beside this file
from train_process import read_records


@pytest.fixture(scope="session")
def multitask_pipeline_run(tiny_model, tmp_path_factory):
    """multitask_run.py's run, once per session (test_curriculum_e2e.py and test_async_e2e.py read it): its folder,
    its metrics.jsonl records and its stdout."""
    out = tmp_path_factory.mktemp("multitask_pipeline") / "run"
    proc = train_multitask_pipeline(out, tiny_model)
    return out, read_records(out / "metrics.jsonl"), proc.stdout
