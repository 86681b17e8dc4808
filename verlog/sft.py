"""The SFT warm start: verl 0.9.1's own SFT trainer (``verl.trainer.sft_trainer``) on demonstrations, CPU or GPU.

:func:`run_sft` checks the data against the model's chat template and length limit *before* anything heavy starts,
builds a tiny model with :mod:`verlog.testing` when the config asks for one, launches
``torchrun --standalone --nproc_per_node=N -m verl.trainer.sft_trainer`` with the overrides the CPU needs (through
:func:`verlog.platform.enable_cpu_platform`; on a GPU machine the platform stays inert and the same overrides are
harmless), streams verl's progress and losses, and exports the final checkpoint's Hugging Face folder to
``<output_dir>/model``, a folder ``verlog train`` (``model.path=...``), transformers and vLLM load as is.

Two things verl does that we adjust:

- **Loss on the final answer only.** verl's ``MultiTurnSFTDataset`` puts loss on every assistant message of a row.
  A demo row (verlog.demos) is one RL turn: the memory window, whose assistant messages are the expert's earlier
  answers under "Previous plan:", then the answer of this turn. :class:`LastTurnSFTDataset` (the default,
  ``data.loss_on: last``) keeps the loss on the final assistant message, the tokens the policy writes in RL;
  ``data.loss_on: all`` keeps verl's behaviour.
- **dtype of the exported config.** verl writes ``config.json`` with ``dtype: bfloat16`` although the safetensors
  hold float32, so transformers 5 would load the weights as bf16; the export sets ``dtype`` to the dtype the weights
  are stored in.

Config: :class:`SFTConfig` (typed defaults; YAML in ``configs/sft/``; unknown keys are errors), see docs/sft.md.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verlog.errors import VerlogError

HF_EXPORT = "model"
CHECKPOINTS = "checkpoints"
METRICS_FILE = "sft_metrics.jsonl"
_STEP_LINE = re.compile(r"(?:^|\W)step:(\d+) - (.*)$")  # tqdm may print its bar first on the line


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
        build_tiny: build a tiny random-weight model at ``path`` with ``verlog.testing.build_tiny_model`` when the
            folder does not exist (no pretrained weights on an offline machine).
        tiny: sizes for ``build_tiny_model`` (``hidden_size``, ``num_layers``, ``num_heads``, ...).
        tokenizer_corpus: texts to train the tiny model's tokenizer on, added to verlog's default corpus
            (e.g. the demo answers); empty: the default corpus only.
    """

    path: str = "outputs/sft/base-model"
    build_tiny: bool = False
    tiny: dict[str, int] = field(default_factory=dict)
    tokenizer_corpus: list[str] = field(default_factory=list)


@dataclass
class SFTDataConfig:
    """The demonstrations.

    Attributes:
        train: a folder written by ``verlog demos`` (its train.parquet) or a parquet file with a ``messages`` column.
        val: a parquet file for validation loss; null: the demo folder's val.parquet when there is one.
        max_length: the longest row in tokens (chat template applied); longer rows are an error before launch.
        loss_on: ``last`` (loss on the final assistant message only) or ``all`` (every assistant message; verl's own).
    """

    train: str = "outputs/demos"
    val: str | None = None
    max_length: int = 1024
    loss_on: str = "last"


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


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> SFTConfig:
    """:class:`SFTConfig` from its defaults, a YAML file (optional) and ``key=value`` overrides, in that order.

    Raises:
        SFTConfigError: a key that :class:`SFTConfig` does not have, or a value of the wrong type.
    """
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        cfg = OmegaConf.structured(SFTConfig)
        if path is not None:
            if not Path(path).is_file():
                raise SFTConfigError(f"SFT config file {str(path)!r} does not exist")
            cfg = OmegaConf.merge(cfg, OmegaConf.load(path))
        if overrides:
            cfg = OmegaConf.merge(cfg, OmegaConf.from_dotlist(list(overrides)))
        config = OmegaConf.to_object(cfg)
    except OmegaConfBaseException as exc:
        raise SFTConfigError(f"bad SFT config ({exc}); see configs/sft/cpu.yaml and docs/sft.md for the keys") from exc
    if not isinstance(config, SFTConfig):  # OmegaConf.to_object of a structured SFTConfig gives one
        raise SFTConfigError(f"SFT config did not resolve to SFTConfig but {type(config).__name__}")
    config.validate()
    return config


