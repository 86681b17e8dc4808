"""Benchmark of the BabaIsAI env (not a test). Results go to docs/benchmarks.md, section "BabaIsAI".

    .venv/bin/python bench/babaisai.py            # seeds 0-19 for the solver, 20k env steps per family
    .venv/bin/python bench/babaisai.py --quick    # seeds 0-4, 2k env steps per family

1. Env speed per task family: ``env.step`` with random action strings (text observation included, no image), and the
   bare engine step (``world.advance``) that the solver uses; episodes are reset on termination or truncation.
2. Solver time per task family: ``solve(env)`` from the start of each seed's level, with the plan length.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import envs
from envs.babaisai import TASKS, generate, solve
from envs.babaisai.world import ACTIONS, advance, parse_rules

FAMILIES = {
    "goto_win": [t for t in TASKS if t.startswith("goto_win")],
    "make_win": [t for t in TASKS if t.startswith("make_win")],
    "two_room-goto_win": [t for t in TASKS if t.startswith("two_room-goto_win")],
    "two_room-break_stop-goto_win": [t for t in TASKS if t.startswith("two_room-break_stop-goto_win")],
    "two_room-maybe_break_stop-goto_win": [t for t in TASKS if t.startswith("two_room-maybe_break_stop")],
    "two_room-make_win": [t for t in TASKS if t.startswith("two_room-make_win")],
    "two_room-break_stop-make_win": [t for t in TASKS if t.startswith("two_room-break_stop-make_win")],
    "two_room-make_you": [t for t in TASKS if t.startswith("two_room-make_you")],
    "two_room-make_wall_win": ["two_room-make_wall_win"],
}


def env_steps_per_second(tasks: list[str], steps: int) -> float:
    rng = np.random.default_rng(0)
    per_task = max(1, steps // len(tasks))
    elapsed = 0.0
    for k, task in enumerate(tasks):
        env = envs.make(f"babaisai/{task}")
        env.reset(seed=k)
        actions = [ACTIONS[i] for i in rng.integers(0, 5, size=per_task)]
        start = time.perf_counter()
        for action in actions:
            _, _, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                env.reset()
        elapsed += time.perf_counter() - start
    return per_task * len(tasks) / elapsed


def engine_steps_per_second(tasks: list[str], steps: int) -> float:
    rng = np.random.default_rng(1)
    per_task = max(1, steps // len(tasks))
    elapsed = 0.0
    for k, task in enumerate(tasks):
        level = generate(task, np.random.RandomState(k))
        cells, width = level.cells, level.width
        rules = parse_rules(cells, width)
        actions = rng.integers(1, 5, size=per_task).tolist()
        start = time.perf_counter()
        for n, action in enumerate(actions):
            cells, rules, won, _ = advance(cells, rules, action, width)
            if won or n % 100 == 99:
                cells, rules = level.cells, parse_rules(level.cells, width)
        elapsed += time.perf_counter() - start
    return per_task * len(tasks) / elapsed


def solver_stats(tasks: list[str], seeds: range) -> tuple[list[float], list[int], int]:
    times, lengths, failures = [], [], 0
    for task in tasks:
        for seed in seeds:
            env = envs.make(f"babaisai/{task}")
            env.reset(seed=seed)
            start = time.perf_counter()
            plan = solve(env)
            times.append(time.perf_counter() - start)
            if plan is None:
                failures += 1
            else:
                lengths.append(len(plan))
    return times, lengths, failures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="seeds 0-4 and 2k steps per family")
    parser.add_argument("--seeds", type=int, default=20, help="solver seeds per task (0..N-1)")
    parser.add_argument("--steps", type=int, default=20_000, help="env steps per family")
    args = parser.parse_args()
    seeds = range(5 if args.quick else args.seeds)
    steps = 2_000 if args.quick else args.steps

    print(f"BabaIsAI: {len(TASKS)} tasks, solver seeds 0-{seeds[-1]}, {steps} random steps per family\n")
    print(
        "| family | tasks | env.step/s | engine step/s | solve mean ms | solve max ms | plan len mean/max | unsolved |"
    )
    print("|---|---|---|---|---|---|---|---|")
    total_start = time.perf_counter()
    all_times: list[float] = []
    for family, tasks in FAMILIES.items():
        env_sps = env_steps_per_second(tasks, steps)
        engine_sps = engine_steps_per_second(tasks, steps)
        times, lengths, failures = solver_stats(tasks, seeds)
        all_times += times
        print(
            f"| {family} | {len(tasks)} | {env_sps:,.0f} | {engine_sps:,.0f} | {1000 * statistics.mean(times):.0f} | "
            f"{1000 * max(times):.0f} | {statistics.mean(lengths):.1f}/{max(lengths)} | {failures} |"
        )
    print(
        f"\nsolver: {len(all_times)} levels in {sum(all_times):.1f} s "
        f"(mean {1000 * statistics.mean(all_times):.0f} ms); whole benchmark {time.perf_counter() - total_start:.1f} s"
    )


if __name__ == "__main__":
    main()
