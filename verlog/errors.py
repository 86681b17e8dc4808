"""Exception classes of the verlog package. Messages name the offending value and the fix."""

from __future__ import annotations


class VerlogError(Exception):
    """Base class of every error raised by ``verlog``."""


class PromptTooLongError(VerlogError, ValueError):
    """Even the smallest allowed prompt (instruction + current observation + generation prompt) exceeds the budget."""


class MemoryUsageError(VerlogError, RuntimeError):
    """``SlidingMemory`` methods called out of order (e.g. ``record()`` twice for one observation)."""


class AdvantageInputError(VerlogError, ValueError):
    """Tensors given to an advantage or loss function with bad shapes, dtypes, masks or links between rows."""


class RunFault(VerlogError, RuntimeError):
    """A fault during a run that is not a bad input (an inference server died, a checkpoint could not be written):
    the command stops with one line naming what happened and how to resume, exit code 1 (docs/reliability.md)."""


class GeneratorDownError(RunFault):
    """The inference server or engine behind a generator is gone (its process died): no retry can succeed."""


class EngineStartError(RunFault):
    """The inference engine did not start; its own log, printed above this line, names the cause."""


class ImageSetupError(VerlogError, ValueError):
    """Images in the prompt (``memory.max_image_history`` > 0) cannot be set up: a text-only model, an env without
    images, or a processor that cannot be loaded (docs/vision.md)."""
