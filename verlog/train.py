"""``python -m verlog.train [key=value ...]``: the same command as ``verlog train`` (the recipes call this form).

Arguments and checks: :mod:`verlog.commands.train`; the config: :mod:`verlog.config`.
"""

from __future__ import annotations

import sys

from verlog.commands.train import main

if __name__ == "__main__":
    sys.exit(main())
