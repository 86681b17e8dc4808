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
import pkgutil
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

# Modules that register the built-in envs when imported, by the family of their ids. Imported on first use of the
# registry, so that ``import envs`` stays cheap and a game's dependencies load only when one of its ids is used.
_BUILTIN_FAMILIES = {
    "babyai": "envs.babyai",
    "crafter": "envs.crafter",
    "babaisai": "envs.babaisai",
    "toy": "envs.toy",
    "slow": "envs.slow",
}
_BUILTIN_MODULES = tuple(_BUILTIN_FAMILIES.values())


def register(env_id: str, factory: Factory | str, *, overwrite: bool = False) -> None:
    """Register ``env_id``.

    Args:
        env_id: ``"<family>/<task>"``, e.g. ``"mygame/easy"``.
        factory: a callable returning a TextEnv (called with make's keyword arguments), or an entry point
            ``"package.module:attr"`` resolved on first use.
        overwrite: replace an existing registration instead of raising.

    Raises:
        EnvRegistrationError: ``env_id`` is taken by another factory (a built-in id too: the game of a built-in
            family is loaded first, so that registering before it would not be undone by it). The same factory
            again (a module imported twice, or through its entry point) is fine.
    """
    if not isinstance(env_id, str) or not env_id or env_id != env_id.strip():
        raise EnvRegistrationError(f"env id must be a non-empty string without surrounding spaces, got {env_id!r}")
    if isinstance(factory, str):
        if ":" not in factory:
            raise EnvRegistrationError(f"entry point {factory!r} for {env_id!r} must look like 'package.module:attr'")
    elif not callable(factory):
        raise EnvRegistrationError(f"factory for {env_id!r} must be callable or an entry point string")
    builtin = _BUILTIN_FAMILIES.get(env_id.partition("/")[0])
    if builtin is not None and builtin not in sys.modules:  # its ids are taken even before the game is loaded
        importlib.import_module(builtin)
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
    if isinstance(factory, functools.partial) and key is not None:  # 'module:Class' with the partial's arguments
        args = [repr(a) for a in factory.args] + [f"{k}={v!r}" for k, v in factory.keywords.items()]
        return f"{_describe(factory.func)} with ({', '.join(args)})"
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


NEEDS_ARGUMENTS: dict[str, str] = {
    "slow": "inner, the env it slows down: verlog play slow --env-arg inner=babyai/goto",
    "multitask": "tasks, its task families: verlog train's env.tasks (docs/curriculum.md), or verlog play multitask "
    "--env-arg \"tasks={'goto': 'babyai/goto'}\"",
}
"""Built-in ids that wrap other envs, so that no env is built from them without keyword arguments -> what they need
(``verlog envs`` lists them apart: :func:`playable_envs`)."""


def needed_arguments(env_id: str) -> str | None:
    """What ``env_id`` needs before it builds with no keyword arguments (``verlog play ID``, ``verlog eval --tasks
    ID``), or None when it builds as it is: a wrapper of :data:`NEEDS_ARGUMENTS`, or a factory with parameters that
    have no default (an entry point not loaded yet is not loaded for this: None)."""
    if env_id in NEEDS_ARGUMENTS:
        return NEEDS_ARGUMENTS[env_id]
    factory = _REGISTRY.get(env_id)
    if factory is None or isinstance(factory, str):
        return None
    params, _ = _keyword_parameters(factory)
    required = [name for name, p in params.items() if p.default is p.empty]
    return f"{', '.join(required)} (no default): --env-arg {required[0]}=..." if required else None


def playable_envs() -> list[str]:
    """The registered ids that build with no keyword arguments, sorted: :func:`list_envs` less those
    :func:`needed_arguments` names."""
    return [env_id for env_id in list_envs() if needed_arguments(env_id) is None]


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
    extend_package_path()  # "envs.my_env:make" may name a module in a user's envs/ folder
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


def _keyword_parameters(factory: Any) -> tuple[dict[str, inspect.Parameter], bool]:
    """The keyword parameters ``factory`` declares (following ``**kwargs`` up a class's ``__init__`` chain; a
    partial's arguments left out), and whether that is all of them (False: a ``**kwargs`` that goes nowhere known)."""
    bound: set[str] = set()
    positional = 0
    target = factory
    while isinstance(target, functools.partial):
        bound |= set(target.keywords)
        positional += len(target.args)
        target = target.func
    chain = [c for c in target.__mro__ if "__init__" in c.__dict__] if isinstance(target, type) else [target]
    found: dict[str, inspect.Parameter] = {}
    for depth, item in enumerate(chain):
        try:
            params = list(inspect.signature(item.__init__ if isinstance(item, type) else item).parameters.values())
        except (TypeError, ValueError):
            return found, False
        params = [p for p in params if p.name != "self"]
        if depth == 0:  # the partial's positional arguments fill the first parameters
            params = [p for k, p in enumerate(params) if k >= positional or p.kind is p.KEYWORD_ONLY]
        for p in params:
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in found and p.name not in bound:
                found[p.name] = p
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            return found, True
        if not isinstance(target, type):
            return found, False
    return found, False


