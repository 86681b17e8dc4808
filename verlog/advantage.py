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
  termination (then ``A[t+1, 0]`` is 0 too).

Positions outside the response mask are skipped: "next token" means the next position inside the mask, as in verl's
``compute_gae_advantage_return``. With equal token and step discounts, turns laid end to end give ordinary GAE.

The fast path never loops over rows: one vectorised reverse pass over the ``R`` token positions computes every
row's in-turn advantages as if the next turn's advantage were 0; each row's advantage is linear in that incoming
advantage, so the cross-turn part is a linear recurrence along the ``next_row`` links, solved by pointer jumping in
``ceil(log2(turns per episode))`` vectorised steps, and added back in one broadcast.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from verlog.errors import AdvantageInputError

LOSS_AGG_MODES = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean")
"""Loss aggregation modes of :func:`value_loss` (the names and meanings of verl's ``agg_loss``)."""

_RowInput = torch.Tensor | Sequence[int] | Sequence[float] | Sequence[bool]


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

    Returns:
        ``(advantages, returns)``, both ``[B, R]`` float32 on ``values``' device: raw advantages (not whitened) and
        ``returns = advantages + values``, both 0 outside ``response_mask``. Rows may come in any order.

    Raises:
        AdvantageInputError: bad shapes, dtypes, masks, discounts or ``next_row`` links (the message names them).
    """
    rewards, vals, mask, nxt_row, boot, term = _check_gae_inputs(
        token_rewards, values, response_mask, next_row, next_value, terminated
    )
    discounts = {"token_gamma": token_gamma, "token_lam": token_lam, "step_gamma": step_gamma, "step_lam": step_lam}
    for name, x in discounts.items():
        if not 0.0 <= float(x) <= 1.0:
            raise AdvantageInputError(f"{name} must be in [0, 1], got {x}")
    batch, width = vals.shape
    device = vals.device
    if batch == 0:
        empty = torch.zeros_like(vals)
        return empty, empty.clone()
    token_gl = float(token_gamma) * float(token_lam)
    step_gl = float(step_gamma) * float(step_lam)
    maskf = mask.to(torch.float32)

    # Next position inside the mask after j (``width`` when j is at or after the turn's last token).
    positions = torch.arange(width, device=device).expand(batch, width)
    valid_pos = torch.where(mask, positions, torch.full_like(positions, width))
    at_or_after = valid_pos.flip(1).cummin(1).values.flip(1)
    next_pos = torch.cat([at_or_after[:, 1:], torch.full((batch, 1), width, device=device)], dim=1)
    first_pos = at_or_after[:, 0].clamp(max=width - 1)
    first_value = vals.gather(1, first_pos[:, None]).squeeze(1)

    # Value after the turn's last token: the next turn's V(s_{t+1}) in the batch, else bootstrap, else 0.
    linked = nxt_row >= 0
    safe_next = torch.where(linked, nxt_row, torch.zeros_like(nxt_row))
    boundary = torch.where(linked, first_value[safe_next], torch.where(term, torch.zeros_like(boot), boot))
    next_values = torch.cat([vals, boundary[:, None]], dim=1).gather(1, next_pos)
    gammas = torch.where(next_pos == width, float(step_gamma), float(token_gamma))
    deltas = (rewards + gammas * next_values - vals) * maskf

    # In-turn reverse pass with the next turn's advantage taken as 0: A0[j] = delta[j] + f[j] * A0[j+1], where f is
    # token_gamma * token_lam inside the mask and 1 outside (masked positions pass the carry through unchanged).
    deltas_t = deltas.t().contiguous()
    factors_t = torch.where(mask, token_gl, 1.0).to(torch.float32).t().contiguous()
    adv0_t = torch.empty_like(deltas_t)
    carry = torch.zeros(batch, dtype=torch.float32, device=device)
    for j in range(width - 1, -1, -1):
        carry = torch.addcmul(deltas_t[j], factors_t[j], carry, out=adv0_t[j])
    adv0 = adv0_t.t()

    # A[t, j] = A0[t, j] + coef[t, j] * A[next_row[t], first], coef = step_gl * token_gl ** (valid tokens after j).
    after = maskf.flip(1).cumsum(1).flip(1) - maskf
    row_coef = step_gl * token_gl ** (maskf.sum(1) - 1).clamp(min=0).double()
    incoming = _solve_linked_rows(adv0.gather(1, first_pos[:, None]).squeeze(1).double(), row_coef, nxt_row, linked)
    coef = step_gl * torch.pow(torch.tensor(token_gl, dtype=torch.float32, device=device), after)
    advantages = (adv0 + coef * incoming.to(torch.float32)[:, None]) * maskf
    returns = (advantages + vals) * maskf
    return advantages, returns


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


def _as_row_tensor(x: _RowInput, name: str, batch: int, device: torch.device) -> torch.Tensor:
    t = torch.as_tensor(x, device=device)
    if t.dim() != 1 or t.shape[0] != batch:
        raise AdvantageInputError(f"{name} must have shape [B] = [{batch}], got {list(t.shape)}")
    return t


def _check_mask(response_mask: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    if response_mask.shape != shape:
        raise AdvantageInputError(f"response_mask must have shape {list(shape)}, got {list(response_mask.shape)}")
    if response_mask.dtype == torch.bool:
        return response_mask
    if not bool(((response_mask == 0) | (response_mask == 1)).all()):
        raise AdvantageInputError("response_mask must hold only 0 and 1 (or bool): 1 = response token, 0 = padding")
    return response_mask != 0


def _check_gae_inputs(
    token_rewards: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    next_row: _RowInput,
    next_value: _RowInput,
    terminated: _RowInput,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Validate and convert: float32 rewards/values, bool mask, long next_row, float32 next_value, bool terminated."""
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
    mask = _check_mask(response_mask.to(device), values.shape)
    rewards = token_rewards.to(device=device, dtype=torch.float32)
    stray = (rewards != 0) & ~mask
    if bool(stray.any()):
        row, pos = (int(i) for i in torch.nonzero(stray)[0])
        raise AdvantageInputError(
            f"token_rewards[{row}, {pos}] = {float(rewards[row, pos])} lies outside response_mask and would be lost: "
            "put a turn's reward on its last response token"
        )
    nxt = _as_row_tensor(next_row, "next_row", batch, device)
    if nxt.is_floating_point() or nxt.dtype == torch.bool:
        raise AdvantageInputError(f"next_row must be an integer tensor (row index or -1), got {nxt.dtype}")
    nxt = nxt.long()
    boot = _as_row_tensor(next_value, "next_value", batch, device).to(torch.float32)
    term = _as_row_tensor(terminated, "terminated", batch, device).bool()
    if batch:
        bad = (nxt < -1) | (nxt >= batch) | (nxt == torch.arange(batch, device=device))
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
        empty = ~mask.any(1)
        tied = empty & (linked | (targets > 0))
        if bool(tied.any()):
            row = int(torch.nonzero(tied)[0, 0])
            raise AdvantageInputError(
                f"row {row} has no response tokens but is linked by next_row; padding rows must have next_row = -1 "
                "and not be any row's next_row"
            )
        if bool((~torch.isfinite(boot) & ~linked & ~term).any()):
            raise AdvantageInputError("next_value holds a non-finite bootstrap value for a row that needs one")
    return rewards, values.to(torch.float32), mask, nxt, boot, term


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
    m = _check_mask(mask.to(values.device), values.shape)
    count = int(m.sum())
    if count < 2:
        raise AdvantageInputError(
            f"masked_whiten needs at least 2 positions inside the mask, got {count}: use a larger batch"
        )
    x = values.to(torch.float32)
    maskf = m.to(torch.float32)
    mean = (x * maskf).sum() / count
    var = ((x - mean).square() * maskf).sum() / (count - 1)
    out = (x - mean) * torch.rsqrt(var + 1e-8)
    if not shift_mean:
        out = out + mean
    return out * maskf


