"""Benchmark of the env pool's Ray backend against subprocess workers (not a test). Results: docs/benchmarks.md,
"Env workers on Ray", and docs/results/pool-ray.json.

    .venv/bin/python bench/pool_ray.py                 # instant and slow envs, 8 slots, 2 workers, 3 rounds
    .venv/bin/python bench/pool_ray.py --quick         # fewer turns and rounds
    .venv/bin/python bench/pool_ray.py --out FILE.json

One run, side by side: for each env (``toy/delayed``, which answers at once, and ``slow`` around it, each step and
reset sleeping ``--delay`` seconds as a remote simulator waits), the wall time of one pool turn (``EnvPool.step`` of
every slot) with ``backend="subprocess"`` and ``backend="ray"`` (a local Ray instance started here), in interleaved
rounds so that load changes hit both alike. The overhead per turn is the turn's time less the env's own time (0 for
the instant env; for the slow one, the slots of a worker run one after another: slots per worker x delay, plus
the resets of the episodes that ended). Start-up (building the workers) is timed apart.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

from envs.pool import EnvPool

ACTIONS = ["go forward", "turn left", "turn right"]


def turn_times(pool: EnvPool, turns: int, seed: int) -> tuple[list[float], list[int]]:
    """Seconds per turn, and the episodes that ended in each turn (their auto-reset also waits)."""
    pool.reset(seeds=seed)
    times, ended = [], []
    for t in range(turns):
        actions = [ACTIONS[(t + i) % len(ACTIONS)] for i in range(pool.num_envs)]
        start = time.perf_counter()
        results = pool.step(actions)
        times.append(time.perf_counter() - start)
        ended.append(sum(1 for r in results if r[2] or r[3]))
    return times, ended


def run(slots: int, workers: int, turns: dict[str, int], rounds: int, delay: float) -> dict:
    cases = {
        "instant": ("toy/delayed", {"length": 4}, 0.0),
        "slow": ("slow", {"inner": "toy/delayed", "length": 4, "step_delay_s": delay}, delay),
    }
    per_worker = -(-slots // workers)
    out: dict = {}
    for case, (env_id, kwargs, wait) in cases.items():
        samples: dict[str, list[float]] = {"subprocess": [], "ray": []}
        overheads: dict[str, list[float]] = {"subprocess": [], "ray": []}
        startup: dict[str, list[float]] = {"subprocess": [], "ray": []}
        for r in range(rounds):
            for backend in ("subprocess", "ray") if r % 2 == 0 else ("ray", "subprocess"):
                start = time.perf_counter()
                with EnvPool(
                    env_id, num_envs=slots, num_workers=workers, env_kwargs=kwargs, backend=backend, seed=r
                ) as pool:
                    startup[backend].append(time.perf_counter() - start)
                    times, ended = turn_times(pool, turns[case], seed=r)
                for seconds, done in zip(times, ended):
                    own = wait * (per_worker + min(done, per_worker))  # the busiest worker's sleeps (steps, resets)
                    samples[backend].append(seconds)
                    overheads[backend].append(seconds - own)
        out[case] = {
            "env_id": env_id,
            "env_kwargs": kwargs,
            "turns_per_round": turns[case],
            **{
                backend: {
                    "turn_ms_median": 1000 * statistics.median(samples[backend]),
                    "turn_ms_p90": 1000 * statistics.quantiles(samples[backend], n=10)[-1],
                    "overhead_ms_median": 1000 * statistics.median(overheads[backend]),
                    "startup_s_median": statistics.median(startup[backend]),
                }
                for backend in samples
            },
        }
        print(f"{case:8s} {env_id:12s}", end="")
        for backend in samples:
            row = out[case][backend]
            print(
                f"  {backend}: {row['turn_ms_median']:.2f} ms/turn (overhead {row['overhead_ms_median']:.2f} ms, "
                f"start {row['startup_s_median']:.2f} s)",
                end="",
            )
        print()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--delay", type=float, default=0.02, help="seconds per step and reset of the slow env")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    args = parser.parse_args()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray

    ray.init(num_cpus=os.cpu_count() or 2, include_dashboard=False, log_to_driver=False)
    turns = {"instant": 60, "slow": 8} if args.quick else {"instant": 300, "slow": 30}
    rounds = 1 if args.quick else args.rounds
    results = run(args.slots, args.workers, turns, rounds, args.delay)
    record = {
        "benchmark": "bench/pool_ray.py",
        "slots": args.slots,
        "workers": args.workers,
        "rounds": rounds,
        "slow_delay_s": args.delay,
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
        "python": platform.python_version(),
        "ray": ray.__version__,
        "results": results,
    }
    ray.shutdown()
    if args.out:
        Path(args.out).write_text(json.dumps(record, indent=2) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
