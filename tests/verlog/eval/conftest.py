"""Fixtures shared by the end-to-end evaluation tests of this folder."""

from __future__ import annotations

import pytest
from vllm_eval_run import run_vllm_eval  # beside this file


@pytest.fixture(scope="session")
def vllm_eval_of_tiny_model(tiny_model, tmp_path_factory):
    """vllm_eval_run.py's evaluation, once per session (test_eval_command.py and test_endpoint_e2e.py read it): its
    output folder and its finished process."""
    return run_vllm_eval(tiny_model, tmp_path_factory.mktemp("vllm_eval"))
