"""What each trial of a sweep came to: its status and outcome, read from its folder, and the summary table.

A trial's outcome is the last value of the objective's metric in its metrics.jsonl (the final in-training evaluation,
for ``eval/...`` metrics), or a field of its ``verlog eval`` summary (``verlog_eval/<field>``). Beside it the table
shows the in-training evaluation's success and valid-action rate, the last iteration's valid-action ratio, the
iterations run and the wall time (the sum over the trial's attempts, from trial.json).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verlog.run.files import read_jsonl
from verlog.run.folder import RunFolder
from verlog.sweep.folder import SweepFolder, read_json
from verlog.sweep.space import EVAL_METRIC_PREFIX, SearchSpace, Trial, format_value

STATUSES = ("finished", "stopped", "failed", "unfinished", "pending")
"""finished: training (and evaluation) ended with exit code 0; stopped: ended early by the scheduler; failed: a
non-zero exit code; unfinished: started but cut (the sweep was killed; it continues on resume); pending: not started."""


@dataclass(frozen=True)
class TrialResult:
    """One row of the summary table."""

    trial: Trial
    status: str
    outcome: float | None = None
    outcome_step: int | None = None
    iterations: int | None = None
    eval_success: float | None = None
    eval_valid: float | None = None
    rollout_valid: float | None = None
    wall_time_s: float | None = None
    exit_code: int | None = None
    note: str = ""


def read_records(path: Path) -> list[dict[str, Any]]:
    """The complete records of a metrics.jsonl ([] when missing; a torn last line, still being written or cut by a
    kill, is skipped: :mod:`verlog.run.files`' rule).

    Raises:
        JsonLinesError: a whole line is not JSON (``file:line``).
    """
    return [record for record in read_jsonl(path) if isinstance(record, dict)]


def last_value(records: Sequence[dict[str, Any]], key: str) -> tuple[float, int] | None:
    """The last finite value of ``key`` in ``records`` and its iteration (``step``), or None."""
    for record in reversed(records):
        value = record.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(float(value)):
            return float(value), int(record.get("step", 0))
    return None


def eval_summary_value(summary: Any, field_name: str) -> float | None:
    """``field_name`` of a ``verlog eval`` summary.json of one env (its pooled numbers), or None."""
    if not isinstance(summary, dict):
        return None
    environments = summary.get("environments") or {}
    if len(environments) != 1:
        return None
    value = next(iter(environments.values())).get(field_name)
    return float(value) if isinstance(value, (int, float)) else None


def wall_time(attempts: Sequence[dict[str, Any]]) -> float | None:
    """Seconds over a trial's attempts: from each start to its end, or to when it was last seen alive."""
    total, seen = 0.0, False
    for attempt in attempts:
        end = attempt.get("ended") or attempt.get("seen")
        if isinstance(end, (int, float)) and isinstance(attempt.get("started"), (int, float)):
            total += max(0.0, end - attempt["started"])
            seen = True
    return total if seen else None


def trial_result(folder: SweepFolder, space: SearchSpace, trial: Trial) -> TrialResult:
    """The row of ``trial``, from its folder."""
    trial_dir = folder.trial_dir(trial.id)
    info = read_json(trial_dir / "trial.json") or {}
    result = read_json(folder.result_file(trial.id)) or {}
    attempts = info.get("attempts") or []
    if result.get("status") in STATUSES:
        status = str(result["status"])
    else:
        status = "unfinished" if attempts else "pending"
    records = read_records(RunFolder(folder.run_dir(trial.id)).metrics)
    metric = space.objective.metric
    if metric.startswith(EVAL_METRIC_PREFIX):
        outcome = eval_summary_value(read_json(trial_dir / "eval" / "summary.json"), metric[len(EVAL_METRIC_PREFIX) :])
        step = None
    else:
        found = last_value(records, metric)
        outcome, step = found if found is not None else (None, None)
    success = last_value(records, "eval/success")
    valid = last_value(records, "eval/valid_action_rate")
    rollout_valid = last_value(records, "rollout/valid_action_ratio")
    steps = [int(r["step"]) for r in records if isinstance(r.get("step"), int) and "training/global_step" in r]
    return TrialResult(
        trial=trial,
        status=status,
        outcome=outcome,
        outcome_step=step,
        iterations=max(steps) if steps else None,
        eval_success=success[0] if success else None,
        eval_valid=valid[0] if valid else None,
        rollout_valid=rollout_valid[0] if rollout_valid else None,
        wall_time_s=wall_time(attempts),
        exit_code=result.get("exit_code"),
        note=str(result.get("note") or ""),
    )


def trial_results(folder: SweepFolder, space: SearchSpace, trials: Sequence[Trial]) -> list[TrialResult]:
    return [trial_result(folder, space, t) for t in trials]


def status_counts(results: Sequence[TrialResult]) -> dict[str, int]:
    """How many trials have each status (statuses with none left out), in :data:`STATUSES` order."""
    counts = {s: sum(1 for r in results if r.status == s) for s in STATUSES}
    return {s: n for s, n in counts.items() if n}


def _number(value: float | None, digits: int = 3) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return ""
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes}m{secs:02d}s"


def summary_table(space: SearchSpace, results: Sequence[TrialResult]) -> str:
    """The summary table in markdown: each trial's swept keys, status, outcome (the objective), the in-training
    evaluation's success and valid-action rate, the last iteration's valid-action ratio, iterations, wall time."""
    keys = [p.key for p in space.params]
    seeds = space.seeds is not None
    header = ["trial", *keys, *(["seed"] if seeds else []), "status", f"{space.objective.metric} (objective)"]
    header += ["eval/success", "eval valid actions", "rollout valid actions", "iterations", "wall time"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in results:
        cells = [r.trial.id, *(format_value(r.trial.params[k]) if k in r.trial.params else "-" for k in keys)]
        cells += [str(r.trial.seed)] if seeds else []
        outcome = _number(r.outcome)
        if r.outcome is not None and r.outcome_step is not None and r.status == "stopped":
            outcome += f" (iteration {r.outcome_step})"
        cells += [r.status, outcome, _number(r.eval_success), _number(r.eval_valid), _number(r.rollout_valid)]
        cells += ["" if r.iterations is None else str(r.iterations), _duration(r.wall_time_s)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
