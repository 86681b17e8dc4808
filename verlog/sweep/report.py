"""``verlog sweep report DIR``: a sweep's diagnosis as markdown with plots.

:func:`build_report` reads the sweep folder (its space, its trials' results), diagnoses the trials that have an
outcome (:mod:`verlog.sweep.analysis`) and :func:`render_markdown` writes, in order: the robust configuration against
the single best trial, which keys matter (spread of level means with its interval and the permutation p), each key's
levels, the seed noise (when configurations repeat with several seeds), and the summary table of every trial.
:func:`plot_effects` draws each key's level means with their intervals over the trials' outcomes; :func:`plot_trials`
the outcome of every trial, sorted. Paths in the markdown are relative to the folder it is written to.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verlog.sweep.analysis import (
    UNSET,
    Diagnosis,
    KeyEffect,
    Levels,
    SeedNoise,
    best_trial,
    diagnose,
    levels_for_trials,
    recommend,
    seed_noise,
)
from verlog.sweep.folder import SweepFolder, read_sweep
from verlog.sweep.results import TrialResult, status_counts, summary_table, trial_results
from verlog.sweep.space import SearchSpace, describe_params, format_value

REPORT_NAME = "report.md"


@dataclass(frozen=True)
class SweepReport:
    """Everything the report shows: the sweep, its results, the diagnosis (None with fewer than 2 outcomes)."""

    folder: SweepFolder
    space: SearchSpace
    results: tuple[TrialResult, ...]
    scored: tuple[TrialResult, ...]
    levels: tuple[Levels, ...]
    diagnosis: Diagnosis | None
    recommended: dict[str, Any]
    noise: SeedNoise | None


def build_report(
    root: str | os.PathLike, *, n_resamples: int = 2000, confidence: float = 0.95, seed: int = 0
) -> SweepReport:
    """Read the sweep in ``root`` and diagnose the trials that have an outcome (:class:`SweepReport`)."""
    folder, space, trials = read_sweep(root)
    results = tuple(trial_results(folder, space, trials))
    scored = tuple(r for r in results if r.outcome is not None and r.status in ("finished", "stopped"))
    levels = tuple(levels_for_trials(space.params, [r.trial.params for r in scored])) if scored else ()
    diagnosis = None
    recommended: dict[str, Any] = {}
    if len(scored) >= 2:
        outcomes = [r.outcome for r in scored]
        diagnosis = diagnose(
            outcomes,  # type: ignore[arg-type]
            levels,
            groups=[r.trial.config for r in scored],
            maximize=space.objective.mode == "max",
            n_resamples=n_resamples,
            n_permutations=n_resamples,
            confidence=confidence,
            seed=seed,
        )
        recommended = recommend(space.params, diagnosis)
    noise = seed_noise([r.outcome for r in scored], [r.trial.config for r in scored]) if scored else None  # type: ignore[misc]
    return SweepReport(folder, space, results, scored, levels, diagnosis, recommended, noise)


# ------------------------------------------------------------------------------------------------ markdown
def _num(x: float, digits: int = 3) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{x:.{digits}f}"


def _signed(x: float) -> str:
    return "n/a" if not math.isfinite(x) else f"{x:+.3f}"


def _interval(low: float, high: float) -> str:
    return f"[{_num(low)}, {_num(high)}]"


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def render_markdown(report: SweepReport, plots: dict[str, str] | None = None) -> str:
    """The report as markdown; ``plots`` maps a plot's name (effects, trials) to its path relative to the report."""
    space, d = report.space, report.diagnosis
    metric = space.objective.metric
    better = "higher" if space.objective.mode == "max" else "lower"
    counts = ", ".join(f"{n} {status}" for status, n in status_counts(report.results).items())
    lines = [
        f"# Sweep {space.name}: diagnosis",
        "",
        f"{len(report.results)} trials ({counts}); {len(report.scored)} with an outcome, the objective "
        f"`{metric}` ({better} is better; its last value in each trial). Search space: `{space.source}`, "
        f"{space.method} sampling; method: docs/sweeps.md.",
        "",
    ]
    if d is None:
        lines += ["Fewer than 2 trials have an outcome: nothing to diagnose yet.", ""]
    else:
        lines += _recommendation(report, d)
        lines += _importance(d)
        if plots and "effects" in plots:
            lines += [f"![level means per key]({plots['effects']})", ""]
        for effect in sorted(d.effects, key=lambda e: [p.key for p in space.params].index(e.key)):
            lines += _levels_table(effect)
    if report.noise is not None:
        n = report.noise
        lines += [
            "## Seed noise",
            "",
            f"{n.configs} configurations ran with several seeds. Between seeds of one configuration the outcome's "
            f"standard deviation is {_num(n.within_sd)}; the configurations' means spread by {_num(n.between_sd)}. "
            "A difference between settings smaller than the first is within seed noise.",
            "",
        ]
    lines += ["## Trials", ""]
    if plots and "trials" in plots:
        lines += [f"![outcome of each trial]({plots['trials']})", ""]
    lines += [summary_table(space, report.results), ""]
    return "\n".join(lines)


