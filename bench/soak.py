"""Soak benchmark of the training rollout with faulty envs, and the cost of env isolation (not a test). Results go to
docs/benchmarks.md, "Soak" and "Env isolation".

    nice -n 19 .venv/bin/python bench/soak.py                        # 1,000 iterations on BabyAI, BabaIsAI, Crafter
    .venv/bin/python bench/soak.py --quick                           # about a minute (tests/bench/test_soak.py)
    .venv/bin/python bench/soak.py --iterations 300 --out DIR        # other sizes; --json FILE for the numbers
    nice -n 19 .venv/bin/python bench/soak.py --isolation-cost       # in-process against workers, 16 x 12 turns

Soak: every iteration runs, for each game, what a training iteration runs outside verl, through the library's own
iteration function (``verlog.rollout.iteration.run_iteration``, whose pieces the trainer's seams call):
``RolloutManager.collect`` over an ``envs.pool.EnvPool`` with 2 subprocess workers (the sliding memory builds every
prompt with a real tokenizer), ``TurnBatch.to_tensors``, the ``dual_gae`` estimator of verlog/algorithms/estimators.py
(``dual_discount_gae``, whitening, its metrics; the non-finite checks) on made-up critic values, ``TrainingTapes``
(``tapes/train.jsonl``) and the JSON-lines logs (``metrics.jsonl``, ``rollout.jsonl``). No model: a scripted
generator answers each request at once with a valid action of the game, and no PPO update runs. The games are the
training configs' env sections (configs/env/babyai.yaml, babaisai.yaml, crafter.yaml), each wrapped in
:class:`FaultyEnv`, which at a low, seeded rate raises, kills its worker (``os._exit``) or hangs past the pool's
``step_timeout``; only the slots of the first worker get faults, so the second worker lives through the whole soak
and shows a long-lived worker's memory.

Checked and reported: resident memory (RSS) of the main process and of the workers every ``--report-every``
iterations and its growth from ``--warmup`` to the end (before that the main process's RSS rises by about 8% while
the tokenizer's and verlog/prompting/memory.py's prompt-piece caches fill, both bounded), open file descriptors, child
processes left after the pools close, rows lost (a batch with fewer than slots x turns rows, or a slot whose turns
skip or repeat across iterations), faults injected (each worker appends a line to ``faults.jsonl`` before it
misbehaves) and recovered (the faulted turn's row carries ``env_error`` and its slot goes on with a fresh episode),
episodes cut without an injected fault (should be none), and the log lines written. The process exits with 1 when
a check fails.

Isolation cost: for each game, a rollout iteration of 16 slots x 12 turns with the scripted generator, the pool
in-process against subprocess workers (``num_workers`` null, the training default: one per CPU), in interleaved
rounds, and each pool's start-up (construction and the first reset).

This file is imported by every spawned env worker (multiprocessing's spawn runs the parent's main module), which
needs only :class:`FaultyEnv`: verlog, torch and psutil are imported inside the functions that use them.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import random
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import envs
from verlog.run.folder import RunFolder

REPO = Path(__file__).resolve().parents[1]
GAMES = ("babyai", "babaisai", "crafter")
"""The training env configs (configs/env/<name>.yaml) the soak and the cost measurement run."""
FAULT_KINDS = ("raise", "exit", "hang")
QUICK = {
    "iterations": 40,
    "warmup": 10,
    "report_every": 10,
    "raise_rate": 0.03,
    "exit_rate": 0.005,
    "hang_rate": 0.005,
    "step_timeout": 2.0,
    "max_growth": 10.0,
    "rounds": 2,
}
"""``--quick``'s defaults: about a minute; fault rates high enough that every kind happens. Its 30 measured
iterations fall while the prompt caches still fill (the full soak's main process grew 8% in its first 100
iterations, about 0.3 MiB per iteration), hence the 10% bound; keeping each iteration's rows and tensors would add
about 3.5 MiB per iteration (25% in 30 iterations)."""


# ------------------------------------------------------------------------------------------------- faulty env
class InjectedFault(RuntimeError):
    """The exception :class:`FaultyEnv` raises on purpose."""


def fault_at(salt: str, seed: int | None, turn: int, rates: dict[str, float]) -> str | None:
    """The fault (a :data:`FAULT_KINDS` entry) injected at ``turn`` (0-based step index) of the episode reset with
    ``seed``, or None. A pure function of its arguments: replaying an episode after a worker restart meets no fault
    on the steps that went through the first time."""
    digest = hashlib.blake2b(f"{salt}:{seed}:{turn}".encode(), digest_size=8).digest()
    u = int.from_bytes(digest, "little") / 2**64
    for kind in FAULT_KINDS:
        rate = float(rates.get(kind, 0.0))
        if u < rate:
            return kind
        u -= rate
    return None


class FaultyEnv:
    """A text env (``envs.make(inner, **inner_kwargs)``) whose ``step`` misbehaves at seeded turns.

    Args:
        inner, inner_kwargs: the wrapped env.
        rates: probability per step of each fault: ``raise`` (InjectedFault), ``exit`` (``os._exit(3)``: the worker
            dies), ``hang`` (sleeps until the pool kills the worker after its ``step_timeout``).
        fault_log: a JSON-lines file each fault is appended to (one ``write``) before it happens; None: no log.
        salt: mixes the fault positions (one per game).
    """

    def __init__(
        self,
        inner: str,
        inner_kwargs: dict[str, Any] | None = None,
        rates: dict[str, float] | None = None,
        fault_log: str | None = None,
        salt: str = "",
    ) -> None:
        self.env = envs.make(inner, **(inner_kwargs or {}))
        self.rates = dict(rates or {})
        self.fault_log = fault_log
        self.salt = salt or inner
        self.seed: int | None = None
        self.turn = 0

    def __getattr__(self, name: str) -> Any:  # instruction, actions, max_steps, get_state, ... of the wrapped env
        if name == "env":
            raise AttributeError(name)
        return getattr(self.env, name)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        self.seed, self.turn = seed, 0
        return self.env.reset(seed=seed, options=options)

    def step(self, action: str) -> Any:
        kind = fault_at(self.salt, self.seed, self.turn, self.rates)
        if kind is not None:
            self._log(kind)
            if kind == "raise":
                raise InjectedFault(f"injected fault at turn {self.turn} of seed {self.seed}")
            if kind == "exit":
                os._exit(3)
            while True:  # hang: the pool kills this worker after step_timeout
                time.sleep(1.0)
        self.turn += 1
        return self.env.step(action)

    def close(self) -> None:
        self.env.close()

    def _log(self, kind: str) -> None:
        if self.fault_log is None:
            return
        line = json.dumps({"kind": kind, "salt": self.salt, "seed": self.seed, "turn": self.turn, "pid": os.getpid()})
        fd = os.open(self.fault_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (line + "\n").encode())
        finally:
            os.close(fd)


# ------------------------------------------------------------------------------------------------- policy
class ValidActionGenerator:
    """Stands in for vLLM: answers every request at once with ``THINK: ... ACTION: <a valid action>`` (the action
    drawn with a seeded generator), the end-of-turn token and made-up log-probabilities."""

    def __init__(self, tokenizer: Any, actions: list[str], seed: int = 0) -> None:
        self.rng = random.Random(seed)
        self.answers = []
        for action in actions:
            text = f"THINK: I try {action} and look at what changes.\nACTION: {action}"
            ids = [*tokenizer.encode(text, add_special_tokens=False), tokenizer.eos_token_id]
            self.answers.append(ids)

    def generate(self, requests: list[Any], sampling: Any) -> list[Any]:
        from verlog.rollout.generator import Generation

        out = []
        for _ in requests:
            ids = self.rng.choice(self.answers)
            out.append(Generation(token_ids=list(ids), log_probs=[-0.5] * len(ids)))
        return out


# ------------------------------------------------------------------------------------------------- set-up
def game_config(name: str) -> tuple[str, dict[str, Any]]:
    """``(env id, env kwargs)`` of the training config configs/env/<name>.yaml (its default task)."""
    from omegaconf import OmegaConf

    section = OmegaConf.to_container(OmegaConf.load(REPO / "configs" / "env" / f"{name}.yaml"), resolve=True)
    return str(section["id"]), dict(section.get("kwargs") or {})


def build_tokenizer(games: tuple[str, ...] = GAMES) -> Any:
    """A byte-level BPE tokenizer with a chat template, trained on the games' text (verlog.models.tiny_model; no
    download)."""
    from verlog.models.tiny_model import DEFAULT_CORPUS, env_corpus, train_tokenizer

    corpus = list(DEFAULT_CORPUS)
    for name in games:
        env_id, _ = game_config(name)
        corpus += env_corpus(env_id, episodes=3, steps=30)
    return train_tokenizer(corpus, vocab_size=2000)


def game_actions(env_id: str, kwargs: dict[str, Any]) -> list[str]:
    env = envs.make(env_id, **kwargs)
    try:
        env.reset(seed=0)
        return list(env.actions)
    finally:
        env.close()


def make_manager(
    pool: Any, tokenizer: Any, actions: list[str], *, seed: int, run_id: str, max_prompt_tokens: int
) -> Any:
    """The training rollout on ``pool`` with the training defaults (memory n=1, sampling, one generation retry)."""
    from verlog.prompting.memory import MemoryConfig, SlidingMemory
    from verlog.prompting.sampling import SamplingConfig
    from verlog.rollout.manager import RolloutManager

    return RolloutManager(
        pool,
        tokenizer,
        ValidActionGenerator(tokenizer, actions, seed=seed),
        SamplingConfig(max_tokens=64),
        max_prompt_tokens=max_prompt_tokens,
        memory_factory=lambda: SlidingMemory.from_config(MemoryConfig()),
        seed=seed,
        run_id=run_id,
        generation_retries=1,
    )


# ------------------------------------------------------------------------------------------------- one iteration
class RowLedger:
    """Checks that every slot's turns follow on across batches: the same episode's next turn, or after an episode
    ended, the first turn of a new one. Counts the rows that break that (lost, repeated or out of order)."""

    def __init__(self) -> None:
        self.last: dict[int, tuple[str, int, bool]] = {}
        self.rows = 0
        self.breaks = 0

    def add(self, rows: list[Any]) -> None:
        for row in rows:
            self.rows += 1
            previous = self.last.get(row.slot)
            if previous is not None:
                episode, turn, ended = previous
                ok = (
                    (row.turn_index == 0 and row.episode_id != episode)
                    if ended
                    else (row.episode_id == episode and row.turn_index == turn + 1)
                )
                self.breaks += not ok
            self.last[row.slot] = (row.episode_id, row.turn_index, row.terminated or row.truncated)


def made_up_values(batch: Any, tensors: Any, step: int) -> tuple[Any, Any]:
    """The soak's critic (no model): ``[B, R]`` uniform values on the response tokens (seeded by ``step``) and 0.5 as
    ``V(s_{t+1})`` of every row whose episode goes on past the batch."""
    import torch

    mask = tensors["response_mask"]
    values = torch.rand(mask.shape, generator=torch.Generator().manual_seed(step)) * mask
    next_values = torch.tensor([0.5 if r.bootstrap_prompt_ids is not None else 0.0 for r in batch.rows])
    return values, next_values


class SoakGame:
    """One game of the soak: its faulty pool, its rollout and everything a training iteration does with the rows."""

    def __init__(self, name: str, folder: Path, tokenizer: Any, args: argparse.Namespace, rates: dict) -> None:
        from envs.pool import EnvPool
        from verlog.tapes.recorders import TapesConfig, TrainingTapes

        self.name = name
        self.folder = folder / name
        self.folder.mkdir(parents=True, exist_ok=True)
        self.fault_log = (self.folder / "faults.jsonl").resolve()  # the workers append to it
        env_id, kwargs = game_config(name)
        self.env_id = env_id
        self.salt = f"{name}:{args.seed}"
        n = args.slots
        faulty = n // 2  # worker 0 holds slots 0 .. n/2 - 1: those get faults; worker 1 runs clean
        self.faulty_slots = set(range(faulty))
        self.rates = rates
        slot_kwargs = [
            {
                "inner": env_id,
                "inner_kwargs": kwargs,
                "rates": rates if i in self.faulty_slots else {},
                "fault_log": str(self.fault_log),
                "salt": self.salt,
            }
            for i in range(n)
        ]
        self.pool = EnvPool(
            FaultyEnv, num_envs=n, num_workers=2, env_kwargs=slot_kwargs, step_timeout=args.step_timeout, seed=args.seed
        )
        self.manager = make_manager(
            self.pool,
            tokenizer,
            game_actions(env_id, kwargs),
            seed=args.seed,
            run_id=f"soak-{name}",
            max_prompt_tokens=args.max_prompt_tokens,
        )
        self.tapes = TrainingTapes(
            self.folder, TapesConfig(episodes_per_iteration=1), tokenizer, env_id=env_id, seed=args.seed
        )
        self.turns = args.turns
        self.max_prompt_tokens = args.max_prompt_tokens
        self.max_response_tokens = args.max_response_tokens
        self.ledger = RowLedger()
        self.short_batches = 0
        self.nonfinite = 0
        self.recovered: Counter[str] = Counter()
        self.recovered_keys: set[tuple[int | None, int]] = set()
        self.unexpected_errors: list[str] = []
        self.missed_faults = 0  # a turn where a fault was due but the row shows none
        self.log_rows = 0

    def iteration(self, step: int) -> None:
        """One training iteration without the model (:func:`verlog.rollout.iteration.run_iteration`: rollout, rows ->
        tensors, ``dual_gae`` advantages on made-up critic values, tapes, logs), then the soak's checks of its rows."""
        from verlog.config.schema import AlgorithmConfig
        from verlog.errors import VerlogError
        from verlog.rollout.iteration import run_iteration

        try:
            done = run_iteration(
                self.manager,
                self.turns,
                step,
                algorithm=AlgorithmConfig(estimator="dual_gae"),
                env_id=self.env_id,
                max_prompt_tokens=self.max_prompt_tokens,
                max_response_tokens=self.max_response_tokens,
                output_dir=self.folder,
                critic=made_up_values,
                tapes=self.tapes,
            )
        except VerlogError as exc:  # a non-finite reward or advantage: the rows of this iteration are lost
            self.nonfinite += 1
            print(f"{self.name} iteration {step}: {exc}", flush=True)
            return
        rows = done.record.batch.rows
        self.short_batches += len(rows) != self.manager.num_slots * self.turns
        self.ledger.add(rows)
        self._check_faults(rows)
        self.log_rows += len(rows)

    def _check_faults(self, rows: list[Any]) -> None:
        """Count the rows that carry an injected fault's error (recovered), and errors no fault explains."""
        for row in rows:
            due = fault_at(self.salt, row.seed, row.turn_index, self.rates) if row.slot in self.faulty_slots else None
            if row.env_error is None:
                self.missed_faults += due is not None
                continue
            if due is None:
                self.unexpected_errors.append(f"slot {row.slot} turn {row.turn_index}: {row.env_error[-300:]}")
                continue
            self.recovered[due] += 1
            self.recovered_keys.add((row.seed, row.turn_index))

    def injected(self) -> Counter[str]:
        """Faults by kind from the workers' log (a fault logged twice, by a worker that died before replying and by
        the rebuilt one that redid the step, counts once)."""
        seen: dict[tuple[int | None, int], str] = {}
        if self.fault_log.exists():
            for line in self.fault_log.read_text().splitlines():
                record = json.loads(line)
                seen[(record["seed"], record["turn"])] = record["kind"]
        self.injected_keys = set(seen)
        return Counter(seen.values())

    def worker_pids(self) -> list[int]:
        return [pid for pid in self.pool.worker_pids() if pid is not None]

    def close(self) -> None:
        self.pool.close()


