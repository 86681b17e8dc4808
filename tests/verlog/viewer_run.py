"""A small training-run folder made through verlog's real writers, without verl: the rollout manager on BabyAI with
frames, :class:`verlog.tapes.recorders.TrainingTapes` fed per-row tensors like the trainer's, in-training evaluations
through :class:`verlog.trainer.evaluation.TrainingEvaluator` (eval tapes, eval/episodes.jsonl), and metrics.jsonl
records. Shared by the viewer tests (tests/verlog/test_viewer.py, test_viewer_browser.py)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf

from verlog.prompting.memory import MemoryConfig
from verlog.rollout.generator import Generation, GenerationRequest, SamplingConfig
from verlog.tapes.recorders import TapesConfig

ENV_ID = "babyai/goto"
ACTIONS = ("turn left", "turn right", "go forward")


class WordTokenizer:
    """Tokens are whitespace-led words (a vocabulary built as it goes): multi-character tokens, exact decoding."""

    eos_token_id = 0
    pad_token_id = 0

    def __init__(self) -> None:
        self.vocab: dict[str, int] = {}
        self.pieces: list[str] = ["<eos>"]

    def apply_chat_template(self, messages: Sequence[dict[str, str]], tokenize: bool = False, **_: Any) -> str:
        return "".join(f"<|{m['role']}|>\n{m['content']}\n" for m in messages) + "<|assistant|>\n"

    def encode(self, text: str, add_special_tokens: bool = False, **_: Any) -> list[int]:
        ids = []
        for piece in re.findall(r"\s*\S+|\s+", text):
            if piece not in self.vocab:
                self.vocab[piece] = len(self.pieces)
                self.pieces.append(piece)
            ids.append(self.vocab[piece])
        return ids

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True, **_: Any) -> str:
        return "".join(self.pieces[i] for i in ids if not (skip_special_tokens and i == self.eos_token_id))


class ScriptedGenerator:
    """Answers "THINK: ... ACTION: <action>" (one of :data:`ACTIONS`, cycling; every seventh answer unparseable),
    with made-up log-probs."""

    def __init__(self, tokenizer: WordTokenizer) -> None:
        self.tokenizer = tokenizer
        self.calls = 0

    def generate(self, requests: Sequence[GenerationRequest], sampling: SamplingConfig) -> list[Generation]:
        out = []
        for _ in requests:
            self.calls += 1
            action = ACTIONS[self.calls % len(ACTIONS)]
            text = (
                f"THINK: call {self.calls}, the goal is somewhere ahead; I try to {action}.\nACTION: {action}"
                if self.calls % 7
                else "I am not sure what to do here."
            )
            ids = [*self.tokenizer.encode(text), self.tokenizer.eos_token_id]
            out.append(Generation(token_ids=ids, log_probs=[-0.05 * (1 + (i % 5)) for i in range(len(ids))]))
        return out


def trainer_tensors(rows: Sequence[Any], width: int, seed: int) -> dict[str, torch.Tensor]:
    """Per-row [B, R] tensors in the trainer's layout (response right-padded): values, advantages, returns, mask,
    log-probs of the actor and the reference, entropies."""
    gen = torch.Generator().manual_seed(seed)
    b = len(rows)
    mask = torch.zeros(b, width)
    old = torch.zeros(b, width)
    for i, row in enumerate(rows):
        n = min(len(row.response_ids), width)
        mask[i, :n] = 1
        old[i, :n] = torch.tensor(row.response_logprobs[:n])
    values = torch.rand(b, width, generator=gen) * mask
    advantages = (torch.randn(b, width, generator=gen) * mask).clamp(-2, 2)
    return {
        "values": values,
        "advantages": advantages,
        "advantages_raw": advantages * 0.5,
        "returns": values + advantages,
        "response_mask": mask,
        "old_log_probs": old,
        "ref_log_prob": old - 0.02 * torch.rand(b, width, generator=gen) * mask,
        "entropys": (0.5 + torch.rand(b, width, generator=gen)) * mask,
    }


def make_training_run(
    root: Path,
    iterations: int = 3,
    slots: int = 3,
    turns: int = 4,
    *,
    max_steps: int = 6,
    eval_every: int = 0,
    eval_episodes: int = 3,
    tapes: TapesConfig | None = None,
) -> Path:
    """Write a run folder under ``root``: config.yaml, metrics.jsonl, tapes/train.jsonl, tapes/eval.jsonl,
    eval/episodes.jsonl; evaluations before the first iteration, every ``eval_every`` iterations and after the
    last. Returns ``root``. (docs/viewer.md's file sizes come from this with the BabyAI recipe's sizes.)"""
    from verlog.eval.protocol import EvalProtocol
    from verlog.rollout.manager import RolloutManager, make_env_pool
    from verlog.tapes.recorders import TrainingTapes, frame_env_kwargs
    from verlog.trainer.evaluation import TrainingEvaluator

    root.mkdir(parents=True, exist_ok=True)
    env_kwargs = {"max_steps": max_steps}
    tok = WordTokenizer()
    gen = ScriptedGenerator(tok)
    sampling = SamplingConfig(temperature=1.0, max_tokens=48)
    settings = tapes or TapesConfig(episodes_per_iteration=2, eval_episodes=2, frames=True, frame_size=64)
    pool = make_env_pool(
        ENV_ID, slots, env_kwargs=frame_env_kwargs(ENV_ID, env_kwargs), in_process=True, keep_images=True, seed=0
    )
    rollout = RolloutManager(pool, tok, gen, sampling, max_prompt_tokens=4096, run_id="synthetic")
    recorder = TrainingTapes(root, settings, tok, env_id=ENV_ID, seed=0)
    protocol = EvalProtocol(
        (ENV_ID,), episodes_per_task=eval_episodes, seed_start=2**31, env_kwargs=frame_env_kwargs(ENV_ID, env_kwargs)
    )
    evaluator = TrainingEvaluator(
        protocol=protocol,
        sampling=sampling,
        memory=MemoryConfig(n=1, keep_reasoning_turns=1, answer_format="cot"),
        max_prompt_tokens=4096,
        output_dir=str(root),
        tapes=settings,
    )
    OmegaConf.save(
        OmegaConf.create(
            {
                "run_name": "synthetic-goto",
                "env": {"id": ENV_ID, "kwargs": env_kwargs},
                "model": {"path": "tiny"},
                "iterations": iterations,
                "rollout": {"num_slots": slots, "turns_per_slot": turns},
                "memory": {"n": 1, "answer_format": "cot"},
                "algorithm": {"step_gamma": 0.95, "step_lam": 0.95},
                "tapes": {"episodes_per_iteration": 2, "eval_episodes": 2, "frames": True},
            }
        ),
        root / "config.yaml",
    )
    with (root / "metrics.jsonl").open("w") as f:
        f.write(json.dumps({"step": 0, **evaluator.run(gen, tok, 0)}) + "\n")
        for it in range(1, iterations + 1):
            batch = rollout.collect(turns)
            recorder.record(batch.rows, trainer_tensors(batch.rows, 48, it), it)
            record = {
                "step": it,
                "training/global_step": it,
                **batch.metrics(),
                "critic/vf_loss": 1.0 / it,
                "actor/entropy": 2.0 - 0.1 * it,
                "timing_s/step": 1.5,
            }
            if it == iterations or (eval_every and it % eval_every == 0):
                record.update(evaluator.run(gen, tok, it))
            f.write(json.dumps(record) + "\n")
    pool.close()
    return root
