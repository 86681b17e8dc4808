"""The closing lines of a training run: did the agent's return and success move between its first and last iterations?

Reads ``<output_dir>/metrics.jsonl`` (one record per iteration) and compares the mean of a few metrics over the first
and the last ``window`` iterations that logged them; the in-training evaluation (``eval/*``) is compared between its
first and last evaluation. Used by ``verlog train`` at the end of a run and by the quick start.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from verlog.console import say
from verlog.run.files import read_jsonl

TRAINING_KEYS = ("env/return_mean", "env/success_rate", "rollout/valid_action_ratio")
EVAL_KEYS = ("eval/success", "eval/return")


ITERATION_FIELDS = (
    ("env/return_mean", "return", "{:.3f}"),
    ("env/success_rate", "success", "{:.2f}"),
    ("rollout/valid_action_ratio", "valid", "{:.2f}"),
    ("critic/vf_explained_var", "expl.var", "{:.2f}"),
    ("eval/success", "eval success", "{:.2f}"),
)
"""The numbers of the console's line per iteration: (metric, label, format); a metric not logged is left out."""


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """The records of a metrics.jsonl file (a missing file gives []; a torn last line, from a kill, is skipped with a
    warning on stderr)."""
    return read_jsonl(path, warn=lambda line: say(f"[verlog] {line}", err=True))


def duration(seconds: float) -> str:
    """``seconds`` as ``42 s``, ``3m05s`` or ``1h02m``."""
    seconds = max(0.0, float(seconds))
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def finite_metric(metrics: dict[str, Any], key: str) -> float | None:
    """``metrics[key]`` as a float when it is a finite number (not a bool), else None."""
    value = metrics.get(key)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(float(value)):
        return float(value)
    return None


def iteration_line(step: int, total: int, metrics: dict[str, Any], elapsed_s: float, eta_s: float) -> str:
    """The console's line for iteration ``step`` of ``total``: the numbers of :data:`ITERATION_FIELDS` that
    ``metrics`` holds, the seconds of the iteration (verl's ``timing_s/step``), the time elapsed and the ETA."""
    parts = [f"[verlog] iteration {step}/{total}"]
    for key, label, fmt in ITERATION_FIELDS:
        value = finite_metric(metrics, key)
        if value is not None:
            parts.append(f"{label} {fmt.format(value)}")
    step_s = finite_metric(metrics, "timing_s/step")
    if step_s is not None:
        parts.append(f"{step_s:.1f} s/it")
    parts.append(f"elapsed {duration(elapsed_s)}, ETA {duration(eta_s)}")
    return " | ".join([parts[0], ", ".join(parts[1:])])


ENGINE_GAP_KEY = "training/rollout_probs_diff_max"
ENGINE_GAP_WARN = 0.5
"""A larger gap between the rollout engine's and the actor's probabilities of the same sampled tokens, in a mode
whose rows come from the current weights, means the two do not compute the same model (a measured case: vLLM's image
normalisation left at noise, gap 0.98 before any update; docs/vision.md). fp32 noise is below 0.01; a very peaked
policy trained at a high learning rate reached 0.15 (docs/results/visual-toy.md, v7)."""


def engine_gap_warning(step: int, metrics: dict[str, Any]) -> str | None:
    """A one-line warning when ``metrics`` (an iteration's, rows sampled by the weights being trained) shows the
    rollout engine disagreeing with the actor by more than :data:`ENGINE_GAP_WARN`; else None."""
    gap = finite_metric(metrics, ENGINE_GAP_KEY)
    if gap is None or gap <= ENGINE_GAP_WARN:
        return None
    return (
        f"[verlog] warning: at iteration {step} the rollout engine and the actor give the same sampled tokens "
        f"probabilities up to {gap:.2f} apart ({ENGINE_GAP_KEY}): the policy that acts is not the one that "
        "trains (weights not synced, or different inputs such as images); PPO learns little until they agree. "
        "docs/metrics.md says what to check"
    )


class EngineGapWarner:
    """The run's one engine-gap warning (:func:`engine_gap_warning`): the first iteration past the threshold, never
    again; nothing when the rows come from older weights (``older_rows``: the async modes with correction), whose gap
    is expected.

    Args:
        older_rows: the run trains on rows sampled by weights older than the actor's.
    """

    def __init__(self, older_rows: bool) -> None:
        self.older_rows = older_rows
        self.warned = False

    def check(self, step: int, metrics: dict[str, Any]) -> str | None:
        """The warning for this iteration's ``metrics``, at most once a run; else None."""
        if self.warned or self.older_rows:
            return None
        warning = engine_gap_warning(step, metrics)
        self.warned = warning is not None
        return warning


def _series(records: list[dict[str, Any]], key: str) -> list[tuple[int, float]]:
    out = []
    for r in records:
        v = finite_metric(r, key)
        if v is not None:
            out.append((int(r.get("step", len(out) + 1)), v))
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