# --------------------------------------------------------------------------------------------------- data
@dataclass
class DataReport:
    """What :func:`check_data` found: row count and token lengths (chat template applied)."""

    path: str
    rows: int
    max_tokens: int
    mean_tokens: float
    loss_tokens: int


def resolve_data(data: SFTDataConfig) -> tuple[str, str | None]:
    """The train and val parquet files of ``data`` (a demo folder gives its train.parquet and val.parquet)."""
    from verlog.demos import TRAIN_FILE, VAL_FILE

    train = Path(data.train)
    val = Path(data.val) if data.val else None
    if train.is_dir():
        if val is None and (train / VAL_FILE).is_file():
            val = train / VAL_FILE
        train = train / TRAIN_FILE
    if not train.is_file():
        raise SFTDataError(f"data.train {str(train)!r} does not exist: run `verlog demos ... --out DIR` first")
    if val is not None and not val.is_file():
        raise SFTDataError(f"data.val {str(val)!r} does not exist")
    return str(train), None if val is None else str(val)


def _token_ids(tokenizer: Any, messages: list[dict[str, str]], add_generation_prompt: bool = False) -> list[int]:
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)
    return list(tokenizer.encode(text, add_special_tokens=False))


def _check_template(tokenizer: Any, messages: list[dict[str, str]], where: str) -> None:
    """verl tokenizes each message on its own and concatenates; that must equal the whole conversation's tokens."""
    empty = [{"role": "user", "content": ""}]
    one, two = _token_ids(tokenizer, empty), _token_ids(tokenizer, empty * 2)
    system_prefix = len(one) - (len(two) - len(one))  # a default system prompt the template adds to every render
    generation = _token_ids(tokenizer, empty, add_generation_prompt=True)[len(one) :]
    pieces: list[int] = []
    for i, message in enumerate(messages):
        ids = _token_ids(tokenizer, [message])
        if i and message["role"] != "system":
            ids = ids[system_prefix:]
        if message["role"] == "assistant" and ids[: len(generation)] != generation:
            raise SFTDataError(
                f"{where}: an assistant message does not start with the chat template's generation prompt "
                f"{tokenizer.decode(generation)!r}, so the loss mask would cover prompt tokens: use a chat template "
                "whose generation prompt opens the assistant turn (e.g. ChatML, as verlog.testing builds)"
            )
        pieces.extend(ids)
    if pieces != _token_ids(tokenizer, messages):
        raise SFTDataError(
            f"{where}: the chat template renders messages differently alone than in a conversation, and verl's "
            "SFT dataset tokenizes each message alone (it would fail with an input_ids mismatch); use a template "
            "without per-position changes (e.g. ChatML)"
        )


