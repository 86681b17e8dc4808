"""What a training row costs, with shared-prefix passes (hardware.prefix_sharing) on and off, side by side.

Two measurements, each on the same rows both ways in one invocation (docs/benchmarks.md, "Row cost"):

- ``passes`` (default; minutes): the five training passes of one rank, in this process, on a real batch of each game
  (rows collected from the env through the sliding memory, verlog.models.tiny_model.collect_turn_rows): old log-probs,
  reference log-probs, critic values (forward only), critic update and actor update (forward and backward). ``off`` is
  verl's per-row path as its FSDP engine runs it without remove-padding (each micro-batch right-padded to its longest
  row, logits, log-softmax and entropy at every position); ``on`` is verlog's engine path (rows ordered by
  order_for_sharing, one packed forward per micro-batch, outputs at the read positions only).
- ``iteration`` (about 4 minutes per run): ``verlog train`` on BabyAI goto with the learning recipe's batch
  (16 slots x 12 turns, memory 1, the 0.4M model, 2 ranks), ``hardware.prefix_sharing`` false then true, verl's own
  per-pass timings (timing_s/*) averaged over the iterations after the first.

    python bench/row_cost.py                       # passes on the three batches
    python bench/row_cost.py --mode iteration      # two short training runs
    python bench/row_cost.py --json out.json       # also write the numbers
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

BATCHES = {
    # name: (env id, slots, turns, memory n)
    "babyai_goto": ("babyai/goto", 16, 12, 1),
    "babaisai": ("babaisai/two_room-goto_win", 64, 5, 0),
    "crafter": ("crafter/default", 16, 10, 1),
}
GOTO_MODEL = {
    "hidden_size": 128,
    "num_layers": 2,
    "num_heads": 2,
    "num_kv_heads": 1,
    "intermediate_size": 256,
    "vocab_size": 1024,
}
"""The learning recipes' model (recipes/cpu/learn_common.sh): 0.4M parameters."""
PASSES = ("old_log_prob", "ref", "values", "update_critic", "update_actor")


# ------------------------------------------------------------------------------------------------ passes
def _models(path: Path) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoModelForTokenClassification

    lm = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32, attn_implementation="sdpa")
    value = AutoModelForTokenClassification.from_pretrained(
        str(path), num_labels=1, dtype=torch.float32, attn_implementation="sdpa"
    )
    value.dropout.p = 0.0
    return lm, value


def _per_row_pass(model: Any, rows: list[tuple[list[int], list[int]]], kind: str, entropy: bool) -> torch.Tensor:
    """verl's FSDP engine path without remove-padding: the micro-batch right-padded to its longest row, outputs at
    every position (logits, log-softmax and entropy for the actor; values for the critic). Returns a scalar to
    back-propagate."""
    from verl.utils.torch_functional import entropy_from_logits, logprobs_from_logits

    lens = [len(p) + len(r) for p, r in rows]
    width = max(lens)
    ids = torch.zeros((len(rows), width), dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (p, r) in enumerate(rows):
        ids[i, : lens[i]] = torch.tensor(p + r)
        mask[i, : lens[i]] = 1
    positions = (mask.cumsum(1) - 1).clamp(min=0)
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=False).logits
    if kind == "value":
        return out[..., 0][mask.bool()].sum()
    total = torch.zeros(())
    if entropy:
        total = total + entropy_from_logits(out)[mask.bool()].sum()
    flat = torch.cat([out[i, : lens[i]] for i in range(len(rows))])
    labels = torch.roll(ids[mask.bool()], -1)
    return total + logprobs_from_logits(flat, labels).sum()


