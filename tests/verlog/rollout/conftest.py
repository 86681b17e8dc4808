"""Fixtures of the rollout tests: a transformers generator standing in for vLLM (one per test module, so that a
module's sampling does not depend on which modules ran before it), on tests/conftest.py's tokenizer."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def generator(tiny_model, tokenizer):
    from verlog.rollout import TransformersGenerator

    return TransformersGenerator(str(tiny_model), tokenizer, seed=0)
