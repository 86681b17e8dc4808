"""Settings and fixtures shared by the whole test suite.

Environment: offline Hugging Face, no usage reporting, Ray without an auth token in the home folder, a small vLLM
KV cache. Fixtures: ``tiny_model`` (one tiny Qwen2 model per test session, built locally by verlog.models.tiny_model).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

_TEST_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_AUTH_MODE": "disabled",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "WANDB_MODE": "disabled",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}
for _key, _value in _TEST_ENV.items():
    os.environ.setdefault(_key, _value)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random-weight Qwen2 model folder (148k parameters, head_dim 32), shared by the session."""
    from verlog.models.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny_model"), seed=0)


@pytest.fixture(scope="session")
def tiny_vlm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random-weight Qwen2-VL model folder with its processor (``verlog tiny-model --vision``), shared by the
    session (tests that read it only; a test that trains writes elsewhere)."""
    from verlog.models.tiny_vlm import build_tiny_vlm

    return build_tiny_vlm(tmp_path_factory.mktemp("tiny_vlm") / "model")


@pytest.fixture(scope="module")
def tokenizer(tiny_model: Path):
    """The tiny model's tokenizer (one per test module)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_model))


@pytest.fixture(scope="session", autouse=True)
def _clean_engine_leftovers():
    """vLLM and verl leave shared-memory segments and /tmp files behind: remove those no live process uses."""
    from verlog.models.tiny_model import clean_engine_leftovers

    yield
    clean_engine_leftovers()
