"""Shared-prefix passes (hardware.prefix_sharing) against the per-row pass, on real rows of the four games.

Each game's rows come from its env through the sliding memory, as training collects them
(verlog.models.tiny_model.collect_turn_rows), ordered into micro-batches as the trainer orders them (order_for_sharing).
For the actor (a causal LM) the per-token log-probs and entropies, for the critic (a token-classification value model)
the values, must equal the per-row forward within 1e-5 (fp32), and every parameter's gradient within 1e-4 relative.
"""

from __future__ import annotations

import pytest
import torch

from verlog.trainer.prefix_sharing import (
    batch_sharing_stats,
    find_prefix_groups,
    order_for_sharing,
    pack_rows,
    scatter_to_rows,
    shared_forward,
)

GAMES = {
    # env id: (slots, turns, memory n) -- small versions of the benchmark batches
    "toy/delayed": (4, 4, 1),
    "babyai/goto": (4, 6, 1),
    "babaisai/two_room-goto_win": (8, 3, 0),
    "crafter/default": (3, 4, 1),
}
MICRO = 8


def test_groups_share_their_prefix_and_keep_a_prompt_token():
    a = list(range(100))
    prompts = [[*a, 7, 8], [*a, 9], a[:60] + [5] * 50, [3, 4, 5], [*a, 7, 8, 9]]
    groups = find_prefix_groups(prompts)
    assert groups is not None
    for g, (first, p) in enumerate(zip(groups.first_row, groups.prefix_lens)):
        rows = [i for i, x in enumerate(groups.group_of_row) if x == g]
        assert first in rows and p >= 1
        for i in rows:
            assert prompts[i][:p] == prompts[first][:p]
            assert p <= len(prompts[i]) - 1  # the last prompt token stays the row's own
    # the three rows on a's 100 tokens share one group; the short unrelated prompt is alone
    assert groups.group_of_row[0] == groups.group_of_row[1] == groups.group_of_row[4]
    assert groups.group_of_row[3] not in {groups.group_of_row[i] for i in (0, 1, 2, 4)}
    assert find_prefix_groups([[1], [1, 2]]) is None  # a one-token prompt: nothing to share


def test_order_puts_neighbours_in_micro_batches_and_mixes_mini_batches():
    prompts = [[k % 4] * 20 + [k] for k in range(32)]  # four instructions, eight rows each
    order = order_for_sharing(prompts, 4, seed=0)
    assert sorted(order) == list(range(32))
    for start in range(0, 32, 4):  # each micro-batch: one instruction
        assert len({prompts[i][0] for i in order[start : start + 4]}) == 1
    first_half = {prompts[i][0] for i in order[:16]}
    assert len(first_half) > 1  # not the sorted order: a mini-batch of 16 rows sees several instructions
    assert order_for_sharing(prompts, 4, seed=0) == order
    stats = batch_sharing_stats([prompts[i] for i in order], [3] * 32, 4)
    assert stats["rows_per_group"] == 4.0 and stats["computed_token_share"] < 0.4


@pytest.fixture(scope="module")
def models(tiny_model):
    from transformers import AutoModelForCausalLM, AutoModelForTokenClassification

    torch.manual_seed(0)
    lm = AutoModelForCausalLM.from_pretrained(str(tiny_model), dtype=torch.float32, attn_implementation="sdpa")
    value = AutoModelForTokenClassification.from_pretrained(
        str(tiny_model), num_labels=1, dtype=torch.float32, attn_implementation="sdpa"
    )
    value.dropout.p = 0.0  # verl's critic loads with classifier_dropout 0
    return lm.train(), value.train()


def _micro_batches(env_id, tokenizer):
    from verlog.models.tiny_model import collect_turn_rows

    slots, turns, memory_n = GAMES[env_id]
    batch = collect_turn_rows(env_id, tokenizer, slots=slots, turns=turns, memory_n=memory_n, seed=3)
    prompts = [r.prompt_ids for r in batch.rows]
    order = order_for_sharing(prompts, MICRO, seed=1)
    rows = [(batch.rows[i].prompt_ids, batch.rows[i].response_ids) for i in order]
    return [rows[k : k + MICRO] for k in range(0, len(rows), MICRO)]


