"""Checksummed byte states: ``header + SHA-256(body) + body``, so a corrupted or foreign state is refused.

Used by :meth:`envs.core.TextEnv.get_state` and :meth:`envs.pool.EnvPool.slot_states`.
"""

from __future__ import annotations

import hashlib


class ChecksumMismatch(ValueError):
    """The body does not match the digest stored with it (the bytes were corrupted)."""


def seal(header: bytes, body: bytes) -> bytes:
    """``header + sha256(body) + body``."""
    return header + hashlib.sha256(body).digest() + body


def unseal(header: bytes, data: bytes) -> bytes | None:
    """The body of ``data`` sealed under ``header``; None when ``data`` does not start with ``header`` (an unsealed,
    older state, for the caller to handle); :class:`ChecksumMismatch` when the digest does not match."""
    if not data.startswith(header):
        return None
    start = len(header)
    digest, body = data[start : start + 32], data[start + 32 :]
    if hashlib.sha256(body).digest() != digest:
        raise ChecksumMismatch(f"the checksum does not match the {len(body)} bytes")
    return body
