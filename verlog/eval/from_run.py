"""``verlog eval --run RUN_DIR``: evaluate a training run as it was trained.

A run folder keeps the config it trained with (``config.yaml``, :class:`verlog.run.folder.RunFolder`); from it come
the evaluation's settings that must match training for the numbers to mean anything: the env id and its keyword
arguments, the prompts (memory ``n``, ``keep_reasoning_turns``, ``answer_format``, ``max_image_history``), the token
budgets, and the in-training evaluation's temperature. The sweep evaluates its trials this way, so the mapping from a
training config to an evaluation lives here only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from verlog.errors import VerlogError
from verlog.run.folder import RunFolder


class RunSettingsError(VerlogError, ValueError):
    """A run folder whose training settings cannot be read for an evaluation (the message names the fix)."""


def eval_settings_of_run(run_dir: str | Path) -> dict[str, Any]:
    """``verlog eval``'s options (argparse destinations) as the run in ``run_dir`` trained: ``tasks``,
    ``env_kwargs`` (JSON), ``max_tokens``, ``max_prompt_tokens``, ``memory_n``, ``keep_reasoning_turns``,
    ``answer_format``, ``max_image_history``, ``temperature`` and ``top_p`` (its in-training evaluation's).

    Raises:
        RunSettingsError: no ``config.yaml`` there, one that does not parse or type, or a multi-task run
            (``env.tasks``: which task to evaluate is the caller's choice, ``--tasks``).
    """
    import json

    from verlog.config.checks import MOVED_KEYS, typed_config

    path = RunFolder(run_dir).config
    if not path.is_file():
        raise RunSettingsError(
            f"{run_dir} has no {path.name}: give the folder verlog train wrote (its output_dir), or the evaluation's "
            "settings as options instead of --run"
        )
    try:
        cfg, problems = typed_config(OmegaConf.load(path))
    except Exception as exc:  # a torn or hand-edited file: yaml and omegaconf raise several kinds
        raise RunSettingsError(f"{path} does not parse ({type(exc).__name__}: {exc})") from None
    problems = [p for p in problems if p.key not in MOVED_KEYS]  # a saved config holds them, derived
    if problems:
        raise RunSettingsError(f"{path}: {problems[0].key}: {problems[0].message}")
    if cfg.env.tasks:
        raise RunSettingsError(
            f"{run_dir} trained several task families (env.tasks): give --tasks with the env ids to evaluate"
        )
    return {
        "tasks": str(cfg.env.id),
        "env_kwargs": json.dumps(dict(cfg.env.kwargs)),
        "max_tokens": cfg.rollout.max_response_tokens,
        "max_prompt_tokens": cfg.rollout.max_prompt_tokens,
        "memory_n": cfg.memory.n,
        "keep_reasoning_turns": cfg.memory.keep_reasoning_turns,
        "answer_format": cfg.memory.answer_format,
        "max_image_history": cfg.memory.max_image_history,
        "temperature": cfg.eval_sampling.temperature,
        "top_p": cfg.eval_sampling.top_p,
    }