def check_data(
    path: str, tokenizer: Any, max_length: int, loss_on: str = "last", *, template_rows: int = 4
) -> DataReport:
    """Check an SFT parquet file against a tokenizer before launching verl.

    Checks: a chat template exists; a ``messages`` column of ``{role, content}`` lists with roles system / user /
    assistant and (for ``loss_on='last'``) an assistant message last; the first ``template_rows`` rows tokenize the
    same message by message as whole (verl's dataset needs it); no row is longer than ``max_length`` tokens.

    Raises:
        SFTDataError: naming the file, the row and the fix.
    """
    import pandas as pd

    if getattr(tokenizer, "chat_template", None) is None:
        raise SFTDataError(
            f"the tokenizer {getattr(tokenizer, 'name_or_path', '')!r} has no chat template, so the demos cannot be "
            "rendered as the rollout renders prompts: use a model folder with a chat template (verlog.testing."
            "build_tiny_model writes ChatML) or set tokenizer.chat_template and save it"
        )
    frame = pd.read_parquet(path)
    if "messages" not in frame.columns:
        raise SFTDataError(
            f"{path} has no 'messages' column (columns: {list(frame.columns)}): verl's SFT trainer reads chat "
            "conversations from 'messages'; write the data with `verlog demos`"
        )
    if len(frame) == 0:
        raise SFTDataError(f"{path} has no rows")
    lengths: list[int] = []
    loss_tokens = 0
    for i, raw in enumerate(frame["messages"]):
        messages = _as_messages(raw, f"{path} row {i}")
        roles = [m["role"] for m in messages]
        if "assistant" not in roles or (loss_on == "last" and roles[-1] != "assistant"):
            want = "end with an assistant message" if loss_on == "last" else "hold an assistant message"
            raise SFTDataError(f"{path} row {i}: roles {roles} do not {want}, so it has nothing to learn")
        if i < template_rows:
            _check_template(tokenizer, messages, f"{path} row {i}")
        ids = _token_ids(tokenizer, messages)
        lengths.append(len(ids))
        loss_tokens += len(ids) - len(_token_ids(tokenizer, messages[:-1], add_generation_prompt=True))
    over = [i for i, n in enumerate(lengths) if n > max_length]
    if over:
        longest = max(lengths)
        raise SFTDataError(
            f"{len(over)} of {len(lengths)} rows of {path} are longer than data.max_length = {max_length} tokens "
            f"(longest: {longest} tokens, row {lengths.index(longest)}): raise data.max_length to at least "
            f"{longest}, or make the demos with a smaller prompt budget (`verlog demos --max-prompt-tokens ... "
            "--tokenizer MODEL`)"
        )
    return DataReport(path, len(lengths), max(lengths), sum(lengths) / len(lengths), loss_tokens)


def _as_messages(raw: Any, where: str) -> list[dict[str, str]]:
    items = list(raw) if raw is not None and not isinstance(raw, (str, bytes, dict)) else None
    if not items:
        raise SFTDataError(f"{where}: 'messages' must be a non-empty list of {{role, content}}, got {raw!r:.200}")
    out = []
    for m in items:
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            raise SFTDataError(f"{where}: every message needs string 'role' and 'content', got {m!r:.200}")
        if m["role"] not in ("system", "user", "assistant"):
            raise SFTDataError(f"{where}: role {m['role']!r} is not one of system, user, assistant")
        out.append({"role": m["role"], "content": m["content"]})
    return out


# --------------------------------------------------------------------------------------------------- dataset
def _last_turn_dataset_class() -> type:
    from verl.utils.dataset.multiturn_sft_dataset import MultiTurnSFTDataset

    class LastTurnSFTDataset(MultiTurnSFTDataset):
        """verl's MultiTurnSFTDataset with the loss on the final assistant message only.

        ``loss_mask`` (shape ``[seq_len]``, 1 = token in the loss) keeps only its last run of ones: the final
        assistant message (without its generation prompt); earlier assistant messages become context.
        """

        def __getitem__(self, item: int) -> dict[str, Any]:
            row = super().__getitem__(item)
            row["loss_mask"] = keep_last_run(row["loss_mask"])
            return row

    return LastTurnSFTDataset


def keep_last_run(mask: Any) -> Any:
    """A copy of the 0/1 ``mask`` (shape ``[seq_len]``) with only its last run of consecutive non-zeros kept."""
    import torch

    nz = torch.nonzero(mask).flatten()
    out = torch.zeros_like(mask)
    if nz.numel() == 0:
        return out
    end = int(nz[-1])
    gaps = torch.nonzero(nz[1:] - nz[:-1] != 1).flatten()
    start = int(nz[int(gaps[-1]) + 1]) if gaps.numel() else int(nz[0])
    out[start : end + 1] = mask[start : end + 1]
    return out