def _shared_pass(model: Any, rows: list[tuple[list[int], list[int]]], kind: str, entropy: bool) -> torch.Tensor:
    """verlog's engine path: one packed forward, outputs at the read positions only."""
    from verl.utils.torch_functional import entropy_from_logits, logprobs_from_logits

    from verlog.trainer.prefix_sharing import find_prefix_groups, pack_rows, scatter_to_rows, shared_forward

    groups = find_prefix_groups([p for p, _ in rows])
    seqs = [torch.tensor(p + r) for p, r in rows]
    layout = pack_rows(seqs, [torch.arange(len(s)) for s in seqs], [len(p) for p, _ in rows], groups)
    read = shared_forward(model, layout, kind)
    if kind == "value":
        return scatter_to_rows(read, layout).sum()
    total = torch.zeros(())
    if entropy:
        total = total + scatter_to_rows(entropy_from_logits(read), layout).sum()
    return total + scatter_to_rows(logprobs_from_logits(read, layout.labels), layout).sum()


def _time_pass(
    fn: Any, model: Any, micro_batches: list[list[tuple[list[int], list[int]]]], kind: str, train: bool, repeats: int
) -> float:
    """Median seconds of one pass over ``micro_batches`` (backward too when ``train``)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for rows in micro_batches:
            if train:
                model.zero_grad(set_to_none=True)
                fn(model, rows, kind, entropy=True).backward()
            else:
                with torch.no_grad():
                    fn(model, rows, kind, entropy=kind == "lm")
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure_passes(batch_name: str, model_path: Path, tokenizer: Any, micro: int, ranks: int, repeats: int) -> dict:
    """One rank's five passes on ``batch_name``'s rows, both ways; seconds per pass."""
    from verlog.models.tiny_model import collect_turn_rows
    from verlog.trainer.prefix_sharing import batch_sharing_stats, order_for_sharing

    env_id, slots, turns, memory_n = BATCHES[batch_name]
    batch = collect_turn_rows(env_id, tokenizer, slots=slots, turns=turns, memory_n=memory_n, seed=7)
    rows = [(r.prompt_ids, r.response_ids) for r in batch.rows]
    share = len(rows) // ranks  # one rank's rows (verl cuts the batch into equal consecutive shares)
    off_rows = rows[:share]  # the rollout's order (verl's balancing reorders by length, not by prefix)
    order = order_for_sharing([p for p, _ in rows], micro, seed=0)
    on_rows = [rows[i] for i in order][:share]
    chunks = {
        "off": [off_rows[k : k + micro] for k in range(0, share, micro)],
        "on": [on_rows[k : k + micro] for k in range(0, share, micro)],
    }
    lm, value = _models(model_path)
    out: dict[str, Any] = {"rows": len(rows), "rank_rows": share, "micro_batch_rows": micro}
    out["prompt_tokens_mean"] = statistics.mean(len(p) for p, _ in rows)
    out["response_tokens_mean"] = statistics.mean(len(r) for _, r in rows)
    out["sharing"] = batch_sharing_stats([p for p, _ in on_rows], [len(r) for _, r in on_rows], micro)
    plan = {
        "old_log_prob": (lm, "lm", False),
        "ref": (lm, "lm", False),
        "values": (value, "value", False),
        "update_critic": (value, "value", True),
        "update_actor": (lm, "lm", True),
    }
    for mode, fn in (("off", _per_row_pass), ("on", _shared_pass)):
        seconds = {}
        for name, (model, kind, train) in plan.items():
            model.train(train)
            seconds[name] = _time_pass(fn, model, chunks[mode], kind, train, repeats)
        seconds["five_passes"] = sum(seconds[p] for p in PASSES)
        out[mode] = seconds
    out["speedup"] = {k: out["off"][k] / out["on"][k] for k in out["off"]}
    return out


# ------------------------------------------------------------------------------------------------ iteration
def measure_iteration(model_path: Path, iterations: int, sharing: bool, folder: Path, micro: int) -> dict:
    """``verlog train`` on BabyAI goto with the learning recipe's batch; verl's timings after the first iteration."""
    out_dir = folder / f"sharing_{str(sharing).lower()}"
    args = [
        sys.executable,
        "-m",
        "verlog.train",
        f"output_dir={out_dir}",
        f"model.path={model_path}",
        "env.id=babyai/goto",
        f"iterations={iterations}",
        "rollout.num_slots=16",
        "rollout.turns_per_slot=12",
        "rollout.max_prompt_tokens=448",
        "rollout.max_response_tokens=8",
        "memory.answer_format=action",
        "algorithm.mini_batches=4",
        "algorithm.critic_warmup=0",
        "hardware.n_gpus_per_node=2",
        f"hardware.micro_batch_size_per_gpu={micro}",
        f"hardware.prefix_sharing={str(sharing).lower()}",
        "checkpoint.save_freq=-1",
        "tapes.episodes_per_iteration=0",
        f"hardware.ray.temp_dir={folder / 'ray'}",
    ]
    start = time.time()
    proc = subprocess.run(args, cwd=REPO, capture_output=True, text=True)
    (folder / f"sharing_{str(sharing).lower()}.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise SystemExit(f"verlog train failed (sharing={sharing}); log in {folder}")
    from verlog.run.files import read_jsonl
    from verlog.run.folder import RunFolder

    records = read_jsonl(RunFolder(out_dir).metrics)
    records = [r for r in records if "training/global_step" in r][1:]  # the first iteration starts the engines
    keys = ["timing_s/step", "timing_s/gen", *(f"timing_s/{p}" for p in PASSES)]
    result = {k.removeprefix("timing_s/"): statistics.mean(r.get(k, 0.0) for r in records) for k in keys}
    result["five_passes"] = sum(result[p] for p in PASSES)
    result["iterations_measured"] = len(records)
    result["wall_s"] = time.time() - start
    for key in ("prefix/computed_token_share", "prefix/rows_per_group"):
        values = [r[key] for r in records if key in r]
        if values:
            result[key] = statistics.mean(values)
    return result


def _build_model(folder: Path) -> Path:
    from verlog.models.tiny_model import build_tiny_model

    path = folder / "model"
    if not (path / "config.json").exists():
        build_tiny_model(path, seed=0, **GOTO_MODEL)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=["passes", "iteration"], default="passes")
    parser.add_argument("--batches", nargs="+", choices=sorted(BATCHES), default=list(BATCHES))
    parser.add_argument(
        "--micro", type=int, default=24, help="rows per micro-batch (hardware.micro_batch_size_per_gpu)"
    )
    parser.add_argument(
        "--off-micro", type=int, default=None, help="micro-batch rows of the off side (default --micro)"
    )
    parser.add_argument("--ranks", type=int, default=2, help="the batch is cut into this many ranks' shares")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=6, help="--mode iteration: PPO iterations per run")
    parser.add_argument("--folder", type=Path, default=None, help="work folder (default: a temporary one)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args(argv)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    folder = args.folder or Path(tempfile.mkdtemp(prefix="row_cost_"))
    folder.mkdir(parents=True, exist_ok=True)
    model_path = _build_model(folder)
    results: dict[str, Any] = {"mode": args.mode, "torch_threads": torch.get_num_threads()}
    if args.mode == "passes":
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(model_path))
        for name in args.batches:
            print(f"[row_cost] {name}: collecting rows and timing the five passes both ways", flush=True)
            r = measure_passes(name, model_path, tokenizer, args.micro, args.ranks, args.repeats)
            results[name] = r
            line = ", ".join(f"{p} {r['off'][p]:.2f}->{r['on'][p]:.2f} s" for p in (*PASSES, "five_passes"))
            print(f"[row_cost] {name}: {line}; five passes {r['speedup']['five_passes']:.2f}x", flush=True)
    else:
        off_micro = args.off_micro or args.micro
        for sharing, micro in ((False, off_micro), (True, args.micro)):
            print(f"[row_cost] verlog train, hardware.prefix_sharing={sharing}, micro {micro}", flush=True)
            r = measure_iteration(model_path, args.iterations, sharing, folder, micro)
            results[f"sharing_{str(sharing).lower()}"] = r
            print(f"[row_cost]   {json.dumps({k: round(v, 3) for k, v in r.items()})}", flush=True)
        off, on = results["sharing_false"], results["sharing_true"]
        results["speedup"] = {k: off[k] / on[k] for k in ("step", "five_passes", *PASSES) if on.get(k)}
        print(f"[row_cost] speed-up: {json.dumps({k: round(v, 2) for k, v in results['speedup'].items()})}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
        print(f"[row_cost] wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
