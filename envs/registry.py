"""The env registry: ids such as ``babyai/goto`` mapped to factories, loaded lazily."""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable
from typing import Any

from envs.errors import EnvRegistrationError, UnknownEnvError

Factory = Callable[..., Any]
_REGISTRY: dict[str, Factory | str] = {}
_BUILTINS_LOADED = False

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
        raise EnvRegistrationError(f"env id {env_id!r} is already registered; pass overwrite=True to replace it")
    _REGISTRY[env_id] = factory


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
    """Build the env registered as ``env_id`` with ``kwargs`` (e.g. ``parse_mode="lenient"``)."""
    return registered_factory(env_id)(**kwargs)