def __getattr__(name: str) -> Any:
    # verl loads the dataset class by name (data.custom_cls); build it on first use so that importing verlog.sft
    # does not import verl.
    if name == "LastTurnSFTDataset":
        cls = _last_turn_dataset_class()
        globals()[name] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# --------------------------------------------------------------------------------------------------- launch
def verl_overrides(
    config: SFTConfig, model_path: str, train_file: str, val_file: str | None, *, cpu: bool = True
) -> list[str]:
    """verl's SFT trainer overrides for ``config`` (docs/sft.md lists why each CPU one is needed); ``config.verl``
    comes last, so a user's override wins."""
    t = config.train
    out = Path(config.output_dir).resolve()
    overrides = [
        f"data.train_files={train_file}",
        f"data.val_files={val_file if val_file else 'null'}",
        f"data.train_batch_size={t.batch_size}",
        f"data.max_length={config.data.max_length}",
        f"data.max_token_len_per_gpu={t.max_tokens_per_rank}",
        "data.truncation=error",
        "data.num_workers=0",
        f"model.path={model_path}",
        "model.use_remove_padding=False",
        "+model.override_config.attn_implementation=sdpa",
        f"model.enable_gradient_checkpointing={t.gradient_checkpointing}",
        "engine.strategy=fsdp2",
        "engine.use_torch_compile=False",
        f"optim.lr={t.lr}",
        f"optim.lr_warmup_steps_ratio={t.warmup_ratio}",
        f"optim.lr_scheduler_type={t.lr_scheduler}",
        f"optim.weight_decay={t.weight_decay}",
        f"optim.clip_grad={t.clip_grad}",
        f"trainer.default_local_dir={out / CHECKPOINTS}",
        f"trainer.project_name={config.project}",
        f"trainer.experiment_name={config.run_name}",
        f"trainer.total_epochs={t.epochs}",
        f"trainer.total_training_steps={t.steps if t.steps is not None else 'null'}",
        f"trainer.save_freq={t.save_freq}",
        f"trainer.seed={t.seed}",
        f"trainer.n_gpus_per_node={t.nproc}",
        f"trainer.logger=[{','.join(config.logger)}]",
        f"trainer.resume_mode={'auto' if config.resume else 'disable'}",
        "checkpoint.save_contents=[model,optimizer,extra,hf_model]",
    ]
    if t.fp32:
        overrides.append("+engine.mixed_precision={param_dtype:fp32,reduce_dtype:fp32,buffer_dtype:fp32}")
    if config.data.loss_on == "last":
        overrides += ["data.custom_cls.path=pkg://verlog.sft", "data.custom_cls.name=LastTurnSFTDataset"]
    if cpu:  # else step 1 fails in SFTTrainer._get_batch_seqlens ("Torch not compiled with CUDA enabled")
        overrides.append("trainer.device=cpu")
    return overrides + list(config.verl)


def build_command(config: SFTConfig, model_path: str, train_file: str, val_file: str | None, cpu: bool) -> list[str]:
    """The torchrun command line of the run (``trainer.device=cpu`` on the CPU route)."""
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={config.train.nproc}",
        "-m",
        "verlog.sft" if cpu else "verl.trainer.sft_trainer",
    ]
    return cmd + verl_overrides(config, model_path, train_file, val_file, cpu=cpu)


def prepare_model(config: SFTModelConfig) -> str:
    """The model folder; built with ``verlog.testing.build_tiny_model`` when missing and ``build_tiny`` is set."""
    path = Path(config.path)
    if (path / "config.json").is_file():
        return str(path.resolve())
    if config.build_tiny:
        from verlog.testing import DEFAULT_CORPUS, build_tiny_model

        corpus = [*DEFAULT_CORPUS, *config.tokenizer_corpus]
        print(f"[verlog sft] building a tiny model at {path}", flush=True)
        build_tiny_model(path, corpus=corpus, **dict(config.tiny))
        return str(path.resolve())
    if config.path.startswith((".", "/")) or path.exists():
        raise SFTConfigError(
            f"model.path {config.path!r} is not a model folder (no config.json): give one, or set "
            "model.build_tiny=true to build a tiny model there"
        )
    return config.path


