"""One call that runs a whole evaluation into a folder: episodes, per-episode records, turn logs, summary.

``verlog eval`` is a thin wrapper around :func:`evaluate`; scripts (e.g. a before/after comparison) call it directly::

    from verlog.eval import EvalProtocol, evaluate, load_model
    model = load_model("out/ppo/huggingface", engine="vllm", max_model_len=1536)
    summary = evaluate(EvalProtocol(("babyai/goto",), episodes_per_task=200, seed_start=100_000), model,
                       SamplingConfig(temperature=1.0, max_tokens=512), out_dir="out/eval_ppo")
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from verlog.eval.engine import LoadedModel
from verlog.eval.protocol import EvalProtocol, EvalProtocolError
from verlog.eval.report import (
    EPISODES_FILE,
    TURNS_FILE,
    append_episode_record,
    read_episode_records,
    summarize,
    write_summary,
)
from verlog.eval.runner import EpisodeRecord, run_episodes
from verlog.logs import TurnLogWriter, iter_turn_logs
from verlog.memory import MemoryConfig
from verlog.sampling import SamplingConfig


def evaluate(
    protocol: EvalProtocol,
    model: LoadedModel,
    sampling: SamplingConfig,
    out_dir: str | Path,
    *,
    memory: MemoryConfig | None = None,
    max_prompt_tokens: int | None = 1024,
    concurrency: int | None = None,
    log_turns: bool = False,
    resume: bool = False,
    confidence: float = 0.95,
    n_resamples: int = 10_000,
    bootstrap_seed: int = 0,
    on_episode: Callable[[EpisodeRecord], None] | None = None,
    generation_retries: int = 1,
    in_process: bool = True,
    num_workers: int | None = None,
) -> dict[str, Any]:
    """Run ``protocol``'s episodes with ``model`` and write ``episodes.jsonl``, ``summary.json`` (and
    ``turns.jsonl`` with ``log_turns``) into ``out_dir``; returns the summary.

    With ``resume``, episodes already in ``out_dir/episodes.jsonl`` (same env id, index and seed) are not played
    again (BALROG's resume); without it an existing ``episodes.jsonl`` is an error rather than silently mixed.
    ``memory`` is the memory section (:class:`verlog.memory.MemoryConfig`; None: its defaults, training's), so a
    model is evaluated on the prompts it was trained on; ``memory``, ``generation_retries``, ``in_process`` and
    ``num_workers`` go to :func:`verlog.eval.runner.run_episodes`.
    """
    memory = memory if memory is not None else MemoryConfig()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    episodes_path = out / EPISODES_FILE
    wanted = protocol.episodes()
    previous: list[EpisodeRecord] = []
    if episodes_path.exists():
        if not resume:
            raise EvalProtocolError(
                f"{episodes_path} exists from an earlier evaluation: pass resume=True (--resume) to continue it, "
                "or choose another output folder"
            )
        keys = {(s.env_id, s.episode_index, s.seed) for s in wanted}
        previous = [r for r in read_episode_records(episodes_path) if (r.env_id, r.episode_index, r.seed) in keys]
    have = {(r.env_id, r.episode_index, r.seed) for r in previous}
    todo = [s for s in wanted if (s.env_id, s.episode_index, s.seed) not in have]

    def record(rec: EpisodeRecord) -> None:
        append_episode_record(episodes_path, rec)
        if on_episode is not None:
            on_episode(rec)

    started = datetime.now(timezone.utc)
    t0 = time.perf_counter()
    if log_turns and resume:
        _keep_finished_turns(out / TURNS_FILE, {r.episode_id for r in previous})
    writer = TurnLogWriter(out / TURNS_FILE, append=resume) if log_turns else None
    try:
        new = run_episodes(
            todo,
            model.generator,
            model.tokenizer,
            sampling,
            memory=memory,
            max_prompt_tokens=max_prompt_tokens,
            concurrency=concurrency,
            env_kwargs=protocol.env_kwargs,
            max_steps=protocol.max_steps,
            turn_log=writer,
            on_episode=record,
            generation_retries=generation_retries,
            in_process=in_process,
            num_workers=num_workers,
        )
    finally:
        if writer is not None:
            writer.close()
    wall = time.perf_counter() - t0
    order = {(s.env_id, s.episode_index, s.seed): i for i, s in enumerate(wanted)}
    records = sorted(previous + new, key=lambda r: order[(r.env_id, r.episode_index, r.seed)])
    summary = summarize(records, confidence=confidence, n_resamples=n_resamples, seed=bootstrap_seed)
    summary.update(
        {
            "model": model.describe(),
            "sampling": {
                "temperature": sampling.temperature,
                "top_p": sampling.top_p,
                "top_k": sampling.top_k,
                "max_tokens": sampling.max_tokens,
            },
            "memory_n": memory.n,
            "keep_reasoning_turns": memory.keep_reasoning_turns,
            "answer_format": memory.answer_format,
            "max_prompt_tokens": max_prompt_tokens,
            "protocol": protocol.as_dict(),
            "started_at": started.isoformat(timespec="seconds"),
            "wall_time_s": wall,
            "episodes_resumed": len(previous),
            "files": {"episodes": EPISODES_FILE, "turns": TURNS_FILE if log_turns else None},
        }
    )
    write_summary(out, summary)
    return summary


def _keep_finished_turns(path: Path, finished: set[str]) -> None:
    """Drop the turns of episodes an interruption left unfinished (they are played again from their start)."""
    if not path.exists():
        return
    kept = [t for t in iter_turn_logs(path) if t.episode_id in finished]
    with TurnLogWriter(path) as writer:
        writer.write_all(kept)
