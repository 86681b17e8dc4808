"""verlog: multi-turn reinforcement learning for LLM agents on long-horizon text games."""

from verlog.version import __version__

__all__ = ["__version__"]