def _recommendation(report: SweepReport, d: Diagnosis) -> list[str]:
    b = best_trial([r.outcome for r in report.scored], d.maximize)  # type: ignore[misc]
    best = report.scored[b]
    lines = [
        "## Recommended configuration",
        "",
        f"For each key, the value whose trials have the best mean outcome in the most of {d.n_resamples} bootstrap "
        "resamples of the trials (P(best)); beside it, the single best trial's value.",
        "",
        f"| key | recommended | P(best) | mean `{report.space.objective.metric}` [{_pct(d.confidence)} interval] | "
        f"trials | best trial ({best.trial.id}) |",
        "|---|---|---|---|---|---|",
    ]
    for p in report.space.params:
        shown = format_value(best.trial.params[p.key]) if p.key in best.trial.params else UNSET
        if p.key not in report.recommended:
            lines.append(f"| {p.key} | {UNSET} (its condition does not hold) | | | | {shown} |")
            continue
        effect = d.effect(p.key)
        stats = effect.level(effect.recommended)
        lines.append(
            f"| {p.key} | {effect.recommended} | {_pct(stats.p_best)} | {_num(stats.mean)} "
            f"{_interval(stats.mean_low, stats.mean_high)} | {stats.n} | {shown} |"
        )
    others = sum(1 for r in report.scored if r.outcome == best.outcome) - 1
    tied = f" (as did {others} other trial{'s' if others > 1 else ''})" if others else ""
    wanted = {k: d.effect(k).recommended for k in report.recommended}
    same = all(lv.labels[lv.index[b]] == wanted.get(lv.key, UNSET) for lv in report.levels)
    verdict = (
        "it lies in the recommended level of every key."
        if same
        else "it lies outside the recommended level of at least one key: one trial alone cannot tell a better "
        "setting from a lucky seed."
    )
    lines += [
        "",
        f"As overrides: `{describe_params(report.recommended)}`.",
        "",
        f"The single best trial, {best.trial.id}, reached {_num(best.outcome)}{tied}; {verdict}",  # type: ignore[arg-type]
        "",
    ]
    return lines


def _importance(d: Diagnosis) -> list[str]:
    lines = [
        "## Which settings matter",
        "",
        "Spread: the best level's mean minus the worst level's, with its bootstrap interval; p: the share of "
        f"{d.n_permutations} shuffles of the outcomes across trials whose spread was at least as large (a small p: "
        "the key's effect is unlikely to be seed noise). Most influential first.",
        "",
        "| key | spread | interval | p | levels |",
        "|---|---|---|---|---|",
    ]
    for e in d.effects:
        lines.append(
            f"| {e.key} | {_num(e.spread)} | {_interval(e.spread_low, e.spread_high)} | {_num(e.p_value, 3)} | "
            f"{len(e.levels)} |"
        )
    return [*lines, ""]


