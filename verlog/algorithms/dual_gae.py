"""Dual-discount GAE over per-turn rows, masked whitening and the clipped critic loss.

Every agent turn is one row: the response tokens of that turn, right-padded to ``R``. Credit flows inside a turn
with the token discounts ``(token_gamma, token_lam)`` and from one turn to the next with the step discounts
``(step_gamma, step_lam)``. For turn ``t`` with response tokens ``j = 0 .. L_t - 1`` (docs/algorithms.md):

- ``V[t, j]``: the critic's value just before token ``j`` (``j = 0`` is the last prompt token, i.e. ``V(s_t)``);
- inside a turn: ``delta = r[t, j] + token_gamma * V[t, j+1] - V[t, j]`` and
  ``A[t, j] = delta + token_gamma * token_lam * A[t, j+1]``;
- last token: ``delta = r[t, j] + step_gamma * V_next - V[t, j]`` and
  ``A[t, j] = delta + step_gamma * step_lam * A[t+1, 0]``, where ``V_next`` is ``V[t+1, 0]`` when the next turn is in
  the batch, the bootstrap value ``V(s_{t+1})`` when it is not (batch boundary or time limit), and 0 after a true
  termination; ``A[t+1, 0]`` counts as 0 unless the next turn is in the batch.

Positions outside the response mask are skipped: "next token" means the next position inside the mask, as in verl's
``compute_gae_advantage_return``. With equal token and step discounts, turns laid end to end give ordinary GAE.

With ``trace_weights`` (``algorithm.turn_trace=vtrace``, asynchronous rollouts) the advantage flowing in from the
next turn is cut by that turn's ``c = min(1, rho)``: ``A[t, j] = delta + step_gamma * step_lam * c[t+1] * A[t+1, 0]``
on the last token (:func:`turn_trace_weights`; docs/algorithms.md, "V-trace across turns").

No loop over rows: each turn's advantages are linear in the advantage flowing in from its next turn, so the
cross-turn part is a linear recurrence along the ``next_row`` links, solved by pointer jumping in
``ceil(log2(turns per episode))`` vectorised steps; the rest is TD errors for all rows at once and one discounted
reverse cumulative sum per row, done in blocks of matrix products (docs/algorithms.md, "How the fast version
works").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from verlog.errors import AdvantageInputError

LOSS_AGG_MODES = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean")
"""Loss aggregation modes of :func:`value_loss` (the names and meanings of verl's ``agg_loss``)."""

_RowInput = torch.Tensor | Sequence[int] | Sequence[float] | Sequence[bool]


def link_turns(episode_ids: Sequence[str], turn_indices: Sequence[int], ended: Sequence[bool]) -> list[int]:
    """The one definition of row links: for each row, the index of the same episode's next turn among these rows,
    or -1 when the episode ended at this row or its next turn is not among them. Any row order (verl's balancing
    reorders rows; the trainer links them again in that order). It gives :func:`dual_discount_gae` its ``next_row``;
    the rollout (``verlog.rollout.batch.TurnBatch``) and the trainer's advantage step both link with it.

    Args:
        episode_ids, turn_indices: ``[B]`` each row's episode and turn index.
        ended: ``[B]`` the episode terminated or was truncated at this row.
    """
    position = {(str(e), int(t)): i for i, (e, t) in enumerate(zip(episode_ids, turn_indices))}
    return [
        -1 if done else position.get((str(e), int(t) + 1), -1) for e, t, done in zip(episode_ids, turn_indices, ended)
    ]


def dual_discount_gae(
    token_rewards: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    next_row: _RowInput,
    next_value: _RowInput,
    terminated: _RowInput,
    *,
    token_gamma: float,
    token_lam: float,
    step_gamma: float,
    step_lam: float,
    trace_weights: _RowInput | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages and returns of per-turn rows with separate discounts inside and across turns.

    Args:
        token_rewards: ``[B, R]`` reward on each response token (the env reward on the turn's last response token,
            optionally a per-token KL penalty); must be 0 outside ``response_mask``.
        values: ``[B, R]`` critic values, left-shifted as verl's critic returns them: ``values[:, j]`` is the value
            before response token ``j``, so ``values[:, 0]`` is ``V(s_t)``.
        response_mask: ``[B, R]`` 1 (or True) on the model's response tokens, 0 on padding.
        next_row: ``[B]`` integer: the row holding the same episode's next turn, or -1 when it is not in the batch.
            Each row is the next turn of at most one row; links must not form a cycle.
        next_value: ``[B]`` bootstrap value ``V(s_{t+1})`` for rows with ``next_row == -1`` that did not terminate
            (the batch ended mid-episode, or a time limit truncated it); ignored for other rows.
        terminated: ``[B]`` bool: the episode truly ended at this turn (no bootstrap). A terminated row must have
            ``next_row == -1``.
        token_gamma, token_lam: discount and GAE lambda between tokens of one turn (Verlog: 1.0, 1.0).
        step_gamma, step_lam: discount and GAE lambda between turns (Verlog: 0.99, 0.95).
        trace_weights: ``[B]`` in [0, 1], V-trace's ``c = min(1, rho)`` of each row's turn
            (:func:`turn_trace_weights`): the advantage flowing from a turn into the turn before it is multiplied by
            the later turn's ``c``; a row's own TD errors are never cut. None: all 1 (the full trace; all 1 gives the
            same advantages bit for bit).

    Returns:
        ``(advantages, returns)``, both ``[B, R]`` float32 on ``values``' device: raw advantages (not whitened) and
        ``returns = advantages + values``, both 0 outside ``response_mask``. Rows may come in any order.

    Raises:
        AdvantageInputError: bad shapes, dtypes, masks, discounts, ``next_row`` links or trace weights (the message
            names them).
    """
    rows = _link_rows(_check_token_inputs(token_rewards, values, response_mask), next_row, next_value, terminated)
    trace = None if trace_weights is None else _check_trace_weights(trace_weights, values.shape[0], values.device)
    discounts = {"token_gamma": token_gamma, "token_lam": token_lam, "step_gamma": step_gamma, "step_lam": step_lam}
    for name, x in discounts.items():
        if not 0.0 <= float(x) <= 1.0:
            raise AdvantageInputError(f"{name} must be in [0, 1], got {x}")
    vals = rows.values
    if vals.shape[0] == 0:
        empty = torch.zeros_like(vals)
        return empty, empty.clone()
    tg, sg = float(token_gamma), float(step_gamma)
    token_gl, step_gl = tg * float(token_lam), sg * float(step_lam)
    token_rows = torch.nonzero(rows.last_pos >= 0).squeeze(1)
    last_pos = rows.last_pos[token_rows]
    boundary = _boundary_values(rows)

    # TD errors with token discounts everywhere, then the last token of each turn redone with the step discount.
    deltas, powers = _token_td_errors(rows, tg, token_gl)
    last_reward = rows.rewards[token_rows, last_pos]
    last_value = vals[token_rows, last_pos]
    deltas[token_rows, last_pos] = last_reward + sg * boundary[token_rows] - last_value

    # Feed the advantage flowing in from each next turn into the turn's last token, then the reverse pass.
    incoming = _incoming_advantages(rows, deltas, powers, token_gl, step_gl, trace)
    deltas[token_rows, last_pos] += step_gl * incoming[token_rows]
    if rows.contiguous:
        advantages = _discounted_reverse_cumsum_(deltas, token_gl)
    else:  # f = token_gamma * token_lam inside the mask, 1 on holes (they carry the advantage through)
        factors = torch.where(rows.mask, token_gl, 1.0).to(torch.float32)
        advantages = _reverse_scan_with_factors(deltas, factors).mul_(rows.maskf)
    returns = torch.addcmul(advantages, vals, rows.maskf)
    return advantages, returns


def _boundary_values(rows: _Rows) -> torch.Tensor:
    """``[B]`` the value after each turn's last token: the next turn's ``V(s_{t+1})`` when it is in the batch, else
    the bootstrap value, else 0 after a termination."""
    first_value = rows.values.gather(1, rows.first_pos.clamp(min=0)[:, None]).squeeze(1)
    linked = rows.next_row >= 0
    safe_next = torch.where(linked, rows.next_row, torch.zeros_like(rows.next_row))
    zeros = torch.zeros_like(rows.next_value)
    return torch.where(linked, first_value[safe_next], torch.where(rows.terminated, zeros, rows.next_value))


def _token_td_errors(rows: _Rows, tg: float, token_gl: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``(deltas [B, R], powers)``: TD errors with the token discount ``tg`` on every response token (rewards first:
    that also finds rewards outside the mask), and the powers of ``token_gl`` that sum a turn's TD errors into its
    first-token advantage (``[R]`` for a contiguous mask, ``[B, R]`` with holes)."""
    rewards, vals, maskf = rows.rewards, rows.values, rows.maskf
    batch, width = vals.shape
    device = vals.device
    deltas = torch.mul(rewards, maskf)
    if int(torch.count_nonzero(deltas)) != int(torch.count_nonzero(rewards)):
        _raise_stray_reward(rewards, maskf)
    if rows.contiguous:
        deltas[:, :-1].addcmul_(vals[:, 1:], maskf[:, :-1], value=tg)
        powers = torch.pow(torch.tensor(token_gl, device=device), torch.arange(width, device=device).float())
    else:  # holes in the mask: "next token" is the next position inside the mask
        positions = torch.arange(width, device=device).expand(batch, width)
        valid_pos = torch.where(rows.mask, positions, torch.full_like(positions, width))
        after = valid_pos.flip(1).cummin(1).values.flip(1)
        next_pos = torch.cat([after[:, 1:], torch.full((batch, 1), width, device=device)], dim=1)
        next_values = torch.cat([vals, vals.new_zeros(batch, 1)], dim=1).gather(1, next_pos)
        deltas.addcmul_(next_values, maskf, value=tg)
        before = maskf.cumsum(1) - maskf
        powers = torch.pow(torch.tensor(token_gl, device=device), before) * maskf
    deltas.addcmul_(vals, maskf, value=-1.0)
    return deltas, powers


def _incoming_advantages(
    rows: _Rows,
    deltas: torch.Tensor,
    powers: torch.Tensor,
    token_gl: float,
    step_gl: float,
    trace: torch.Tensor | None,
) -> torch.Tensor:
    """``[B]`` float32: the first-token advantage of each row's next turn (0 when it is not in the batch), cut by
    that turn's trace weight with ``trace``. Each row's first-token advantage is head + row_coef * (the next turn's
    first-token advantage): the recurrence is solved along the links."""
    head = deltas @ powers if powers.dim() == 1 else (deltas * powers).sum(1)
    row_coef = step_gl * torch.pow(
        torch.tensor(token_gl, dtype=torch.float64), (rows.lengths - 1).clamp(min=0).double()
    ).to(rows.values.device)
    linked = rows.next_row >= 0
    flow = None
    if trace is not None:  # V-trace: what flows in from the next turn u is cut by c[u] (x 1.0 is exact)
        safe_next = torch.where(linked, rows.next_row, torch.zeros_like(rows.next_row))
        flow = torch.where(linked, trace[safe_next], torch.ones_like(trace))
        row_coef = row_coef * flow
    incoming = _solve_linked_rows(head.double(), row_coef, rows.next_row, linked)
    if flow is not None:
        incoming = incoming * flow
    return incoming.to(torch.float32)


_SCAN_BLOCK = 64
"""Token positions per block of the blocked reverse scan (one small matrix product each)."""


def reference_dual_discount_gae(
    rewards: Any,
    values: Any,
    mask: Any,
    next_row: Sequence[int],
    next_value: Sequence[float],
    terminated: Sequence[bool],
    tg: float,
    tl: float,
    sg: float,
    sl: float,
    trace_weights: Sequence[float] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`dual_discount_gae` written as plain nested loops over turns and tokens, straight from the formulas in
    docs/algorithms.md: the readable specification the fast version is tested against (float64, slow).

    Same arguments (as arrays or nested lists; ``tg, tl, sg, sl``: token gamma and lambda, step gamma and lambda;
    ``trace_weights``: ``[B]`` V-trace's ``c`` per row, None for all 1) and the same ``(advantages, returns)``, each
    ``[B, R]``.
    """
    rewards, values, mask = (np.asarray(x, dtype=np.float64) for x in (rewards, values, mask))
    batch, width = values.shape
    c = np.ones(batch) if trace_weights is None else np.asarray(trace_weights, dtype=np.float64)
    adv = np.zeros((batch, width))
    solved: set[int] = set()

    def tokens(t: int) -> list[int]:
        return [j for j in range(width) if mask[t, j]]

    def solve(t: int) -> None:
        if t in solved:
            return
        nr = int(next_row[t])
        if nr >= 0:
            solve(nr)
            v_next, a_next = values[nr, tokens(nr)[0]], c[nr] * adv[nr, tokens(nr)[0]]
        elif terminated[t]:
            v_next, a_next = 0.0, 0.0
        else:
            v_next, a_next = float(next_value[t]), 0.0
        pos = tokens(t)
        last = 0.0
        for k in reversed(range(len(pos))):
            j = pos[k]
            if k == len(pos) - 1:
                delta = rewards[t, j] + sg * v_next - values[t, j]
                last = delta + sg * sl * a_next
            else:
                delta = rewards[t, j] + tg * values[t, pos[k + 1]] - values[t, j]
                last = delta + tg * tl * last
            adv[t, j] = last
        solved.add(t)

    for t in range(batch):
        solve(t)
    return adv, (adv + values) * mask


def _discounted_reverse_cumsum_(x: torch.Tensor, factor: float) -> torch.Tensor:
    """In place: ``x[:, j] = x[:, j] + factor * x[:, j+1]`` from the last column back (``[B, R]`` float32).

    Blocks of ``_SCAN_BLOCK`` columns: inside a block it is one product with the matrix ``U[i, j] = factor^(i-j)``
    (``i >= j``), plus ``factor^(end-j)`` times the carried value from the block to the right.
    """
    width = x.shape[1]
    size = min(_SCAN_BLOCK, width)
    idx = torch.arange(size, device=x.device, dtype=torch.float32)
    gap = idx[:, None] - idx[None, :]
    base = torch.tensor(factor, dtype=torch.float32, device=x.device)
    upper = torch.where(gap >= 0, torch.pow(base, gap.clamp(min=0)), torch.zeros_like(gap))
    carry: torch.Tensor | None = None
    for start in range(((width - 1) // size) * size, -1, -size):
        end = min(start + size, width)
        n = end - start
        block = x[:, start:end].contiguous() @ upper[:n, :n]
        if carry is not None:
            block.addr_(carry, torch.pow(base, n - idx[:n]))
        x[:, start:end] = block
        carry = block[:, 0]
    return x


def _reverse_scan_with_factors(x: torch.Tensor, factors: torch.Tensor) -> torch.Tensor:
    """``A[:, j] = x[:, j] + factors[:, j] * A[:, j+1]`` from the last column back; ``[B, R]`` in, new tensor out."""
    x_t = x.t().contiguous()
    f_t = factors.t().contiguous()
    carry = torch.zeros(x.shape[0], dtype=torch.float32, device=x.device)
    for j in range(x.shape[1] - 1, -1, -1):
        carry = torch.addcmul(x_t[j], f_t[j], carry, out=x_t[j])
    return x_t.t().contiguous()


def _raise_stray_reward(rewards: torch.Tensor, maskf: torch.Tensor) -> None:
    row, pos = (int(i) for i in torch.nonzero(rewards.masked_fill(maskf != 0, 0.0))[0])
    raise AdvantageInputError(
        f"token_rewards[{row}, {pos}] = {float(rewards[row, pos])} lies outside response_mask and would be lost: "
        "put a turn's reward on its last response token"
    )


def _solve_linked_rows(
    head: torch.Tensor, row_coef: torch.Tensor, next_row: torch.Tensor, linked: torch.Tensor
) -> torch.Tensor:
    """``[B]`` advantage flowing into each row from its next turn: ``X[next_row[t]]`` (0 when unlinked).

    ``X[t] = head[t] + row_coef[t] * X[next_row[t]]`` along the links, solved by pointer jumping (float64).
    """
    batch = head.shape[0]
    sentinel = batch
    zero = head.new_zeros(1)
    total = torch.cat([head, zero])
    coef = torch.cat([torch.where(linked, row_coef, torch.zeros_like(row_coef)), zero])
    pointer = torch.cat(
        [torch.where(linked, next_row, torch.full_like(next_row, sentinel)), next_row.new_full((1,), sentinel)]
    )
    rounds = math.ceil(math.log2(batch + 1)) + 1
    for _ in range(rounds):
        if bool((pointer == sentinel).all()):
            break
        total = total + coef * total[pointer]
        coef = coef * coef[pointer]
        pointer = pointer[pointer]
    else:
        if not bool((pointer == sentinel).all()):
            row = int(torch.nonzero(pointer != sentinel)[0, 0])
            raise AdvantageInputError(
                f"next_row links form a cycle (row {row} never reaches -1): each episode's last turn in the batch "
                "must have next_row = -1"
            )
    safe_next = torch.where(linked, next_row, torch.zeros_like(next_row))
    return torch.where(linked, total[:batch][safe_next], torch.zeros_like(head))


@dataclass
class _Tokens:
    """Validated token inputs of GAE: float32 ``[B, R]`` tensors, bool mask, each row's response positions."""

    rewards: torch.Tensor
    values: torch.Tensor
    mask: torch.Tensor | None  # bool [B, R]; None on the right-padded fast path
    maskf: torch.Tensor
    contiguous: bool  # every row's response tokens are positions 0 .. L-1 (right padding only)
    lengths: torch.Tensor  # response tokens per row (long)
    first_pos: torch.Tensor  # first response position, -1 for a row without tokens
    last_pos: torch.Tensor  # last response position, -1 for a row without tokens


@dataclass
class _Rows(_Tokens):
    """Validated GAE inputs: the token inputs (:class:`_Tokens`) and the per-row tensors ``[B]`` that link turns."""

    next_row: torch.Tensor
    next_value: torch.Tensor
    terminated: torch.Tensor


def _as_row_tensor(x: _RowInput, name: str, batch: int, device: torch.device) -> torch.Tensor:
    t = torch.as_tensor(x, device=device)
    if t.dim() != 1 or t.shape[0] != batch:
        raise AdvantageInputError(f"{name} must have shape [B] = [{batch}], got {list(t.shape)}")
    return t


def _check_mask(response_mask: torch.Tensor, shape: torch.Size) -> tuple[torch.Tensor, torch.Tensor]:
    """``(bool mask, float32 mask)`` after checking the shape and that it holds only 0 and 1."""
    if response_mask.shape != shape:
        raise AdvantageInputError(f"response_mask must have shape {list(shape)}, got {list(response_mask.shape)}")
    if response_mask.dtype == torch.bool:
        return response_mask, response_mask.to(torch.float32)
    maskf = response_mask.to(torch.float32)
    if not torch.equal(maskf * maskf, maskf):  # only 0 and 1 satisfy x * x == x
        raise AdvantageInputError("response_mask must hold only 0 and 1 (or bool): 1 = response token, 0 = padding")
    return maskf.bool(), maskf


def _check_token_inputs(token_rewards: torch.Tensor, values: torch.Tensor, response_mask: torch.Tensor) -> _Tokens:
    """Validate and convert the ``[B, R]`` inputs of :func:`dual_discount_gae` (checks cost a few passes over them)."""
    if values.dim() != 2:
        raise AdvantageInputError(f"values must have shape [B, R], got {list(values.shape)}")
    if token_rewards.shape != values.shape:
        raise AdvantageInputError(
            f"token_rewards shape {list(token_rewards.shape)} differs from values shape {list(values.shape)}"
        )
    if not (values.is_floating_point() and token_rewards.is_floating_point()):
        raise AdvantageInputError(
            f"values and token_rewards must be floating point, got {values.dtype} and {token_rewards.dtype}"
        )
    batch, width = values.shape
    if width == 0:
        raise AdvantageInputError("values has no response positions (R = 0)")
    device = values.device
    rewards = token_rewards.to(device=device, dtype=torch.float32)
    vals = values.to(torch.float32)
    if response_mask.shape != values.shape:
        raise AdvantageInputError(
            f"response_mask must have shape {list(values.shape)}, got {list(response_mask.shape)}"
        )
    maskf = response_mask.to(device=device, dtype=torch.float32)
    # Right padding (tokens at 0 .. L-1), the common layout, found by reductions only: with entries in [0, 1], a row
    # summing to an integer L has sum(j * m_j) = L(L-1)/2 only when m = 1 at positions 0 .. L-1 and 0 elsewhere.
    contiguous = batch > 0
    if batch and response_mask.dtype != torch.bool:
        low, high = torch.aminmax(maskf)
        contiguous = bool(low >= 0) and bool(high <= 1)
    lengths_raw = maskf.sum(1)
    lengths_f = lengths_raw.round()
    position_sums = maskf @ torch.arange(width, device=device, dtype=torch.float32)
    contiguous = (
        contiguous
        and torch.equal(lengths_f, lengths_raw)
        and torch.equal(position_sums, lengths_f * (lengths_f - 1) / 2)
    )
    if contiguous:
        mask = None
        lengths = lengths_f.long()
        first_pos = torch.where(lengths > 0, 0, -1)
        last_pos = lengths - 1
    else:
        mask, maskf = _check_mask(response_mask.to(device), values.shape)
        lengths = mask.sum(1)
        first_pos = torch.where(lengths > 0, mask.to(torch.int8).argmax(1), -1)
        last_pos = torch.where(lengths > 0, width - 1 - mask.flip(1).to(torch.int8).argmax(1), -1)
    return _Tokens(rewards, vals, mask, maskf, contiguous, lengths, first_pos, last_pos)


def _link_rows(tokens: _Tokens, next_row: _RowInput, next_value: _RowInput, terminated: _RowInput) -> _Rows:
    """The checked token inputs with the per-row inputs of :func:`dual_discount_gae`, validated and converted."""
    batch, device = tokens.values.shape[0], tokens.values.device
    nxt = _as_row_tensor(next_row, "next_row", batch, device)
    if nxt.is_floating_point() or nxt.dtype == torch.bool:
        raise AdvantageInputError(f"next_row must be an integer tensor (row index or -1), got {nxt.dtype}")
    nxt = nxt.long()
    boot = _as_row_tensor(next_value, "next_value", batch, device).to(torch.float32)
    term = _as_row_tensor(terminated, "terminated", batch, device).bool()
    if batch:
        _check_links(nxt, term, boot, tokens.lengths)
    return _Rows(**vars(tokens), next_row=nxt, next_value=boot, terminated=term)


def _check_trace_weights(trace_weights: _RowInput, batch: int, device: torch.device) -> torch.Tensor:
    """``[B]`` float64 trace weights after checking the shape and that each is a finite number in [0, 1]."""
    c = _as_row_tensor(trace_weights, "trace_weights", batch, device)
    if not c.is_floating_point():
        raise AdvantageInputError(f"trace_weights must be a float tensor (min(1, rho) per row), got {c.dtype}")
    c = c.double()
    bad = ~((c >= 0) & (c <= 1))  # NaN fails both
    if bool(bad.any()):
        row = int(torch.nonzero(bad)[0, 0])
        raise AdvantageInputError(
            f"trace_weights[{row}] = {float(c[row])} is not in [0, 1]: pass min(1, rho) of each row's turn "
            "(verlog.algorithms.dual_gae.turn_trace_weights)"
        )
    return c


def _check_links(nxt: torch.Tensor, term: torch.Tensor, boot: torch.Tensor, lengths: torch.Tensor) -> None:
    batch = nxt.shape[0]
    bad = (nxt < -1) | (nxt >= batch) | (nxt == torch.arange(batch, device=nxt.device))
    if bool(bad.any()):
        row = int(torch.nonzero(bad)[0, 0])
        raise AdvantageInputError(
            f"next_row[{row}] = {int(nxt[row])}: must be -1 or another row's index in [0, {batch})"
        )
    linked = nxt >= 0
    both = linked & term
    if bool(both.any()):
        row = int(torch.nonzero(both)[0, 0])
        raise AdvantageInputError(
            f"row {row} is terminated but has next_row = {int(nxt[row])}: a terminated turn has no next turn; "
            "set next_row to -1 (a new episode starts a new chain)"
        )
    targets = torch.bincount(nxt[linked], minlength=batch)
    if bool((targets > 1).any()):
        row = int(torch.nonzero(targets > 1)[0, 0])
        raise AdvantageInputError(f"row {row} is the next_row of {int(targets[row])} rows; at most one is allowed")
    tied = (lengths == 0) & (linked | (targets > 0))
    if bool(tied.any()):
        row = int(torch.nonzero(tied)[0, 0])
        raise AdvantageInputError(
            f"row {row} has no response tokens but is linked by next_row; padding rows must have next_row = -1 "
            "and not be any row's next_row"
        )
    if bool((~torch.isfinite(boot) & ~linked & ~term).any()):
        raise AdvantageInputError("next_value holds a non-finite bootstrap value for a row that needs one")


ADVANTAGE_LEVELS = ("token", "turn")
"""``algorithm.advantage_level``: each response token keeps its own GAE advantage (``token``), or every token of a
turn gets the turn's first-position advantage ``A[t, 0]`` (``turn``, baseline ``V(s_t)``)."""
BOUNDARIES = ("bootstrap", "cut")
"""``algorithm.boundary``: an episode that goes on past the end of an iteration continues with ``V(s_T)``
(``bootstrap``) or its return ends there (``cut``: next value 0, as at a terminal state)."""
TURN_TRACES = ("full", "vtrace")
"""``algorithm.turn_trace``: the cross-turn trace as it is (``full``), or each turn's part in the advantages of the
turns before it cut by ``min(1, rho)`` of that turn (``vtrace``, :func:`turn_trace_weights`)."""


def turn_trace_weights(
    old_log_probs: torch.Tensor,
    rollout_log_probs: torch.Tensor,
    response_mask: torch.Tensor,
    known: _RowInput | None = None,
) -> torch.Tensor:
    """V-trace's ``c = min(1, rho)`` of each row's turn, one action: ``rho = exp(sum_j (old - rollout)[j])`` over
    the row's response tokens, the ratio of the policy being trained (``old_log_probs``, verl's recomputed ones) to
    the one that sampled the turn (``rollout_log_probs``, the inference server's).

    Args:
        old_log_probs, rollout_log_probs: ``[B, R]`` per-token log-probabilities.
        response_mask: ``[B, R]`` 1 on response tokens.
        known: ``[B]`` bool: the row's rollout log-probs are real; a row with False gets ``c = 1`` (a failed
            generation, a row without log-probs). None: every row with a response is known.

    Returns:
        ``[B]`` float32 in [0, 1]; 1 for unknown rows and rows without response tokens (NaN log-probs give NaN,
        which :func:`dual_discount_gae` refuses).
    """
    if not (old_log_probs.shape == rollout_log_probs.shape == response_mask.shape) or old_log_probs.dim() != 2:
        raise AdvantageInputError(
            "old_log_probs, rollout_log_probs and response_mask must share one [B, R] shape, got "
            f"{list(old_log_probs.shape)}, {list(rollout_log_probs.shape)}, {list(response_mask.shape)}"
        )
    mask, _ = _check_mask(response_mask.to(old_log_probs.device), old_log_probs.shape)
    diff = old_log_probs.double() - rollout_log_probs.to(old_log_probs.device).double()
    diff = torch.where(mask, diff, torch.zeros_like(diff))  # padding may hold anything, even -inf
    c = torch.exp(diff.sum(1).clamp(max=0.0))  # min(1, exp(x)) = exp(min(0, x)), without overflow
    if known is not None:
        keep = _as_row_tensor(known, "known", c.shape[0], c.device).bool()
        c = torch.where(keep, c, torch.ones_like(c))
    return c.to(torch.float32)


def turn_level_advantages(advantages: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Every response token of a row gets the row's first-position advantage ``A[t, 0]``.

    Args:
        advantages: ``[B, R]`` per-token advantages (e.g. from :func:`dual_discount_gae`).
        response_mask: ``[B, R]`` 1 (or True) on response tokens.

    Returns:
        ``[B, R]`` float32: ``A[t, first]`` on every masked position of row ``t`` (its first response token, the one
        whose baseline is ``V(s_t)``), 0 elsewhere; rows without response tokens are all 0.
    """
    if advantages.shape != response_mask.shape or advantages.dim() != 2:
        raise AdvantageInputError(
            f"advantages {list(advantages.shape)} and response_mask {list(response_mask.shape)} must both be [B, R]"
        )
    mask, maskf = _check_mask(response_mask.to(advantages.device), advantages.shape)
    if mask.shape[1] == 0:
        return advantages.to(torch.float32).clone()
    first = mask.to(torch.int8).argmax(1)
    first_adv = advantages.to(torch.float32).gather(1, first[:, None])
    return first_adv * maskf


def masked_whiten(values: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True) -> torch.Tensor:
    """Normalise ``values`` to zero mean and unit variance over the positions where ``mask`` is 1.

    Args:
        values: ``[B, R]`` (any shape) e.g. advantages.
        mask: same shape, 1 (or True) where a value counts (response tokens).
        shift_mean: if False, the original mean is added back after scaling (only the scale changes).

    Returns:
        float32 tensor of ``values``' shape; 0 outside the mask. Uses the unbiased variance and ``1e-8`` inside the
        square root, like verl's ``masked_whiten``.
    """
    if values.shape != mask.shape:
        raise AdvantageInputError(f"mask shape {list(mask.shape)} differs from values shape {list(values.shape)}")
    _, maskf = _check_mask(mask.to(values.device), values.shape)
    count = float(maskf.sum())
    if count < 2:
        raise AdvantageInputError(
            f"masked_whiten needs at least 2 positions inside the mask, got {count:g}: use a larger batch"
        )
    x = values.to(torch.float32)
    mean = torch.dot(x.flatten(), maskf.flatten()) / count
    centered = (x - mean).mul_(maskf).flatten()
    var = torch.dot(centered, centered) / (count - 1)
    out = centered.mul_(torch.rsqrt(var + 1e-8)).view(values.shape)
    if not shift_mean:
        out = torch.addcmul(out, maskf, mean)
    return out


def value_loss_weights(response_mask: torch.Tensor, first_position_weight: float = 1.0) -> torch.Tensor:
    """``[B, R]`` float32 per-position weights of the value loss: the mask, with each row's first response position
    (``V(s_t)``) weighted ``first_position_weight``."""
    if first_position_weight < 0:
        raise AdvantageInputError(f"first_position_weight must be >= 0, got {first_position_weight}")
    if response_mask.dim() != 2:
        raise AdvantageInputError(f"response_mask must have shape [B, R], got {list(response_mask.shape)}")
    mask, maskf = _check_mask(response_mask, response_mask.shape)
    weights = maskf.clone()
    if first_position_weight != 1.0 and mask.shape[1] > 0:
        rows = torch.nonzero(mask.any(1)).squeeze(1)
        first = mask.to(torch.int8).argmax(1)
        weights[rows, first[rows]] = float(first_position_weight)
    return weights


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    cliprange_value: float,
    first_position_weight: float = 1.0,
    loss_agg_mode: str = "token-mean",
    dp_size: int = 1,
    batch_num_tokens: float | None = None,
    global_batch_size: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's clipped critic loss, with an extra weight on each row's first response position (``V(s_t)``).

    ``loss = 0.5 * agg(max((v - R)^2, (clip(v, v_old - c, v_old + c) - R)^2), weights)`` where the weights are
    :func:`value_loss_weights`. With ``first_position_weight = 1`` it equals verl's ``compute_value_loss``.

    Args:
        values: ``[B, R]`` the critic's current predictions (with gradient).
        old_values: ``[B, R]`` the values recorded at rollout time (the clipping centre).
        returns: ``[B, R]`` targets from :func:`dual_discount_gae`.
        response_mask: ``[B, R]`` 1 on response tokens.
        cliprange_value: clip range ``c`` of the value update (Verlog: 0.5).
        first_position_weight: weight of the first response position (Verlog's "highlight first": 3-5).
        loss_agg_mode: one of :data:`LOSS_AGG_MODES`; "token-mean" is the weighted mean over weighted positions.
        dp_size: data-parallel size (the loss is scaled so that averaging gradients over ranks gives the global
            mean, as in verl's ``agg_loss``).
        batch_num_tokens: for "token-mean", the total weight over the global batch (sum of
            :func:`value_loss_weights` over all ranks' micro-batches); required when ``dp_size > 1``.
        global_batch_size: for the "seq-mean-*" modes, the number of non-empty rows in the global batch; required
            when ``dp_size > 1``.

    Returns:
        ``(loss, clipfrac)``: the scalar loss and the fraction of response positions where clipping was active.
    """
    if not (values.shape == old_values.shape == returns.shape == response_mask.shape) or values.dim() != 2:
        raise AdvantageInputError(
            "values, old_values, returns and response_mask must share one [B, R] shape, got "
            f"{list(values.shape)}, {list(old_values.shape)}, {list(returns.shape)}, {list(response_mask.shape)}"
        )
    if cliprange_value < 0:
        raise AdvantageInputError(f"cliprange_value must be >= 0, got {cliprange_value}")
    _, maskf = _check_mask(response_mask.to(values.device), values.shape)
    weights = value_loss_weights(maskf, first_position_weight)
    clipped = old_values + (values - old_values).clamp(-cliprange_value, cliprange_value)
    unclipped_loss = (values - returns).square()
    clipped_loss = (clipped - returns).square()
    loss_mat = torch.maximum(unclipped_loss, clipped_loss)
    loss = 0.5 * _aggregate(loss_mat, weights, loss_agg_mode, dp_size, batch_num_tokens, global_batch_size)
    clipfrac = ((clipped_loss > unclipped_loss).to(torch.float32) * maskf).sum() / maskf.sum().clamp(min=1.0)
    return loss, clipfrac


def _aggregate(
    loss_mat: torch.Tensor,
    weights: torch.Tensor,
    mode: str,
    dp_size: int,
    batch_num_tokens: float | None,
    global_batch_size: int | None,
) -> torch.Tensor:
    """Weighted version of verl's ``agg_loss``: identical to it when the weights are the mask."""
    weighted = loss_mat * weights
    if mode == "token-mean":
        if batch_num_tokens is None:
            if dp_size > 1:
                raise AdvantageInputError("batch_num_tokens (global total weight) is required when dp_size > 1")
            batch_num_tokens = weights.sum().clamp(min=1e-8)
        return weighted.sum() / batch_num_tokens * dp_size
    if mode == "token-sum":
        return weighted.sum() * dp_size
    if mode in ("seq-mean-token-sum", "seq-mean-token-mean"):
        row_weight = weights.sum(-1)
        per_row = weighted.sum(-1)
        if mode == "seq-mean-token-mean":
            per_row = per_row / (row_weight + 1e-8)
        nonempty = (row_weight > 0).to(loss_mat.dtype)
        if global_batch_size is None:
            if dp_size > 1:
                raise AdvantageInputError("global_batch_size is required with a seq-mean mode when dp_size > 1")
            global_batch_size = nonempty.sum()
        return (per_row * nonempty).sum() / global_batch_size * dp_size
    raise AdvantageInputError(f"loss_agg_mode {mode!r} is not one of {', '.join(LOSS_AGG_MODES)}")


def advantage_metrics(
    advantages: torch.Tensor, returns: torch.Tensor, values: torch.Tensor, response_mask: torch.Tensor
) -> dict[str, float]:
    """Diagnostics over response tokens (docs/algorithms.md, "Metrics"); pass raw (not whitened) advantages.

    All inputs ``[B, R]``. ``critic/vf_explained_var`` is ``1 - Var(returns - values) / Var(returns)``.
    """
    if not (advantages.shape == returns.shape == values.shape == response_mask.shape) or advantages.dim() != 2:
        raise AdvantageInputError(
            "advantages, returns, values and response_mask must share one [B, R] shape, got "
            f"{list(advantages.shape)}, {list(returns.shape)}, {list(values.shape)}, {list(response_mask.shape)}"
        )
    mask, _ = _check_mask(response_mask.to(advantages.device), advantages.shape)
    if not bool(mask.any()):
        raise AdvantageInputError("advantage_metrics needs at least one response token in the mask")
    adv = advantages.float()[mask]
    ret = returns.float()[mask]
    val = values.float()[mask]
    first = mask.to(torch.int8).argmax(1)
    rows = mask.any(1)
    turn_adv = advantages.float().gather(1, first[:, None]).squeeze(1)[rows]
    ret_var = ret.var(unbiased=False)
    explained = 1.0 - (ret - val).var(unbiased=False) / ret_var.clamp(min=1e-8)
    return {
        "adv/mean": float(adv.mean()),
        "adv/std": float(adv.std(unbiased=False)),
        "adv/max": float(adv.max()),
        "adv/min": float(adv.min()),
        "adv/turn_mean": float(turn_adv.mean()),
        "critic/returns/mean": float(ret.mean()),
        "critic/values/mean": float(val.mean()),
        "critic/vf_explained_var": float(explained),
    }