def accepted_kwargs(factory: Any) -> list[str] | None:
    """The keyword arguments ``factory`` takes (following ``**kwargs`` up a class's ``__init__`` chain), or None
    when they cannot be known (a function that passes ``**kwargs`` on)."""
    found, complete = _keyword_parameters(factory)
    return list(found) if complete else None


# the annotations whose values are checked before an env is built: name -> (what the value may be, how to write it)
_SIMPLE_TYPES: dict[str, tuple[tuple[type, ...], str]] = {
    "bool": ((bool,), "true or false"),
    "int": ((int,), "an integer"),
    "float": ((int, float), "a number"),
    "str": ((str,), "a text"),
    "None": ((type(None),), "null"),
}


def _simple_types(annotation: Any) -> list[str] | None:
    """``"int | None"`` (or ``Optional[int]``, or the types themselves) -> ``["int", "None"]``; None for any
    annotation that is not made of bool, int, float, str and None (those values are left to the env)."""
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", None) or str(annotation)
    text = text.replace("typing.", "").replace(" ", "").replace("NoneType", "None")
    optional = re.fullmatch(r"Optional\[(.+)\]", text)
    parts = (optional.group(1) + "|None" if optional else text).split("|")
    return parts if all(part in _SIMPLE_TYPES for part in parts) else None


def _fits(value: Any, types: list[str]) -> bool:
    if isinstance(value, bool):  # a bool is an int to Python, not to an env's integer setting
        return "bool" in types
    return any(isinstance(value, _SIMPLE_TYPES[t][0]) for t in types if t != "bool")


def check_kwarg_types(env_id: str, factory: Any, kwargs: dict[str, Any], origin: str) -> None:
    """Each value of ``kwargs`` fits the annotation of the parameter it is given to, where that annotation is made
    of bool, int, float, str and None (``binary_reward='maybe'`` is no bool, and a text is always true).

    Raises:
        EnvBuildError: the first value that does not fit, with the spellings accepted.
    """
    params, _ = _keyword_parameters(factory)
    for name, value in kwargs.items():
        param = params.get(name)
        types = None if param is None or param.annotation is param.empty else _simple_types(param.annotation)
        if types is None or _fits(value, types):
            continue
        spelled = " or ".join(_SIMPLE_TYPES[t][1] for t in types)
        example = f" ({name}=true or {name}=false)" if "bool" in types else ""
        raise EnvBuildError(
            f"env {env_id!r} takes {name}: {' | '.join(types)}, but {origin} gives {name}={value!r} "
            f"({type(value).__name__}): write {spelled}{example}"
        )


def build_env(env_id: str, kwargs: dict[str, Any], origin: str, *, reset: bool = True, seed: int = 0) -> Any:
    """Build ``env_id`` (a registered id or ``package.module:factory``) with ``kwargs`` and reset it with ``seed``.

    ``origin`` says where the kwargs come from (``--env-arg``, ``env.kwargs``, ``--env-kwargs``) for the message.

    Raises:
        UnknownEnvError, EnvRegistrationError: the id does not resolve.
        EnvBuildError: a value of the wrong type (:func:`check_kwarg_types`); the env does not build or reset with
            these kwargs (with none, the env's own error); an argument the env does not take is named with the close
            ones it takes.
    """
    factory = _entry_point(env_id, "env id") if ":" in env_id else registered_factory(env_id)
    check_kwarg_types(env_id, factory, kwargs, origin)
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
    if not kwargs:  # nothing of the user's went in: the env fails on its own
        return (
            f"env {env_id!r} failed on its own while it was built and reset with no keyword arguments ({origin} "
            f"gives none): {type(exc).__name__}: {exc}{at}; this is the env's own error, not a setting: fix the "
            "env (its factory or reset), or tell its author"
        )
    return (
        f"building env {env_id!r} with {origin} {kwargs} and resetting it failed: {type(exc).__name__}: {exc}{at}; "
        f"check {origin}"
    )


def extend_package_path() -> list[str]:
    """Add to the ``envs`` package's ``__path__`` the ``envs/`` folder of each ``sys.path`` entry that has one.

    ``envs/__init__.py`` does it for the entries on ``sys.path`` when it is imported (``pkgutil.extend_path``); this
    adds those put there since, such as the current folder (:func:`ensure_importable`). A user's own ``envs/`` folder
    (with or without an ``__init__.py``, which is never run) so extends verlog's ``envs``: ``import envs.my_env`` finds
    its ``my_env.py``. verlog's own folder stays first, so a user's module never replaces one of verlog's.

    Returns:
        The folders ``envs.NAME`` is searched in, in order.
    """
    package = sys.modules[__name__.rpartition(".")[0]]
    for folder in pkgutil.extend_path(list(package.__path__), package.__name__):
        if folder not in package.__path__:
            package.__path__.append(folder)
    return list(package.__path__)


