"""Results of an evaluation: the summary (BALROG's numbers plus intervals), the table, the files, comparisons.

Files in an evaluation folder:

- ``episodes.jsonl``: one :class:`verlog.eval.runner.EpisodeRecord` per line, appended as episodes finish (an
  interrupted evaluation resumes from it);
- ``summary.json``: :func:`summarize`'s dict plus the run's settings (model, sampling, protocol with every seed);
- ``turns.jsonl`` (optional): one :class:`verlog.tapes.record.TurnLog` per turn.

Summary layout (percentages as BALROG reports them, rates and returns as plain numbers)::

    {"format": "verlog.eval/1", "average_progress": %, "standard_error": %, "episodes": N,
     "confidence": 0.95, "bootstrap": {"n_resamples": 10000, "seed": 0},
     "environments": {"babyai": {<group>, "tasks": {"goto": {<group>}, ...}}, ...}, ...settings}

    <group> = {"episodes", "progression_percentage", "progression_sd", "standard_error", "progression_ci",
               "success_rate", "success_rate_ci", "mean_return", "return_ci", "average_steps",
               "valid_action_rate", "truncated_episodes", "generation_failures", "input_tokens", "output_tokens"}

``average_progress`` and ``standard_error`` follow BALROG exactly (:func:`verlog.eval.stats.balrog_overall`); the
``*_ci`` entries are percentile-bootstrap intervals ``[low, high]`` (:func:`verlog.eval.stats.bootstrap_mean_ci`).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from verlog.eval.runner import EpisodeRecord
from verlog.eval.stats import Interval, balrog_mean_se, balrog_overall, bootstrap_diff_ci, bootstrap_mean_ci
from verlog.run.files import append_jsonl, json_lines

SUMMARY_FORMAT = "verlog.eval/1"
SUMMARY_FILE = "summary.json"
EPISODES_FILE = "episodes.jsonl"
TURNS_FILE = "turns.jsonl"
SETTINGS_FILE = "settings.json"
"""What an evaluation was started with (:func:`verlog.eval.evaluation.evaluation_settings`), written before its first
episode, so that ``--resume`` can tell an interrupted evaluation of other settings."""
METRICS = ("success", "progression", "return")


def _interval(values: Sequence[float], confidence: float, n_resamples: int, seed: int, scale: float = 1.0) -> list:
    ci = bootstrap_mean_ci(values, confidence=confidence, n_resamples=n_resamples, seed=seed).scaled(scale)
    return [ci.low, ci.high]


def group_stats(
    records: Sequence[EpisodeRecord], *, confidence: float = 0.95, n_resamples: int = 10_000, seed: int = 0
) -> dict[str, Any]:
    """The numbers of one group of episodes (a task, or an environment's tasks pooled)."""
    progression = [r.progression for r in records]
    success = [float(r.success) for r in records]
    returns = [r.episode_return for r in records]
    prog = balrog_mean_se(progression)
    steps = sum(r.num_steps for r in records)
    return {
        "episodes": len(records),
        "progression_percentage": 100.0 * prog.mean,
        "progression_sd": 100.0 * prog.sd,
        "standard_error": 100.0 * prog.se,
        "progression_ci": _interval(progression, confidence, n_resamples, seed, 100.0),
        "success_rate": float(np.mean(success)),
        "success_rate_ci": _interval(success, confidence, n_resamples, seed),
        "mean_return": float(np.mean(returns)),
        "return_ci": _interval(returns, confidence, n_resamples, seed),
        "average_steps": steps / len(records),
        "valid_action_rate": sum(r.valid_actions for r in records) / steps if steps else 0.0,
        "truncated_episodes": sum(r.truncated for r in records),
        "generation_failures": sum(r.generation_failures for r in records),
        "input_tokens": sum(r.input_tokens for r in records),
        "output_tokens": sum(r.output_tokens for r in records),
    }


def summarize(
    records: Sequence[EpisodeRecord], *, confidence: float = 0.95, n_resamples: int = 10_000, seed: int = 0
) -> dict[str, Any]:
    """BALROG's per-environment and overall numbers, per-task blocks, and bootstrap intervals (module docstring)."""
    if not records:
        raise ValueError("no episode records to summarize: the evaluation ran no episode")
    kw = {"confidence": confidence, "n_resamples": n_resamples, "seed": seed}
    by_env: dict[str, dict[str, list[EpisodeRecord]]] = {}
    for rec in records:
        by_env.setdefault(rec.env, {}).setdefault(rec.task, []).append(rec)
    environments: dict[str, Any] = {}
    for env, tasks in by_env.items():
        pooled = [r for recs in tasks.values() for r in recs]
        block = group_stats(pooled, **kw)
        block["tasks"] = {task: group_stats(recs, **kw) for task, recs in tasks.items()}
        environments[env] = block
    average, se = balrog_overall(
        [b["progression_percentage"] for b in environments.values()],
        [b["standard_error"] for b in environments.values()],
    )
    return {
        "format": SUMMARY_FORMAT,
        "average_progress": average,
        "standard_error": se,
        "episodes": len(records),
        "confidence": confidence,
        "bootstrap": {"n_resamples": n_resamples, "seed": seed},
        "environments": environments,
    }


def format_table(summary: dict[str, Any]) -> str:
    """A plain-text results table: one row per task, one per environment (tasks pooled), one overall."""
    pct = round(100 * float(summary.get("confidence", 0.95)))
    header = (
        f"{'task':<34} {'eps':>4}  {'progression % (+-SE)':>20}  {'success [' + str(pct) + '% CI]':>22}  "
        f"{'return':>7}  {'steps':>6}  {'valid':>6}"
    )
    lines = [header, "-" * len(header)]

    def row(name: str, g: dict[str, Any]) -> str:
        prog = f"{g['progression_percentage']:.1f} +- {g['standard_error']:.1f}"
        lo, hi = g["success_rate_ci"]
        succ = f"{g['success_rate']:.2f} [{lo:.2f}, {hi:.2f}]"
        return (
            f"{name:<34} {g['episodes']:>4}  {prog:>20}  {succ:>22}  {g['mean_return']:>7.3f}  "
            f"{g['average_steps']:>6.1f}  {g['valid_action_rate']:>6.2f}"
        )

    for env, block in summary["environments"].items():
        for task, g in block["tasks"].items():
            lines.append(row(f"{env}/{task}" if task != env else env, g))
        if len(block["tasks"]) > 1:
            lines.append(row(f"{env} (all tasks)", block))
    lines.append("-" * len(header))
    overall = f"{summary['average_progress']:.1f} +- {summary['standard_error']:.1f}"
    lines.append(f"{'overall (BALROG, mean of envs)':<34} {summary['episodes']:>4}  {overall:>20}")
    return "\n".join(lines)


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"cannot write {type(value).__name__} to JSON")


