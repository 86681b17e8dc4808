"""A learning run's results page written to disk: the markdown, its learning-curve PNG and the numbers as JSON."""

from __future__ import annotations

import json
from pathlib import Path

from verlog.reports.learning.markdown import render_markdown
from verlog.reports.learning.plot import plot_curves
from verlog.reports.learning.results import as_dict, collect


def write_results(
    run_dir: str | Path, out: str | Path, *, n_resamples: int = 10_000, seed: int = 0
) -> tuple[Path, Path | None]:
    """Write ``out`` (markdown), ``<out stem>_curve.png`` and ``<out stem>.json`` (the numbers); returns md, png."""
    results = collect(run_dir, n_resamples=n_resamples, seed=seed)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    png = plot_curves(results, out.with_name(f"{out.stem}_curve.png"))
    out.write_text(render_markdown(results, png.name if png else None), encoding="utf-8")
    out.with_suffix(".json").write_text(json.dumps(as_dict(results), indent=2) + "\n", encoding="utf-8")
    return out, png
