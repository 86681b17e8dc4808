"""A registry of named entries, in registration order: what a config key such as ``algorithm.estimator`` or
``rollout.async_mode`` names (verlog.algorithms.estimators, verlog.config.async_modes)."""

from __future__ import annotations

from typing import Generic, TypeVar

Entry = TypeVar("Entry")


class Registry(dict[str, Entry], Generic[Entry]):
    """Name -> entry, in registration order (the order the key's choices are listed in); a plain dict to read."""

    def __init__(self, what: str) -> None:
        super().__init__()
        self.what = what
        """What an entry is, in messages ("advantage estimator")."""

    def add(self, name: str, entry: Entry) -> Entry:
        """Register ``entry`` as ``name``.

        Raises:
            ValueError: ``name`` is registered already.
        """
        if name in self:
            raise ValueError(f"an {self.what} named {name!r} is registered already")
        self[name] = entry
        return entry

    def entry(self, name: str) -> Entry:
        """The entry named ``name``.

        Raises:
            ValueError: no entry of that name, with the registered names (the config checks report it before a
                launch).
        """
        try:
            return self[name]
        except KeyError:
            raise ValueError(f"no {self.what} {name!r}; registered: {', '.join(self)}") from None

    def copy(self) -> Registry[Entry]:
        """A registry with the same entries (a test that registers an example changes the copy only)."""
        twin: Registry[Entry] = Registry(self.what)
        twin.update(self)
        return twin