def dumps(data: Any) -> str:
    """JSON text; numpy scalars and arrays become plain numbers and lists."""
    return json.dumps(data, default=_json_default, ensure_ascii=False)


def append_episode_record(path: str | Path, record: EpisodeRecord) -> None:
    """Add one record to an ``episodes.jsonl`` file (created with its folder if missing; one write of a whole line,
    :func:`verlog.run.files.append_jsonl`)."""
    append_jsonl(path, [record.to_dict()], default=_json_default)


def read_episode_records(path: str | Path) -> list[EpisodeRecord]:
    """The records of an ``episodes.jsonl`` file, or of ``<folder>/episodes.jsonl`` when given a folder; a torn last
    line (an evaluation killed while writing it) is skipped with a warning on stderr (:mod:`verlog.run.files`' rule).

    Raises:
        ValueError: a line is not an episode record (``file:line``); JsonLinesError, a ValueError, when it is not
            JSON.
    """
    path = Path(path)
    if path.is_dir():
        path = path / EPISODES_FILE
    out = []
    for number, value in json_lines(path, on_torn=lambda torn: print(f"[verlog] {torn}", file=sys.stderr)):
        try:
            out.append(EpisodeRecord.from_dict(value))
        except (TypeError, AttributeError) as exc:
            raise ValueError(f"{path}:{number}: not an episode record ({exc})") from exc
    return out


def write_summary(out_dir: str | Path, summary: dict[str, Any]) -> Path:
    """Write ``summary.json`` into ``out_dir``; returns its path."""
    path = Path(out_dir) / SUMMARY_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(summary, indent=2, default=_json_default, ensure_ascii=False) + "\n")
    return path


def _metric(record: EpisodeRecord, metric: str) -> float:
    if metric == "success":
        return float(record.success)
    if metric == "progression":
        return record.progression
    if metric == "return":
        return record.episode_return
    raise ValueError(f"metric must be one of {METRICS}, got {metric!r}")


def compare_records(
    treatment: Iterable[EpisodeRecord],
    baseline: Iterable[EpisodeRecord],
    metric: str = "success",
    *,
    confidence: float = 0.95,
    n_resamples: int = 10_000,
    seed: int = 0,
) -> tuple[Interval, bool]:
    """Bootstrap interval of ``mean(treatment) - mean(baseline)`` for ``metric`` (success, progression, return).

    When both runs played exactly the same episodes (same env ids and seeds), the episodes are paired by
    ``(env_id, seed)`` and the paired bootstrap is used; otherwise the two samples are treated as independent.
    Returns the interval and whether it was paired.
    """
    t = {(r.env_id, r.seed): r for r in treatment}
    b = {(r.env_id, r.seed): r for r in baseline}
    kw = {"confidence": confidence, "n_resamples": n_resamples, "seed": seed}
    if t and set(t) == set(b):
        keys = sorted(t)
        tv = [_metric(t[k], metric) for k in keys]
        bv = [_metric(b[k], metric) for k in keys]
        return bootstrap_diff_ci(tv, bv, paired=True, **kw), True
    tv = [_metric(r, metric) for r in t.values()]
    bv = [_metric(r, metric) for r in b.values()]
    return bootstrap_diff_ci(tv, bv, paired=False, **kw), False
