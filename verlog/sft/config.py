"""Settings of `verlog sft`: typed defaults, YAML (configs/sft/), key=value overrides; unknown keys are
errors."""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any

from verlog.errors import VerlogError
from verlog.prompting.memory import ANSWER_FORMATS, MemoryConfig


class SFTConfigError(VerlogError, ValueError):
    """An SFT setting is invalid or contradicts another (the message names both and the fix)."""


class SFTDataError(VerlogError, ValueError):
    """The SFT data do not fit the model: no chat template, malformed conversations, rows over the length limit."""


class SFTRunError(VerlogError, RuntimeError):
    """verl's SFT trainer failed or wrote no Hugging Face folder."""


# --------------------------------------------------------------------------------------------------- config
@dataclass
class SFTModelConfig:
    """The model to fine-tune.

    Attributes:
        path: a Hugging Face model folder (or hub id when one can be downloaded).
        build_tiny: build a tiny random-weight model at ``path`` with ``verlog.models.tiny_model.build_tiny_model`` when
            the folder does not exist (no pretrained weights on an offline machine).
        tiny: sizes for ``build_tiny_model`` (``hidden_size``, ``num_layers``, ``num_heads``, ...).
        tokenizer_corpus: texts to train the tiny model's tokenizer on, added to verlog's default corpus
            (e.g. the demo answers); empty: the default corpus only.
        tokenizer_from_data: also train the tiny tokenizer on the message texts of the training rows (``data.train``),
            so an env's own words become whole tokens: BabaIsAI prompts shrink from about 1,120 to 750 tokens.
    """

    path: str = "outputs/sft/base-model"
    build_tiny: bool = False
    tiny: dict[str, int] = field(default_factory=dict)
    tokenizer_corpus: list[str] = field(default_factory=list)
    tokenizer_from_data: bool = False


@dataclass
class SFTTapesConfig:
    """Tapes as SFT data (``data.train`` a tapes folder or file): which episodes, and the prompts of the run that will
    train on the SFT model (docs/sft.md, "Tapes as SFT data").

    Attributes:
        success_only: keep only episodes that ended in success.
        min_return: keep only episodes whose return is at least this (null: any).
        env_ids: keep only episodes of these env ids (empty: all).
        last_iterations: keep only episodes that started in the last K iterations of the tapes (training and
            in-training evaluation tapes; null: all).
        valid_only: leave out the rows of turns whose answer named no valid action (the turn stays in the history
            of the next prompts, as the rollout showed it).
        val_episodes: the last this-many kept episodes go to val.parquet.
        memory: the memory section (``memory.n``, ``memory.keep_reasoning_turns``, ``memory.answer_format``) of the
            run that will train: the prompts are rebuilt with it.
        max_prompt_tokens: that run's ``rollout.max_prompt_tokens`` (counted with the SFT model's tokenizer; null:
            no budget).
        env_kwargs: the env keyword arguments the tapes were played with; null: read from the tapes' folder
            (a run's config.yaml, an evaluation's summary.json, a recording's first turn).
        imports: modules to import first (your module that registers the env, like ``--import``).
    """

    success_only: bool = True
    min_return: float | None = None
    env_ids: list[str] = field(default_factory=list)
    last_iterations: int | None = None
    valid_only: bool = True
    val_episodes: int = 0
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    max_prompt_tokens: int | None = 1024
    env_kwargs: dict[str, Any] | None = None
    imports: list[str] = field(default_factory=list)

    def problems(self) -> list[str]:
        """What is wrong with these settings, one message per problem (each naming the key and the fix)."""
        out = []
        m = self.memory
        if m.n < 0 or m.keep_reasoning_turns < 0:
            out.append(
                f"data.tapes.memory.n and keep_reasoning_turns must be >= 0, got {m.n} and {m.keep_reasoning_turns}; "
                "use the memory section of the run that will train"
            )
        if m.answer_format not in ANSWER_FORMATS:
            out.append(
                f"data.tapes.memory.answer_format {m.answer_format!r} is not one of {', '.join(ANSWER_FORMATS)}; "
                "use the run's memory.answer_format"
            )
        if self.max_prompt_tokens is not None and self.max_prompt_tokens < 1:
            out.append(
                f"data.tapes.max_prompt_tokens must be >= 1 or null, got {self.max_prompt_tokens}; use the run's "
                "rollout.max_prompt_tokens"
            )
        if self.last_iterations is not None and self.last_iterations < 1:
            out.append(f"data.tapes.last_iterations must be >= 1 or null (all), got {self.last_iterations}")
        if self.val_episodes < 0:
            out.append(f"data.tapes.val_episodes must be >= 0, got {self.val_episodes}")
        if self.min_return is not None and not math.isfinite(self.min_return):
            out.append(f"data.tapes.min_return must be a finite number or null, got {self.min_return}")
        return out


