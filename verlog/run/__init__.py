"""A run's files: the crash-safe run folder, JSON-lines and atomic writes, fault points, the summary."""
