"""The env registry: ids such as ``babyai/goto`` mapped to factories, loaded lazily.

It is the one place an env id is resolved and checked: a registered id, or an entry point ``"package.module:attr"``
(:func:`resolve_env_factory`, :func:`register_entry_point`), modules of one's own that register envs
(:func:`import_modules`, ``--import MODULE``), and the checks every command and the training preflight run before
anything starts (:func:`check_env_id`, :func:`build_env`). Their errors are :class:`envs.errors.EnvError`s whose
message names the input at fault and the fix; the callers add only where the input came from.
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import importlib
import inspect
import os
import re
import sys
import traceback
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import Any

from envs.core import RecordsEnvId
from envs.errors import EnvBuildError, EnvImportError, EnvRegistrationError, UnknownEnvError

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
        try:
            factory = _load_entry_point(factory)
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
    target = getattr(env, "unwrapped", env)
    if isinstance(target, RecordsEnvId):
        target.env_id = env_id
    return env


# ------------------------------------------------------------------------------------------------ entry points
def _load_entry_point(spec: str) -> Any:
    """The object ``"package.module:attr"`` names (the ImportError or AttributeError as raised)."""
    module_name, _, attr = spec.partition(":")
    return getattr(importlib.import_module(module_name), attr)


def resolve_env_factory(env_id: str) -> str | Factory:
    """A registered env id stays as is; ``"package.module:attr"`` becomes that callable (e.g. a test's env).

    Raises:
        EnvRegistrationError: (a ValueError) the module or the attribute cannot be loaded.
    """
    if ":" not in env_id:
        return env_id
    try:
        return _load_entry_point(env_id)
    except (ImportError, AttributeError) as exc:
        raise EnvRegistrationError(
            f"env factory {env_id!r} cannot be loaded ({exc}); give a registered id or 'module:attr'"
        ) from exc


def _entry_point(env_id: str, option: str | None) -> Any:
    """:func:`resolve_env_factory` of ``env_id``; its error prefixed with ``option`` (where the id came from)."""
    try:
        return resolve_env_factory(env_id)
    except EnvRegistrationError as exc:
        if option is None:
            raise
        raise EnvRegistrationError(f"{option}: {exc}") from None


def register_entry_point(env_id: str, option: str | None = None) -> None:
    """Register a ``package.module:factory`` env id under that same id, so that :func:`make` (and the env-pool
    workers) build it; a registered id is left alone. EnvRegistrationError (prefixed with ``option``, when given)
    when it cannot be loaded."""
    if ":" in env_id and env_id not in _REGISTRY:
        register(env_id, _entry_point(env_id, option))


# ------------------------------------------------------------------------------------------------ checks
def check_env_id(env_id: str, option: str = "env id") -> None:
    """``env_id`` is a registered id or an importable ``package.module:factory``; else UnknownEnvError with the close
    ids (or EnvRegistrationError), the message starting with ``option``."""
    if ":" in env_id:
        _entry_point(env_id, option)
        return
    known = list_envs()
    if env_id in known:
        return
    close = difflib.get_close_matches(env_id, known, n=3, cutoff=0.5)
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    raise UnknownEnvError(
        f"{option} {env_id!r} is not a registered env.{hint} `verlog envs` lists them; an env of your own needs "
        "--import MODULE (the module that calls envs.register) or the form package.module:factory"
    )


def accepted_kwargs(factory: Any) -> list[str] | None:
    """The keyword arguments ``factory`` takes (following ``**kwargs`` up a class's ``__init__`` chain), or None
    when they cannot be known (a function that passes ``**kwargs`` on)."""
    bound: set[str] = set()
    positional = 0
    target = factory
    while isinstance(target, functools.partial):
        bound |= set(target.keywords)
        positional += len(target.args)
        target = target.func
    chain = [c for c in target.__mro__ if "__init__" in c.__dict__] if isinstance(target, type) else [target]
    names: list[str] = []
    for depth, item in enumerate(chain):
        try:
            params = list(inspect.signature(item.__init__ if isinstance(item, type) else item).parameters.values())
        except (TypeError, ValueError):
            return None
        params = [p for p in params if p.name != "self"]
        if depth == 0:  # the partial's positional arguments fill the first parameters
            params = [p for k, p in enumerate(params) if k >= positional or p.kind is p.KEYWORD_ONLY]
        names += [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in names]
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            return [n for n in names if n not in bound]
        if not isinstance(target, type):
            return None
    return None


def build_env(env_id: str, kwargs: dict[str, Any], origin: str, *, reset: bool = True, seed: int = 0) -> Any:
    """Build ``env_id`` (a registered id or ``package.module:factory``) with ``kwargs`` and reset it with ``seed``.

    ``origin`` says where the kwargs come from (``--env-arg``, ``env.kwargs``, ``--env-kwargs``) for the message.

    Raises:
        UnknownEnvError, EnvRegistrationError: the id does not resolve.
        EnvBuildError: the env does not build or reset with these kwargs; an argument the env does not take is named
            with the close ones it takes.
    """
    factory = _entry_point(env_id, "env id") if ":" in env_id else registered_factory(env_id)
    env = None
    try:
        env = factory(**kwargs)
        if reset:
            env.reset(seed=seed)
        return env
    except TypeError as exc:
        _close(env)
        match = re.search(r"unexpected keyword argument '(\w+)'", str(exc))
        if match is None or match.group(1) not in kwargs:  # not one of the given arguments: the factory's own error
            raise EnvBuildError(_build_failure(env_id, kwargs, origin, exc)) from None
        bad = match.group(1)
        accepted = accepted_kwargs(factory)
        lines = [f"env {env_id!r} takes no keyword argument {bad!r} (from {origin}: {bad}={kwargs.get(bad)!r})."]
        if accepted:
            close = difflib.get_close_matches(bad, accepted, n=1, cutoff=0.6)
            if close:
                lines.append(f"Did you mean {close[0]!r}?")
            lines.append(f"It takes: {', '.join(accepted)}.")
        raise EnvBuildError(" ".join(lines)) from None
    except Exception as exc:  # the factory or reset raised on these settings
        _close(env)
        raise EnvBuildError(_build_failure(env_id, kwargs, origin, exc)) from None


def _close(env: Any) -> None:
    if env is not None:
        with contextlib.suppress(Exception):
            env.close()


def _build_failure(env_id: str, kwargs: dict[str, Any], origin: str, exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    at = f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    return (
        f"building env {env_id!r} with {origin} {kwargs} and resetting it failed: {type(exc).__name__}: {exc}{at}; "
        f"check {origin}"
    )


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