def _reference(model, rows):
    """The per-row pass: each row alone, outputs at its read positions (the last prompt token and the response's
    tokens but the last), concatenated."""
    outs = []
    for prompt, response in rows:
        ids = torch.tensor([prompt + response])
        out = model(input_ids=ids, position_ids=torch.arange(ids.shape[1])[None]).logits[0]
        outs.append(out[len(prompt) - 1 : len(prompt) - 1 + len(response)])
    return torch.cat(outs)


def _shared(model, rows, kind):
    groups = find_prefix_groups([p for p, _ in rows])
    seqs = [torch.tensor(p + r) for p, r in rows]
    layout = pack_rows(seqs, [torch.arange(len(s)) for s in seqs], [len(p) for p, _ in rows], groups)
    return shared_forward(model, layout, kind), layout


def _log_probs(logits, labels):
    return torch.log_softmax(logits, -1).gather(-1, labels[:, None])[:, 0]


def _entropy(logits):
    p = torch.softmax(logits, -1)
    return -(p * torch.log_softmax(logits, -1)).sum(-1)


def _grads(model):
    return {name: p.grad.detach().clone() for name, p in model.named_parameters() if p.grad is not None}


def _assert_grads_close(shared, reference):
    assert shared.keys() == reference.keys()
    for name, ref in reference.items():
        scale = float(ref.norm())
        if scale == 0.0:
            assert float(shared[name].norm()) == 0.0, name
            continue
        rel = float((shared[name] - ref).norm()) / scale
        assert rel < 1e-4, f"{name}: relative gradient difference {rel:.2e}"


@pytest.mark.parametrize("env_id", sorted(GAMES))
def test_shared_passes_equal_per_row_passes(env_id, models, tokenizer):
    lm, value = models
    micro_batches = _micro_batches(env_id, tokenizer)
    computed = total = 0
    for rows in micro_batches:
        labels = torch.tensor([t for _, r in rows for t in r])
        # actor: log-probs and entropy, then the gradient of a loss on both
        ref_logits = _reference(lm, rows)
        logits, layout = _shared(lm, rows, "lm")
        assert torch.equal(layout.labels, labels)
        computed, total = computed + layout.computed_tokens, total + sum(len(p) + len(r) for p, r in rows)
        assert (_log_probs(logits, labels) - _log_probs(ref_logits, labels)).abs().max() < 1e-5
        assert (_entropy(logits) - _entropy(ref_logits)).abs().max() < 1e-5
        weights = torch.linspace(-1.0, 1.0, len(labels))  # a PPO-like loss: per-token weights, entropy bonus

        def actor_loss(out, weights=weights, labels=labels):
            return (weights * _log_probs(out, labels)).sum() - 0.01 * _entropy(out).sum()

        lm.zero_grad()
        actor_loss(_reference(lm, rows)).backward()
        reference = _grads(lm)
        lm.zero_grad()
        actor_loss(_shared(lm, rows, "lm")[0]).backward()
        _assert_grads_close(_grads(lm), reference)
        # critic: values, then the gradient of a squared error
        ref_values = _reference(value, rows)[:, 0]
        values, _ = _shared(value, rows, "value")
        assert (values - ref_values).abs().max() < 1e-5
        value.zero_grad()
        ((_reference(value, rows)[:, 0] - weights) ** 2).sum().backward()
        reference = _grads(value)
        value.zero_grad()
        ((_shared(value, rows, "value")[0] - weights) ** 2).sum().backward()
        _assert_grads_close(_grads(value), reference)
    assert computed < 0.8 * total, f"{env_id}: the shared passes computed {computed} of {total} tokens"


def test_scatter_to_rows_fills_the_positions_verl_reads(models, tokenizer):
    rows = _micro_batches("toy/delayed", tokenizer)[0]
    lm, _ = models
    _logits, layout = _shared(lm, rows, "lm")
    flat = scatter_to_rows(torch.arange(len(layout.read_index), dtype=torch.float32) + 1, layout)
    assert flat.shape[0] == sum(len(p) + len(r) for p, r in rows)
    start = 0
    k = 0
    for prompt, response in rows:
        n = len(prompt) + len(response)
        row = flat[start : start + n]
        read = row[len(prompt) - 1 : len(prompt) - 1 + len(response)]  # verl's no_padding_2_padding slice
        assert torch.equal(read, torch.arange(k, k + len(response), dtype=torch.float32) + 1)
        assert float(row.abs().sum() - read.abs().sum()) == 0.0
        start, k = start + n, k + len(response)