@dataclass
class SFTResult:
    """What a run produced."""

    model_dir: str
    checkpoint_dir: str
    steps: int
    losses: list[float]
    val_losses: list[float]
    data: DataReport
    wall_s: float
    command: list[str]


def run_sft(config: SFTConfig, *, dry_run: bool = False) -> SFTResult | list[str]:
    """Check the data, launch verl's SFT trainer, export ``<output_dir>/model``; ``dry_run`` returns the command.

    Raises:
        SFTDataError / SFTConfigError: before anything is launched.
        SFTRunError: verl's trainer exited with an error or saved no Hugging Face folder.
    """
    from transformers import AutoTokenizer

    config.validate()
    train_file, val_file = resolve_data(config.data)
    model_path = prepare_model(config.model)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    report = check_data(train_file, tokenizer, config.data.max_length, config.data.loss_on)
    if val_file:
        check_data(val_file, tokenizer, config.data.max_length, config.data.loss_on)
    if report.rows < config.train.batch_size:
        raise SFTConfigError(
            f"{train_file} has {report.rows} rows, fewer than train.batch_size = {config.train.batch_size}: verl "
            "drops incomplete batches, so no step would run; lower train.batch_size or make more demos"
        )
    from verlog.platform import enable_cpu_platform

    cpu = enable_cpu_platform()
    command = build_command(config, model_path, train_file, val_file, cpu)
    if dry_run:
        return command
    out = Path(config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    print(
        f"[verlog sft] {report.rows} rows (mean {report.mean_tokens:.0f} tokens, longest {report.max_tokens}), "
        f"{'CPU' if cpu else 'GPU'} x {config.train.nproc}, loss on {config.data.loss_on} assistant message(s)",
        flush=True,
    )
    start = time.perf_counter()
    losses, val_losses, last_step, tail = _stream(command, out / METRICS_FILE)
    wall = time.perf_counter() - start
    if tail is not None:
        raise SFTRunError(f"verl's SFT trainer failed ({tail[0]}); its last output lines:\n{tail[1]}")
    checkpoint = _latest_checkpoint(out / CHECKPOINTS)
    model_dir = export_hf_model(checkpoint / "huggingface", out / HF_EXPORT, tokenizer_from=model_path)
    print(f"[verlog sft] done in {wall:.0f} s: model in {model_dir} (use it as model.path of `verlog train`)")
    return SFTResult(str(model_dir), str(checkpoint), last_step, losses, val_losses, report, wall, command)


def _stream(command: list[str], metrics_path: Path) -> tuple[list[float], list[float], int, tuple[str, str] | None]:
    """Run ``command``, echo its output, collect ``train/loss`` and ``val/loss`` per step into ``metrics_path``."""
    env = dict(os.environ)
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env.setdefault("WANDB_MODE", "disabled")
    losses: list[float] = []
    val_losses: list[float] = []
    last_step = 0
    recent: list[str] = []
    with (
        open(metrics_path, "w") as metrics,
        subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, bufsize=1
        ) as proc,
    ):
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            recent = [*recent[-39:], line.rstrip("\n")]
            match = _STEP_LINE.search(line.rstrip())
            if not match:
                continue
            step, fields = int(match.group(1)), _parse_fields(match.group(2))
            last_step = max(last_step, step)
            if "train/loss" in fields:
                losses.append(fields["train/loss"])
            if "val/loss" in fields:
                val_losses.append(fields["val/loss"])
            metrics.write(json.dumps({"step": step, **fields}) + "\n")
            metrics.flush()
        code = proc.wait()
    failure = None if code == 0 else (f"exit code {code}", "\n".join(recent))
    return losses, val_losses, last_step, failure


