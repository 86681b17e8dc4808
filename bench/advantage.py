"""Benchmark of verlog's core algorithms (not a test). Results go to docs/benchmarks.md, "Advantage and memory".

    .venv/bin/python bench/advantage.py                 # full sizes: B = 2048 rows x R = 512 tokens
    .venv/bin/python bench/advantage.py --quick         # small sizes, a few seconds
    .venv/bin/python bench/advantage.py --device cuda   # the GAE part on a GPU

1. Dual-discount GAE on B rows x R tokens (16 turns per env slot, random response lengths, episode ends and
   bootstraps), against verl's ``compute_gae_advantage_return`` on the same tensors (which also whitens, so it is
   compared with dual GAE + ``masked_whiten``), and against plain Python loops over turns and tokens (timed on a
   subset of slots and scaled linearly to B rows: the loops are linear in the number of rows).
2. Prompt tokens against turn index over 400-turn Crafter episodes, with the sliding memory (n = 1) and with the
   whole history, and prompts built per second. Uses ``envs.make("crafter/default")`` when that env is registered,
   else Crafter-like synthetic observations (said in the output). The tokenizer is verlog.models.tiny_model's small BPE
   trained on Crafter-like text, so token counts are indicative (a Qwen tokenizer gives other absolute numbers).
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from verlog.algorithms.dual_gae import dual_discount_gae, masked_whiten
from verlog.prompting.memory import SlidingMemory

_CLOCK = {"now": time.perf_counter}


def _now() -> float:
    """Wall time, or this process's CPU time with --clock cpu (robust to other jobs on a shared machine)."""
    return _CLOCK["now"]()


DISCOUNTS = {"token_gamma": 1.0, "token_lam": 1.0, "step_gamma": 0.99, "step_lam": 0.95}


