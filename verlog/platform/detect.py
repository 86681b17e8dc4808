"""Deciding whether verl should run on the CPU platform (cheap: no verl or vLLM import)."""

from __future__ import annotations

import os
import shutil

PLATFORM_ENV = "VERLOG_PLATFORM"
"""``cpu`` forces the CPU route, ``gpu`` (or ``auto``/unset) leaves the choice to :func:`gpu_present`."""


def gpu_present() -> bool:
    """Whether this machine has an accelerator verl can use (CUDA, ROCm or Ascend NPU)."""
    try:
        import torch

        if torch.cuda.is_available():
            return True
        npu = getattr(torch, "npu", None)
        if npu is not None and npu.is_available():
            return True
    except Exception:
        pass
    return any(shutil.which(cmd) for cmd in ("nvidia-smi", "rocm-smi", "npu-smi"))


def cpu_platform_wanted() -> bool:
    """True when ``VERLOG_PLATFORM=cpu``, False when it is ``gpu``, else True exactly when no GPU is present."""
    choice = os.environ.get(PLATFORM_ENV, "auto").strip().lower()
    if choice == "cpu":
        return True
    if choice in ("gpu", "cuda", "npu"):
        return False
    if choice not in ("", "auto"):
        raise ValueError(f"{PLATFORM_ENV}={choice!r} is not one of cpu, gpu, auto")
    return not gpu_present()
