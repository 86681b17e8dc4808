"""Read back what wandb wrote offline: the history rows of a run's transaction log (``run-<id>.wandb``).

wandb 0.31 keeps no Python reader of its own log; the format is LevelDB's log (a 7-byte header, then 32 KiB blocks of
records ``crc32 (4) | length (2) | type (1) | payload``, a payload split over FIRST/MIDDLE/LAST records when it
crosses a block) whose payloads are ``wandb_internal_pb2.Record`` messages.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

BLOCK = 32 * 1024
HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def payloads(path: Path) -> list[bytes]:
    """The record payloads of one ``.wandb`` file, reassembled."""
    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a wandb transaction log"
    pos, out, chunk = HEADER, [], b""
    while pos + 7 <= len(data):
        left = BLOCK - pos % BLOCK
        if left < 7:  # a block's tail too short for a record header is padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if kind == 0 and length == 0:  # zero padding up to the block's end
            pos += left
            continue
        payload = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind == FULL:
            out.append(payload)
        elif kind == FIRST:
            chunk = payload
        elif kind == MIDDLE:
            chunk += payload
        elif kind == LAST:
            out.append(chunk + payload)
    return out


def wandb_history(folder: Path) -> list[dict[str, Any]]:
    """The history rows (``wandb.log`` calls) of the one offline run under ``folder`` (a ``WANDB_DIR``'s wandb/)."""
    from wandb.proto import wandb_internal_pb2 as pb

    logs = sorted(Path(folder).glob("offline-run-*/run-*.wandb"))
    assert len(logs) == 1, f"expected one offline wandb run under {folder}, found {logs}"
    rows = []
    for raw in payloads(logs[0]):
        record = pb.Record()
        record.ParseFromString(raw)
        if record.WhichOneof("record_type") == "history":
            rows.append(
                {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
            )
    return rows
