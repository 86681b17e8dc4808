"""The env registry: ids such as ``babyai/goto`` mapped to factories, loaded lazily."""

from __future__ import annotations

import difflib
import functools
import importlib
import os
import sys
import traceback
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import Any

from envs.errors import EnvImportError, EnvRegistrationError, UnknownEnvError

Factory = Callable[..., Any]
_REGISTRY: dict[str, Factory | str] = {}
_BUILTINS_LOADED = False

IMPORTS_ENV_VAR = "VERLOG_IMPORTS"
"""Comma-separated modules :func:`import_modules` imported in this process; env-pool workers (spawned processes,
which inherit the environment) import them again before building their envs."""

# Modules that register the built-in envs when imported. Imported on first use of the registry, so that
# ``import envs`` stays cheap and a game's dependencies load only when one of its ids is used.
_BUILTIN_MODULES = ("envs.babyai", "envs.crafter", "envs.babaisai", "envs.toy")


def register(env_id: str, factory: Factory | str, *, overwrite: bool = False) -> None:
    """Register ``env_id``.

    Args:
        env_id: ``"<family>/<task>"``, e.g. ``"mygame/easy"``.
        factory: a callable returning a TextEnv (called with make's keyword arguments), or an entry point
            ``"package.module:attr"`` resolved on first use.
        overwrite: replace an existing registration instead of raising.
    """
    if not isinstance(env_id, str) or not env_id or env_id != env_id.strip():
        raise EnvRegistrationError(f"env id must be a non-empty string without surrounding spaces, got {env_id!r}")
    if isinstance(factory, str):
        if ":" not in factory:
            raise EnvRegistrationError(f"entry point {factory!r} for {env_id!r} must look like 'package.module:attr'")
    elif not callable(factory):
        raise EnvRegistrationError(f"factory for {env_id!r} must be callable or an entry point string")
    if env_id in _REGISTRY and not overwrite:
        old = _REGISTRY[env_id]
        if _same_factory(old, factory):  # the same definition again (a module imported twice, or by its entry point)
            if isinstance(old, str):
                _REGISTRY[env_id] = factory
            return
        raise EnvRegistrationError(
            f"env id {env_id!r} is already registered to {_describe(old)}, now given {_describe(factory)}; choose "
            "another id, or pass overwrite=True to replace it"
        )
    _REGISTRY[env_id] = factory


def _factory_key(factory: Any) -> Any:
    """What identifies a factory's definition across re-imports: ``"module:qualname"`` (with a partial's arguments)."""
    if isinstance(factory, str):
        return factory
    if isinstance(factory, functools.partial):
        inner = _factory_key(factory.func)
        return None if inner is None else (inner, repr(factory.args), repr(sorted(factory.keywords.items())))
    module, name = getattr(factory, "__module__", None), getattr(factory, "__qualname__", None)
    if not module or not name or "<" in name:  # lambdas and local functions have no stable name
        return None
    return f"{module}:{name}"


def _same_factory(old: Any, new: Any) -> bool:
    if old is new:
        return True
    key = _factory_key(new)
    return key is not None and key == _factory_key(old)


def _describe(factory: Any) -> str:
    key = _factory_key(factory)
    return repr(key if isinstance(key, str) else factory)


def _load_builtins() -> None:
    global _BUILTINS_LOADED
    if _BUILTINS_LOADED:
        return
    _BUILTINS_LOADED = True
    for module in _BUILTIN_MODULES:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:  # a real missing dependency inside the game module
                raise


def list_envs() -> list[str]:
    """All registered env ids, sorted."""
    _load_builtins()
    return sorted(_REGISTRY)


def registered_factory(env_id: str) -> Factory:
    """The factory registered for ``env_id`` (entry points resolved); raises UnknownEnvError with close matches."""
    if env_id not in _REGISTRY:  # the built-in games load only when an id is not registered yet
        _load_builtins()
    if env_id not in _REGISTRY:
        close = difflib.get_close_matches(env_id, list(_REGISTRY), n=5, cutoff=0.5)
        hint = f" Did you mean: {', '.join(close)}?" if close else ""
        raise UnknownEnvError(
            f"unknown env id {env_id!r}.{hint} See envs.list_envs() (or `verlog envs`) for all {len(_REGISTRY)} ids."
        )
    factory = _REGISTRY[env_id]
    if isinstance(factory, str):
        module_name, _, attr = factory.partition(":")
        try:
            factory = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as exc:
            raise EnvRegistrationError(
                f"entry point {_REGISTRY[env_id]!r} of {env_id!r} cannot be loaded: {exc}"
            ) from exc
        _REGISTRY[env_id] = factory
    return factory


