"""What each torchrun rank runs on the CPU route: ``python -m verlog.sft <verl SFT overrides>``."""

from __future__ import annotations

import os


def _ensure_cpu_process_group() -> None:
    """Interim, until verlog.platform.cpu covers it: verl's ``initialize_global_process_group`` (the SFT trainer's;
    the PPO path uses the ``_ray`` variant, which the platform already fixes) builds ``"cpu:gloo,cpu:gloo"`` on the
    CPU, which torch refuses ("Duplicate device type cpu"). Use ``"cpu:gloo"``; a no-op once the platform patches it.
    """
    import verl.utils.distributed as dist_utils

    original = dist_utils.initialize_global_process_group
    if getattr(original, "__verlog_patched__", False):
        return

    def initialize_global_process_group(timeout_second: int = 36000) -> tuple[int, int, int]:
        from datetime import timedelta

        import torch.distributed

        torch.distributed.init_process_group(
            backend="cpu:gloo",
            timeout=timedelta(seconds=timeout_second),
            init_method=os.environ.get("DIST_INIT_METHOD", None),
        )
        return int(os.environ["LOCAL_RANK"]), int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])

    initialize_global_process_group.__verlog_patched__ = True  # type: ignore[attr-defined]
    dist_utils.initialize_global_process_group = initialize_global_process_group


def _rank_main() -> None:
    """What each torchrun rank runs on the CPU route: verl's own SFT entry point, after the platform is set up."""
    from verlog.platform import enable_cpu_platform

    enable_cpu_platform(force=True)
    _ensure_cpu_process_group()
    from verl.trainer import sft_trainer

    sft_trainer.main()


if __name__ == "__main__":
    _rank_main()
