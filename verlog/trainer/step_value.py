"""StepValue: what one seam of verl's ``fit`` hands to a later seam of the same iteration, by the iteration's number."""

from __future__ import annotations

from typing import Generic, TypeVar

T = TypeVar("T")


class StepValue(Generic[T]):
    """A value one seam of verl's ``fit`` hands to a later seam of the same iteration: :meth:`put` at iteration
    ``step``, :meth:`take` at that ``step`` (once). A value of another iteration is never handed out, so a seam that
    did not run in an iteration leaves nothing stale for the next."""

    def __init__(self) -> None:
        self._step: int | None = None
        self._value: T | None = None

    def put(self, step: int, value: T) -> None:
        self._step, self._value = step, value

    def take(self, step: int, default: T) -> T:
        if self._step != step or self._value is None:
            return default
        value = self._value
        self._step, self._value = None, None
        return value