# ------------------------------------------------------------------------------------------------- measuring
def rss_mib(pid: int) -> float | None:
    import psutil

    try:
        return psutil.Process(pid).memory_info().rss / 2**20
    except psutil.Error:
        return None


def snapshot(games: list[SoakGame], iteration: int) -> dict[str, Any]:
    """RSS of the main process and of every worker (pid -> MiB), open file descriptors, child processes."""
    import psutil

    gc.collect()
    main = psutil.Process()
    workers = {str(pid): rss_mib(pid) for game in games for pid in game.worker_pids()}
    return {
        "iteration": iteration,
        "main_rss_mib": main.memory_info().rss / 2**20,
        "workers_rss_mib": workers,
        "open_fds": main.num_fds(),
        "children": len(main.children(recursive=True)),
        "worker_restarts": sum(g.pool.stats["worker_restarts"] for g in games),
    }


def env_workers_left() -> tuple[list[int], list[int]]:
    """Child processes of this process: ``(env workers and others, multiprocessing's resource tracker)``. The
    tracker is started by the first spawned process and ends with the interpreter; it holds no env."""
    import psutil

    others, trackers = [], []
    for child in psutil.Process().children(recursive=True):
        try:
            cmdline = " ".join(child.cmdline())
        except psutil.Error:
            continue
        (trackers if "resource_tracker" in cmdline else others).append(child.pid)
    return others, trackers