def value_loss_weights(response_mask: torch.Tensor, first_position_weight: float = 1.0) -> torch.Tensor:
    """``[B, R]`` float32 per-position weights of the value loss: the mask, with each row's first response position
    (``V(s_t)``) weighted ``first_position_weight``."""
    if first_position_weight < 0:
        raise AdvantageInputError(f"first_position_weight must be >= 0, got {first_position_weight}")
    if response_mask.dim() != 2:
        raise AdvantageInputError(f"response_mask must have shape [B, R], got {list(response_mask.shape)}")
    m = _check_mask(response_mask, response_mask.shape)
    weights = m.to(torch.float32)
    if first_position_weight != 1.0 and m.shape[1] > 0:
        has_token = m.any(1)
        first = m.to(torch.int8).argmax(1)
        rows = torch.nonzero(has_token).squeeze(1)
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
    mask = _check_mask(response_mask.to(values.device), values.shape)
    weights = value_loss_weights(mask, first_position_weight)
    clipped = old_values + (values - old_values).clamp(-cliprange_value, cliprange_value)
    unclipped_loss = (values - returns).square()
    clipped_loss = (clipped - returns).square()
    loss_mat = torch.maximum(unclipped_loss, clipped_loss)
    loss = 0.5 * _aggregate(loss_mat, weights, loss_agg_mode, dp_size, batch_num_tokens, global_batch_size)
    maskf = mask.to(torch.float32)
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
