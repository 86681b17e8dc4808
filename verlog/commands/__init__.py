"""Subcommands of the ``verlog`` console command (one module each; see verlog/cli.py)."""
