"""Exception classes of the envs package. Messages name the offending value and the fix."""


class EnvError(Exception):
    """Base class of every error raised by ``envs``."""


class UnknownEnvError(EnvError, KeyError):
    """An env id that is not registered."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class EnvRegistrationError(EnvError, ValueError):
    """A bad ``envs.register`` call (duplicate id, bad entry point)."""


class EnvStateError(EnvError, RuntimeError):
    """An env used out of order (step after the episode ended) or a state that cannot be restored."""


class EnvPoolError(EnvError, RuntimeError):
    """The pool cannot go on: an env cannot be built or reset at all, or a get/set-state call failed."""


class EnvOutputError(EnvError, ValueError):
    """An env returned what a text env must not: an observation that is not text, a reward that is not a finite
    number, an info that is not a dict. In a pool this ends only that slot's episode (``info["env_error"]``)."""


class EnvImportError(EnvError, ImportError):
    """A module named to register envs (``--import MODULE``, ``env.imports``) cannot be imported."""


class EnvBuildError(EnvError, ValueError):
    """An env that does not build, or does not reset, with the keyword arguments given (``envs.registry.build_env``):
    the message names the argument at fault and where it came from."""


class EnvImageError(EnvOutputError):
    """An observation's image that breaks the rules (``envs.images.check_image``: a numpy array ``[H, W, 3]`` of
    dtype uint8), or images asked of an env that draws none (``images=True``)."""
