"""verlog environments: text games with a gymnasium API.

- ``envs.make(env_id, **kwargs)`` builds a registered env; ``envs.list_envs()`` lists the ids;
  ``envs.register(env_id, factory)`` adds one (a callable or a ``"module:attr"`` entry point);
  ``envs.import_modules(["my_envs"])`` imports modules of one's own that register envs (the current folder is
  importable, and env-pool workers import them too).
- Every env follows :class:`envs.core.TextEnv`: text observations (:class:`envs.core.TextObservation`), text actions.
- :class:`envs.multitask.MultiTaskEnv` (id ``multitask``) plays several env ids, one task per episode
  (``reset(options={"task": name})``; in a pool, ``EnvPool.set_next_options``).
"""

import pkgutil

# A user's own envs/ folder (on sys.path) extends this package: `import envs.my_env` finds their envs/my_env.py,
# while `import envs` and verlog's own modules stay these (its folder comes first). docs/design.md, "The envs
# package name"; envs.registry.ensure_importable adds the folders of entries put on sys.path later.
__path__ = pkgutil.extend_path(__path__, __name__)

from envs.adapter import GymTextAdapter
from envs.core import TextEnv, TextObservation
from envs.errors import (
    EnvError,
    EnvImportError,
    EnvOutputError,
    EnvPoolError,
    EnvRegistrationError,
    EnvStateError,
    UnknownEnvError,
)
from envs.multitask import MultiTaskEnv, UnknownTaskError
from envs.pool import BACKENDS, EnvBackendError, EnvPool
from envs.pool_ray import RayClusterError, RayResourcesError, RayWorkerOptions
from envs.registry import import_modules, list_envs, make, register, registered_factory

__all__ = [
    "BACKENDS",
    "EnvBackendError",
    "EnvError",
    "EnvImportError",
    "EnvOutputError",
    "EnvPool",
    "EnvPoolError",
    "EnvRegistrationError",
    "EnvStateError",
    "GymTextAdapter",
    "MultiTaskEnv",
    "RayClusterError",
    "RayResourcesError",
    "RayWorkerOptions",
    "TextEnv",
    "TextObservation",
    "UnknownEnvError",
    "UnknownTaskError",
    "import_modules",
    "list_envs",
    "make",
    "register",
    "registered_factory",
]
