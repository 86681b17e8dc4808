"""The learning curves of a learning run's PPO runs as a PNG (success and mean return against PPO iteration)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from verlog.reports.learning.run_logs import smooth

if TYPE_CHECKING:
    from verlog.reports.learning.results import LearningResults


def plot_curves(results: LearningResults, png: str | Path, *, window: int = 5) -> Path | None:
    """Success rate and mean return of the rollout episodes against PPO iteration (every PPO run) as a PNG; the
    mean return alone for a task measured by its return.

    Points: each iteration's episodes; lines: a moving average over ``window`` iterations weighted by episodes;
    dashed: the SFT model's evaluation. Returns None (and writes nothing) when no PPO run has metrics yet.
    """
    curves = {k: c for k, c in results.curves.items() if c.steps}
    if not curves:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # the in-training evaluations go on the first panel: the measure of the task's target
    panels = [("ret", "mean return")] if results.by_return else [("success", "success rate"), ("ret", "mean return")]
    fig, grid = plt.subplots(1, len(panels), figsize=(11, 4) if len(panels) == 2 else (8, 5), squeeze=False)
    colors = {"dual GAE": "tab:blue", "single GAE": "tab:orange", "boundary cut": "tab:green"}
    for ax, (attr, label) in zip(grid[0], panels):
        for name, curve in curves.items():
            values = getattr(curve, attr)
            color = colors.get(name)
            ax.scatter(curve.steps, values, s=10, alpha=0.35, color=color)
            ax.plot(curve.steps, smooth(values, curve.episodes, window), color=color, label=f"PPO, {name}")
            if attr == panels[0][0] and curve.eval_steps:
                ax.errorbar(
                    curve.eval_steps,
                    curve.eval_return if results.by_return else curve.eval_success,
                    yerr=curve.eval_return_se if results.by_return else curve.eval_success_se,
                    fmt="s--",
                    color=color,
                    capsize=3,
                    markersize=4,
                    label=f"PPO, {name}: in-training evaluation (± s.e.)",
                )
        warmup = int(results.settings.get("CRITIC_WARMUP", "0") or 0)
        if warmup > 0:
            ax.axvspan(0.5, warmup + 0.5, color="gray", alpha=0.12, label="critic warm-up (actor fixed)")
        sft = results.evals.get(results.start_label)
        if sft is not None:
            ax.axhline(
                (sft.success if attr == "success" else sft.ret).estimate,
                color="gray",
                linestyle="--",
                label=f"{results.start_label} model (evaluation)",
            )
        ax.set_xlabel("PPO iteration")
        ax.set_ylabel(f"{label} of episodes ended in the iteration")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    wrap = " " if len(panels) == 2 else "\n"  # one panel is too narrow for the title on one line
    fig.suptitle(
        f"{results.title} learning curves{wrap}(moving average over {window} iterations, weighted by episodes)"
    )
    fig.tight_layout()
    png = Path(png)
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return png
