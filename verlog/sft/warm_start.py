"""A format-only warm start: a few plain-torch SFT steps on uniformly random valid answers.

A random-weight model writes no valid action, so RL from it learns nothing in minutes. Fine-tuning it on answers
that name a *uniformly random* valid action, in the exact prompt layout of the rollout (the same
:class:`~verlog.prompting.memory.SlidingMemory`, template and token budget), teaches the answer format and nothing about
the
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

from verlog.errors import VerlogError
from verlog.prompting.memory import MemoryConfig, SlidingMemory
from verlog.rollout.stepper import EpisodeStepper, LocalEnv, RandomValidPolicy
from verlog.sft.demos import format_answer, think_text


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
        max_image_history: the training config's ``memory.max_image_history``: > 0 needs a vision-language model
            and an env with images (its frames then sit in the prompts); 0 = text only.
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
    max_image_history: int = 0
    seed: int = 0

    def check(self) -> None:
        for name in ("steps", "batch_size", "episodes", "max_prompt_tokens"):
            if int(getattr(self, name)) < 1:
                raise WarmStartError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise WarmStartError(f"lr must be a positive number, got {self.lr}")
        if self.warmup_steps < 0:
            raise WarmStartError(f"warmup_steps must be >= 0, got {self.warmup_steps}")
        if self.max_image_history < 0:
            raise WarmStartError(f"max_image_history must be >= 0, got {self.max_image_history}")


@dataclass(frozen=True)
class AnswerRow:
    """One warm-start row: the prompt's token ids (image placeholders expanded), the answer's ids + end of turn, and
    the images the prompt shows, in prompt order ([H, W, 3] uint8; empty for text)."""

    prompt_ids: list[int]
    answer_ids: list[int]
    images: list[Any] = field(default_factory=list)


def random_answer_rows(config: WarmStartConfig, tokenizer: Any) -> list[tuple[list[int], list[int]]]:
    """``(prompt ids, answer ids + EOS)`` for every turn of ``config.episodes`` episodes played by a uniformly random
    valid-action policy, prompts built exactly as the rollout builds them (text only)."""
    return [(row.prompt_ids, row.answer_ids) for row in answer_rows(config, tokenizer)]


def answer_rows(config: WarmStartConfig, tokenizer: Any, image_tokens: Any = None) -> list[AnswerRow]:
    """The rows of :func:`random_answer_rows` with their images: with ``config.max_image_history`` > 0 the env draws
    frames and ``image_tokens`` (``verlog.models.vision.ImageTokenCounter``) counts each one's tokens."""
    import envs
    from envs.pool import EnvPool

    images = config.max_image_history > 0
    kwargs = {**config.env_kwargs, **({"images": True} if images else {})}
    local = LocalEnv(envs.make(config.env_id, **kwargs), rebuild=lambda: envs.make(config.env_id, **kwargs))
    memory_config = MemoryConfig(
        config.memory_n, config.keep_reasoning_turns, config.answer_format, config.max_image_history
    )
    memory = SlidingMemory.from_config(memory_config, image_tokens=image_tokens)
    policy = RandomValidPolicy(
        lambda slot: local.env.actions,
        lambda action, slot: format_answer(think_text(config.env_id, local.env, action), action, config.answer_format),
        seed=config.seed,
        tokenizer=tokenizer,
    )
    rows: list[AnswerRow] = []
    pool = EnvPool(local, num_envs=1, in_process=True, keep_images=images)
    try:
        stepper = EpisodeStepper(
            pool, tokenizer, [memory], max_prompt_tokens=config.max_prompt_tokens, bootstrap_prompts=False
        )
        for episode in range(config.episodes):
            stepper.reset([config.seed + episode])
            ended = False
            while not ended:
                (turn,) = stepper.step(policy, continue_episodes=False)
                row = turn.row  # the answer's tokens + end of turn; the prompt's images as the rollout sends them
                rows.append(AnswerRow(list(row.prompt_ids), list(row.response_ids), list(row.images)))
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

    Returns ``{"rows", "steps", "first_loss", "last_loss", "wall_s", "answer_tokens_mean", "images_per_row"}``;
    ``progress(step, loss)`` is called every 25 steps and at the end.
    """
    import torch

    config.check()
    source = Path(model_dir)
    if not (source / "config.json").exists():
        raise WarmStartError(f"{source} is not a model folder (no config.json): build one with `verlog tiny-model`")
    start = time.perf_counter()
    model, tokenizer, processor = _load(source, config)
    rows = answer_rows(config, tokenizer, _image_tokens(processor) if config.max_image_history > 0 else None)
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
        loss = model(**_batch_inputs(batch, pad, processor)).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        losses.append(float(loss.detach()))
        if progress is not None and ((step + 1) % 25 == 0 or step + 1 == config.steps):
            progress(step + 1, losses[-1])
    _save(model, tokenizer, source, Path(out_dir) if out_dir is not None else source)
    return {
        "rows": float(len(rows)),
        "steps": float(config.steps),
        "first_loss": losses[0],
        "last_loss": sum(losses[-10:]) / len(losses[-10:]),
        "wall_s": time.perf_counter() - start,
        "answer_tokens_mean": sum(len(r.answer_ids) for r in rows) / len(rows),
        "images_per_row": sum(len(r.images) for r in rows) / len(rows),
    }


def _load(source: Path, config: WarmStartConfig) -> tuple[Any, Any, Any]:
    """The model, its tokenizer and (a vision-language model) its processor, else None."""
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText, AutoTokenizer

    from verlog.errors import ImageSetupError
    from verlog.models.vision import is_vision_model, load_vision_processor

    if not is_vision_model(source):
        if config.max_image_history > 0:
            raise WarmStartError(
                f"max_image_history {config.max_image_history} needs a vision-language model and {source} is "
                "text only: build one with `verlog tiny-model --vision`, or warm-start without images"
            )
        return (
            AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32),
            AutoTokenizer.from_pretrained(source),
            None,
        )
    try:
        processor = load_vision_processor(source)
    except ImageSetupError as exc:
        raise WarmStartError(str(exc)) from None
    model = AutoModelForImageTextToText.from_pretrained(source, dtype=torch.float32)
    return model, processor.tokenizer, processor


def _image_tokens(processor: Any) -> Any:
    from verlog.models.vision import ImageTokenCounter

    if processor is None:
        raise WarmStartError("images in the prompt need a vision-language model's processor")
    return ImageTokenCounter(processor)


def _batch_inputs(batch: list[AnswerRow], pad: int, processor: Any) -> dict[str, Any]:
    """The model's inputs for ``batch``, right-padded: ``input_ids``, ``attention_mask``, ``labels`` ``[B, L]`` (the
    loss on the answers only) and, when the prompts show images, their ``pixel_values`` ``[patches, C*T*P*P]`` and
    ``image_grid_thw`` ``[images, 3]`` in row order (the order of the image-token runs in ``input_ids``) and
    ``mm_token_type_ids`` ``[B, L]``."""
    import torch

    width = max(len(r.prompt_ids) + len(r.answer_ids) for r in batch)
    ids = torch.full((len(batch), width), pad, dtype=torch.long)
    labels = torch.full((len(batch), width), -100, dtype=torch.long)
    attention = torch.zeros((len(batch), width), dtype=torch.long)
    for i, row in enumerate(batch):
        seq = row.prompt_ids + row.answer_ids
        ids[i, : len(seq)] = torch.tensor(seq)
        labels[i, len(row.prompt_ids) : len(seq)] = torch.tensor(row.answer_ids)  # loss on the answer only
        attention[i, : len(seq)] = 1
    inputs: dict[str, Any] = {"input_ids": ids, "attention_mask": attention, "labels": labels}
    images = [image for row in batch for image in row.images]
    if images:
        from verlog.models.vision import pixel_inputs

        vision = pixel_inputs(processor, images)
        inputs["pixel_values"], inputs["image_grid_thw"] = vision["pixel_values"], vision["image_grid_thw"]
        # which tokens are an image's (1): the model lays its rotary positions on the image grid there
        inputs["mm_token_type_ids"] = (ids == int(processor.image_token_id)).long()
    return inputs


def _save(model: Any, tokenizer: Any, source: Path, target: Path) -> None:
    """The fine-tuned weights into ``target``; a new folder also gets the source's other files (tokenizer, image
    processor, chat template, the tiny model's spec)."""
    import shutil

    target.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(target)
    if target.resolve() == source.resolve():
        return
    tokenizer.save_pretrained(target)
    for item in sorted(source.iterdir()):
        if item.is_file() and not (target / item.name).exists():
            shutil.copy2(item, target / item.name)
