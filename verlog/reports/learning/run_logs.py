"""What a learning run's logs say besides the evaluations: each stage's wall time (``timings.jsonl``), each PPO
run's learning curve (verl's ``metrics.jsonl``) and its episodes across iterations (``rollout.jsonl``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verlog.reports.learning.stages import TIMINGS_FILE
from verlog.reports.run_files import ReportError, read_log


def read_timings(run_dir: str | Path) -> dict[str, float]:
    """Stage -> seconds of its last run (``timings.jsonl``; empty when the file is missing)."""
    path = Path(run_dir) / TIMINGS_FILE
    if not path.is_file():
        return {}
    out: dict[str, float] = {}
    for item in read_log(path, "learning"):
        if "stage" not in item or "seconds" not in item:
            raise ReportError(f"{path}: a line lacks 'stage' or 'seconds': {item}")
        out[str(item["stage"])] = float(item["seconds"])
    return out


@dataclass
class Curve:
    """Per-iteration rollout statistics of one PPO run (from its ``metrics.jsonl``).

    ``steps``, ``success``, ``ret``, ``episodes``: iterations in which at least one episode ended, with the success
    rate, mean return and number of those episodes; ``step_seconds``: verl's ``timing_s/step`` of every iteration.
    """

    steps: list[int] = field(default_factory=list)
    success: list[float] = field(default_factory=list)
    ret: list[float] = field(default_factory=list)
    episodes: list[float] = field(default_factory=list)
    step_seconds: list[float] = field(default_factory=list)
    iterations: int = 0
    eval_steps: list[int] = field(default_factory=list)  # the in-training evaluations (eval/*), where logged
    eval_success: list[float] = field(default_factory=list)
    eval_success_se: list[float] = field(default_factory=list)
    eval_return: list[float] = field(default_factory=list)
    eval_return_se: list[float] = field(default_factory=list)


def read_curve(metrics_path: str | Path) -> Curve:
    """The learning curve in a PPO run's ``metrics.jsonl`` (a line per iteration; on repeats the last wins)."""
    by_step: dict[int, dict[str, Any]] = {}
    for item in read_log(metrics_path, "learning"):
        if "step" not in item:
            raise ReportError(f"{metrics_path}: a line has no 'step': {sorted(item)[:8]}...")
        by_step[int(item["step"])] = item
    curve = Curve(iterations=sum(1 for step in by_step if step >= 1))  # step 0: the evaluation before training
    for step in sorted(by_step):
        item = by_step[step]
        if "timing_s/step" in item:
            curve.step_seconds.append(float(item["timing_s/step"]))
        if item.get("env/episodes", 0) and "env/success_rate" in item:
            curve.steps.append(step)
            curve.success.append(float(item["env/success_rate"]))
            curve.ret.append(float(item["env/return_mean"]))
            curve.episodes.append(float(item["env/episodes"]))
        if "eval/success" in item:
            curve.eval_steps.append(step)
            curve.eval_success.append(float(item["eval/success"]))
            curve.eval_success_se.append(float(item.get("eval/success_se", 0.0)))
            curve.eval_return.append(float(item.get("eval/return", math.nan)))
            curve.eval_return_se.append(float(item.get("eval/return_se", 0.0)))
    return curve


def read_training_seeds(rollout_path: str | Path) -> set[int]:
    """The env seeds of every episode a PPO run trained on, from its ``rollout.jsonl`` (``episode_seeds``; empty for
    logs written before verlog recorded seeds)."""
    seeds: set[int] = set()
    for record in read_log(rollout_path, "learning"):
        seeds.update(int(v) for v in record.get("episode_seeds", {}).values() if v is not None)
    return seeds


@dataclass(frozen=True)
class Spans:
    """How PPO's episodes lay across iterations (from ``rollout.jsonl``'s ``episode_seeds``: every episode with a row
    in that iteration's batch).

    ``episodes``: episodes with at least one row; ``spanning``: those with rows in two or more iterations (each
    iteration boundary they cross is a bootstrap with ``V(s_T)``, or a cut in the ablation); ``mean_iterations`` and
    ``max_iterations``: iterations per episode."""

    episodes: int
    spanning: int
    mean_iterations: float
    max_iterations: int

    @property
    def share(self) -> float:
        return self.spanning / self.episodes if self.episodes else 0.0


def read_spans(rollout_path: str | Path) -> Spans:
    """:class:`Spans` of a PPO run's ``rollout.jsonl`` (a resumed run's repeated steps count once)."""
    by_step: dict[int, list[str]] = {}
    for record in read_log(rollout_path, "learning"):
        by_step[int(record.get("step", len(by_step)))] = list(record.get("episode_seeds", {}))
    counts: dict[str, int] = {}
    for ids in by_step.values():
        for episode in ids:
            counts[episode] = counts.get(episode, 0) + 1
    if not counts:
        return Spans(0, 0, 0.0, 0)
    return Spans(
        episodes=len(counts),
        spanning=sum(1 for c in counts.values() if c >= 2),
        mean_iterations=sum(counts.values()) / len(counts),
        max_iterations=max(counts.values()),
    )


def smooth(values: Sequence[float], weights: Sequence[float], window: int) -> list[float]:
    """Trailing moving average over ``window`` points, each point weighted (e.g. by its number of episodes)."""
    out = []
    for i in range(len(values)):
        lo = max(0, i - window + 1)
        w = sum(weights[lo : i + 1])
        out.append(sum(v * k for v, k in zip(values[lo : i + 1], weights[lo : i + 1])) / w if w else math.nan)
    return out
