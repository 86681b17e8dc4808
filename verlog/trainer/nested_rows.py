"""verl 0.9.1's nested rows of three dimensions (a row's ``[4, L]`` position ids, runs with images) under torch 2.13.

verl keeps a batch's rows as jagged nested tensors. ``verl.utils.tensordict_utils.nested_tensor_from_tensor_list``
rebuilds one from per-row tensors (when it cuts a batch into mini-batches or chunks) with
``torch.nested.nested_tensor_from_jagged(values, offsets)`` and sets ``_ragged_idx`` afterwards; this torch keeps
the shape it computed for a ragged first dimension, so ``[B, 4, j]`` position ids come back as ``[B, j, 4 * B]`` and
the actor's update fails (``split_with_sizes expects split_sizes to sum exactly to ...``). :func:`install` makes it
pass the ragged dimension to torch (``jagged_dim``), and replaces verl's repair of position ids that came through Ray
(``maybe_fix_3d_position_ids``, which has the same flaw). Text rows (``[L]`` per row) are unchanged.

verl imports this module in every process (``VERL_USE_EXTERNAL_MODULES``; :func:`enable_for_workers`, called by the
launcher for runs with images); the function is replaced once verl's module is first imported.
"""

from __future__ import annotations

import itertools
import os
import types
from typing import Any

MODULE_NAME = "verlog.trainer.nested_rows"
TARGET_MODULE = "verl.utils.tensordict_utils"
EXTERNAL_MODULES_ENV = "VERL_USE_EXTERNAL_MODULES"


def nested_tensor_from_tensor_list(tensors: list[Any], ragged_idx: int | None = None) -> Any:
    """A jagged nested tensor ``[B, ...]`` of ``tensors`` ragged along ``ragged_idx`` (default: their last
    dimension), as verl's function means it, with the ragged dimension given to torch."""
    import torch

    if not tensors:
        raise ValueError("nested_tensor_from_tensor_list needs at least one tensor")
    sample_dim = tensors[0].dim()
    ragged_idx = sample_dim if ragged_idx is None else ragged_idx
    if not 1 <= ragged_idx <= sample_dim:
        raise ValueError(f"ragged_idx must be in [1, {sample_dim}], got {ragged_idx}")
    if sample_dim == 1:
        return torch.nested.as_nested_tensor(tensors, layout=torch.jagged)
    cat_dim = ragged_idx - 1
    values = torch.cat(tensors, dim=cat_dim)
    lengths = torch.tensor([t.shape[cat_dim] for t in tensors], dtype=torch.long, device=values.device)
    offsets = torch.zeros(len(tensors) + 1, dtype=torch.long, device=values.device)
    torch.cumsum(lengths, dim=0, out=offsets[1:])
    return torch.nested.nested_tensor_from_jagged(values=values, offsets=offsets, jagged_dim=ragged_idx)


def maybe_fix_3d_position_ids(data: Any) -> None:
    """verl's fix of ``[B, 4, j]`` position ids that came through Ray (consolidated and pickled), done as verl means
    it: the rows rebuilt ragged along their last dimension. verl's own sets ``_ragged_idx = 2`` on the tensor, which
    this torch ignores for the shape, and which is wrong when every row has the same length (torch then builds the
    tensor ragged along the first dimension: values ``[B * 4, L]``, and the update failed on it)."""
    positions = data["position_ids"] if "position_ids" in data.keys() else None
    if positions is None or not positions.is_nested or positions.dim() != 3:
        return
    values, offsets = positions.values(), positions.offsets()
    if int(offsets[-1]) == values.shape[0]:  # ragged along the first dimension: row i is values[o_i:o_i+1], [4, L]
        rows = [values[int(a) : int(b)] for a, b in itertools.pairwise(offsets.tolist())]
    else:  # values [4, total], ragged along the last dimension
        rows = [values[:, int(a) : int(b)] for a, b in itertools.pairwise(offsets.tolist())]
    data["position_ids"] = nested_tensor_from_tensor_list(rows, ragged_idx=2)


FIXED_IN = ("verl.workers.engine_workers", "verl.workers.engine.base", "verl.workers.engine_workers_tinker")
"""verl's modules that import ``maybe_fix_3d_position_ids`` by name (each gets verlog's)."""


def _replace(module: types.ModuleType) -> None:
    module.nested_tensor_from_tensor_list = nested_tensor_from_tensor_list
    module.maybe_fix_3d_position_ids = maybe_fix_3d_position_ids


def _replace_fix(module: types.ModuleType) -> None:
    module.maybe_fix_3d_position_ids = maybe_fix_3d_position_ids


def install() -> None:
    """Replace verl's functions in this process, now or when verl's modules are first imported."""
    from verlog.platform.cpu import when_imported

    when_imported(TARGET_MODULE, _replace)
    for name in FIXED_IN:
        when_imported(name, _replace_fix)


def enable_for_workers() -> None:
    """Install here and make verl import this module in every process it starts (Ray workers inherit the variable)."""
    modules = [m for m in os.environ.get(EXTERNAL_MODULES_ENV, "").split(",") if m]
    if MODULE_NAME not in modules:
        os.environ[EXTERNAL_MODULES_ENV] = ",".join([*modules, MODULE_NAME])
    install()


install()