def _parse_fields(text: str) -> dict[str, float]:
    fields = {}
    for part in text.split(" - "):
        key, _, value = part.partition(":")
        try:
            fields[key.strip()] = float(value)
        except ValueError:
            continue
    return fields


def _latest_checkpoint(root: Path) -> Path:
    steps = sorted(
        (int(p.name.rsplit("_", 1)[1]), p) for p in root.glob("global_step_*") if p.name.rsplit("_", 1)[1].isdigit()
    )
    if not steps or not (steps[-1][1] / "huggingface" / "config.json").is_file():
        raise SFTRunError(f"verl saved no Hugging Face checkpoint under {root} (expected global_step_K/huggingface)")
    return steps[-1][1]


def export_hf_model(source: str | Path, dest: str | Path, tokenizer_from: str | None = None) -> Path:
    """Copy verl's ``huggingface`` checkpoint folder to ``dest`` with ``config.json``'s dtype set to the stored one.

    verl writes ``dtype: bfloat16`` whatever the weights are; transformers 5 and vLLM would then load float32
    weights as bf16. The tokenizer files come from ``tokenizer_from`` when the checkpoint has none.
    """
    src, out = Path(source), Path(dest)
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(src, out)
    stored = _stored_dtype(out)
    config_path = out / "config.json"
    config = json.loads(config_path.read_text())
    if stored is not None:
        config["dtype"] = stored
        config.pop("torch_dtype", None)
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    if tokenizer_from is not None and not (out / "tokenizer_config.json").is_file():
        from transformers import AutoTokenizer

        AutoTokenizer.from_pretrained(tokenizer_from).save_pretrained(out)
    return out


def _stored_dtype(folder: Path) -> str | None:
    """The dtype of the first floating tensor in the folder's safetensors (as a transformers dtype name)."""
    names = {"F32": "float32", "BF16": "bfloat16", "F16": "float16"}
    for file in sorted(folder.glob("*.safetensors")):
        with open(file, "rb") as fh:
            size = int.from_bytes(fh.read(8), "little")
            header = json.loads(fh.read(size))
        for key, info in header.items():
            if key != "__metadata__" and info.get("dtype") in names:
                return names[info["dtype"]]
    return None


# --------------------------------------------------------------------------------------------------- rank entry
def _ensure_cpu_process_group() -> None:
    """Interim, until verlog.platform.cpu covers it: verl's ``initialize_global_process_group`` (the SFT trainer's;
    the PPO path uses the ``_ray`` variant, which the platform already fixes) builds ``"cpu:gloo,cpu:gloo"`` on the
    CPU, which torch refuses ("Duplicate device type cpu"). Use ``"cpu:gloo"``; a no-op once the platform patches it.
    """
    import verl.utils.distributed as dist_utils

    original = dist_utils.initialize_global_process_group
    if getattr(original, "__verlog_patched__", False):
        return

    def initialize_global_process_group(timeout_second: int = 36000) -> tuple[int, int, int]:
        from datetime import timedelta

        import torch.distributed

        torch.distributed.init_process_group(
            backend="cpu:gloo",
            timeout=timedelta(seconds=timeout_second),
            init_method=os.environ.get("DIST_INIT_METHOD", None),
        )
        return int(os.environ["LOCAL_RANK"]), int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])

    initialize_global_process_group.__verlog_patched__ = True  # type: ignore[attr-defined]
    dist_utils.initialize_global_process_group = initialize_global_process_group


def _rank_main() -> None:
    """What each torchrun rank runs on the CPU route: verl's own SFT entry point, after the platform is set up."""
    from verlog.platform import enable_cpu_platform

    enable_cpu_platform(force=True)
    _ensure_cpu_process_group()
    from verl.trainer import sft_trainer

    sft_trainer.main()


if __name__ == "__main__":
    _rank_main()
