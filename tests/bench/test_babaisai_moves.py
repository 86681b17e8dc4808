"""bench/babaisai_moves.py on real BabaIsAI levels and the real solver: tapes of the solver's own plan are all optimal
moves, tapes of idling none, and the random baseline sits between."""

from __future__ import annotations

import json
from pathlib import Path

from bench_script import load

from envs.babaisai import BabaIsAIEnv, solve
from verlog.tapes.record import read_turn_logs

REPO = Path(__file__).resolve().parents[2]
TASK = "two_room-goto_win"


moves = load("babaisai_moves")


def _tape(path: Path, episodes: dict[str, tuple[int, list[str], int]]) -> Path:
    """A training tapes file: episode id -> (seed, executed actions, iteration of every turn)."""
    with path.open("w") as f:
        for episode_id, (seed, actions, iteration) in episodes.items():
            for turn, action in enumerate(actions):
                record = {"format": "verlog.turnlog/3", "episode_id": episode_id, "turn": turn, "seed": seed,
                          "env_id": f"babaisai/{TASK}", "action": action, "iteration": iteration}  # fmt: skip
                f.write(json.dumps(record) + "\n")
    return path


def _plan(seed: int) -> list[str]:
    env = BabaIsAIEnv(TASK, max_steps=20)
    env.reset(seed=seed)
    plan = solve(env)
    assert plan
    return plan


def test_the_solvers_plan_is_all_optimal_and_idling_is_never(tmp_path, capsys):
    plans = {seed: _plan(seed) for seed in (11, 12)}
    tapes = _tape(
        tmp_path / "train.jsonl",
        {
            "e-solver-11": (11, plans[11], 1),  # block 0 (iterations 1-2)
            "e-solver-12": (12, plans[12], 2),
            "e-idle": (13, ["idle"] * 4, 3),  # block 1 (iterations 3-4)
            "e-no-start": (14, ["up"], 3),  # its first turn is not taped: skipped
        },
    )
    # a sampled slot's episode begins mid-tape: drop the first turn of e-no-start
    lines = [line for line in tapes.read_text().splitlines() if '"e-no-start"' not in line]
    lines.append(json.dumps({"format": "verlog.turnlog/3", "episode_id": "e-no-start", "turn": 3,
                             "env_id": f"babaisai/{TASK}", "seed": 14, "action": "up", "iteration": 3}))  # fmt: skip
    tapes.write_text("\n".join(lines) + "\n")
    counts = moves.tape_moves(read_turn_logs(tapes), block=2, horizon=20)
    solver, idle = counts[0], counts[1]
    assert solver.actions == len(plans[11]) + len(plans[12]) and solver.optimal == solver.actions
    assert (idle.actions, idle.optimal, idle.losing) == (4, 0, 0)
    baseline = moves.random_moves(TASK, episodes=5, max_steps=8, horizon=20)
    assert baseline.actions >= 5 and 0 < baseline.optimal < baseline.actions
    assert moves.main([str(tapes), "--block", "2", "--random", "3", "--max-steps", "6"]) == 0
    out = capsys.readouterr().out
    assert "| 1-2 | " in out and "| 100.0% | 0.0% |" in out and "| 3-4 | 4 | 0.0% | 0.0% |" in out
    assert "| random actions (3 levels) |" in out


def test_bad_inputs_end_in_one_line(tmp_path, capsys):
    assert moves.main([str(tmp_path / "missing.jsonl")]) == 2
    assert capsys.readouterr().err.strip() == f"error: no tapes file at {tmp_path / 'missing.jsonl'}"
    other = tmp_path / "babyai.jsonl"
    other.write_text(json.dumps({"format": "verlog.turnlog/3", "episode_id": "e", "turn": 0, "env_id": "babyai/goto",
                                 "seed": 1, "action": "forward", "iteration": 1}) + "\n")  # fmt: skip
    assert moves.main([str(other), "--random", "0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no BabaIsAI episode whose first turn and seed are taped" in err
    assert moves.main([str(other), "--block", "0"]) == 2