def make_batch(slots: int, turns: int, width: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """``slots * turns`` rows; row ``s * turns + t`` is turn t of slot s; random episode ends inside a slot."""
    rng = np.random.default_rng(seed)
    batch = slots * turns
    lengths = rng.integers(width // 4, width + 1, size=batch)
    mask = (np.arange(width)[None, :] < lengths[:, None]).astype(np.float32)
    values = rng.normal(size=(batch, width)).astype(np.float32)
    rewards = np.zeros((batch, width), dtype=np.float32)
    rewards[np.arange(batch), lengths - 1] = rng.random(batch) < 0.1
    terminated = rng.random(batch) < 0.05
    next_row = np.arange(batch) + 1
    last_of_slot = (np.arange(batch) % turns) == turns - 1
    next_row[terminated | last_of_slot] = -1
    next_value = rng.normal(size=batch).astype(np.float32)
    perm = rng.permutation(batch)  # rows in any order (as balance_batch leaves them)
    inverse = np.empty(batch, dtype=np.int64)
    inverse[perm] = np.arange(batch)
    next_row = np.where(next_row >= 0, inverse[np.clip(next_row, 0, batch - 1)], -1)[perm]
    return {
        "token_rewards": torch.from_numpy(rewards[perm]),
        "values": torch.from_numpy(values[perm]),
        "response_mask": torch.from_numpy(mask[perm]),
        "next_row": torch.from_numpy(next_row),
        "next_value": torch.from_numpy(next_value[perm]),
        "terminated": torch.from_numpy(terminated[perm]),
    }


def loop_reference(b: dict[str, torch.Tensor], tg: float, tl: float, sg: float, sl: float) -> list[list[float]]:
    """Plain Python loops over turns and tokens (the formulas of docs/algorithms.md), on lists."""
    rewards, values, mask = (b[k].tolist() for k in ("token_rewards", "values", "response_mask"))
    next_row, next_value, terminated = b["next_row"].tolist(), b["next_value"].tolist(), b["terminated"].tolist()
    batch, width = len(values), len(values[0])
    adv = [[0.0] * width for _ in range(batch)]
    prev = [-1] * batch
    for t, n in enumerate(next_row):
        if n >= 0:
            prev[n] = t
    for tail in (t for t in range(batch) if next_row[t] < 0):
        t, v_next, a_next = tail, (0.0 if terminated[tail] else next_value[tail]), 0.0
        while t >= 0:
            pos = [j for j in range(width) if mask[t][j]]
            last = 0.0
            for k in range(len(pos) - 1, -1, -1):
                j = pos[k]
                if k == len(pos) - 1:
                    last = rewards[t][j] + sg * v_next - values[t][j] + sg * sl * a_next
                else:
                    last = rewards[t][j] + tg * values[t][pos[k + 1]] - values[t][j] + tg * tl * last
                adv[t][j] = last
            v_next, a_next = values[t][pos[0]], adv[t][pos[0]]
            t = prev[t]
    return adv


def timed_interleaved(fns, repeats: int, sync) -> list[float]:
    """Median wall time in seconds of each function, calls interleaved so that load changes hit all alike."""
    for fn in fns:  # warm-up
        fn()
    sync()
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeats):
        for fn, out in zip(fns, times):
            start = _now()
            fn()
            sync()
            out.append(_now() - start)
    return [statistics.median(t) for t in times]


def bench_gae(rows: int, width: int, turns: int, device: str, repeats: int, loop_slots: int) -> None:
    from verl.trainer.ppo.core_algos import compute_gae_advantage_return

    slots = rows // turns
    batch = {k: v.to(device) for k, v in make_batch(slots, turns, width).items()}
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    print(f"## GAE: B = {slots * turns} rows x R = {width} tokens, {turns} turns per slot, device {device}")
    clock = "wall" if _CLOCK["now"] is time.perf_counter else "process CPU"
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {clock} time")

    def dual():
        return dual_discount_gae(**batch, **DISCOUNTS)

    def dual_whitened():
        adv, _ = dual()
        return masked_whiten(adv, batch["response_mask"])

    def verl_gae():
        return compute_gae_advantage_return(
            batch["token_rewards"], batch["values"], batch["response_mask"], gamma=0.99, lam=0.95
        )

    t_dual, t_dual_w, t_verl = timed_interleaved([dual, dual_whitened, verl_gae], repeats, sync)
    print(f"dual_discount_gae                 {t_dual * 1e3:9.1f} ms")
    print(f"dual_discount_gae + masked_whiten {t_dual_w * 1e3:9.1f} ms")
    print(f"verl compute_gae_advantage_return {t_verl * 1e3:9.1f} ms (includes whitening)")
    print(f"ratio (dual + whiten) / verl      {t_dual_w / t_verl:9.2f}x (target <= 1.5x)")

    sub = {k: v.cpu() for k, v in make_batch(loop_slots, turns, width, seed=1).items()}
    fast, _ = dual_discount_gae(**sub, **DISCOUNTS)
    scale = slots / loop_slots
    start = _now()
    ref = loop_reference(sub, **{"tg": 1.0, "tl": 1.0, "sg": 0.99, "sl": 0.95})
    t_lists = (_now() - start) * scale
    err = (fast - torch.tensor(ref)).abs().max().item()
    print(
        f"plain loops on Python lists: {t_lists:.2f} s for {slots * turns} rows (timed on {loop_slots * turns} rows, "
        f"x{scale:g}); dual GAE is {t_lists / t_dual:.0f}x faster (target >= 50x); max |difference| {err:.1e}"
    )
    test_reference = _test_reference()
    if test_reference is not None:
        arrays = [sub[k].numpy() for k in ("token_rewards", "values", "response_mask", "next_row", "next_value")]
        start = _now()
        test_reference(*arrays, sub["terminated"].numpy(), 1.0, 1.0, 0.99, 0.95)
        t_test = (_now() - start) * scale
        print(
            f"the test's nested-loop reference (numpy indexing): {t_test:.2f} s for {slots * turns} rows "
            f"(scaled x{scale:g}); dual GAE is {t_test / t_dual:.0f}x faster"
        )


def _test_reference():
    """``reference_gae`` from tests/verlog/algorithms/test_advantage.py (loaded by path), or None outside a checkout."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "tests" / "verlog" / "algorithms" / "test_advantage.py"
    if not path.exists():
        return None
    spec = importlib.util.spec_from_file_location("_verlog_test_advantage", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.reference_gae


def crafter_like_observation(rng: random.Random) -> tuple[str, str]:
    """A synthetic observation in BALROG's Crafter text layout (long-term, short-term)."""
    names = ["grass", "tree", "water", "stone", "sand", "path", "coal", "cow", "zombie", "iron", "table"]
    dirs = ["north", "south", "east", "west", "north-west", "north-east", "south-west", "south-east"]
    seen = rng.sample(names, rng.randint(3, 8))
    lines = [
        f"- {n} {d} step{'s' if d > 1 else ''} to your {rng.choice(dirs)}"
        for n, d in ((n, rng.randint(1, 7)) for n in seen)
    ]
    long_term = "You see:\n" + "\n".join(lines) + f"\n\nYou face {rng.choice(names)} at your front."
    status = "Your status:\n" + "\n".join(
        f"- {k}: {rng.randint(1, 9)}/9" for k in ("health", "food", "drink", "energy")
    )
    inventory = "Your inventory:\n" + "\n".join(
        f"- {k}: {rng.randint(1, 5)}" for k in rng.sample(["wood", "stone", "sapling", "coal"], 2)
    )
    return long_term, f"{status}\n\n{inventory}"


def crafter_source(turns: int):
    """(name, instruction, list of (long_term, short_term)) for one episode of ``turns`` observations."""
    try:
        import envs

        env = envs.make("crafter/default")
        obs, _ = env.reset(seed=0)
        out = [(obs.long_term, obs.short_term)]
        actions = ["Move West", "Move East", "Move North", "Move South", "Do", "Noop"]
        rng = random.Random(0)
        while len(out) < turns:
            obs, _, terminated, truncated, _ = env.step("ACTION: " + rng.choice(actions))
            if terminated or truncated:
                obs, _ = env.reset()
            out.append((obs.long_term, obs.short_term))
        return "envs.make('crafter/default')", env.instruction, out
    except Exception as exc:  # the Crafter env is written in parallel; fall back to synthetic texts
        rng = random.Random(0)
        from verlog.models.tiny_model import DEFAULT_CORPUS

        instruction = "\n".join(DEFAULT_CORPUS[16:20] * 6)
        return (
            f"synthetic Crafter-like texts ({type(exc).__name__}: {exc})",
            instruction,
            [crafter_like_observation(rng) for _ in range(turns)],
        )


def bench_memory(turns: int) -> None:
    from verlog.models.tiny_model import DEFAULT_CORPUS, train_tokenizer

    source, instruction, observations = crafter_source(turns)
    rng = random.Random(1)
    corpus = DEFAULT_CORPUS + [instruction] + ["\n".join(crafter_like_observation(rng)) for _ in range(200)]
    tokenizer = train_tokenizer(corpus, vocab_size=2000)
    print(f"\n## Prompt tokens over a {turns}-turn Crafter episode ({source}); tokenizer: BPE, {len(tokenizer)} tokens")

    def response(t: int) -> str:  # a different output every turn, as a model's would be
        return f"THINK: turn {t}: the tree is north-west, so I move north first and then west. ACTION: Move North"

    # the piece cache: emptied before each run so runs do not warm each other
    from verlog.prompting.memory import _ENCODERS

    checkpoints = sorted({0, 1, 2, 10, 50, 100, 200, turns - 1} & set(range(turns)))
    rows = {}
    speeds = {}
    for label, memory in (("memory n=1", SlidingMemory(n=1)), ("full history", SlidingMemory(n=turns))):
        _ENCODERS.clear()
        memory.reset(instruction)
        sizes = []
        build_time = 0.0
        for t, (long_term, short_term) in enumerate(observations):
            memory.observe(long_term, short_term)
            start = time.perf_counter()
            built = memory.build_prompt(tokenizer)
            build_time += time.perf_counter() - start
            sizes.append(built.num_tokens)
            memory.record(response(t), "Move North")
        rows[label] = sizes
        speeds[label] = turns / build_time
    print("| turn | " + " | ".join(rows) + " |")
    print("|---|" + "---|" * len(rows))
    for t in checkpoints:
        print(f"| {t} | " + " | ".join(str(rows[k][t]) for k in rows) + " |")
    for label in rows:
        print(f"{label}: max {max(rows[label])} tokens, {speeds[label]:.0f} prompts built per second (one core)")
    # A budget that holds about two past turns: n = 4 must drop turns on most of the episode.
    limit = max(rows["memory n=1"]) + 100
    budget = SlidingMemory(n=4)
    _ENCODERS.clear()
    budget.reset(instruction)
    kept = []
    start = time.perf_counter()
    for t, (long_term, short_term) in enumerate(observations):
        budget.observe(long_term, short_term)
        built = budget.build_prompt(tokenizer, max_prompt_tokens=limit)
        kept.append(built.turns_kept)
        budget.record(response(t), "Move North")
    rate = turns / (time.perf_counter() - start)
    print(
        f"n=4 with max_prompt_tokens={limit}: {rate:.0f} prompts built per second, "
        f"{sum(kept) / len(kept):.2f} turns kept on average (min {min(kept[4:])} after turn 4)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (B = 256, R = 128, 50 turns)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--loop-slots", type=int, default=4, help="slots timed with the plain loops")
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument(
        "--clock",
        choices=["wall", "cpu"],
        default="wall",
        help="cpu: process CPU time for the GAE part (use --threads 1)",
    )
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.clock == "cpu":
        _CLOCK["now"] = time.process_time
    rows, width, turns = (256, 128, 50) if args.quick else (2048, 512, 400)
    bench_gae(rows, width, 16, args.device, args.repeats, min(args.loop_slots, rows // 16))
    if not args.skip_memory:
        bench_memory(turns)


if __name__ == "__main__":
    main()