def growth(before: float | None, after: float | None) -> float | None:
    if not before or after is None:
        return None
    return 100.0 * (after - before) / before


def run_soak(args: argparse.Namespace) -> dict[str, Any]:
    """The soak; returns its figures (see the module docstring)."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name in GAMES:  # a fresh soak: old logs would count twice
        run = RunFolder(out / name)
        for file in (run.root / "faults.jsonl", run.metrics, run.rollout_log, run.train_tapes):
            file.unlink(missing_ok=True)
    rates = {"raise": args.raise_rate, "exit": args.exit_rate, "hang": args.hang_rate}
    started = time.perf_counter()
    tokenizer = build_tokenizer()
    games = [SoakGame(name, out, tokenizer, args, rates) for name in GAMES]
    snapshots: list[dict[str, Any]] = [snapshot(games, 0)]
    print(f"soak: {args.iterations} iterations of {args.slots} slots x {args.turns} turns on {', '.join(GAMES)}")
    try:
        for step in range(1, args.iterations + 1):
            for game in games:
                game.iteration(step)
            if step == args.warmup or step == args.iterations or step % args.report_every == 0:
                snap = snapshot(games, step)
                snapshots.append(snap)
                print(
                    f"  iteration {step}: main {snap['main_rss_mib']:.0f} MiB, workers "
                    f"{sum(v or 0 for v in snap['workers_rss_mib'].values()):.0f} MiB, {snap['open_fds']} fds, "
                    f"{snap['worker_restarts']} restarts, {time.perf_counter() - started:.0f} s",
                    flush=True,
                )
    finally:
        for game in games:
            game.close()
    left, trackers = env_workers_left()
    elapsed = time.perf_counter() - started
    return summarize(args, games, snapshots, left, trackers, elapsed)


def summarize(
    args: argparse.Namespace,
    games: list[SoakGame],
    snapshots: list[dict[str, Any]],
    left: list[int],
    trackers: list[int],
    elapsed: float,
) -> dict[str, Any]:
    from verlog.run.files import read_jsonl

    warm = next(s for s in snapshots if s["iteration"] == args.warmup)
    end = snapshots[-1]
    lived = [pid for pid in warm["workers_rss_mib"] if pid in end["workers_rss_mib"]]  # never restarted
    per_game = {}
    for game in games:
        injected = game.injected()
        run = RunFolder(game.folder)
        metrics_lines = len(read_jsonl(run.metrics))
        rollout_rows = sum(r["rows"] for r in read_jsonl(run.rollout_log))
        tape_lines = len(read_jsonl(run.train_tapes))
        per_game[game.name] = {
            "env_id": game.env_id,
            "rows": game.ledger.rows,
            "rows_expected": args.iterations * args.slots * args.turns,
            "rows_lost": (args.iterations * args.slots * args.turns - game.ledger.rows) + game.ledger.breaks,
            "short_batches": game.short_batches,
            "slot_breaks": game.ledger.breaks,
            "nonfinite_advantages": game.nonfinite,
            "faults_injected": {k: injected.get(k, 0) for k in FAULT_KINDS},
            "faults_recovered": {k: game.recovered.get(k, 0) for k in FAULT_KINDS},
            "faults_unrecovered": len(game.injected_keys - game.recovered_keys),
            "faults_due_not_seen": game.missed_faults,
            "unexpected_env_errors": len(game.unexpected_errors),
            "unexpected_examples": game.unexpected_errors[:3],
            "worker_restarts": game.pool.stats["worker_restarts"],
            "env_errors": game.pool.stats["env_errors"],
            "log_lines": {"metrics.jsonl": metrics_lines, "rollout.jsonl rows": rollout_rows, "tape turns": tape_lines},
            "tape_turns_written": game.tapes.turns_written,
        }
    lived_before = sum(warm["workers_rss_mib"][pid] or 0 for pid in lived)
    lived_after = sum(end["workers_rss_mib"][pid] or 0 for pid in lived)
    result = {
        "settings": {
            "iterations": args.iterations,
            "warmup": args.warmup,
            "slots": args.slots,
            "turns": args.turns,
            "workers_per_game": 2,
            "step_timeout": args.step_timeout,
            "rates": {"raise": args.raise_rate, "exit": args.exit_rate, "hang": args.hang_rate},
            "seed": args.seed,
            "max_prompt_tokens": args.max_prompt_tokens,
            "max_response_tokens": args.max_response_tokens,
            "max_growth": args.max_growth,
        },
        "elapsed_s": elapsed,
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg()[0],
        "memory": {
            "main_rss_mib": [warm["main_rss_mib"], end["main_rss_mib"]],
            "main_growth_pct": growth(warm["main_rss_mib"], end["main_rss_mib"]),
            "long_lived_pids": lived,
            "long_lived_workers_rss_mib": [lived_before, lived_after],
            "long_lived_workers_growth_pct": growth(lived_before, lived_after),
            "open_fds": [warm["open_fds"], end["open_fds"]],
        },
        "snapshots": snapshots,
        "children_left": len(left),
        "resource_trackers": len(trackers),
        "games": per_game,
    }
    result["problems"] = problems(result, args.max_growth)
    return result


def problems(result: dict[str, Any], max_growth: float) -> list[str]:
    """What the soak found wrong (empty: every check passed)."""
    found = []
    for name, g in result["games"].items():
        if g["rows_lost"]:
            found.append(f"{name}: {g['rows_lost']} rows lost or out of order")
        if g["nonfinite_advantages"]:
            found.append(f"{name}: non-finite advantages in {g['nonfinite_advantages']} iterations")
        if g["faults_unrecovered"] or g["faults_due_not_seen"]:
            found.append(f"{name}: {g['faults_unrecovered']} injected faults without a recovered row")
        if g["faults_injected"] != g["faults_recovered"]:
            found.append(f"{name}: injected {g['faults_injected']}, recovered {g['faults_recovered']}")
        if g["unexpected_env_errors"]:
            found.append(f"{name}: {g['unexpected_env_errors']} episodes cut without an injected fault")
        expected = result["settings"]["iterations"]
        lines = g["log_lines"]
        if lines["metrics.jsonl"] != expected or lines["rollout.jsonl rows"] != g["rows_expected"]:
            found.append(f"{name}: log lines {lines}, expected {expected} iterations and {g['rows_expected']} rows")
        if lines["tape turns"] != g["tape_turns_written"]:
            found.append(f"{name}: {lines['tape turns']} tape lines for {g['tape_turns_written']} turns written")
    memory = result["memory"]
    for key in ("main_growth_pct", "long_lived_workers_growth_pct"):
        value = memory[key]
        if value is None or value > max_growth:
            found.append(f"memory: {key} = {value} (bound {max_growth}%)")
    fds = memory["open_fds"]
    if fds[1] > fds[0]:
        found.append(f"open file descriptors grew from {fds[0]} to {fds[1]}")
    if result["children_left"]:
        found.append(f"{result['children_left']} child processes left after the pools closed")
    return found


def soak_markdown(result: dict[str, Any]) -> str:
    s, m = result["settings"], result["memory"]
    lived = set(m["long_lived_pids"])
    lines = [
        f"Soak: {s['iterations']} iterations x {len(result['games'])} games, {s['slots']} slots x {s['turns']} turns, "
        f"2 workers per game, faults per step of the first worker's slots: raise {s['rates']['raise']}, exit "
        f"{s['rates']['exit']}, hang {s['rates']['hang']} (step_timeout {s['step_timeout']} s); "
        f"{result['elapsed_s']:.0f} s, {result['cpus']} CPUs, load average {result['load_average']:.1f} at the end.",
        "",
        f"| iteration | main RSS MiB | RSS of the {len(lived)} workers alive from {s['warmup']} to the end, MiB "
        "| RSS of one worker, min-max MiB | open fds (main) | worker restarts so far |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for snap in result["snapshots"]:
        workers = snap["workers_rss_mib"]
        lived_now = [workers[pid] for pid in lived if workers.get(pid)]
        lived_text = f"{sum(lived_now):.1f}" if len(lived_now) == len(lived) else "-"
        values = [v for v in workers.values() if v]
        lines.append(
            f"| {snap['iteration']} | {snap['main_rss_mib']:.1f} | {lived_text} | "
            f"{min(values, default=0):.0f}-{max(values, default=0):.0f} | {snap['open_fds']} | "
            f"{snap['worker_restarts']} |"
        )
    lines += [
        "",
        f"Growth from iteration {s['warmup']} (warm-up) to {s['iterations']}: main process "
        f"{_pct(m['main_growth_pct'])}, long-lived workers {_pct(m['long_lived_workers_growth_pct'])} (bound "
        f"{s['max_growth']}%).",
        "",
        "| game | rows | rows lost | faults injected (raise/exit/hang) | recovered | cut without a fault | worker "
        "restarts | log lines (metrics, rollout rows, tape turns) |",
        "|---|---:|---:|---|---|---:|---:|---|",
    ]
    for g in result["games"].values():
        inj, rec, logs = g["faults_injected"], g["faults_recovered"], g["log_lines"]
        lines.append(
            f"| {g['env_id']} | {g['rows']:,} | {g['rows_lost']} | {'/'.join(str(inj[k]) for k in FAULT_KINDS)} | "
            f"{'/'.join(str(rec[k]) for k in FAULT_KINDS)} | {g['unexpected_env_errors']} | {g['worker_restarts']} | "
            f"{logs['metrics.jsonl']:,}, {logs['rollout.jsonl rows']:,}, {logs['tape turns']:,} |"
        )
    lines += [
        "",
        f"Child processes left after the pools closed: {result['children_left']} (multiprocessing's resource tracker, "
        f"which ends with the interpreter: {result['resource_trackers']}).",
        "Problems: " + ("; ".join(result["problems"]) if result["problems"] else "none"),
    ]
    return "\n".join(lines)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1f}%"


# ------------------------------------------------------------------------------------------------- isolation cost
def run_isolation_cost(args: argparse.Namespace) -> dict[str, Any]:
    """Rollout iterations (``slots x turns``, scripted generator) with the pool in-process and with subprocess
    workers, side by side in interleaved rounds; and each pool's start-up. Wall time is what an iteration takes on
    this machine now; CPU time (the main process's plus the workers') does not depend on the other jobs as much."""
    from verlog.rollout.manager import make_env_pool

    tokenizer = build_tokenizer()
    result: dict[str, Any] = {
        "settings": {"slots": args.cost_slots, "turns": args.cost_turns, "rounds": args.rounds},
        "cpus": os.cpu_count(),
        "load_average_before": os.getloadavg()[0],
        "games": {},
    }
    print(f"isolation cost: {args.cost_slots} slots x {args.cost_turns} turns, {args.rounds} rounds, load "
          f"{os.getloadavg()[0]:.1f}")  # fmt: skip
    for name in GAMES:
        env_id, kwargs = game_config(name)
        actions = game_actions(env_id, kwargs)
        managers: dict[str, Any] = {}
        startup: dict[str, float] = {}
        for mode, in_process in (("in-process", True), ("workers", False)):
            start = time.perf_counter()
            pool = make_env_pool(env_id, args.cost_slots, env_kwargs=kwargs, in_process=in_process, seed=args.seed)
            manager = make_manager(
                pool, tokenizer, actions, seed=args.seed, run_id=mode, max_prompt_tokens=args.max_prompt_tokens
            )
            manager.start()
            startup[mode] = time.perf_counter() - start
            managers[mode] = manager
        rounds: dict[str, list[dict[str, float]]] = {mode: [] for mode in managers}
        try:
            for manager in managers.values():  # warm-up (prompt caches, first episodes)
                manager.collect(args.cost_turns)
            for _ in range(args.rounds):
                for mode, manager in managers.items():
                    rounds[mode].append(timed_collect(manager, args.cost_turns))
        finally:
            workers = managers["workers"].pool.num_workers
            for manager in managers.values():
                manager.pool.close()
        # wall times: medians; CPU times (counted in 10 ms ticks): means over the rounds
        summary = {
            mode: {k: (statistics.fmean if "cpu" in k else statistics.median)([r[k] for r in runs]) for k in runs[0]}
            for mode, runs in rounds.items()
        }
        paired = list(zip(rounds["workers"], rounds["in-process"]))
        result["games"][name] = {
            "env_id": env_id,
            "workers": workers,
            "summary": summary,
            "extra_wall_s": statistics.median(w["wall_s"] - p["wall_s"] for w, p in paired),
            "extra_cpu_s": summary["workers"]["cpu_s"] - summary["in-process"]["cpu_s"],
            "startup_s": startup,
            "rounds": rounds,
        }
        g = result["games"][name]
        print(
            f"  {env_id}: in-process {summary['in-process']['wall_s']:.3f} s, {workers} workers "
            f"{summary['workers']['wall_s']:.3f} s per iteration ({g['extra_wall_s']:+.3f} s wall, "
            f"{g['extra_cpu_s']:+.3f} s CPU); start-up {startup['in-process']:.2f} s / {startup['workers']:.2f} s",
            flush=True,
        )
    result["load_average_after"] = os.getloadavg()[0]
    return result


def timed_collect(manager: Any, turns: int) -> dict[str, float]:
    """One ``collect``: wall seconds, seconds in ``pool.step``, CPU seconds of this process and of the workers."""
    import psutil

    def cpu(process: psutil.Process) -> float:
        times = process.cpu_times()
        return times.user + times.system

    main = psutil.Process()
    workers = [psutil.Process(pid) for pid in manager.pool.worker_pids() if pid is not None]
    main_before, workers_before = cpu(main), sum(cpu(w) for w in workers)
    start = time.perf_counter()
    batch = manager.collect(turns)
    wall = time.perf_counter() - start
    main_s = cpu(main) - main_before
    workers_s = sum(cpu(w) for w in workers) - workers_before
    return {
        "wall_s": wall,
        "env_step_s": batch.timing["timing_s/rollout_env"],
        "cpu_s": main_s + workers_s,
        "main_cpu_s": main_s,
        "workers_cpu_s": workers_s,
    }


def cost_markdown(result: dict[str, Any]) -> str:
    s = result["settings"]
    lines = [
        f"Isolation cost: {s['slots']} slots x {s['turns']} turns per iteration, scripted generator, "
        f"{s['rounds']} interleaved rounds (wall: median, CPU: mean); {result['cpus']} CPUs, load average "
        f"{result['load_average_before']:.1f} before, {result['load_average_after']:.1f} after.",
        "",
        "| game | mode | wall s/iteration | in pool.step | CPU s/iteration (main + workers) | start-up s |",
        "|---|---|---:|---:|---|---:|",
    ]
    for g in result["games"].values():
        for mode, m in g["summary"].items():
            label = f"{g['workers']} workers" if mode == "workers" else mode
            lines.append(
                f"| {g['env_id']} | {label} | {m['wall_s']:.3f} | {m['env_step_s']:.3f} | {m['cpu_s']:.3f} "
                f"({m['main_cpu_s']:.3f} + {m['workers_cpu_s']:.3f}) | {g['startup_s'][mode]:.2f} |"
            )
        lines.append(
            f"| | workers - in-process | {g['extra_wall_s']:+.3f} (paired by round) | | {g['extra_cpu_s']:+.3f} | |"
        )
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------- main
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="about a minute: fewer iterations, higher fault rates")
    parser.add_argument("--isolation-cost", action="store_true", help="measure in-process against workers instead")
    parser.add_argument("--out", default="outputs/soak", help="folder of the soak's logs, tapes and fault logs")
    parser.add_argument("--json", default=None, help="write the figures here (default: <out>/soak.json)")
    parser.add_argument("--iterations", type=int, default=1000)
    parser.add_argument(
        "--warmup", type=int, default=100, help="memory growth is measured from this iteration (caches filled)"
    )
    parser.add_argument("--report-every", type=int, default=100)
    parser.add_argument("--slots", type=int, default=4, help="env slots per game (half of them get faults)")
    parser.add_argument("--turns", type=int, default=4, help="turns per slot and iteration")
    parser.add_argument("--raise-rate", type=float, default=0.002, help="per step of a faulty slot")
    parser.add_argument("--exit-rate", type=float, default=0.0005)
    parser.add_argument("--hang-rate", type=float, default=0.0005)
    parser.add_argument("--step-timeout", type=float, default=3.0, help="the pool's hang detection, seconds")
    parser.add_argument("--max-growth", type=float, default=5.0, help="RSS growth after warm-up allowed, percent")
    parser.add_argument("--max-prompt-tokens", type=int, default=2048)
    parser.add_argument("--max-response-tokens", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cost-slots", type=int, default=16)
    parser.add_argument("--cost-turns", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=20, help="timed rounds per mode (--isolation-cost)")
    if parser.parse_known_args(argv)[0].quick:
        parser.set_defaults(**QUICK)
    args = parser.parse_args(argv)
    if not 1 <= args.warmup <= args.iterations:
        parser.error(f"--warmup must lie in 1 .. --iterations ({args.iterations}), got {args.warmup}")
    if args.slots < 2:
        parser.error(f"--slots must be >= 2 (one clean worker, one with faults), got {args.slots}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.isolation_cost:
        result = run_isolation_cost(args)
        text = cost_markdown(result)
        default_json = Path(args.out) / "isolation_cost.json"
        failed = False
    else:
        result = run_soak(args)
        text = soak_markdown(result)
        default_json = Path(args.out) / "soak.json"
        failed = bool(result["problems"])
    print()
    print(text)
    path = Path(args.json) if args.json else default_json
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nfigures: {path}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