def _levels_table(effect: KeyEffect) -> list[str]:
    lines = [
        f"### {effect.key}",
        "",
        "| level | trials | mean [interval] | minus recommended [interval] | P(best) | top trial share |",
        "|---|---|---|---|---|---|",
    ]
    for s in effect.levels:
        mark = " (recommended)" if s.label == effect.recommended else ""
        lines.append(
            f"| {s.label}{mark} | {s.n} | {_num(s.mean)} {_interval(s.mean_low, s.mean_high)} | {_signed(s.diff)} "
            f"{_interval(s.diff_low, s.diff_high)} | {_pct(s.p_best)} | {_pct(s.top_share)} |"
        )
    return [*lines, ""]


# ------------------------------------------------------------------------------------------------ plots
def plot_effects(report: SweepReport, path: Path) -> Path | None:
    """Each key's level means with their bootstrap intervals over the trials' outcomes; None without matplotlib or
    a diagnosis."""
    if report.diagnosis is None:
        return None
    plt = _pyplot()
    if plt is None:
        return None
    keys = [p.key for p in report.space.params]
    cols = min(3, len(keys))
    rows = math.ceil(len(keys) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.3 * rows), squeeze=False)
    outcomes = [r.outcome for r in report.scored]
    for ax, key in zip(axes.flat, keys):
        effect = report.diagnosis.effect(key)
        lv = next(lv for lv in report.levels if lv.key == key)
        for i, s in enumerate(effect.levels):
            points = [y for y, g in zip(outcomes, lv.index) if g == i]
            jitter = [i + 0.25 * ((j * 0.618) % 1 - 0.5) for j in range(len(points))]
            ax.scatter(jitter, points, s=12, color="0.6", zorder=1)
            low, high = s.mean_low, s.mean_high
            err = [[max(0.0, s.mean - low)], [max(0.0, high - s.mean)]] if math.isfinite(low) else None
            color = "tab:orange" if s.label == effect.recommended else "tab:blue"
            ax.errorbar([i], [s.mean], yerr=err, fmt="o", color=color, capsize=4, zorder=2)
        ax.set_xticks(range(len(effect.levels)))
        ax.set_xticklabels([s.label for s in effect.levels], fontsize=7, rotation=20)
        ax.set_title(f"{key}  (p = {_num(effect.p_value, 3)})", fontsize=8)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(keys) :]:
        ax.axis("off")
    fig.supylabel(report.space.objective.metric, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_trials(report: SweepReport, path: Path) -> Path | None:
    """The outcome of every trial that has one, sorted, the best first; None without matplotlib or outcomes."""
    rows = [r for r in report.results if r.outcome is not None]
    plt = _pyplot() if rows else None
    if plt is None:
        return None
    rows.sort(key=lambda r: r.outcome, reverse=report.space.objective.mode == "max")  # type: ignore[arg-type,return-value]
    fig, ax = plt.subplots(figsize=(max(5.0, 0.28 * len(rows) + 2), 3.2))
    colors = {"finished": "tab:blue", "stopped": "tab:gray", "failed": "tab:red"}
    ax.bar(range(len(rows)), [r.outcome for r in rows], color=[colors.get(r.status, "tab:olive") for r in rows])
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([r.trial.id for r in rows], fontsize=7, rotation=90)
    ax.set_ylabel(report.space.objective.metric, fontsize=9)
    ax.set_title("outcome per trial (grey: stopped early)", fontsize=9)
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def write_report(report: SweepReport, out_dir: Path) -> Path:
    """Write ``report.md`` and its plots (``effects.png``, ``trials.png``) into ``out_dir``; the markdown's path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    plots = {}
    for name, draw in (("effects", plot_effects), ("trials", plot_trials)):
        if draw(report, out_dir / f"{name}.png") is not None:
            plots[name] = f"{name}.png"
    path = out_dir / REPORT_NAME
    path.write_text(render_markdown(report, plots), encoding="utf-8")
    return path