def make(env_id: str, **kwargs: Any) -> Any:
    """Build the env registered as ``env_id`` with ``kwargs`` (e.g. ``parse_mode="lenient"``).

    A :class:`~envs.core.TextEnv` (or :class:`~envs.multitask.MultiTaskEnv`) built here records ``env_id`` (its
    ``env_id`` attribute), which its saved states carry: ``set_state`` refuses a state of another id.
    """
    env = registered_factory(env_id)(**kwargs)
    from envs.core import TextEnv
    from envs.multitask import MultiTaskEnv

    target = getattr(env, "unwrapped", env)
    if isinstance(target, (TextEnv, MultiTaskEnv)):
        target.env_id = env_id
    return env


def ensure_importable(folder: str | os.PathLike | None = None) -> str:
    """Put ``folder`` (default: the current folder) on ``sys.path`` (at the end: it never hides an installed
    package), so that a module of one's own there can be imported, here and in spawned workers."""
    path = os.path.abspath(os.fspath(folder) if folder is not None else os.getcwd())
    if path not in (os.path.abspath(p or os.curdir) for p in sys.path):
        sys.path.append(path)
    return path


def import_modules(modules: Iterable[str], *, folder: str | os.PathLike | None = None) -> list[ModuleType]:
    """Import the modules that register envs of one's own (``verlog ... --import MODULE``).

    The current folder (or ``folder``) is importable first (:func:`ensure_importable`). The modules are recorded in
    the environment variable :data:`IMPORTS_ENV_VAR`, so env-pool workers import them too.

    Raises:
        EnvImportError: a name that is not a module name, a module that is not found, or one that fails while it is
            imported; the message names the module and the fix.
    """
    where = ensure_importable(folder)
    done = []
    for raw in modules:
        name = str(raw).strip()
        if not name:
            continue
        if name.endswith(".py") or os.sep in name or not all(part.isidentifier() for part in name.split(".")):
            stem = os.path.splitext(os.path.basename(name))[0]
            hint = f" (for {name}: --import {stem}, run from the folder that holds it)" if stem.isidentifier() else ""
            raise EnvImportError(f"{name!r} is not a module name: give the module's dotted name without .py{hint}")
        try:
            done.append(importlib.import_module(name))
        except ModuleNotFoundError as exc:
            if exc.name is not None and (name == exc.name or name.startswith(exc.name + ".")):
                file = name.replace(".", "/") + ".py"
                raise EnvImportError(
                    f"no module named {name!r}: there is no {file} in the current folder ({where}) nor on sys.path; "
                    "run from the folder that holds it, or add that folder to PYTHONPATH"
                ) from None
            raise EnvImportError(
                f"importing {name!r} failed: it imports {exc.name!r}, which is not installed ({exc})"
            ) from None
        except Exception as exc:  # the module itself raised: name where, without the whole traceback
            frames = traceback.extract_tb(exc.__traceback__)
            inside = [f for f in frames if "importlib" not in f.filename] or frames
            at = f" (at {inside[-1].filename}:{inside[-1].lineno})" if inside else ""
            raise EnvImportError(f"importing {name!r} failed: {type(exc).__name__}: {exc}{at}") from None
    recorded = [m for m in os.environ.get(IMPORTS_ENV_VAR, "").split(",") if m]
    for module in done:
        if module.__name__ not in recorded:
            recorded.append(module.__name__)
    if recorded:
        os.environ[IMPORTS_ENV_VAR] = ",".join(recorded)
    return done


def import_recorded_modules() -> None:
    """Import the modules :func:`import_modules` recorded in :data:`IMPORTS_ENV_VAR` (in a spawned worker)."""
    modules = [m for m in os.environ.get(IMPORTS_ENV_VAR, "").split(",") if m]
    if modules:
        import_modules(modules)
