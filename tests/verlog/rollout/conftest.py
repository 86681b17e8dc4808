"""Fixtures of the rollout tests: the tiny model's tokenizer and a transformers generator standing in for vLLM (one
of each per test module, so that a module's sampling does not depend on which modules ran before it)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def tokenizer(tiny_model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model)


@pytest.fixture(scope="module")
def generator(tiny_model, tokenizer):
    from verlog.rollout import TransformersGenerator

    return TransformersGenerator(str(tiny_model), tokenizer, seed=0)
