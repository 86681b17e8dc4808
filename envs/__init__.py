"""verlog environments: text games with a gymnasium API.

- ``envs.make(env_id, **kwargs)`` builds a registered env; ``envs.list_envs()`` lists the ids;
  ``envs.register(env_id, factory)`` adds one (a callable or a ``"module:attr"`` entry point).
- Every env follows :class:`envs.core.TextEnv`: text observations (:class:`envs.core.TextObservation`), text actions.
"""

from envs.adapter import GymTextAdapter
from envs.core import TextEnv, TextObservation
from envs.errors import EnvError, EnvPoolError, EnvRegistrationError, EnvStateError, UnknownEnvError
from envs.pool import EnvPool
from envs.registry import list_envs, make, register, registered_factory

__all__ = [
    "EnvError",
    "EnvPool",
    "EnvPoolError",
    "EnvRegistrationError",
    "EnvStateError",
    "GymTextAdapter",
    "TextEnv",
    "TextObservation",
    "UnknownEnvError",
    "list_envs",
    "make",
    "register",
    "registered_factory",
]
