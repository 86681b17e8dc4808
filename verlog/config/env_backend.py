"""Where ``verlog train``'s env workers run: ``env.backend`` (subprocess, ray, in_process) and ``env.ray``.

:func:`env_backend_problems` checks the keys before anything starts (an unknown backend with its close match, the
old ``env.in_process: true`` against another backend, Ray resource requests that cannot be right, a ``RAY_ADDRESS``
that does not answer); :func:`env_pool_arguments` turns them into the env pool's ``backend`` and ``ray_options`` and
says in one line when the old ``env.in_process: true`` chose the backend. Whether a node of the cluster has the
resources is checked when the pool starts (``envs.pool_ray.check_resources``), against the cluster itself.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable
from typing import Any

from envs.pool import BACKENDS
from envs.pool_ray import RAY_ADDRESS_VAR, RayClusterError, RayResourcesError, RayWorkerOptions, check_ray_address

LEGACY_NOTE = "[verlog] env.in_process=true now means env.backend=in_process (write that instead)"
"""What :func:`env_pool_arguments` says when the old key chose the backend."""


def env_backend_problems(cfg: Any) -> list[str]:
    """The problems of ``cfg.env.backend``, ``cfg.env.in_process`` and ``cfg.env.ray`` (a typed training config), one
    line each, naming the key and the fix; empty when they are fine."""
    env = cfg.env
    backend = str(env.backend)
    if backend not in BACKENDS:
        close = difflib.get_close_matches(backend, BACKENDS, n=1, cutoff=0.5)
        hint = f" Did you mean env.backend={close[0]}?" if close else ""
        return [f"env.backend={backend!r} is not one of {', '.join(BACKENDS)} (where the env workers run).{hint}"]
    problems = []
    if env.in_process and backend not in ("subprocess", "in_process"):
        problems.append(
            f"env.in_process=true and env.backend={backend} contradict each other: drop env.in_process (it now means "
            "env.backend=in_process)"
        )
    resources = dict(env.ray.resources or {})
    if backend != "ray":
        if resources:
            problems.append(
                f"env.ray.resources are requests of Ray env workers, but env.backend={backend}: set env.backend=ray "
                "or drop env.ray.resources"
            )
        return problems
    try:
        RayWorkerOptions(env.ray.num_cpus_per_worker, resources)
    except RayResourcesError as exc:
        text = str(exc).replace("num_cpus per Ray env worker", "env.ray.num_cpus_per_worker")
        problems.append(text if text.startswith("env.") else f"env.ray.{text}")
    try:
        check_ray_address(os.environ.get(RAY_ADDRESS_VAR) or None)
    except RayClusterError as exc:
        problems.append(f"env.backend=ray: {exc}")
    return problems


def env_pool_arguments(cfg: Any, say: Callable[[str], None] | None = print) -> dict[str, Any]:
    """The env pool's ``backend`` and ``ray_options`` (``build_rollout``'s keywords) from a checked config; ``say``
    gets :data:`LEGACY_NOTE` when ``env.in_process: true`` chose the backend."""
    env = cfg.env
    backend = str(env.backend)
    if env.in_process and backend == "subprocess":
        backend = "in_process"
        if say is not None:
            say(LEGACY_NOTE)
    ray_options = None
    if backend == "ray":
        ray_options = {"num_cpus": float(env.ray.num_cpus_per_worker), "resources": dict(env.ray.resources or {})}
    return {"backend": backend, "ray_options": ray_options}


def ray_workers_line(pool: Any, ray_options: dict[str, Any] | None) -> str:
    """One line saying where a Ray env pool's workers are: how many actors, what each asks for, on how many nodes."""
    options = ray_options or {}
    asks = {"CPU": options.get("num_cpus", 1.0), **options.get("resources", {})}
    wanted = ", ".join(f"{name} {amount:g}" for name, amount in asks.items())
    nodes = {node for node in pool.worker_nodes() if node}
    where = f" on {len(nodes)} node(s)" if nodes else ""
    return f"{pool.num_workers} Ray actors ({wanted} each){where} for {pool.num_envs} env slots"
