"""One call that runs a whole evaluation into a folder: episodes, per-episode records, turn logs, summary.

``verlog eval`` is a thin wrapper around :func:`evaluate`; scripts (e.g. a before/after comparison) call it directly::

    from verlog.eval import EvalProtocol, evaluate, load_model
    model = load_model("out/ppo/huggingface", engine="vllm", max_model_len=1536)
    summary = evaluate(EvalProtocol(("babyai/goto",), episodes_per_task=200, seed_start=100_000), model,
                       SamplingConfig(temperature=1.0, max_tokens=512), out_dir="out/eval_ppo")
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from verlog.eval.engine import EvalModel
from verlog.eval.protocol import EpisodeSpec, EvalProtocol, EvalProtocolError
from verlog.eval.report import (
    EPISODES_FILE,
    SETTINGS_FILE,
    SUMMARY_FILE,
    TURNS_FILE,
    append_episode_record,
    read_episode_records,
    summarize,
    write_summary,
)
from verlog.eval.runner import EpisodeRecord, play_episodes
from verlog.models.vision import ImageTokenCounter, load_vision_processor
from verlog.prompting.memory import MemoryConfig, SlidingMemory
from verlog.prompting.sampling import SamplingConfig
from verlog.run.files import nested_value
from verlog.tapes.record import TurnLogWriter, iter_turn_logs


def evaluate(
    protocol: EvalProtocol,
    model: EvalModel,
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
    ``memory`` is the memory section (:class:`verlog.prompting.memory.MemoryConfig`; None: its defaults, training's), so
    a model is evaluated on the prompts it was trained on; ``memory``, ``generation_retries``, ``in_process`` and
    ``num_workers`` go to :func:`verlog.eval.runner.run_episodes`. With ``memory.max_image_history`` > 0 the envs
    draw their images and the newest observations are shown with them, as in training (the model's processor counts
    their tokens; ``model`` must be a vision-language model on the vLLM engine).
    """
    memory = memory if memory is not None else MemoryConfig()
    out = Path(out_dir)
    episodes_path = out / EPISODES_FILE
    wanted = protocol.episodes()
    settings = evaluation_settings(protocol, model.model_path, model.engine, sampling, memory, max_prompt_tokens)
    previous = _open_folder(out, settings, wanted, resume)
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
    images = memory.max_image_history > 0
    image_tokens = ImageTokenCounter(load_vision_processor(model.model_path)) if images else None
    try:
        new = play_episodes(
            todo,
            model.policy(sampling, generation_retries),
            model.tokenizer,
            memory_factory=lambda: SlidingMemory.from_config(memory, image_tokens),
            max_prompt_tokens=max_prompt_tokens,
            concurrency=concurrency,
            env_kwargs=protocol.env_kwargs,
            images=images,
            max_steps=protocol.max_steps,
            turn_log=writer,
            on_episode=record,
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
    summary.update(_run_facts(settings, model, started, wall, len(previous), log_turns))
    write_summary(out, summary)
    return summary


def _run_facts(
    settings: dict[str, Any], model: EvalModel, started: datetime, wall: float, resumed: int, log_turns: bool
) -> dict[str, Any]:
    """What the summary says about the run besides its results: settings, model, start, wall time and files."""
    return {
        **settings,
        "model": model.describe(),
        "started_at": started.isoformat(timespec="seconds"),
        "wall_time_s": wall,
        "episodes_resumed": resumed,
        "files": {"episodes": EPISODES_FILE, "turns": TURNS_FILE if log_turns else None},
    }


def _open_folder(out: Path, settings: dict[str, Any], wanted: list[EpisodeSpec], resume: bool) -> list[EpisodeRecord]:
    """Create ``out`` and write the settings into it; returns the records of ``wanted`` episodes an earlier run of
    the same evaluation finished there. Raises EvalProtocolError for an earlier evaluation without ``resume``, or
    one with other settings."""
    episodes_path = out / EPISODES_FILE
    if episodes_path.exists():
        if not resume:
            raise EvalProtocolError(
                f"{episodes_path} exists from an earlier evaluation: pass resume=True (--resume) to continue it, "
                "or choose another output folder"
            )
        other = other_evaluation(out, settings)
        if other is not None:
            raise EvalProtocolError(other)
    out.mkdir(parents=True, exist_ok=True)
    (out / SETTINGS_FILE).write_text(json.dumps(settings, indent=2) + "\n", encoding="utf-8")
    if not episodes_path.exists():
        return []
    keys = {(s.env_id, s.episode_index, s.seed) for s in wanted}
    return [r for r in read_episode_records(episodes_path) if (r.env_id, r.episode_index, r.seed) in keys]


def evaluation_settings(
    protocol: EvalProtocol,
    model_path: str | Path,
    engine: str,
    sampling: SamplingConfig,
    memory: MemoryConfig,
    max_prompt_tokens: int | None,
) -> dict[str, Any]:
    """What an evaluation is of, as its summary.json records it (the same keys): the model and engine, sampling,
    memory, prompt budget and protocol. :func:`other_evaluation` compares two of them."""
    return {
        "model": {
            "path": str(model_path) if engine == "endpoint" else str(Path(model_path).absolute()),
            "engine": engine,
        },
        "sampling": {
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "top_k": sampling.top_k,
            "max_tokens": sampling.max_tokens,
        },
        "memory_n": memory.n,
        "keep_reasoning_turns": memory.keep_reasoning_turns,
        "answer_format": memory.answer_format,
        "max_image_history": memory.max_image_history,
        "max_prompt_tokens": max_prompt_tokens,
        "protocol": protocol.as_dict(),
    }


SETTING_OPTIONS = {
    "model.path": "--model",
    "model.engine": "--engine",
    "sampling.temperature": "--temperature",
    "sampling.top_p": "--top-p",
    "sampling.top_k": "top_k",
    "sampling.max_tokens": "--max-tokens",
    "memory_n": "--memory-n",
    "keep_reasoning_turns": "--keep-reasoning-turns",
    "answer_format": "--answer-format",
    "max_image_history": "--max-image-history",
    "max_prompt_tokens": "--max-prompt-tokens",
    "protocol.tasks": "--tasks",
    "protocol.max_steps": "--max-steps",
    "protocol.env_kwargs": "--env-kwargs",
    "protocol.seeds": "--seed-start/--seeds",
}
"""The settings an evaluation resumed with ``--resume`` must keep, with the ``verlog eval`` option of each."""


def other_evaluation(out_dir: str | Path, settings: dict[str, Any]) -> str | None:
    """Why the evaluation in ``out_dir`` (its settings.json, else its summary.json) is another evaluation than
    ``settings`` (:func:`evaluation_settings`), naming each setting that differs; None when it is the same one (more
    or fewer episodes of the same seeds are the same evaluation, extended or cut) or when it records no settings.

    Resuming another evaluation would mix both into one episodes.jsonl under one summary.
    """
    out = Path(out_dir)
    before = None
    for name in (SETTINGS_FILE, SUMMARY_FILE):
        try:
            before = json.loads((out / name).read_text(encoding="utf-8"))
            break
        except (OSError, ValueError):
            continue
    if not isinstance(before, dict):
        return None
    differs = []
    for key, option in SETTING_OPTIONS.items():
        then, now = nested_value(before, key, _ABSENT), nested_value(settings, key, _ABSENT)
        if key == "protocol.seeds" and isinstance(then, list) and isinstance(now, list):
            same = then[: len(now)] == now[: len(then)]  # the seeds of the episodes both have
        elif key == "model.path" and isinstance(then, str):
            same = Path(then).absolute() == Path(str(now)).absolute()
        else:
            same = then == now or then is _ABSENT
        if not same:
            differs.append(f"{option} {_shown(then)} there, {_shown(now)} now")
    if not differs:
        return None
    return (
        f"--out {str(out)!r} holds another evaluation ({'; '.join(differs)}): --resume continues an evaluation with "
        "the settings it started with, and would mix both into one episodes.jsonl; give those settings, or choose "
        "another --out"
    )


_ABSENT = object()


def _shown(value: Any) -> str:
    if isinstance(value, list) and len(value) > 6:
        return f"[{', '.join(map(str, value[:3]))}, ..., {value[-1]}]"
    return json.dumps(value) if not isinstance(value, str) else value


def _keep_finished_turns(path: Path, finished: set[str]) -> None:
    """Drop the turns of episodes an interruption left unfinished (they are played again from their start)."""
    if not path.exists():
        return
    kept = [t for t in iter_turn_logs(path) if t.episode_id in finished]
    with TurnLogWriter(path) as writer:
        writer.write_all(kept)
