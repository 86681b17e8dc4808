"""``python -m verlog.train [key=value ...]``: the same command as ``verlog train`` (the recipes call this form).

Arguments and checks: :mod:`verlog.commands.train`; the config: :mod:`verlog.config`.
"""

from __future__ import annotations

import sys

from verlog.cli import import_envs_package
from verlog.commands.train import main

if __name__ == "__main__":
    import_envs_package()  # before the current folder, first on the path, can stand in for envs (verlog.cli)
    sys.exit(main())
