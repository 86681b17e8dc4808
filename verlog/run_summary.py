"""The closing lines of a training run: did the agent's return and success move between its first and last iterations?

Reads ``<output_dir>/metrics.jsonl`` (one record per iteration) and compares the mean of a few metrics over the first
and the last ``window`` iterations that logged them; the in-training evaluation (``eval/*``) is compared between its
first and last evaluation. Used by ``verlog train`` at the end of a run and by the quick start.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

from verlog.run_folder import read_jsonl

TRAINING_KEYS = ("env/return_mean", "env/success_rate", "rollout/valid_action_ratio")
EVAL_KEYS = ("eval/success", "eval/return")


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """The records of a metrics.jsonl file (a missing file gives []; a torn last line, from a kill, is skipped with a
    warning on stderr)."""
    return read_jsonl(path, warn=lambda line: print(f"[verlog] {line}", file=sys.stderr))


def _series(records: list[dict[str, Any]], key: str) -> list[tuple[int, float]]:
    out = []
    for r in records:
        v = r.get(key)
        if isinstance(v, (int, float)) and math.isfinite(float(v)):
            out.append((int(r.get("step", len(out) + 1)), float(v)))
    return out


def compare_first_last(records: list[dict[str, Any]], key: str, window: int = 3) -> dict[str, float] | None:
    """``{"first", "last", "change", "first_steps", "last_steps"}`` over the first and last ``window`` iterations
    that logged ``key``; None when fewer than 2 iterations did."""
    points = _series(records, key)
    if len(points) < 2:
        return None
    k = max(1, min(window, len(points) // 2))
    first, last = points[:k], points[-k:]
    first_mean = sum(v for _, v in first) / k
    last_mean = sum(v for _, v in last) / k
    return {
        "first": first_mean,
        "last": last_mean,
        "change": last_mean - first_mean,
        "first_steps": float(k),
        "last_steps": float(k),
        "first_step": float(first[0][0]),
        "last_step": float(last[-1][0]),
    }


def summary_lines(records: list[dict[str, Any]], window: int = 3) -> list[str]:
    """Human-readable lines comparing the first and last iterations (and evaluations) of a run."""
    lines = []
    for key in TRAINING_KEYS:
        c = compare_first_last(records, key, window)
        if c is not None:
            k = int(c["first_steps"])
            lines.append(
                f"{key}: {c['first']:.3f} (mean of the first {k} iterations) -> {c['last']:.3f} (last {k}), "
                f"change {c['change']:+.3f}"
            )
    for key in EVAL_KEYS:
        c = compare_first_last(records, key, window=1)
        if c is not None:
            lines.append(
                f"{key}: {c['first']:.3f} at iteration {int(c['first_step'])} -> {c['last']:.3f} at iteration "
                f"{int(c['last_step'])}, change {c['change']:+.3f}"
            )
    return lines


def write_learning_curve(records: list[dict[str, Any]], path: str | Path) -> Path | None:
    """A PNG of the episode return, success and valid-action rate per iteration (and the in-training evaluation's
    success with its standard error, where logged); None when matplotlib is missing or nothing was logged."""
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = {key: _series(records, key) for key in TRAINING_KEYS}
    if not any(series.values()):
        return None
    fig, ax = plt.subplots(figsize=(7, 4))
    for key, points in series.items():
        if points:
            ax.plot([s for s, _ in points], [v for _, v in points], label=f"{key} (training rollouts)")
    evals = _series(records, "eval/success")
    if evals:
        ses = dict(_series(records, "eval/success_se"))
        steps, values = [s for s, _ in evals], [v for _, v in evals]
        ax.errorbar(
            steps,
            values,
            yerr=[ses.get(s, 0.0) for s in steps],
            fmt="o-",
            capsize=3,
            label="eval/success (held-out seeds, ± s.e.)",
        )
    ax.set_xlabel("PPO iteration")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
