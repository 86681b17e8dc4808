"""A format-only warm start: a few plain-torch SFT steps on uniformly random valid answers.

A random-weight model writes no valid action, so RL from it learns nothing in minutes. Fine-tuning it on answers
that name a *uniformly random* valid action, in the exact prompt layout of the rollout (the same
:class:`~verlog.memory.SlidingMemory`, template and token budget), teaches the answer format and nothing about the
task: the policy starts near uniform over the valid actions, and whatever it learns after that is RL's doing. The
learnability test and the CPU quick start use it on ``toy/delayed``; it works for any registered env.

Runs in the calling process on the CPU (no verl, no Ray): about 30 s for 250 steps of 16 rows with the tiny model.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verlog.demos import format_answer, think_text
from verlog.errors import VerlogError
from verlog.memory import MemoryConfig, SlidingMemory
from verlog.rollout.stepper import EpisodeStepper, LocalEnv, RandomValidPolicy


class WarmStartError(VerlogError, ValueError):
    """The warm start cannot run: a bad setting or a model folder that does not load."""


@dataclass(frozen=True)
class WarmStartConfig:
    """What to fine-tune on and how.

    Attributes:
        env_id: a registered env id (``verlog envs``).
        steps, batch_size, lr, warmup_steps: the optimisation (AdamW, linear warm-up, then constant).
        episodes: random-policy episodes that provide the rows (seeds ``seed .. seed + episodes - 1``).
        env_kwargs: keyword arguments of ``envs.make`` (use the training config's ``env.kwargs``).
        memory_n, keep_reasoning_turns, answer_format, max_prompt_tokens: the training config's memory and prompt
            budget, so the prompts are token for token the rollout's.
        seed: seeds the episodes, the random answers and the batch order.
    """

    env_id: str
    steps: int = 250
    batch_size: int = 16
    lr: float = 1e-3
    warmup_steps: int = 20
    episodes: int = 64
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    memory_n: int = 1
    keep_reasoning_turns: int = 1
    answer_format: str = "cot"
    max_prompt_tokens: int = 1024
    seed: int = 0

    def check(self) -> None:
        for name in ("steps", "batch_size", "episodes", "max_prompt_tokens"):
            if int(getattr(self, name)) < 1:
                raise WarmStartError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise WarmStartError(f"lr must be a positive number, got {self.lr}")
        if self.warmup_steps < 0:
            raise WarmStartError(f"warmup_steps must be >= 0, got {self.warmup_steps}")


def random_answer_rows(config: WarmStartConfig, tokenizer: Any) -> list[tuple[list[int], list[int]]]:
    """``(prompt ids, answer ids + EOS)`` for every turn of ``config.episodes`` episodes played by a uniformly random
    valid-action policy, prompts built exactly as the rollout builds them."""
    import envs

    kwargs = dict(config.env_kwargs)
    local = LocalEnv(envs.make(config.env_id, **kwargs), rebuild=lambda: envs.make(config.env_id, **kwargs))
    memory = SlidingMemory.from_config(MemoryConfig(config.memory_n, config.keep_reasoning_turns, config.answer_format))
    policy = RandomValidPolicy(
        lambda slot: local.env.actions,
        lambda action, slot: format_answer(think_text(config.env_id, local.env, action), action, config.answer_format),
        seed=config.seed,
        tokenizer=tokenizer,
    )
    rows: list[tuple[list[int], list[int]]] = []
    pool = local.pool()
    try:
        stepper = EpisodeStepper(
            pool, tokenizer, [memory], max_prompt_tokens=config.max_prompt_tokens, bootstrap_prompts=False
        )
        for episode in range(config.episodes):
            stepper.reset([config.seed + episode])
            ended = False
            while not ended:
                (turn,) = stepper.step(policy, continue_episodes=False)
                rows.append((turn.row.prompt_ids, turn.row.response_ids))  # the answer's tokens + end of turn
                ended = turn.episode is not None
    finally:
        pool.close()
    return rows


def warm_start(
    model_dir: str | Path,
    config: WarmStartConfig,
    *,
    out_dir: str | Path | None = None,
    progress: Callable[[int, float], None] | None = None,
) -> dict[str, float]:
    """Fine-tune the model in ``model_dir`` on random valid answers and save it to ``out_dir`` (default: in place).

    Returns ``{"rows", "steps", "first_loss", "last_loss", "wall_s", "answer_tokens_mean"}``; ``progress(step, loss)``
    is called every 25 steps and at the end.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    config.check()
    source = Path(model_dir)
    if not (source / "config.json").exists():
        raise WarmStartError(f"{source} is not a model folder (no config.json): build one with `verlog tiny-model`")
    start = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(source)
    rows = random_answer_rows(config, tokenizer)
    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
    model.train()
    torch.manual_seed(config.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min(1.0, (step + 1) / config.warmup_steps) if config.warmup_steps else 1.0
    )
    pad = int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id)
    rng = random.Random(config.seed + 1)
    order: list[int] = []
    losses: list[float] = []
    for step in range(config.steps):
        batch = []
        for _ in range(config.batch_size):
            if not order:
                order = list(range(len(rows)))
                rng.shuffle(order)
            batch.append(rows[order.pop()])
        width = max(len(p) + len(a) for p, a in batch)
        ids = torch.full((len(batch), width), pad, dtype=torch.long)
        labels = torch.full((len(batch), width), -100, dtype=torch.long)
        attention = torch.zeros((len(batch), width), dtype=torch.long)
        for i, (prompt, answer) in enumerate(batch):
            seq = prompt + answer
            ids[i, : len(seq)] = torch.tensor(seq)
            labels[i, len(prompt) : len(seq)] = torch.tensor(answer)  # loss on the answer only
            attention[i, : len(seq)] = 1
        loss = model(input_ids=ids, attention_mask=attention, labels=labels).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        losses.append(float(loss.detach()))
        if progress is not None and ((step + 1) % 25 == 0 or step + 1 == config.steps):
            progress(step + 1, losses[-1])
    target = Path(out_dir) if out_dir is not None else source
    target.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(target)
    if target != source:
        tokenizer.save_pretrained(target)
    return {
        "rows": float(len(rows)),
        "steps": float(config.steps),
        "first_loss": losses[0],
        "last_loss": sum(losses[-10:]) / len(losses[-10:]),
        "wall_s": time.perf_counter() - start,
        "answer_tokens_mean": sum(len(a) for _, a in rows) / len(rows),
    }
