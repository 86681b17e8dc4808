"""Results of the curriculum recipe (recipes/cpu/curriculum_toy.sh): uniform vs SEC task sampling, same budget.

    .venv/bin/python bench/curriculum.py outputs/curriculum-toy --out docs/results/curriculum.md

Reads each run's ``metrics.jsonl`` (the per-family ``curriculum/<f>/*`` and ``family/<f>/*`` metrics) and
``eval/episodes.jsonl`` (the in-training evaluation's episodes, each with its family), and writes the markdown: how
the sampling shifted (share of episodes each family got early and late, the final probabilities and Q values) and
each family's success and return before and after training on held-out seeds, with 95% bootstrap intervals, for both
runs. A recipe's report writer, so it lives here and not in the library.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from verlog.eval import bootstrap_mean_ci
from verlog.files import read_jsonl as read_run_log
from verlog.run_folder import RunFolder

RUNS = ("uniform", "sec")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The records of a run's JSON-lines log ([] when missing; a torn last line is skipped with a warning)."""
    return read_run_log(path, warn=lambda line: print(f"[curriculum] {line}", file=sys.stderr))


def families_of(records: list[dict[str, Any]]) -> list[str]:
    """The family names of a run, in the order of its first record that names them."""
    out: list[str] = []
    for r in records:
        for key in r:
            if key.startswith("curriculum/") and key.endswith("/prob"):
                name = key.split("/")[1]
                if name not in out:
                    out.append(name)
    return out


def episode_shares(records: list[dict[str, Any]], families: list[str], steps: range | list[int]) -> dict[str, float]:
    """Each family's share of the training episodes that ended in ``steps`` (``family/<f>/episodes``)."""
    wanted = set(steps)
    counts = {f: sum(r.get(f"family/{f}/episodes", 0.0) for r in records if r.get("step") in wanted) for f in families}
    total = sum(counts.values())
    return {f: (c / total if total else float("nan")) for f, c in counts.items()}


def eval_by_family(episodes: list[dict[str, Any]]) -> dict[int, dict[str, list[dict[str, Any]]]]:
    """iteration -> family -> evaluation episode records."""
    out: dict[int, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for e in episodes:
        out[int(e["iteration"])][str(e.get("family", ""))].append(e)
    return out


def _ci(values: list[float]) -> str:
    if not values:
        return "n/a"
    ci = bootstrap_mean_ci(values, n_resamples=2000, seed=0)
    return f"{ci.estimate:.2f} [{ci.low:.2f}, {ci.high:.2f}]"


def render(run_dir: Path) -> str:
    lines = [
        "# Multi-task PPO with a self-evolving curriculum (SEC) vs uniform task sampling (2-core CPU)",
        "",
        f"Written by `bench/curriculum.py` from `{run_dir}` (`recipes/cpu/curriculum_toy.sh`). The two runs share the "
        "starting model (format-only warm start), the seeds, the budget and every setting but `curriculum.*`.",
        "",
    ]
    settings = (run_dir / "settings.env").read_text(encoding="utf-8") if (run_dir / "settings.env").is_file() else ""
    if "SMOKE=1" in settings:
        lines += ["**SMOKE run: tiny budgets that check the chain. These numbers mean nothing.**", ""]
    for run in RUNS:
        records = [r for r in read_jsonl(RunFolder(run_dir / run).metrics) if "training/global_step" in r]
        lines += [f"## {run}", ""]
        if not records:
            lines += ["Not run yet.", ""]
            continue
        families = families_of(records)
        steps = sorted(int(r["step"]) for r in records)
        k = max(1, len(steps) // 5)
        early, late = episode_shares(records, families, steps[:k]), episode_shares(records, families, steps[-k:])
        last = records[-1]
        lines += [
            f"{len(steps)} iterations. Sampling: each family's share of the training episodes that ended in the first "
            f"{k} and the last {k} iterations, and the curriculum's state after the last one.",
            "",
            "| family | share, first iterations | share, last iterations | P(draw) at the end | Q at the end "
            "| episodes drawn |",
            "|---|---|---|---|---|---|",
        ]
        for f in families:
            lines.append(
                f"| {f} | {100 * early[f]:.0f}% | {100 * late[f]:.0f}% | {last.get(f'curriculum/{f}/prob', 0):.2f} | "
                f"{last.get(f'curriculum/{f}/q', 0):.3f} | {int(last.get(f'curriculum/{f}/draws', 0))} |"
            )
        evals = eval_by_family(read_jsonl(RunFolder(run_dir / run).eval_episodes))
        if evals:
            first_it, last_it = min(evals), max(evals)
            lines += [
                "",
                f"Held-out evaluation (seeds from 2^31, the same for every family and run) at iteration {first_it} "
                f"(before training) and {last_it}: mean success and mean return with 95% bootstrap intervals.",
                "",
                "| family | episodes | success before | success after | return before | return after |",
                "|---|---|---|---|---|---|",
            ]
            for f in families:
                before, after = evals[first_it].get(f, []), evals[last_it].get(f, [])
                keys = ("success", "episode_return")
                cells = [_ci([float(e[key]) for e in when]) for key in keys for when in (before, after)]
                lines.append(f"| {f} | {len(after)} | {cells[0]} | {cells[1]} | {cells[2]} | {cells[3]} |")
            middle = [it for it in sorted(evals) if it not in (first_it, last_it)]
            if middle:
                points = "; ".join(
                    f"iteration {it}: "
                    + ", ".join(
                        f"{f} {sum(float(e['success']) for e in evals[it][f]) / max(len(evals[it][f]), 1):.2f}"
                        for f in families
                    )
                    for it in middle
                )
                lines += ["", f"In between (success): {points}."]
        lines.append("")
    notes = run_dir / "notes.md"
    if notes.is_file():
        lines += ["## Notes on this run", "", notes.read_text(encoding="utf-8").strip(), ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", help="the recipe's run folder (its OUTPUT_DIR)")
    parser.add_argument("--out", default="docs/results/curriculum.md", help="the markdown to write")
    args = parser.parse_args(argv)
    run_dir = Path(args.run_dir)
    if not run_dir.is_dir():
        print(f"error: run folder {run_dir} does not exist: run recipes/cpu/curriculum_toy.sh first", file=sys.stderr)
        return 2
    text = render(run_dir)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    print(text)
    print(f"[curriculum] wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
