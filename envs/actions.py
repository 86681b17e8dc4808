"""Turning the model's text into one of an env's action strings.

Two modes, chosen per env config:

- ``strict``: BALROG's chain-of-thought parsing (balrog-text-spec.md section 4.3): drop every character that is not
  an ASCII letter, whitespace or ``:``, take what follows the last case-sensitive ``ACTION:`` (the whole text when
  there is none), strip it, and accept it only if it is exactly one of the actions.
- ``lenient``: TODO (issue 3): last ``ACTION:`` marker in any case, case-insensitive match, underscores, trailing
  punctuation, and the env's synonym map.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

_NOT_LETTER_SPACE_COLON = re.compile(r"[^A-Za-z\s:]")


def parse_action(
    text: str, actions: Sequence[str], *, mode: str = "strict", synonyms: Mapping[str, str] | None = None
) -> str | None:
    """The action string ``text`` names, or None when it names none of ``actions``."""
    if mode == "strict":
        filtered = _NOT_LETTER_SPACE_COLON.sub("", text)
        candidate = filtered.split("ACTION:")[-1].strip()
        return candidate if candidate in actions else None
    raise NotImplementedError(f"parse mode {mode!r}")
