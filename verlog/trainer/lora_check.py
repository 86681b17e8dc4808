"""Proof that a LoRA adapter reaches the inference server (``model.lora.rank`` > 0; docs/lora.md).

LoRA's classic failure is silent: the adapter never reaches the engine, the server samples with the base weights,
and training merely looks slow. So, at the first iteration of a run and at the first one after the actor's first
update, the trainer takes a few rows of the iteration (their prompt and response tokens, fixed) and compares the
log-probabilities of their response tokens, at temperature 1, under three models:

- the server's: vLLM's prompt log-probs of the whole sequence (``prompt_logprobs``), with the adapter it serves;
- the trainer's: the FSDP actor with its adapter;
- the base model's: the same actor with the adapter disabled (verl's ``no_lora_adapter``, the way verl computes
  reference log-probs for a LoRA actor).

``check/lora_server_gap`` = max |server - trainer| is float noise when the adapter arrived; ``check/lora_base_gap``
= max |base - trainer| is 0 before the first update (LoRA's ``B`` starts at 0) and grows as the adapter learns. Had
the server kept the base weights, the server gap would equal the base gap.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import torch
from verl import DataProto
from verl.protocol import pad_dataproto_to_divisor

from verlog.rollout.generator import run_coroutine

CHECK_ROWS = 4
"""Rows of the iteration whose response tokens are compared (the shortest ones)."""

SERVER_GAP_WARN = 1e-3
"""A larger server gap is printed as a warning: fp32 float noise between vLLM and the FSDP actor is about 1e-5."""

LogProbs = Callable[[DataProto], torch.Tensor]
"""A pass of the actor over rows: their response tokens' log-probs, shape ``(rows, response_length)``."""


class LoraCheck:
    """When the check runs: at the first iteration it can (the server holds the actor's weights), and once more at
    the first iteration after the adapter was updated; then never again in the run."""

    def __init__(self) -> None:
        self.checked = False
        self.done = False

    def due(self, updated: bool, synced: bool) -> bool:
        """Whether to check now; ``updated``: the actor was updated before this iteration; ``synced``: the server
        holds the actor's newest weights."""
        return synced and not self.done and (not self.checked or updated)

    def record(self, updated: bool) -> None:
        self.checked = True
        self.done = updated


def check_rows(batch: DataProto, divisor: int, rows: int = CHECK_ROWS) -> tuple[DataProto, int]:
    """The ``rows`` shortest rows with a response (fixed tokens), at temperature 1, padded (with copies) to a multiple
    of ``divisor`` (ranks x micro-batch rows: verl's passes need whole micro-batches); and how many are real."""
    lengths = batch.batch["attention_mask"].sum(dim=1)
    answered = batch.batch["attention_mask"][:, batch.batch["prompts"].shape[1] :].sum(dim=1) > 0
    order = [i for i in torch.argsort(lengths, stable=True).tolist() if bool(answered[i])][:rows]
    sub = batch.select_idxs(torch.tensor(order, dtype=torch.long))
    sub.meta_info = {**batch.meta_info, "temperature": 1.0}  # vLLM's prompt log-probs are untempered
    padded, _ = pad_dataproto_to_divisor(sub, divisor)
    return padded, len(order)


def row_sequences(sub: DataProto, rows: int) -> tuple[list[list[int]], list[int]]:
    """Each row's tokens (prompt without its left padding, then the response without its right padding) and the
    prompt's length."""
    width = int(sub.batch["prompts"].shape[1])
    sequences, prompt_lengths = [], []
    for i in range(rows):
        keep = sub.batch["attention_mask"][i].bool()
        sequences.append(sub.batch["input_ids"][i][keep].tolist())
        prompt_lengths.append(int(keep[:width].sum()))
    return sequences, prompt_lengths


async def _prompt_log_probs(client: Any, request_id: str, ids: list[int]) -> list[float] | None:
    """log p(ids[j + 1] | ids[: j + 1]) for every j, from verl's server (its ``extra_fields["prompt_logprobs"]``:
    one entry per prompt token, the last a pad); None when the server returned none."""
    params = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "max_tokens": 1, "prompt_logprobs": 0}
    out = await client.generate(request_id, prompt_ids=ids, sampling_params=params)
    scored = (getattr(out, "extra_fields", None) or {}).get("prompt_logprobs")
    return None if scored is None else [float(entry[0]) for entry in scored[:-1]]


def server_log_probs(
    client: Any, sequences: list[list[int]], prompt_lengths: list[int], width: int, tag: str
) -> torch.Tensor:
    """The server's log-probs of each sequence's response tokens, laid out as verl's (shape ``(rows, width)``,
    0 past a response; NaN where the server returned none); ``client``: verl's ``LLMServerClient``."""

    async def score_all() -> list[list[float] | None]:
        calls = [_prompt_log_probs(client, f"{tag}-{i}", ids) for i, ids in enumerate(sequences)]
        return list(await asyncio.gather(*calls))

    scored = run_coroutine(score_all())
    out = torch.zeros((len(sequences), width), dtype=torch.float32)
    for i, (lps, start) in enumerate(zip(scored, prompt_lengths)):
        if lps is None:
            out[i] = float("nan")
            continue
        response = lps[start - 1 :]  # the first response token is token `start`, scored at index start - 1
        out[i, : len(response)] = torch.tensor(response, dtype=torch.float32)
    return out


def lora_gaps(
    batch: DataProto, divisor: int, client: Any, trainer: LogProbs, base: LogProbs, tag: str
) -> dict[str, float]:
    """``check/lora_server_gap`` and ``check/lora_base_gap`` (module docstring) on a few rows of ``batch``;
    ``divisor``: ranks x micro-batch rows; ``trainer`` and ``base``: the actor's passes with and without its
    adapter."""
    sub, rows = check_rows(batch, divisor)
    if rows == 0:
        return {}
    sequences, prompt_lengths = row_sequences(sub, rows)
    mine = trainer(sub)[:rows].float()
    width = int(mine.shape[1])
    served = server_log_probs(client, sequences, prompt_lengths, width, tag)
    original = base(sub)[:rows].float()
    mask = sub.batch["attention_mask"][:rows, -width:].bool()
    return {
        "check/lora_server_gap": float((served - mine).abs()[mask].max()),
        "check/lora_base_gap": float((original - mine).abs()[mask].max()),
    }
