"""The start model of a learning run: the SFT-length scan (``SFT_SCAN``: each SFT checkpoint's success on validation
seeds, the longest below the start bound chosen) and the start-bound check (``START_BOUND``)."""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from verlog.eval import Interval
from verlog.reports.evaluation import load_evaluation
from verlog.reports.learning.stages import SCAN, SCAN_CHOICE, SFT
from verlog.reports.run_files import ReportError
from verlog.run.files import write_atomically
from verlog.run.folder import RunFolder

_pct = Interval.percent


@dataclass(frozen=True)
class ScanPoint:
    """One SFT length of the scan: its checkpoint's success on the validation seeds (95% bootstrap interval)."""

    steps: int
    success: Interval
    episodes: int


def read_scan(run_dir: str | Path, *, n_resamples: int = 10_000, seed: int = 0) -> list[ScanPoint]:
    """The scan's evaluations (``scan/step_<N>/``), shortest SFT first; empty when the run has no scan."""
    folder = Path(run_dir) / SCAN
    points = []
    for sub in folder.glob("step_*") if folder.is_dir() else ():
        steps = sub.name.removeprefix("step_")
        result = load_evaluation(sub, sub.name, n_resamples=n_resamples, seed=seed) if steps.isdigit() else None
        if result is not None:
            points.append(ScanPoint(int(steps), result.success, len(result.records)))
    return sorted(points, key=lambda p: p.steps)


def read_scan_choice(run_dir: str | Path) -> int | None:
    """The SFT length the scan chose (``scan/choice.json``), or None."""
    path = Path(run_dir) / SCAN / SCAN_CHOICE
    if not path.is_file():
        return None
    try:
        return int(json.loads(path.read_text(encoding="utf-8"))["steps"])
    except (ValueError, KeyError, TypeError) as exc:
        raise ReportError(f"{path} is not a scan choice ({exc}): delete it and rerun the recipe") from exc


def scan_choice(points: Sequence[ScanPoint], bound: float) -> ScanPoint | None:
    """The longest SFT whose validation success is below ``bound`` with 95% confidence (its interval's upper end at
    most ``bound``), so that the start model is also likely within the bound on the evaluation seeds; None if none."""
    below = [p for p in points if p.success.high <= bound]
    return below[-1] if below else None


def pick_start(run_dir: str | Path, bound: float) -> int:
    """Exit status of the scan's choice: 0 with the chosen checkpoint's model copied to ``scan/model`` and the choice
    in ``scan/choice.json``; 2 (one line naming the fix) when every scanned length is above the bound; 1 when the
    scan has no evaluation or its checkpoint is missing."""
    run = Path(run_dir)
    points = read_scan(run)  # the report's intervals (the same resamples and seed), so its table shows the choice
    if not points:
        print(f"error: no SFT-length scan evaluation in {run / SCAN} to choose from", file=sys.stderr)
        return 1
    chosen = scan_choice(points, bound)
    if chosen is None:
        first = points[0]
        print(
            f"[learning] every scanned SFT length is above the start bound of {100 * bound:.0f}% with 95% confidence "
            f"on the validation seeds (the shortest, {first.steps} steps, wins {_pct(first.success)}): rerun with a "
            "new OUTPUT_DIR and shorter lengths in SFT_SCAN",
            file=sys.stderr,
        )
        return 2
    source = RunFolder(run / SFT).checkpoint(chosen.steps) / "huggingface"
    if not (source / "config.json").is_file():
        print(f"error: the scan chose {chosen.steps} SFT steps, but {source} holds no model", file=sys.stderr)
        return 1
    target, partial = run / SCAN / "model", run / SCAN / "model.partial"
    shutil.rmtree(partial, ignore_errors=True)
    shutil.copytree(source, partial)
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
    choice = {"steps": chosen.steps, "success": chosen.success.as_dict(), "episodes": chosen.episodes,
              "start_bound": bound, "model": str(source)}  # fmt: skip
    write_atomically(run / SCAN / SCAN_CHOICE, json.dumps(choice, indent=2) + "\n")  # the stage's done file
    print(
        f"[learning] SFT-length scan: {chosen.steps} steps ({_pct(chosen.success)} on the validation seeds) is the "
        f"longest below the start bound of {100 * bound:.0f}% with 95% confidence; start model {target}"
    )
    return 0


def check_start(run_dir: str | Path, eval_name: str, bound: float) -> int:
    """Exit status of the start bound: 0 when ``run_dir``'s ``eval_<eval_name>`` has a success rate of at most
    ``bound``, 2 (with one line naming the fix) when it is above, 1 when there is no such evaluation."""
    result = load_evaluation(Path(run_dir) / f"eval_{eval_name}", eval_name, n_resamples=1000)
    if result is None:
        folder = Path(run_dir) / f"eval_{eval_name}"
        print(f"error: no evaluation in {folder} to check the start bound on", file=sys.stderr)
        return 1
    rate = result.success.estimate
    if rate > bound:
        print(
            f"[learning] the start model wins {100 * rate:.1f}% of {len(result.records)} evaluation episodes, above "
            f"the start bound of {100 * bound:.0f}%: PPO would have too little room; rerun with a new OUTPUT_DIR and "
            "fewer SFT_STEPS (or WARM_START_STEPS), or let SFT_SCAN choose the SFT length",
            file=sys.stderr,
        )
        return 2
    print(f"[learning] start model: {100 * rate:.1f}% success, within the start bound of {100 * bound:.0f}%")
    return 0
