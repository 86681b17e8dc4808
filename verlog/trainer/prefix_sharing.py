"""Shared-prefix training passes: rows that begin with the same tokens compute those tokens once.

A micro-batch of ``B`` rows (prompt + response, no padding) is cut into ``G`` groups of rows that share a token
prefix (:func:`find_prefix_groups`, from the token ids alone). One forward pass runs the ``T`` tokens that need
computing, packed as one sequence with their original positions: every group's prefix once, then every row's own tokens
(the rest of its prompt and its response). The linear layers see only those ``T`` tokens; the attention
(:func:`shared_prefix_attention`) gathers them into padded blocks::

    packed      [1, T]          prefixes (group order), then each row's own tokens (row order)
    prefixes    [G, H, P, d]    group g's prefix attends causally to itself (P = longest prefix)
    rows        [B, H, S, d]    row i's own tokens attend to its group's prefix and causally to themselves
                                (keys [B, H, P + S, d]; S = most own tokens of a row)
    read        [K]             each row's last prompt position and its response positions but the last

Why outputs and gradients equal the per-row pass: causal attention at a position reads the keys/values of the
positions before it, and a prefix position's keys/values depend only on the prefix tokens and their positions; every
row of a group has the same prefix at the same positions, so computing it once and letting each row attend to it gives
the per-row numbers (up to float summation order). The prefix's keys/values are gathered into each row's block by
``index_select``, whose backward adds the rows' gradients into the prefix: its parameter gradients are the sum over the
group's rows, as when each row recomputed it (docs/row-cost.md).

Pure torch + transformers (no verl): verlog's FSDP engines (:mod:`verlog.trainer.engines`) call it, and so do the
equality tests and ``bench/row_cost.py`` on a plain Hugging Face model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal

import torch

ModelKind = Literal["lm", "value"]

MERGE_MIN_FRACTION = 0.5
"""A row joins a group only when the shared prefix is at least this share of its own prompt: a short common prefix
would leave long suffixes, and every suffix in the micro-batch is padded to the longest one."""


@dataclass(frozen=True)
class PrefixGroups:
    """Rows grouped by a shared token prefix.

    Attributes:
        group_of_row: ``[B]`` the group index of each row (in the caller's row order).
        prefix_lens: ``[G]`` tokens of each group's prefix, each >= 1 and at most its shortest prompt - 1 (so every
            row keeps its last prompt token, the position that predicts its first response token).
        first_row: ``[G]`` a row of each group (its prefix tokens are that row's first ``prefix_lens[g]`` tokens).
    """

    group_of_row: list[int]
    prefix_lens: list[int]
    first_row: list[int]

    @property
    def num_groups(self) -> int:
        return len(self.prefix_lens)


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def find_prefix_groups(prompts: Sequence[Sequence[int]]) -> PrefixGroups | None:
    """Group rows by the longest common token prefix of their prompts.

    Rows are sorted by their token ids, so rows that share a prefix become neighbours (the longest common prefix of a
    run of sorted rows is the smallest common prefix of neighbours); a run grows while the merge computes fewer
    tokens than it adds (a group of ``n`` rows with prefix ``p`` gains a row when the new prefix ``p'`` keeps
    ``n * p' >= (n - 1) * p``) and the prefix is at least :data:`MERGE_MIN_FRACTION` of the row's prompt. A group's
    prefix is at most its shortest prompt minus one token. Nothing is assumed about the env: instructions that change
    (Crafter), memory n >= 0, several tasks in one batch and users' own envs all group by their tokens.

    Args:
        prompts: ``B`` prompts' token ids.

    Returns:
        The groups, or None when some prompt has fewer than 2 tokens (no prefix can be shared: use the per-row pass).
    """
    if any(len(p) < 2 for p in prompts):
        return None
    order = sorted(range(len(prompts)), key=lambda i: tuple(prompts[i]))
    group_of_row = [0] * len(prompts)
    prefix_lens: list[int] = []
    first_row: list[int] = []
    size = 0
    prefix = 0
    previous: Sequence[int] = ()
    for i in order:
        row = prompts[i]
        own = len(row) - 1
        if size:
            shared = min(prefix, _common_prefix(previous, row), own)
            if shared >= 1 and size * shared >= (size - 1) * prefix and shared >= MERGE_MIN_FRACTION * own:
                prefix, size = shared, size + 1
                prefix_lens[-1] = prefix
                group_of_row[i] = len(prefix_lens) - 1
                previous = row
                continue
        prefix_lens.append(own)
        first_row.append(i)
        group_of_row[i] = len(prefix_lens) - 1
        prefix, size, previous = own, 1, row
    return PrefixGroups(group_of_row, prefix_lens, first_row)


@dataclass(frozen=True)
class PackedLayout:
    """One micro-batch packed for the shared pass (see the module docstring for the picture).

    ``T`` real tokens: every group's prefix once (group order), then every row's own tokens (row order: the rest of
    its prompt, then its response). The linear layers run on these ``T`` tokens and nothing else (no padding); the
    attention gathers them into padded blocks.

    Attributes:
        input_ids, position_ids: ``[1, T]``.
        prefix_index, prefix_valid: ``[G, P]`` the flat index of each group's prefix tokens (right-padded to
            ``P``; padding points at token 0 and is not valid).
        suffix_index, suffix_valid: ``[B, S]`` the flat index of each row's own tokens, right-padded to ``S``.
        row_group: ``[B]`` each row's group.
        read_index: ``[K]`` the flat positions whose outputs the losses read, row by row: the last prompt token and
            every response token but the last (position k predicts response token k; ``K = sum r_i``).
        prompt_lens, response_lens: per row, as given.
    """

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    prefix_index: torch.Tensor
    prefix_valid: torch.Tensor
    suffix_index: torch.Tensor
    suffix_valid: torch.Tensor
    row_group: torch.Tensor
    read_index: torch.Tensor
    prompt_lens: list[int]
    response_lens: list[int]

    @cached_property
    def key_index(self) -> torch.Tensor:
        """``[B, P + S]`` the flat index of the keys each row attends to: its group's prefix, then its own tokens."""
        return torch.cat([self.prefix_index[self.row_group], self.suffix_index], dim=1)

    @cached_property
    def prefix_tokens(self) -> torch.Tensor:
        """The valid entries of ``prefix_index`` as positions of its flattened ``[G * P]`` (row-major)."""
        return self.prefix_valid.reshape(-1).nonzero().squeeze(1)

    @cached_property
    def suffix_tokens(self) -> torch.Tensor:
        """The valid entries of ``suffix_index`` as positions of its flattened ``[B * S]`` (row-major)."""
        return self.suffix_valid.reshape(-1).nonzero().squeeze(1)

    @property
    def computed_tokens(self) -> int:
        """Tokens the shared pass runs through the model (``T``)."""
        return int(self.input_ids.shape[1])

    @property
    def labels(self) -> torch.Tensor:
        """``[K]`` the token each read position predicts (the next token of its row)."""
        return self.input_ids[0, self.read_index + 1]


def pack_rows(
    sequences: Sequence[torch.Tensor],
    positions: Sequence[torch.Tensor],
    prompt_lens: Sequence[int],
    groups: PrefixGroups,
) -> PackedLayout:
    """Pack ``B`` rows for :func:`shared_forward`.

    Args:
        sequences: ``B`` tensors ``[n_i]``: row i's prompt then response tokens, no padding.
        positions: ``B`` tensors ``[n_i]``: their position ids (a prefix keeps its rows' positions, a row's own tokens
            keep theirs).
        prompt_lens: ``B`` prompt lengths (each row has at least one response token).
        groups: :func:`find_prefix_groups` of the prompts.
    """
    device = sequences[0].device
    b, g = len(sequences), groups.num_groups
    lens = [int(s.shape[0]) for s in sequences]
    response_lens = [n - int(p) for n, p in zip(lens, prompt_lens)]
    if min(response_lens) < 1:
        raise ValueError("every row needs at least one response token")
    ids: list[torch.Tensor] = []
    pos: list[torch.Tensor] = []
    width_p = max(groups.prefix_lens)
    prefix_index = torch.zeros((g, width_p), dtype=torch.long)
    prefix_valid = torch.zeros((g, width_p), dtype=torch.bool)
    offset = 0
    for k, (row, p) in enumerate(zip(groups.first_row, groups.prefix_lens)):
        ids.append(sequences[row][:p])
        pos.append(positions[row][:p])
        prefix_index[k, :p] = torch.arange(offset, offset + p)
        prefix_valid[k, :p] = True
        offset += p
    own = [lens[i] - groups.prefix_lens[groups.group_of_row[i]] for i in range(b)]
    width_s = max(own)
    suffix_index = torch.zeros((b, width_s), dtype=torch.long)
    suffix_valid = torch.zeros((b, width_s), dtype=torch.bool)
    read: list[torch.Tensor] = []
    for i in range(b):
        p = groups.prefix_lens[groups.group_of_row[i]]
        ids.append(sequences[i][p:])
        pos.append(positions[i][p:])
        suffix_index[i, : own[i]] = torch.arange(offset, offset + own[i])
        suffix_valid[i, : own[i]] = True
        first = offset + int(prompt_lens[i]) - p - 1  # the row's last prompt token
        read.append(torch.arange(first, first + response_lens[i]))
        offset += own[i]
    return PackedLayout(
        input_ids=torch.cat(ids).to(device).view(1, -1),
        position_ids=torch.cat(pos).to(device).view(1, -1),
        prefix_index=prefix_index.to(device),
        prefix_valid=prefix_valid.to(device),
        suffix_index=suffix_index.to(device),
        suffix_valid=suffix_valid.to(device),
        row_group=torch.tensor(groups.group_of_row, dtype=torch.long, device=device),
        read_index=torch.cat(read).to(device),
        prompt_lens=[int(p) for p in prompt_lens],
        response_lens=response_lens,
    )


def full_attention_only(config: Any) -> bool:
    """Whether every layer of the model attends to the whole context (no sliding window), as the packed attention
    does; a model config that says otherwise takes the per-row path."""
    if config is None:
        return False
    if getattr(config, "use_sliding_window", False) and getattr(config, "sliding_window", None):
        return False
    layer_types = getattr(config, "layer_types", None) or []
    return all(t == "full_attention" for t in layer_types)


ATTENTION_NAME = "verlog_shared_prefix"
"""The attention implementation :func:`shared_forward` switches the model to for its pass (registered with
transformers' ``AttentionInterface``; no attention mask is built for it)."""
LAYOUT_KWARG = "verlog_layout"


def shared_prefix_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """Attention over a :class:`PackedLayout` (transformers' attention-function signature).

    ``query`` ``[1, H, T, d]``, ``key``/``value`` ``[1, Hkv, T, d]``; returns ``[1, T, H, d]``. The prefixes attend
    causally to themselves (``[G, H, P, d]``); each row's own tokens attend to its group's prefix and causally to
    themselves (``[B, H, S, d]`` against ``[B, H, P + S, d]``); both scatter back to the flat order."""
    layout: PackedLayout = kwargs[LAYOUT_KWARG]
    from transformers.integrations.sdpa_attention import repeat_kv

    groups = int(getattr(module, "num_key_value_groups", 1))
    q, k, v = query[0], repeat_kv(key, groups)[0], repeat_kv(value, groups)[0]  # [H, T, d]
    heads, dim = q.shape[0], q.shape[2]
    sdpa = torch.nn.functional.scaled_dot_product_attention
    g, width_p = layout.prefix_index.shape
    b, width_s = layout.suffix_index.shape

    def gather(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:  # [H, T, d] -> [rows, H, cols, d]
        # index_select, whose backward adds into the source (advanced indexing's backward is a slower scatter)
        return x.index_select(1, index.reshape(-1)).view(heads, *index.shape, dim).transpose(0, 1)

    causal_p = torch.ones((width_p, width_p), dtype=torch.bool, device=q.device).tril()
    mask_p = causal_p[None, None] & layout.prefix_valid[:, None, None, :]
    out_p = sdpa(
        gather(q, layout.prefix_index),
        gather(k, layout.prefix_index),
        gather(v, layout.prefix_index),
        attn_mask=mask_p,
        dropout_p=dropout,
        scale=scaling,
    )  # [G, H, P, d]
    keys = layout.key_index  # [B, P + S]: the group's prefix, then the row's own tokens
    causal_s = torch.ones((width_s, width_s), dtype=torch.bool, device=q.device).tril()
    mask_s = torch.cat(
        [
            layout.prefix_valid[layout.row_group][:, None, None, :].expand(-1, 1, width_s, -1),
            causal_s[None, None] & layout.suffix_valid[:, None, None, :],
        ],
        dim=-1,
    )  # [B, 1, S, P + S]
    out_s = sdpa(
        gather(q, layout.suffix_index),
        gather(k, keys),
        gather(v, keys),
        attn_mask=mask_s,
        dropout_p=dropout,
        scale=scaling,
    )  # [B, H, S, d]
    # the valid tokens in row-major order are the flat order
    flat = torch.cat(
        [
            out_p.transpose(1, 2).reshape(g * width_p, heads, dim).index_select(0, layout.prefix_tokens),
            out_s.transpose(1, 2).reshape(b * width_s, heads, dim).index_select(0, layout.suffix_tokens),
        ],
        dim=0,
    )  # [T, H, d]
    return flat.unsqueeze(0), None


def _register_attention() -> None:
    from transformers import AttentionInterface

    if ATTENTION_NAME not in AttentionInterface._global_mapping:
        AttentionInterface.register(ATTENTION_NAME, shared_prefix_attention)


def shared_forward(model: Any, layout: PackedLayout, kind: ModelKind) -> torch.Tensor:
    """One forward pass over a :class:`PackedLayout`; returns the model's output at the read positions.

    Args:
        model: a Hugging Face causal LM (``kind="lm"``) or a token-classification value model with one label
            (``kind="value"``), plain or wrapped by FSDP (its root forward is called once, as verl's path does).

    Returns:
        ``kind="lm"``: logits ``[K, V]`` (read position k predicts ``layout.labels[k]``); ``kind="value"``: values
        ``[K]`` (the value before each response token).
    """
    _register_attention()
    config = model.config
    before = config._attn_implementation
    config._attn_implementation = ATTENTION_NAME
    try:
        out = model(
            input_ids=layout.input_ids,
            position_ids=layout.position_ids,
            use_cache=False,
            **({"logits_to_keep": layout.read_index} if kind == "lm" else {}),
            **{LAYOUT_KWARG: layout},
        )
    finally:
        config._attn_implementation = before
    if kind == "lm":
        return out.logits[0]
    values = out.logits if hasattr(out, "logits") else out[2]
    return values[0, layout.read_index].reshape(-1)


def scatter_to_rows(read: torch.Tensor, layout: PackedLayout) -> torch.Tensor:
    """Read outputs ``[K, ...]`` laid out as verl's no-padding outputs: one flat ``[sum n_i, ...]`` tensor, row i's
    ``n_i`` positions in turn, position ``prompt_len - 1 + k`` holding its read output k (the positions nobody reads,
    the prompt's but the last and the final one, hold 0). Differentiable."""
    pieces = []
    tail = read.shape[1:]
    start = 0
    for p, r in zip(layout.prompt_lens, layout.response_lens):
        pieces.append(read.new_zeros((p - 1, *tail)))
        pieces.append(read[start : start + r])
        pieces.append(read.new_zeros((1, *tail)))
        start += r
    return torch.cat(pieces, dim=0)


def order_for_sharing(prompts: Sequence[Sequence[int]], micro_batch_rows: int, seed: int) -> list[int]:
    """A row order that puts rows sharing a prefix into the same micro-batch, and micro-batches of unrelated rows into
    each mini-batch.

    The rows are sorted by their token ids (shared prefixes become neighbours: same instruction, then same episode,
    then same turn), cut into runs of ``micro_batch_rows``, and the runs are shuffled (``seed``): verl cuts a batch
    into ranks, mini-batches and micro-batches as consecutive runs of whole micro-batches, so every micro-batch is
    one run of neighbours, while a mini-batch mixes runs from the whole batch (the sort alone would give each PPO
    mini-batch a single task or instruction).

    Args:
        prompts: ``N`` prompts' token ids; ``N`` a multiple of ``micro_batch_rows`` (verl's batches are).

    Returns:
        The permutation: position k of the new order holds row ``order[k]``.
    """
    n = len(prompts)
    ranked = sorted(range(n), key=lambda i: tuple(prompts[i]))
    micro = max(1, micro_batch_rows)
    runs = [ranked[k : k + micro] for k in range(0, n, micro)]
    generator = torch.Generator().manual_seed(int(seed))
    shuffled = torch.randperm(len(runs), generator=generator).tolist()
    return [i for r in shuffled for i in runs[r]]


def batch_sharing_stats(
    prompts: Sequence[Sequence[int]], response_lens: Sequence[int], micro_batch_rows: int
) -> dict[str, float]:
    """What the micro-batches of consecutive ``micro_batch_rows`` rows share, over the whole batch.

    Returns:
        ``rows_per_group``: rows per prefix group; ``computed_token_share``: tokens the shared passes compute over the
        tokens of the rows (1.0 = no saving); ``shared_prefix_tokens``: mean prefix length of a group.
    """
    groups = rows = total = computed = prefix_sum = 0
    micro = max(1, micro_batch_rows)
    for k in range(0, len(prompts), micro):
        chunk = prompts[k : k + micro]
        lens = [len(p) + int(r) for p, r in zip(chunk, response_lens[k : k + micro])]
        found = find_prefix_groups(chunk)
        total += sum(lens)
        rows += len(chunk)
        if found is None:
            groups += len(chunk)
            computed += sum(lens)
            continue
        groups += found.num_groups
        prefix_sum += sum(found.prefix_lens)
        computed += sum(lens) - sum(found.prefix_lens[g] for g in found.group_of_row) + sum(found.prefix_lens)
    return {
        "rows_per_group": rows / max(groups, 1),
        "computed_token_share": computed / max(total, 1),
        "shared_prefix_tokens": prefix_sum / max(groups, 1),
    }
