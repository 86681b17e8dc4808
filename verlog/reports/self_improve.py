"""The results page of the self-improvement recipe (recipes/cpu/self_improve_babyai.sh): run folder -> markdown + JSON.

The recipe's run folder holds the start model's evaluation (``eval_sft``), and per round ``r``: ``collect_<r>`` (the
current model played on training seeds, with tapes), ``self_sft_<r>`` (SFT on the successful episodes of those tapes;
``self_sft_<r>/data/tapes.json`` says what was kept) and ``eval_self_<r>`` (the fine-tuned model on the evaluation
seeds, the same for every model). :func:`collect` reads them; every number comes from the per-episode records
(``episodes.jsonl``): success rate and mean return with 95% percentile-bootstrap intervals, and each round against the
start and against the round before, paired by seed (:func:`verlog.eval.compare_records`). Rounds not run yet are left
out, so a partial run can be read too.

    verlog report self-improve outputs/self-improve-babyai --out docs/results/self-improve.md
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verlog.eval import Interval, compare_records
from verlog.reports.evaluation import Evaluation, load_evaluation
from verlog.reports.run_files import existing_run, read_settings, shown_path, shown_settings

START_EVAL = "eval_sft"
ROUND_DIR = re.compile(r"^(?:collect|self_sft|eval_self)_(\d+)$")  # a round's stage folders


@dataclass
class Round:
    """One round of the loop: what the current model collected, what SFT kept, the fine-tuned model's evaluation."""

    number: int
    collected: int = 0  # episodes played on the round's training seeds
    collected_success: float | None = None  # their success rate
    kept: int | None = None  # episodes SFT kept (data/tapes.json)
    rows: int | None = None  # SFT rows made from them
    evaluation: Evaluation | None = None
    vs_start: tuple[Interval, Interval] | None = None  # (success, return) minus the start model's, paired
    vs_previous: tuple[Interval, Interval] | None = None  # minus the round before (round 1: the start)


@dataclass
class SelfImproveResults:
    """Everything the self-improvement page reports about one run folder."""

    run_dir: Path
    settings: dict[str, str]
    start: Evaluation | None
    rounds: list[Round] = field(default_factory=list)
    paired: bool = True  # every comparison paired by seed (the same evaluation episodes)


def collect(run_dir: str | Path, *, n_resamples: int = 10_000, seed: int = 0) -> SelfImproveResults:
    """Read a self-improvement run folder (rounds not run yet are left out)."""
    run = existing_run(run_dir, "recipes/cpu/self_improve_babyai.sh")
    kw = {"n_resamples": n_resamples, "seed": seed}
    start = load_evaluation(run / START_EVAL, "SFT (start)", **kw)
    results = SelfImproveResults(run, read_settings(run), start)
    numbers = sorted({int(m.group(1)) for p in run.iterdir() if (m := ROUND_DIR.match(p.name))})
    previous = start
    for number in numbers:
        rnd = _read_round(run, number, start, previous, results, **kw)
        previous = rnd.evaluation or previous
        results.rounds.append(rnd)
    return results


def _read_round(
    run: Path,
    number: int,
    start: Evaluation | None,
    previous: Evaluation | None,
    results: SelfImproveResults,
    *,
    n_resamples: int,
    seed: int,
) -> Round:
    """Round ``number``: what it collected and kept, its evaluation and its gains over ``start`` and ``previous``
    (``results.paired`` turns False when a comparison could not be paired)."""
    kw = {"n_resamples": n_resamples, "seed": seed}
    rnd = Round(number)
    collected = load_evaluation(run / f"collect_{number}", "collected", **kw)
    if collected is not None:
        rnd.collected, rnd.collected_success = len(collected.records), collected.success.estimate
    manifest = run / f"self_sft_{number}" / "data" / "tapes.json"
    if manifest.is_file():
        data = json.loads(manifest.read_text(encoding="utf-8"))
        rnd.kept, rnd.rows = int(data["counts"]["kept"]), int(data["rows_train"]) + int(data["rows_val"])
    rnd.evaluation = load_evaluation(run / f"eval_self_{number}", f"round {number}", **kw)
    if rnd.evaluation is not None:
        for base, slot in ((start, "vs_start"), (previous, "vs_previous")):
            if base is not None:
                success, paired = compare_records(rnd.evaluation.records, base.records, "success", **kw)
                ret, _ = compare_records(rnd.evaluation.records, base.records, "return", **kw)
                setattr(rnd, slot, (success, ret))
                results.paired &= paired
    return rnd


_pct, _pts, _num, _diff = Interval.percent, Interval.points, Interval.number, Interval.difference


