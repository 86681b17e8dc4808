"""The LoRA check's row handling and schedule (verlog/trainer/lora_check.py); its end-to-end proof through verl, Ray
and vLLM is test_lora_e2e.py."""

from __future__ import annotations

import torch
from verl import DataProto

from verlog.trainer.lora_check import CHECK_ROWS, LoraCheck, check_rows, row_sequences


def _rows(prompts: list[list[int]], responses: list[list[int]], width: int = 5, length: int = 4) -> DataProto:
    """verl's layout: prompts left-padded to ``width``, responses right-padded to ``length`` (pad id 0)."""
    k = len(prompts)
    p_ids, p_mask = torch.zeros((k, width), dtype=torch.long), torch.zeros((k, width), dtype=torch.long)
    r_ids, r_mask = torch.zeros((k, length), dtype=torch.long), torch.zeros((k, length), dtype=torch.long)
    for i, (p, r) in enumerate(zip(prompts, responses)):
        p_ids[i, width - len(p) :], p_mask[i, width - len(p) :] = torch.tensor(p), 1
        if r:
            r_ids[i, : len(r)], r_mask[i, : len(r)] = torch.tensor(r), 1
    tensors = {
        "prompts": p_ids,
        "responses": r_ids,
        "response_mask": r_mask,
        "input_ids": torch.cat([p_ids, r_ids], dim=1),
        "attention_mask": torch.cat([p_mask, r_mask], dim=1),
    }
    return DataProto.from_dict(tensors=tensors, meta_info={"temperature": 0.7, "global_steps": 3})


def test_check_rows_takes_the_shortest_answered_rows_at_temperature_one():
    batch = _rows(
        prompts=[[5, 6, 7, 8], [9], [10, 11], [12, 13, 14], [15, 16, 17, 18, 19], [20]],
        responses=[[1, 2], [3], [], [4, 4, 4], [2], [7, 7]],
    )
    sub, real = check_rows(batch, divisor=4)
    assert real == CHECK_ROWS == 4
    sequences, prompt_lengths = row_sequences(sub, real)
    # lengths 2 ([9]+[3]), 2 (row 2 has no answer: skipped), 3 ([20]+[7,7]), 6, 6, 6: the stable order keeps ties
    assert sequences == [[9, 3], [20, 7, 7], [5, 6, 7, 8, 1, 2], [12, 13, 14, 4, 4, 4]]
    assert prompt_lengths == [1, 1, 4, 3]
    assert sub.meta_info["temperature"] == 1.0 and batch.meta_info["temperature"] == 0.7


def test_check_rows_pads_to_whole_micro_batches_of_every_rank():
    batch = _rows(prompts=[[5], [6, 7], [8, 9, 10]], responses=[[1], [2], [3]])
    sub, real = check_rows(batch, divisor=4)
    assert real == 3 and len(sub) == 4  # the copies only fill verl's micro-batches; the gaps read the real rows


def test_the_check_runs_first_then_once_after_the_first_update():
    check = LoraCheck()
    assert not check.due(updated=False, synced=False)  # the server holds older weights (a deferred sync)
    assert check.due(updated=False, synced=True)  # the first iteration: the untouched adapter
    check.record(updated=False)
    assert not check.due(updated=False, synced=True)  # critic-only iterations: nothing new to check
    assert check.due(updated=True, synced=True)  # the first after an actor update
    check.record(updated=True)
    assert not check.due(updated=True, synced=True)


def test_a_resumed_run_checks_its_trained_adapter_once():
    check = LoraCheck()
    assert check.due(updated=True, synced=True)
    check.record(updated=True)
    assert not check.due(updated=True, synced=True)
