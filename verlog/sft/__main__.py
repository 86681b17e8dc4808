"""What each torchrun rank runs on the CPU route: ``python -m verlog.sft <verl SFT overrides>``."""

from __future__ import annotations


def _rank_main() -> None:
    """What each torchrun rank runs on the CPU route: verl's own SFT entry point, after the platform is set up."""
    from verlog.platform import enable_cpu_platform

    enable_cpu_platform(force=True)  # includes the torchrun process-group fix ("cpu:gloo")
    from verl.trainer import sft_trainer

    sft_trainer.main()


if __name__ == "__main__":
    _rank_main()
