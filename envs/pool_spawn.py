"""The first code a spawned env-pool worker runs (:class:`envs.pool_worker.ProcessWorker`: ``runpy.run_path``).

A spawned worker starts with its parent's ``sys.path``, which holds the user's folder (the current folder, that
``--import`` makes importable). A user's ``envs/`` folder there must extend verlog's ``envs`` package, not replace it,
but a plain ``import envs`` could take it for the whole package: when it has an ``__init__.py`` and comes first on the
path, and under an editable install of verlog even without one and at the end of the path (a folder without
``__init__.py`` is a namespace package, which Python's path finder returns before setuptools' editable finder is
asked). So the worker loads verlog's ``envs`` from this file's folder first (its ``__init__`` then takes in the user's
folders), and only then unpickles its envs' factories, which may live in such a folder (``envs.my_env:make``).
"""

from __future__ import annotations

import importlib.util
import os
import pickle
import sys
from typing import Any


def load_envs_package(folder: str) -> None:
    """Import ``folder`` (verlog's ``envs``) as the package ``envs``, whatever ``sys.path`` would find first.

    ``verlog.cli.import_envs_package`` does the same in the verlog command (``python -m verlog`` puts the current
    folder first on the path)."""
    if "envs" in sys.modules:
        return
    spec = importlib.util.spec_from_file_location(
        "envs", os.path.join(folder, "__init__.py"), submodule_search_locations=[folder]
    )
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["envs"] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop("envs", None)
        raise


def start_worker(conn: Any, payload: bytes, keep_images: bool, marker: Any) -> None:
    """Load verlog's ``envs``, unpickle the slots' specs (``payload``), run :func:`envs.pool_worker.worker_main`."""
    load_envs_package(os.path.dirname(os.path.abspath(__file__)))
    from envs.pool_worker import worker_main

    worker_main(conn, pickle.loads(payload), keep_images, marker)


# Run with runpy's init_globals WORKER_ARGS (ProcessWorker), it starts the worker; imported or run without them (the
# verlog command, for load_envs_package), it does nothing.
if "WORKER_ARGS" in globals():
    start_worker(*globals()["WORKER_ARGS"])
