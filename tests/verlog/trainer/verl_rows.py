"""verl's batch of rows as the trainer's seams receive it, for the seam tests: the tensors and each row's keys."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def verl_rows(
    tensors: dict[str, Any],
    episode_ids: Sequence[str],
    turn_indices: Sequence[int],
    terminated: Sequence[bool],
    truncated: Sequence[bool],
    **columns: np.ndarray,
) -> Any:
    """A ``verl.DataProto`` of B rows: ``tensors`` (``[B, R]`` each), each row's episode id, turn index and end flags
    (``[B]`` each), and any further ``[B]`` non-tensor ``columns`` (group ids, anchors...)."""
    from verl import DataProto

    return DataProto.from_dict(
        tensors=tensors,
        non_tensors={
            "episode_id": np.array(episode_ids, dtype=object),
            "turn_index": np.array(turn_indices),
            "terminated": np.array(terminated, dtype=bool),
            "truncated": np.array(truncated, dtype=bool),
            **columns,
        },
    )
