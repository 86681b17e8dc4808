"""Everything a learning run's results page reports (:class:`LearningResults`), read from its run folder by
:func:`collect`; every number comes from the evaluations' per-episode records (``episodes.jsonl``): success rate and
mean return with 95% percentile-bootstrap intervals, and the differences between models paired by seed
(:func:`verlog.eval.compare_records`). Stages not run yet are left out, so a partial run can be read too."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verlog.eval import Interval, compare_records
from verlog.reports.evaluation import Evaluation, load_evaluation
from verlog.reports.learning.crafter import CrafterMeasures, crafter_results
from verlog.reports.learning.run_logs import Curve, Spans, read_curve, read_spans, read_timings, read_training_seeds
from verlog.reports.learning.scan import ScanPoint, read_scan, read_scan_choice
from verlog.reports.learning.stages import (
    COMPARISONS,
    DEMOS,
    HARDER_TARGET,
    MODELS,
    PPO_DUAL,
    PPO_RUNS,
    ROLLOUT_FILE,
    START_MODELS,
    TARGETS,
    Target,
)
from verlog.reports.run_files import existing_run, read_notes, read_settings, shown_path, shown_settings
from verlog.run.folder import METRICS_FILE


@dataclass
class Comparison:
    """``treatment - baseline`` of success rate and mean return, with bootstrap intervals."""

    treatment: str
    baseline: str
    success: Interval
    ret: Interval
    paired: bool


@dataclass
class LearningResults:
    """Everything a results page (docs/results/) reports about one run folder."""

    run_dir: Path
    settings: dict[str, str]
    timings: dict[str, float]
    evals: dict[str, Evaluation]
    curves: dict[str, Curve]
    comparisons: list[Comparison]
    demo_seeds: set[int]
    seed_overlaps: dict[str, list[int]]
    ppo_seeds: dict[str, set[int]] = field(default_factory=dict)  # PPO run -> logged training seeds
    spans: dict[str, Spans] = field(default_factory=dict)  # PPO run -> its episodes across iterations
    notes: str = ""  # the run folder's notes.md: what was tried before this run, by hand
    start_label: str = "SFT"  # the start model's label in evals and comparisons (START_MODELS)
    crafter: dict[str, CrafterMeasures] = field(default_factory=dict)  # model -> Crafter's measures (Crafter runs)
    crafter_diffs: dict[str, Interval] = field(default_factory=dict)  # model -> its Crafter score - the start's
    scan: list[ScanPoint] = field(default_factory=list)  # SFT_SCAN: each SFT length's validation success
    scan_choice: int | None = None  # the SFT length the scan chose (scan/choice.json)

    def start_comparison(self) -> Comparison | None:
        """PPO with dual GAE minus the start model, where both are evaluated."""
        return next(
            (c for c in self.comparisons if c.treatment == "PPO, dual GAE" and c.baseline == self.start_label), None
        )

    def target_checks(self) -> dict[str, bool] | None:
        """Each part of the task's target for dual-GAE PPO over the start model; None if the two evaluations are not
        there."""
        c = self.start_comparison()
        if c is None:
            return None
        dual = self.evals["PPO, dual GAE"]
        seconds = self.timings.get(PPO_DUAL)
        t = self.target
        if t.measure == "return":
            checks = {
                f"mean return gain >= +{t.gain:.1f}": c.ret.estimate >= t.gain,
                "paired 95% interval above zero": c.ret.low > 0,
            }
        else:
            checks = {
                f"success gain >= +{100 * t.gain:.0f} points": c.success.estimate >= t.gain,
                "paired 95% interval above zero": c.success.low > 0,
            }
        if t.valid_actions is not None:
            checks[f"valid actions after PPO >= {100 * t.valid_actions:.0f}%"] = (
                dual.valid_action_rate >= t.valid_actions
            )
        if t.success is not None:
            checks[f"success after PPO >= {100 * t.success:.0f}%"] = dual.success.estimate >= t.success
        checks[f"PPO wall time <= {t.ppo_minutes:.0f} min"] = seconds is not None and seconds <= 60 * t.ppo_minutes
        return checks

    @property
    def env_id(self) -> str:
        """The env id of the run (the recipe's ``ENV_ID``; ``babyai/<TASK>`` for runs recorded before it was)."""
        return self.settings.get("ENV_ID") or f"babyai/{self.task}"

    @property
    def title(self) -> str:
        """The game and task in words, e.g. "BabyAI goto", "BabaIsAI two_room-goto_win"."""
        game, _, task = self.env_id.partition("/")
        names = {"babyai": "BabyAI", "babaisai": "BabaIsAI", "crafter": "Crafter"}
        return f"{names.get(game, game)} {task}".strip()

    @property
    def task(self) -> str:
        """The BabyAI task kind of the run (the recipe's ``TASK``; goto when the settings do not say)."""
        return self.settings.get("TASK", "goto")

    @property
    def target(self) -> Target:
        """Issue 13's target for this run's task."""
        return TARGETS.get(self.env_id, HARDER_TARGET)

    @property
    def by_return(self) -> bool:
        """The task is measured by its mean return and has no success (Crafter): reports leave success out."""
        return self.target.measure == "return"

    def target_met(self) -> bool | None:
        """Issue 13's target (every part of :meth:`target_checks`); None if not measured."""
        checks = self.target_checks()
        return None if checks is None else all(checks.values())


def compare(a: Evaluation, b: Evaluation, *, n_resamples: int = 10_000, seed: int = 0) -> Comparison:
    """``a - b``: paired by (env id, seed) when both played the same episodes (:func:`verlog.eval.compare_records`)."""
    kw = {"n_resamples": n_resamples, "seed": seed}
    success, paired = compare_records(a.records, b.records, "success", **kw)
    ret, _ = compare_records(a.records, b.records, "return", **kw)
    return Comparison(a.name, b.name, success, ret, paired)


def collect(run_dir: str | Path, *, n_resamples: int = 10_000, seed: int = 0) -> LearningResults:
    """Read a learning run folder (missing stages are left out)."""
    run = existing_run(run_dir, "recipes/cpu/learn_babyai.sh")
    kw = {"n_resamples": n_resamples, "seed": seed}
    settings = read_settings(run)
    start_label = "warm start" if settings.get("START") == "warm_start" else "SFT"
    evals = _evaluations(run, start_label, **kw)
    comparisons = []
    for a, b in ((a, start_label if b == "SFT" else b) for a, b in COMPARISONS):
        if a in evals and b in evals:
            comparisons.append(compare(evals[a], evals[b], **kw))
    ppo_logs = {name: run / folder / ROLLOUT_FILE for name, folder in PPO_RUNS.items()}
    ppo_logs = {name: path for name, path in ppo_logs.items() if path.is_file()}
    ppo_seeds = {name: read_training_seeds(path) for name, path in ppo_logs.items()}
    demo_seeds = _demo_seeds(run)
    return LearningResults(
        run_dir=run,
        settings=settings,
        timings=read_timings(run),
        evals=evals,
        curves={
            name: read_curve(run / folder / METRICS_FILE)
            for name, folder in PPO_RUNS.items()
            if (run / folder / METRICS_FILE).is_file()
        },
        comparisons=comparisons,
        demo_seeds=demo_seeds,
        seed_overlaps=_seed_overlaps(evals, demo_seeds | _first_ppo_seeds(settings) | set().union(*ppo_seeds.values())),
        ppo_seeds=ppo_seeds,
        spans={name: read_spans(path) for name, path in ppo_logs.items()},
        start_label=start_label,
        **crafter_results(evals, start_label, **kw),
        notes=read_notes(run),
        scan=read_scan(run, **kw),
        scan_choice=read_scan_choice(run),
    )


def _evaluations(run: Path, start_label: str, *, n_resamples: int, seed: int) -> dict[str, Evaluation]:
    """Model label -> its evaluation, for the start model and every PPO run evaluated so far."""
    models = {start_label: START_MODELS[start_label], **{k: v for k, v in MODELS.items() if k != "SFT"}}
    evals = {}
    for name, folder in models.items():
        result = load_evaluation(run / folder, name, n_resamples=n_resamples, seed=seed)
        if result is not None:
            evals[name] = result
    return evals


def _demo_seeds(run: Path) -> set[int]:
    """The seeds the demonstrations tried (empty without a ``demos`` stage)."""
    if not (run / DEMOS / "demos.json").is_file():
        return set()
    from verlog.sft.demos import used_seeds

    return used_seeds(run / DEMOS)


def _first_ppo_seeds(settings: dict[str, str]) -> set[int]:
    """The seeds of the PPO slots' first episodes (``PPO_SEED`` + slot), where the settings say."""
    if "PPO_SEED" not in settings or "PPO_SLOTS" not in settings:
        return set()
    start = int(settings["PPO_SEED"])
    return set(range(start, start + int(settings["PPO_SLOTS"])))


def _seed_overlaps(evals: dict[str, Evaluation], trained_on: set[int]) -> dict[str, list[int]]:
    """Model -> the evaluation seeds it also trained on (only models with any)."""
    overlaps = {}
    for name, result in evals.items():
        bad = sorted(result.seeds & trained_on)
        if bad:
            overlaps[name] = bad
    return overlaps


def as_dict(results: LearningResults) -> dict[str, Any]:
    """The numbers of ``results`` as plain JSON data (no per-episode records)."""
    return {
        "run_dir": shown_path(results.run_dir),
        "settings": shown_settings(results.settings),
        "timings_s": results.timings,
        "models": {
            name: {
                "episodes": len(e.records),
                "success": e.success.as_dict(),
                "return": e.ret.as_dict(),
                "valid_action_rate": e.valid_action_rate,
                "mean_steps": e.mean_steps,
            }
            for name, e in results.evals.items()
        },
        "comparisons": [
            {
                "treatment": c.treatment,
                "baseline": c.baseline,
                "paired": c.paired,
                "success": c.success.as_dict(),
                "return": c.ret.as_dict(),
            }
            for c in results.comparisons
        ],
        "curves": {
            name: {
                "steps": c.steps,
                "success": c.success,
                "return": c.ret,
                "episodes": c.episodes,
                "iterations": c.iterations,
            }
            for name, c in results.curves.items()
        },
        "task": results.task,
        "env_id": results.env_id,
        "spans": {name: {**vars(sp), "share": sp.share} for name, sp in results.spans.items()},
        "crafter": _crafter_dict(results),
        "target_met": results.target_met(),
        "scan": [{"steps": p.steps, "episodes": p.episodes, "success": p.success.as_dict()} for p in results.scan],
        "scan_choice": results.scan_choice,
        "seed_overlaps": results.seed_overlaps,
    }


def _crafter_dict(results: LearningResults) -> dict[str, Any]:
    """Crafter's measures of every evaluated model as JSON data (empty when not a Crafter run)."""
    return {
        model: {"score": m.score.as_dict(), "unlock": {k: v.as_dict() for k, v in m.unlock.items()}}
        for model, m in results.crafter.items()
    }
