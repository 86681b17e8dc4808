"""Move quality of a BabaIsAI policy from its tapes: the share of its actions that bring a win one move closer.

Success is sparse on BabaIsAI (one bit per episode); this reads every action instead. Each taped episode is replayed
from its seed and executed actions (a level is a function of task and seed), and before and after every action the
solver says how many moves a win still takes. An action is *optimal* when that number drops by one (or it wins), and
*losing* when the level could be won before it and cannot after it (within ``--horizon`` moves). The shares are
reported per block of training iterations, beside the same measure for uniformly random actions of the env's action
set on fresh seeds. A by-hand diagnostic of docs/results/babaisai.md, not a test; the actions are weighted
equally, so long failing episodes weigh most: read the change between blocks, not the level.

    .venv/bin/python bench/babaisai_moves.py outputs/learn-babaisai-v7/ppo_dual/tapes/train.jsonl --block 25

Episodes whose first turn is not in the tapes (the tapes keep a sample of the slots) are skipped.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from envs.babaisai import BabaIsAIEnv, solve_board
from verlog.errors import VerlogError
from verlog.tapes.record import TurnLog, group_episodes, read_turn_logs

RANDOM_SEED_START = 3_000_000  # the random baseline's levels: outside every recipe's seed ranges


@dataclass
class MoveCounts:
    """Actions replayed, those that brought a win one move closer, and those that made the level unwinnable."""

    actions: int = 0
    optimal: int = 0
    losing: int = 0

    def add(self, before: int | None, after: int | None) -> None:
        """Count one action from the solver's distances to a win before and after it (None: no win in reach)."""
        self.actions += 1
        self.optimal += before is not None and after is not None and after == before - 1
        self.losing += before is not None and after is None

    def row(self, label: str) -> str:
        n = max(self.actions, 1)
        return f"| {label} | {self.actions} | {100 * self.optimal / n:.1f}% | {100 * self.losing / n:.1f}% |"


def distance(env: BabaIsAIEnv, horizon: int, won: bool = False) -> int | None:
    """Moves a win takes from the env's state (0 once ``won``: a win ends the episode, and the step's info says
    ``success``), or None when the solver finds none within ``horizon``."""
    if won:
        return 0
    plan = solve_board(env.cells, env.width, horizon)
    return None if plan is None else len(plan)


def replay(turns: Sequence[TurnLog], horizon: int) -> Iterable[tuple[int, int | None, int | None]]:
    """(iteration, distance before, distance after) of each taped action of one episode, replayed from its seed."""
    task = turns[0].env_id.partition("/")[2]
    env = BabaIsAIEnv(task, max_steps=len(turns) + 1)
    env.reset(seed=int(turns[0].seed))
    for record in turns:
        before = distance(env, horizon)
        _, _, terminated, truncated, info = env.step(record.action)
        yield int(record.iteration or 0), before, distance(env, horizon, info.get("success", False))
        if terminated or truncated:
            return


def tape_moves(records: Iterable[TurnLog], block: int, horizon: int) -> dict[int, MoveCounts]:
    """Block index (iterations ``block * i + 1`` to ``block * (i + 1)``) -> the counts of the taped actions."""
    counts: dict[int, MoveCounts] = {}
    for turns in group_episodes(records).values():
        if turns[0].turn != 0 or turns[0].seed is None or not turns[0].env_id.startswith("babaisai/"):
            continue
        for iteration, before, after in replay(turns, horizon):
            counts.setdefault(max(iteration - 1, 0) // block, MoveCounts()).add(before, after)
    return counts


def random_moves(task: str, episodes: int, max_steps: int, horizon: int, seed: int = 0) -> MoveCounts:
    """The same counts for uniformly random actions of the env's action set, ``episodes`` fresh levels."""
    rng = np.random.default_rng(seed)
    counts = MoveCounts()
    for i in range(episodes):
        env = BabaIsAIEnv(task, max_steps=max_steps)
        env.reset(seed=RANDOM_SEED_START + i)
        for _ in range(max_steps):
            before = distance(env, horizon)
            _, _, terminated, truncated, info = env.step(env.actions[rng.integers(len(env.actions))])
            counts.add(before, distance(env, horizon, info.get("success", False)))
            if terminated or truncated:
                break
    return counts


def report(path: str | Path, block: int, horizon: int, random_episodes: int, max_steps: int) -> str:
    """The markdown table of :func:`tape_moves` and, with ``random_episodes`` > 0, the random baseline."""
    records = read_turn_logs(path)
    counts = tape_moves(records, block, horizon)
    if not counts:
        raise VerlogError(f"{path}: no BabaIsAI episode whose first turn and seed are taped: nothing to replay")
    task = next(t.env_id for t in records if t.env_id.startswith("babaisai/")).partition("/")[2]
    lines = [f"Moves of `{path}` ({task}):", "", "| iterations | actions | optimal | losing |", "|---|---|---|---|"]
    lines += [counts[b].row(f"{b * block + 1}-{(b + 1) * block}") for b in sorted(counts)]
    if random_episodes > 0:
        baseline = random_moves(task, random_episodes, max_steps, horizon)
        lines.append(baseline.row(f"random actions ({random_episodes} levels)"))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tapes", help="a training or evaluation tapes file (tapes/train.jsonl of a PPO run folder)")
    parser.add_argument("--block", type=int, default=25, help="iterations per row (default 25)")
    parser.add_argument("--horizon", type=int, default=20, help="longest plan the solver looks for (default 20)")
    parser.add_argument("--random", type=int, default=300, help="levels of the random baseline; 0: none (300)")
    parser.add_argument("--max-steps", type=int, default=20, help="step limit of the random baseline (default 20)")
    args = parser.parse_args(argv)
    if args.block < 1 or args.horizon < 1 or args.random < 0 or args.max_steps < 1:
        print("error: --block, --horizon and --max-steps must be >= 1, --random >= 0", file=sys.stderr)
        return 2
    if not Path(args.tapes).is_file():
        print(f"error: no tapes file at {args.tapes}", file=sys.stderr)
        return 2
    try:
        print(report(args.tapes, args.block, args.horizon, args.random, args.max_steps), end="")
    except VerlogError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
