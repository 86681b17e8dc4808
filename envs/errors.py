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
