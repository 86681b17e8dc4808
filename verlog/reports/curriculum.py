"""The results page of the curriculum recipe (recipes/cpu/curriculum_toy.sh): uniform vs SEC task sampling, same
budget.

Reads each run's ``metrics.jsonl`` (the per-family ``curriculum/<f>/*`` and ``family/<f>/*`` metrics) and
``eval/episodes.jsonl`` (the in-training evaluation's episodes, each with its family), and writes the markdown: how
the sampling shifted (share of episodes each family got early and late, the final probabilities and Q values) and
each family's success and return before and after training on held-out seeds, with 95% bootstrap intervals, for both
runs.

    verlog report curriculum outputs/curriculum-toy --out docs/results/curriculum.md
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from verlog.eval import bootstrap_mean_ci
from verlog.reports.run_files import existing_run, read_log, read_notes, read_settings
from verlog.run.folder import RunFolder

RUNS = ("uniform", "sec")


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


def render(run_dir: str | Path) -> str:
    """The results page of the curriculum run folder ``run_dir`` (a run not started yet says so)."""
    run_dir = existing_run(run_dir, "recipes/cpu/curriculum_toy.sh")
    lines = [
        "# Multi-task PPO with a self-evolving curriculum (SEC) vs uniform task sampling (2-core CPU)",
        "",
        f"Written by `verlog report curriculum` from `{run_dir}` (`recipes/cpu/curriculum_toy.sh`). The two runs "
        "share the starting model (format-only warm start), the seeds, the budget and every setting but "
        "`curriculum.*`.",
        "",
    ]
    if read_settings(run_dir).get("SMOKE") == "1":
        lines += ["**SMOKE run: tiny budgets that check the chain. These numbers mean nothing.**", ""]
    for run in RUNS:
        lines += _run_section(run_dir / run, run)
    notes = read_notes(run_dir)
    if notes:
        lines += ["## Notes on this run", "", notes.strip(), ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def _run_section(folder: Path, run: str) -> list[str]:
    """One run's section: how its sampling shifted, then its held-out evaluation per family."""
    records = [
        r for r in read_log(RunFolder(folder).metrics, "curriculum", missing_ok=True) if "training/global_step" in r
    ]
    lines = [f"## {run}", ""]
    if not records:
        return [*lines, "Not run yet.", ""]
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
    evals = eval_by_family(read_log(RunFolder(folder).eval_episodes, "curriculum", missing_ok=True))
    if evals:
        lines += _evaluation_section(evals, families)
    lines.append("")
    return lines


def _evaluation_section(evals: dict[int, dict[str, list[dict[str, Any]]]], families: list[str]) -> list[str]:
    """Each family's success and return at the first and last in-training evaluation, and success in between."""
    first_it, last_it = min(evals), max(evals)
    lines = [
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
    return lines