@dataclass
class SFTDataConfig:
    """The data: demonstrations, or tapes.

    Attributes:
        train: a folder written by ``verlog demos`` (its train.parquet), a parquet file with a ``messages`` column, or
            tapes: a training run's folder (tapes/*.jsonl), an evaluation's (``verlog eval --log-turns``: turns.jsonl),
            a ``verlog play --record`` folder, or one tape file (.jsonl); tapes become rows under
            ``<output_dir>/data`` (see ``tapes``).
        val: a parquet file for validation loss; null: the demo folder's val.parquet when there is one.
        max_length: the longest row in tokens (chat template applied); longer rows are an error before launch.
        loss_on: ``last`` (loss on the final assistant message only) or ``all`` (every assistant message; verl's own).
        tapes: the filters and prompt settings used when ``train`` is tapes.
    """

    train: str = "outputs/demos"
    val: str | None = None
    max_length: int = 1024
    loss_on: str = "last"
    tapes: SFTTapesConfig = field(default_factory=SFTTapesConfig)


@dataclass
class SFTTrainConfig:
    """Optimisation and processes.

    Attributes:
        nproc: processes (FSDP ranks; one per GPU, or CPU ranks on a CPU machine).
        batch_size: rows per optimizer step (global, over all ranks).
        epochs: passes over the data; ``steps`` (when set) stops earlier or later.
        steps: optimizer steps in all; null: ``epochs * (rows // batch_size)``.
        lr: peak learning rate (AdamW).
        warmup_ratio: fraction of the steps with a linear warm-up.
        lr_scheduler: ``constant`` or ``cosine`` (after the warm-up).
        weight_decay: AdamW weight decay.
        clip_grad: gradient norm clip.
        max_tokens_per_rank: tokens per micro-batch per rank (verl's dynamic batch size).
        gradient_checkpointing: recompute activations (saves memory, about 10% slower on CPU).
        fp32: compute in float32 (faster than bf16 on CPUs without fast bf16; bf16 otherwise).
        save_freq: also checkpoint every this many steps (-1: only at the end).
        seed: data-order seed.
    """

    nproc: int = 1
    batch_size: int = 16
    epochs: int = 1
    steps: int | None = None
    lr: float = 1e-3
    warmup_ratio: float = 0.1
    lr_scheduler: str = "cosine"
    weight_decay: float = 0.01
    clip_grad: float = 1.0
    max_tokens_per_rank: int = 16384
    gradient_checkpointing: bool = False
    fp32: bool = True
    save_freq: int = -1
    seed: int = 1


