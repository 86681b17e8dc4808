"""BALROG-style evaluation of a model on verlog's text games (docs/evaluation.md).

- :mod:`verlog.eval.protocol`: which episodes run (tasks, episodes per task, explicit seeds).
- :mod:`verlog.eval.engine`: resolve the model path, start one generation engine (vLLM or transformers).
- :mod:`verlog.eval.runner`: play episodes, batched across episodes and tasks.
- :mod:`verlog.eval.stats`: BALROG's mean and standard error, bootstrap intervals.
- :mod:`verlog.eval.report`: summary, results table, files, comparisons between runs.
- :mod:`verlog.eval.evaluation`: :func:`evaluate`, all of it into one folder.
"""

from __future__ import annotations

from verlog.eval.engine import EvalModelError, LoadedModel, load_model, resolve_model_path
from verlog.eval.evaluation import evaluate
from verlog.eval.protocol import EpisodeSpec, EvalProtocol, EvalProtocolError, expand_tasks, split_task
from verlog.eval.report import compare_records, format_table, read_episode_records, summarize
from verlog.eval.runner import EpisodeRecord, run_episodes
from verlog.eval.stats import (
    EvalStatsError,
    Interval,
    MeanSE,
    balrog_mean_se,
    balrog_overall,
    bootstrap_diff_ci,
    bootstrap_mean_ci,
)

__all__ = [
    "EpisodeRecord",
    "EpisodeSpec",
    "EvalModelError",
    "EvalProtocol",
    "EvalProtocolError",
    "EvalStatsError",
    "Interval",
    "LoadedModel",
    "MeanSE",
    "balrog_mean_se",
    "balrog_overall",
    "bootstrap_diff_ci",
    "bootstrap_mean_ci",
    "compare_records",
    "evaluate",
    "expand_tasks",
    "format_table",
    "load_model",
    "read_episode_records",
    "resolve_model_path",
    "run_episodes",
    "split_task",
    "summarize",
]