def ensure_importable(folder: str | os.PathLike | None = None) -> str:
    """Put ``folder`` (default: the current folder) on ``sys.path`` (at the end: it never hides an installed
    package), so that a module of one's own there can be imported, here and in spawned workers; its ``envs/``
    folder, if any, extends the ``envs`` package (:func:`extend_package_path`)."""
    path = os.path.abspath(os.fspath(folder) if folder is not None else os.getcwd())
    if path not in (os.path.abspath(p or os.curdir) for p in sys.path):
        sys.path.append(path)
    extend_package_path()
    return path


def _where_raised(exc: BaseException) -> str:
    """`` (at FILE:LINE)``: the innermost frame of ``exc``'s traceback outside importlib and this module (for an
    error of :func:`register`, the line that called it), or ``""``."""
    frames = traceback.extract_tb(exc.__traceback__)
    inside = [f for f in frames if "importlib" not in f.filename and f.filename != __file__] or frames
    return f" (at {inside[-1].filename}:{inside[-1].lineno})" if inside else ""


def _local_file(name: str, where: str) -> str | None:
    """The file of module ``name`` in folder ``where`` (``a/b.py`` or ``a/b/__init__.py``), if there is one."""
    base = os.path.join(where, *name.split("."))
    return next((f for f in (base + ".py", os.path.join(base, "__init__.py")) if os.path.isfile(f)), None)


def _not_found(name: str, missing: str, where: str) -> str:
    """Why ``name`` cannot be imported, ``no module named NAME`` aside: no module ``missing`` (``name`` itself or a
    package above it) is found."""
    parent, _, leaf = missing.rpartition(".")
    if not parent:  # a top-level module: the current folder is on sys.path
        file = name.replace(".", "/") + ".py"
        return (
            f"there is no {file} in the current folder ({where}) nor on sys.path; "
            "run from the folder that holds it, or add that folder to PYTHONPATH"
        )
    package = sys.modules.get(parent)
    searched = list(getattr(package, "__path__", None) or [])
    if not searched:  # Python's "'a' is not a package"
        origin = getattr(package, "__file__", None) or "?"
        return f"{parent!r} ({origin}) is a module, not a package of modules"
    folder = parent.replace(".", "/")
    message = (
        f"no module {leaf} ({leaf}.py or {leaf}/) in any {folder}/ folder on the path (searched: {', '.join(searched)})"
    )
    local = _local_file(missing, where)
    if local is not None:  # the file is there, but its folder is not part of the package (an installed one hides it)
        origin = getattr(package, "__file__", None) or searched[0]
        return (
            f"{message}; {local} exists, but the package {parent!r} is imported from {origin}, which does not take in "
            f"the {folder}/ folder of the current folder: rename that folder"
        )
    return f"{message}; run from the folder that holds {folder}/{leaf}.py, or add that folder to PYTHONPATH"


def _hidden(name: str, module: ModuleType, where: str) -> str | None:
    """The message when ``where`` holds a file of module ``name`` but the module imported is another one (an
    installed module of that name, such as verlog's own ``envs.toy``, comes first on the path), else None."""
    local, imported = _local_file(name, where), getattr(module, "__file__", None)
    if local is None or imported is None:
        return None
    with contextlib.suppress(OSError):
        if os.path.samefile(local, imported):
            return None
    return (
        f"{name!r} is {imported}, which comes first on the path, not your {local}: give your module a name of its own"
    )


def import_modules(modules: Iterable[str], *, folder: str | os.PathLike | None = None) -> list[ModuleType]:
    """Import the modules that register envs of one's own (``verlog ... --import MODULE``).

    The current folder (or ``folder``) is importable first (:func:`ensure_importable`), and so is its ``envs/``
    folder, as part of the ``envs`` package (``--import envs.my_env``). The modules are recorded in the environment
    variable :data:`IMPORTS_ENV_VAR`, so env-pool workers import them too.

    Raises:
        EnvImportError: a name that is not a module name, a module that is not found (the folders searched), one
            that fails while it is imported (the exception and where), or one whose name an installed module
            takes; the message names the module and the fix.
    """
    where = ensure_importable(folder)
    importlib.invalidate_caches()  # modules written since the last import (finders cache folder listings)
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
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            missing = exc.name or name
            if name == missing or name.startswith(missing + "."):
                raise EnvImportError(f"no module named {name!r}: {_not_found(name, missing, where)}") from None
            at = _where_raised(exc)
            if "." in missing and missing.rpartition(".")[0] in sys.modules:  # a module of a package that is there
                why = _not_found(missing, missing, where)
                raise EnvImportError(
                    f"importing {name!r} failed: it imports {missing!r}, which is not found{at}: {why}"
                ) from None
            raise EnvImportError(
                f"importing {name!r} failed: it imports {exc.name!r}, which is not installed ({exc}){at}"
            ) from None
        except Exception as exc:  # the module itself raised: name where, without the whole traceback
            at = _where_raised(exc)
            raise EnvImportError(f"importing {name!r} failed: {type(exc).__name__}: {exc}{at}") from None
        hidden = _hidden(name, module, where)
        if hidden is not None:
            raise EnvImportError(hidden)
        done.append(module)
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
