"""Benchmark of envs.EnvPool (not a test). Results go to docs/benchmarks.md, "Env pool".

    .venv/bin/python bench/pool.py                    # Crafter and BabyAI, 8 envs, 2 workers
    .venv/bin/python bench/pool.py --quick            # fewer steps, a few seconds per game
    .venv/bin/python bench/pool.py --images           # envs render an RGB frame every step (render-bound)
    .venv/bin/python bench/pool.py --games babyai/goto --envs 16 --workers 2

For each game, in one run: env steps per second of (a) a plain loop over N envs in this process (auto-reset by
hand), (b) EnvPool(in_process=True) (the same loop behind the pool's API), (c) EnvPool with W spawned workers.
Start-up is timed apart. The three modes run side by side in interleaved rounds (the same action plan each round,
actions drawn from each env's valid actions with a fixed seed), so a change in machine load hits them alike;
"vs plain" is the median over rounds of the mode's rate divided by the plain loop's rate in the same round.
The ratio (c) / (a) is what the issue's targets refer to (Crafter >= 1.4x, BabyAI >= 0.5x on 2 cores). On a
machine shared with other jobs the numbers move: the load average is printed with them, and so are the CPU seconds
each mode spent per env step (parent and workers, from psutil) and the throughput they imply on idle cores
("idle-core proj.": n_envs / (parent CPU per pool step + the busiest worker's CPU per pool step)).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time

import numpy as np
import psutil

import envs
from envs.pool import EnvPool

TARGETS = {"crafter/default": 1.4, "babyai/goto": 0.5}


def action_plan(actions: list[str], n_envs: int, steps: int, seed: int = 0) -> list[list[str]]:
    rng = random.Random(seed)
    return [[rng.choice(actions) for _ in range(n_envs)] for _ in range(steps)]


def run_game(
    env_id: str, n_envs: int, workers: int, steps: int, rounds: int, env_kwargs: dict | None = None
) -> dict[str, dict[str, float]]:
    """Steps/s of the three modes, timed in interleaved rounds so that load changes hit them alike.

    Returns mode -> {"best": steps/s, "median": steps/s, "ratio": median over rounds of (mode / plain) of the
    same round, "startup": s}.
    """
    env_kwargs = env_kwargs or {}
    probe = envs.make(env_id, **env_kwargs)
    plan = action_plan(list(probe.actions), n_envs, steps)
    probe.close()
    plain_envs = [envs.make(env_id, **env_kwargs) for _ in range(n_envs)]
    # The pool's seeding, so that all modes play the same episodes: slot i starts with seed i (reset(seeds=0)), and
    # its later episodes take seeds from numpy.random.default_rng(i).
    seed_rngs = [np.random.default_rng(i) for i in range(n_envs)]
    for i, env in enumerate(plain_envs):
        env.reset(seed=i)

    def plain_step(actions: list[str]) -> None:
        for env, rng, action in zip(plain_envs, seed_rngs, actions):
            _, _, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                env.reset(seed=int(rng.integers(0, 2**31 - 1)))

    startup = {"plain": 0.0}
    start = time.perf_counter()
    keep = bool(env_kwargs.get("render_image"))
    local = EnvPool(env_id, num_envs=n_envs, in_process=True, env_kwargs=env_kwargs, keep_images=keep)
    local.reset(seeds=0)
    startup["in-process"] = time.perf_counter() - start
    start = time.perf_counter()
    remote = EnvPool(env_id, num_envs=n_envs, num_workers=workers, env_kwargs=env_kwargs, keep_images=keep)
    remote.reset(seeds=0)
    startup["workers"] = time.perf_counter() - start
    modes = {"plain": plain_step, "in-process": local.step, "workers": remote.step}
    rates: dict[str, list[float]] = {name: [] for name in modes}
    parent = psutil.Process()
    worker_procs = [psutil.Process(pid) for pid in remote.worker_pids()]
    cpu = {name: [0.0, [0.0] * len(worker_procs)] for name in modes}  # parent s, per-worker s
    try:
        for step_all in modes.values():  # warm-up
            for actions in plan[:5]:
                step_all(actions)
        for _ in range(rounds):
            for name, step_all in modes.items():
                p0, w0 = _cpu(parent), [_cpu(w) for w in worker_procs]
                start = time.perf_counter()
                for actions in plan:
                    step_all(actions)
                rates[name].append(len(plan) * n_envs / (time.perf_counter() - start))
                cpu[name][0] += _cpu(parent) - p0
                cpu[name][1] = [c + _cpu(w) - b for c, w, b in zip(cpu[name][1], worker_procs, w0)]
    finally:
        local.close()
        remote.close()
        for env in plain_envs:
            env.close()
    out = {}
    pool_steps = rounds * len(plan)
    for name, values in rates.items():
        ratios = [v / p for v, p in zip(values, rates["plain"])]
        parent_s, worker_s = cpu[name][0] / pool_steps, [w / pool_steps for w in cpu[name][1]]
        out[name] = {
            "best": max(values),
            "median": statistics.median(values),
            "ratio": statistics.median(ratios),
            "round_ratios": ratios,
            "startup": startup[name],
            "cpu_ms": 1e3 * (parent_s + sum(worker_s)) / n_envs,  # CPU per env step, all processes
            # On idle cores: the parent's share runs alone, the workers' shares in parallel.
            "projected": n_envs / (parent_s + max(worker_s, default=0.0)),
        }
    for name in out:
        out[name]["projected_ratio"] = out[name]["projected"] / out["plain"]["projected"]
    return out


def _cpu(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--games", nargs="+", default=["crafter/default", "babyai/goto"])
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=None, help="pool steps per round (default: per game)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved timed rounds per mode")
    parser.add_argument("--quick", action="store_true", help="fewer steps and 2 rounds")
    parser.add_argument(
        "--images", action="store_true", help="envs render their RGB frame every step (render_image=True)"
    )
    args = parser.parse_args()
    default_steps = {"crafter/default": 100, "babyai/goto": 400}
    rounds = 2 if args.quick else args.rounds
    print(f"cores: {os.cpu_count()}, load average before: {os.getloadavg()[0]:.2f}")
    header = (
        f"{'game':<17}{'mode':<22}{'best steps/s':>13}{'median':>9}{'vs plain':>10}{'start-up s':>12}"
        f"{'cpu ms/step':>12}{'idle-core proj.':>16}"
    )
    print(header)
    for env_id in args.games:
        steps = args.steps or default_steps.get(env_id, 200)
        if args.quick:
            steps = max(10, steps // 5)
        kwargs = {"render_image": True} if args.images else {}
        result = run_game(env_id, args.envs, args.workers, steps, rounds, kwargs)
        labels = {
            "plain": f"plain loop, {args.envs} envs",
            "in-process": "EnvPool in-process",
            "workers": f"EnvPool {args.workers} workers",
        }
        for name, row in result.items():
            print(
                f"{env_id:<17}{labels[name]:<22}{row['best']:>13.0f}{row['median']:>9.0f}{row['ratio']:>9.2f}x"
                f"{row['startup']:>12.2f}{row['cpu_ms']:>12.3f}{row['projected']:>9.0f} {row['projected_ratio']:>5.2f}x"
            )
        rounds_text = " ".join(f"{r:.2f}" for r in result["workers"]["round_ratios"])
        print(f"{'':<17}{'workers / plain by round':<22}  {rounds_text}")
        target = TARGETS.get(env_id)
        if target is not None:
            verdict = "meets" if result["workers"]["ratio"] >= target else "misses"
            print(f"{'':<17}{'target (workers)':<22}{'':>22}{target:>9.2f}x  ({verdict} it)")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
