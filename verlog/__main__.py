"""``python -m verlog`` is the ``verlog`` command."""

import sys

from verlog.cli import main

sys.exit(main())
