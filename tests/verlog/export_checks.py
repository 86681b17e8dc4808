"""Checks of ``verlog export`` against a checkpoint's own weights, shared by the end-to-end tests (a full run in
tests/verlog/trainer/test_train_e2e.py, a LoRA run in the LoRA end-to-end test) and usable by hand on any run folder.

- :func:`shard_state_dict`: a checkpoint's weights read straight from verl's FSDP shards (not through verl's merger
  nor :mod:`verlog.trainer.checkpoint_model`).
- :func:`answer_log_probs`: a model's log-probs of a fixed answer to a fixed chat prompt.
- :func:`vllm_answer_log_probs`: the same log-probs from vLLM, started as ``verlog eval`` starts it (a subprocess:
  this file is its script).
- :func:`check_adapter_export`: a LoRA run exported twice (merged, and ``--adapter-only``); the adapter loaded with
  PEFT over the base model it names gives the merged export's log-probs.

Where the base weights of a LoRA checkpoint come from: LoRA freezes them, so the checkpoint's shards hold the model
the run started from, unchanged, beside the adapter; ``--adapter-only`` names that model (the run's ``model.path``)
in ``adapter_config.json``. :func:`check_adapter_export` checks that claim: the shards' base weights equal that
model's, tensor for tensor.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

PROMPT = [
    {"role": "system", "content": "You play a text game. Answer with ACTION: <action>."},
    {"role": "user", "content": "You see a red ball 2 steps forward and a wall to your left. What do you do?"},
]
ANSWER = "THINK: the ball is ahead.\nACTION: go forward"
FLOAT_NOISE = 1e-4
"""Log-prob gaps between two computations of the same fp32 policy (the training tests' tolerance, docs/stack.md)."""
LOG_PROBS_LINE = "answer log-probs: "
"""How the subprocess of :func:`vllm_answer_log_probs` hands its result back (a line on stdout, then JSON)."""
SHARD_NAME = re.compile(r"model_world_size_(\d+)_rank_(\d+)\.pt")


def shard_state_dict(actor: Path) -> dict[str, Any]:
    """A checkpoint's weights from the FSDP shards of its ``actor/`` folder: each DTensor's local pieces joined along
    the dimension it is sharded on (FSDP2 on a 1-D mesh, what verlog trains with). Names as verl saved them (a LoRA
    run's carry PEFT's ``base_model.model.`` prefix and ``base_layer`` / ``lora_A`` / ``lora_B``)."""
    import torch
    from torch.distributed.tensor import DTensor

    paths = sorted(actor.glob("model_world_size_*_rank_*.pt"), key=lambda p: int(SHARD_NAME.fullmatch(p.name)[2]))
    shards = [torch.load(p, map_location="cpu", weights_only=False) for p in paths]
    merged: dict[str, Any] = {}
    for key, first in shards[0].items():
        if not isinstance(first, DTensor):
            merged[key] = first
            continue
        (placement,) = first.placements
        locals_ = [shard[key]._local_tensor for shard in shards]
        merged[key] = torch.cat(locals_, dim=placement.dim) if placement.is_shard() else locals_[0]
    return merged


def answer_log_probs(model: Any, tokenizer: Any) -> list[float]:
    """``model``'s log-prob of each token of :data:`ANSWER` after :data:`PROMPT` rendered with the chat template
    (a transformers causal LM or a PEFT model over one). Returns one float per answer token."""
    import torch

    prompt, answer = prompt_and_answer_ids(tokenizer)
    ids = torch.tensor([prompt + answer])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()  # (answer tokens, vocab)
    log_probs = torch.log_softmax(logits, dim=-1)
    return log_probs.gather(1, torch.tensor(answer)[:, None])[:, 0].tolist()


def prompt_and_answer_ids(tokenizer: Any) -> tuple[list[int], list[int]]:
    """Token ids of :data:`PROMPT` (chat template, generation prompt added) and of :data:`ANSWER`."""
    prompt = tokenizer.apply_chat_template(PROMPT, add_generation_prompt=True, tokenize=True, return_dict=False)
    if isinstance(prompt, dict):  # transformers 5 may return a BatchEncoding
        prompt = prompt["input_ids"]
    return list(prompt), tokenizer(ANSWER, add_special_tokens=False)["input_ids"]


def vllm_answer_log_probs(folder: Path, eval_out: Path) -> list[float]:
    """vLLM's log-prob of each token of :data:`ANSWER` after :data:`PROMPT` with the model in ``folder``, from the
    engine ``verlog eval`` starts (:func:`verlog.eval.load_model`: float32 on a CPU), in a subprocess (vLLM spawns its
    workers); the same engine then plays one short babyai/goto episode through verlog's evaluation, whose summary.json
    goes to ``eval_out``."""
    proc = subprocess.run(
        [sys.executable, __file__, str(folder), str(eval_out)], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    (line,) = [x for x in proc.stdout.splitlines() if x.startswith(LOG_PROBS_LINE)]
    return json.loads(line.removeprefix(LOG_PROBS_LINE))


def _serve_and_evaluate(folder: Path, eval_out: Path) -> None:
    """The subprocess of :func:`vllm_answer_log_probs`."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    from verlog.eval import EvalProtocol, evaluate, load_model
    from verlog.prompting.sampling import SamplingConfig

    model = load_model(folder, engine="vllm", max_model_len=512 + 16)
    try:
        prompt, answer = prompt_and_answer_ids(model.tokenizer)
        params = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0)
        (out,) = model.generator.llm.generate([TokensPrompt(prompt_token_ids=prompt + answer)], params, use_tqdm=False)
        scored = out.prompt_logprobs[len(prompt) :]  # one {token id: Logprob} per answer token
        log_probs = [position[token].logprob for position, token in zip(scored, answer, strict=True)]
        print(LOG_PROBS_LINE + json.dumps(log_probs), flush=True)
        protocol = EvalProtocol(tasks=("babyai/goto",), episodes_per_task=1, max_steps=2)
        evaluate(protocol, model, SamplingConfig(max_tokens=16), eval_out, max_prompt_tokens=512, n_resamples=100)
    finally:
        model.close()


def max_gap(a: list[float], b: list[float]) -> float:
    assert len(a) == len(b), (len(a), len(b))
    return max(abs(x - y) for x, y in zip(a, b, strict=True))


def check_adapter_export(run_dir: Path, tmp: Path) -> dict[str, float]:
    """Export the latest checkpoint of the LoRA run ``run_dir`` into ``tmp/merged`` (the model, adapter merged) and
    ``tmp/adapter`` (``--adapter-only``), and check them against the checkpoint's shards and each other:

    - the adapter folder is a PEFT folder naming the run's ``model.path`` as its base, and the shards' frozen base
      weights equal that model's;
    - the merged export's weights are base + alpha / r * B A, computed here from the shards;
    - PEFT's adapter over that base gives the merged export's log-probs of a fixed prompt and answer within
      :data:`FLOAT_NOISE` (measured 2e-6 to 4e-6), and the adapter was trained (some B is not zero).

    Returns the measured gaps: ``weights`` (merged export against base + alpha / r * B A), ``peft_vs_merged`` and
    ``adapter_vs_base`` (log-probs; how far the adapter moved the policy: the caller may ask more of it).
    """
    import torch
    from peft import PeftModel
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from verlog.cli import main

    merged, adapter = tmp / "merged", tmp / "adapter"
    assert main(["export", str(run_dir), "--out", str(merged)]) == 0
    assert main(["export", str(run_dir), "--adapter-only", "--out", str(adapter)]) == 0
    meta = json.loads((adapter / "verlog_export.json").read_text())
    assert meta["contents"] == "lora_adapter" and json.loads((merged / "verlog_export.json").read_text())["lora_merged"]
    assert {"adapter_config.json", "adapter_model.safetensors", "tokenizer_config.json"} <= {
        p.name for p in adapter.iterdir()
    }
    assert not any(p.name.startswith("model") for p in adapter.iterdir())  # the adapter, not the model
    config = json.loads((adapter / "adapter_config.json").read_text())
    base = Path(config["base_model_name_or_path"])
    assert base.is_dir(), f"the base model {base} named by the adapter is not a folder"
    assert (config["r"], config["lora_alpha"]) == (meta["lora"]["rank"], meta["lora"]["alpha"])
    scale = config["lora_alpha"] / config["r"]

    actor = Path(meta["source"]) / "actor"
    shards = shard_state_dict(actor)
    base_weights = load_file(str(next(base.glob("*.safetensors"))))
    exported = load_file(str(merged / "model.safetensors"))
    weight_gap, trained = 0.0, False
    for name, tensor in base_weights.items():
        module, _, kind = name.rpartition(".")
        lora_a = shards.get(f"base_model.model.{module}.lora_A.default.weight")
        frozen = shards.get(f"base_model.model.{module}.base_layer.{kind}", shards.get(f"base_model.model.{name}"))
        assert frozen is not None, f"{name} of the base model is not in the checkpoint's shards"
        assert torch.equal(frozen, tensor.to(frozen.dtype)), f"the checkpoint's frozen {name} is not the base's"
        expected = frozen
        if lora_a is not None and kind == "weight":
            lora_b = shards[f"base_model.model.{module}.lora_B.default.weight"]
            trained = trained or bool(lora_b.abs().max() > 0)
            expected = frozen + scale * lora_b @ lora_a
        weight_gap = max(weight_gap, float((exported[name] - expected).abs().max()))
    assert trained, "every lora_B is zero: the adapter was never trained"
    assert weight_gap < 1e-5, f"merged weights differ from base + alpha/r * B A by {weight_gap}"

    tokenizer = AutoTokenizer.from_pretrained(adapter)
    base_model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    base_lp = answer_log_probs(base_model, tokenizer)
    peft_lp = answer_log_probs(PeftModel.from_pretrained(base_model, adapter).eval(), tokenizer)
    merged_lp = answer_log_probs(AutoModelForCausalLM.from_pretrained(merged).eval(), tokenizer)
    gaps = {
        "weights": weight_gap,
        "peft_vs_merged": max_gap(peft_lp, merged_lp),
        "adapter_vs_base": max_gap(peft_lp, base_lp),
    }
    assert gaps["peft_vs_merged"] < FLOAT_NOISE, gaps
    return gaps


if __name__ == "__main__":  # vLLM spawns its workers: its script needs this guard
    _serve_and_evaluate(Path(sys.argv[1]), Path(sys.argv[2]))