def render_markdown(results: SelfImproveResults) -> str:
    """The results page: settings, each model's success and return, each round's gain with its paired interval."""
    s = shown_settings(results.settings)
    smoke = s.get("SMOKE") == "1"
    lines = [
        f"# Self-improvement on {s.get('ENV_ID', 'babyai/goto')}: keep the successful episodes, fine-tune, repeat",
        "",
        f"Written by `verlog report self-improve` from the run folder `{shown_path(results.run_dir)}` of "
        "`recipes/cpu/self_improve_babyai.sh`"
        + (" (**SMOKE=1: tiny budgets, the numbers mean nothing**)" if smoke else "")
        + ". Each round the current model plays episodes on training seeds with tapes (`verlog eval --log-turns`), "
        "`verlog sft` fine-tunes it on the successful ones (`data.train=<tapes> data.tapes.success_only=true`, the "
        "prompts rebuilt with the evaluation's memory settings), and the result is evaluated on the evaluation seeds, "
        "the same episodes for every model. Intervals are 95% percentile bootstrap; the gains are paired by seed.",
        "",
    ]
    if s:
        keys = ("ENV_ID", "MAX_STEPS", "ANSWER_FORMAT", "MEMORY_N", "ROUNDS", "COLLECT_EPISODES", "COLLECT_SEED_START",
                "EPISODES", "EVAL_SEED_START", "SELF_SFT_STEPS", "SFT_BATCH", "SELF_SFT_LR", "SUCCESS_ONLY",
                "EVAL_TEMPERATURE", "START_MODEL_PATH")  # fmt: skip
        shown = ", ".join(f"{k}={s[k]}" for k in keys if s.get(k))
        lines += [f"Settings: {shown}.", ""]
    lines += ["| model | episodes | success | mean return | valid actions |", "|---|---|---|---|---|"]
    evals = ([results.start] if results.start else []) + [r.evaluation for r in results.rounds if r.evaluation]
    for e in evals:
        lines.append(
            f"| {e.name} | {len(e.records)} | {_pct(e.success)} | {_num(e.ret)} | {100 * e.valid_action_rate:.1f}% |"
        )
    if not evals:
        lines.append("| (no evaluation yet) | | | | |")
    lines += ["", "| round | collected | their success | kept (rows) | success gain vs start | vs the round before |"]
    lines.append("|---|---|---|---|---|---|")
    for r in results.rounds:
        rate = "-" if r.collected_success is None else f"{100 * r.collected_success:.1f}%"
        kept = "-" if r.kept is None else f"{r.kept} ({r.rows})"
        gain = _pts(r.vs_start[0]) if r.vs_start else "-"
        step = _pts(r.vs_previous[0]) if r.vs_previous else "-"
        lines.append(f"| {r.number} | {r.collected} | {rate} | {kept} | {gain} | {step} |")
    last = next((r for r in reversed(results.rounds) if r.vs_start), None)
    lines.append("")
    if last is None:
        lines.append("**Verdict:** not measured yet (no round has been evaluated).")
    else:
        success, ret = last.vs_start
        above = success.low > 0
        lines.append(
            f"**Verdict:** after {last.number} round(s), success {_pts(success)} and mean return {_diff(ret)} over "
            f"the start model{'' if results.paired else ' (not paired: the evaluations played different episodes)'}"
            f"; the interval of the success gain is {'above zero' if above else 'not above zero'}."
        )
    return "\n".join(lines) + "\n"


def as_dict(results: SelfImproveResults) -> dict[str, Any]:
    """The numbers as plain JSON data (no per-episode records)."""

    def evaluation(e: Evaluation | None) -> dict[str, Any] | None:
        if e is None:
            return None
        return {
            "episodes": len(e.records),
            "success": e.success.as_dict(),
            "return": e.ret.as_dict(),
            "valid_action_rate": e.valid_action_rate,
        }

    def pair(p: tuple[Interval, Interval] | None) -> dict[str, Any] | None:
        return None if p is None else {"success": p[0].as_dict(), "return": p[1].as_dict()}

    return {
        "run_dir": shown_path(results.run_dir),
        "settings": shown_settings(results.settings),
        "start": evaluation(results.start),
        "paired": results.paired,
        "rounds": [
            {
                "round": r.number,
                "collected": r.collected,
                "collected_success": r.collected_success,
                "kept": r.kept,
                "rows": r.rows,
                "evaluation": evaluation(r.evaluation),
                "vs_start": pair(r.vs_start),
                "vs_previous": pair(r.vs_previous),
            }
            for r in results.rounds
        ],
    }
