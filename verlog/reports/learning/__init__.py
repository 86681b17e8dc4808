"""The results page of the CPU learning recipes (recipes/cpu/learn_babyai.sh, learn_babaisai.sh, learn_crafter.sh):
run folder -> markdown + JSON + learning curve.

A run folder holds one sub-folder per stage (:data:`~verlog.reports.learning.stages.STAGES`), ``timings.jsonl`` (one
``{"stage", "seconds"}`` line per stage run, written by the recipe), ``settings.env`` (the recipe's settings,
``KEY=VALUE``) and, for each PPO run, verl's tracked metrics in ``<ppo run>/metrics.jsonl``. :func:`collect` reads all
of it (:mod:`.results`); :func:`render_markdown` writes the page (:mod:`.markdown`), :func:`plot_curves` the curve
(:mod:`.plot`), :func:`write_results` all three. :func:`check_start` and :func:`pick_start` (:mod:`.scan`) are the
recipe's start-model checks.

    verlog report learning outputs/learn-babyai --out docs/results/babyai-goto.md
"""

from verlog.reports.learning.crafter import CrafterMeasures, achievement_names, crafter_measures, crafter_score_diff
from verlog.reports.learning.markdown import render_markdown
from verlog.reports.learning.plot import plot_curves
from verlog.reports.learning.results import Comparison, LearningResults, as_dict, collect, compare
from verlog.reports.learning.run_logs import Curve, Spans, read_curve, read_spans, read_timings, smooth
from verlog.reports.learning.scan import ScanPoint, check_start, pick_start, read_scan, scan_choice
from verlog.reports.learning.write import write_results

__all__ = [
    "Comparison",
    "CrafterMeasures",
    "Curve",
    "LearningResults",
    "ScanPoint",
    "Spans",
    "achievement_names",
    "as_dict",
    "check_start",
    "collect",
    "compare",
    "crafter_measures",
    "crafter_score_diff",
    "pick_start",
    "plot_curves",
    "read_curve",
    "read_scan",
    "read_spans",
    "read_timings",
    "render_markdown",
    "scan_choice",
    "smooth",
    "write_results",
]