@dataclass
class SFTConfig:
    """Everything ``verlog sft`` needs.

    Attributes:
        output_dir: checkpoints go to ``<output_dir>/checkpoints``, the exported model to ``<output_dir>/model``.
        project, run_name: names for verl's tracking backends.
        logger: verl's tracking backends (``console``, ``tensorboard``, ``wandb``, ...).
        resume: continue from the newest checkpoint under ``output_dir`` (verl's ``resume_mode=auto``).
        verl: extra overrides of verl's SFT config, ``"key=value"`` strings, applied last.
    """

    output_dir: str = "outputs/sft"
    model: SFTModelConfig = field(default_factory=SFTModelConfig)
    data: SFTDataConfig = field(default_factory=SFTDataConfig)
    train: SFTTrainConfig = field(default_factory=SFTTrainConfig)
    project: str = "verlog-sft"
    run_name: str = "sft"
    logger: list[str] = field(default_factory=lambda: ["console"])
    resume: bool = False
    verl: list[str] = field(default_factory=list)

    def validate(self) -> None:
        """Raise :class:`SFTConfigError` on values verl would reject late or silently misuse."""
        t = self.train
        if self.data.loss_on not in ("last", "all"):
            raise SFTConfigError(f"data.loss_on must be 'last' or 'all', got {self.data.loss_on!r}")
        if self.data.max_length < 8:
            raise SFTConfigError(f"data.max_length must be >= 8 tokens, got {self.data.max_length}")
        if t.nproc < 1:
            raise SFTConfigError(f"train.nproc must be >= 1, got {t.nproc}")
        if t.batch_size < 1 or t.batch_size % t.nproc:
            raise SFTConfigError(
                f"train.batch_size ({t.batch_size}) must be a positive multiple of train.nproc ({t.nproc}): each "
                "rank takes batch_size / nproc rows per step"
            )
        if t.steps is not None and t.steps < 1:
            raise SFTConfigError(f"train.steps must be >= 1 or null, got {t.steps}")
        if t.epochs < 1:
            raise SFTConfigError(f"train.epochs must be >= 1, got {t.epochs}")
        if t.lr <= 0 or not 0 <= t.warmup_ratio < 1:
            raise SFTConfigError(f"need train.lr > 0 and 0 <= train.warmup_ratio < 1, got {t.lr}, {t.warmup_ratio}")
        if t.lr_scheduler not in ("constant", "cosine"):
            raise SFTConfigError(f"train.lr_scheduler must be 'constant' or 'cosine', got {t.lr_scheduler!r}")
        if t.max_tokens_per_rank < self.data.max_length:
            raise SFTConfigError(
                f"train.max_tokens_per_rank ({t.max_tokens_per_rank}) is below data.max_length "
                f"({self.data.max_length}): a row must fit in one micro-batch; raise it"
            )
        for item in self.verl:
            if "=" not in item:
                raise SFTConfigError(f"each entry of verl must be 'key=value' (a verl SFT override), got {item!r}")
        problems = self.data.tapes.problems()
        if problems:
            raise SFTConfigError(
                problems[0] if len(problems) == 1 else f"{len(problems)} problems: {' | '.join(problems)}"
            )


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> SFTConfig:
    """:class:`SFTConfig` from its defaults, a YAML file (optional) and ``key=value`` overrides, in that order.

    Raises:
        SFTConfigError: a key that :class:`SFTConfig` does not have, or a value of the wrong type.
    """
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    if path is not None and not Path(path).is_file():
        raise SFTConfigError(
            f"SFT config file {str(path)!r} does not exist; give an SFT YAML such as configs/sft/cpu.yaml, or only "
            "key=value overrides"
        )
    try:
        cfg = OmegaConf.structured(SFTConfig)
        if path is not None:
            cfg = OmegaConf.merge(cfg, OmegaConf.load(path))
        if overrides:
            cfg = OmegaConf.merge(cfg, OmegaConf.from_dotlist(list(overrides)))
        config = OmegaConf.to_object(cfg)
    except OmegaConfBaseException as exc:
        raise SFTConfigError(_one_line(exc)) from None
    if not isinstance(config, SFTConfig):  # OmegaConf.to_object of a structured SFTConfig gives one
        raise SFTConfigError(f"SFT config did not resolve to SFTConfig but {type(config).__name__}")
    config.validate()
    return config


def config_keys(cls: type = SFTConfig, prefix: str = "") -> list[str]:
    """Every dotted key of ``cls`` (a config dataclass), sections included (``data``, ``data.tapes``, ...)."""
    out = []
    for f in fields(cls):
        key = f"{prefix}{f.name}"
        out.append(key)
        default = f.default_factory() if callable(f.default_factory) else f.default  # type: ignore[misc]
        if is_dataclass(default):
            out.extend(config_keys(type(default), f"{key}."))
    return out


def _one_line(exc: Exception) -> str:
    """OmegaConf's multi-line message as one line: the key, what is wrong, the closest key, where the keys are."""
    key = str(getattr(exc, "full_key", "") or "")
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    hint = "see configs/sft/cpu.yaml and docs/sft.md for the keys"
    if "not in" in first and key:
        close = difflib.get_close_matches(key, config_keys(), n=1, cutoff=0.6)
        if close:
            hint = f"did you mean {close[0]}? ({hint})"
        return f"{key}: the SFT config has no such key; {hint}"
    where = f"{key}: " if key else ""
    return f"{where}{first}; {hint}"
