"""Launching verl's SFT trainer under torchrun, following its progress, exporting the Hugging Face folder."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verlog.models.folder import record_stored_dtype
from verlog.run.summary import duration
from verlog.sft.config import SFTConfig, SFTConfigError, SFTModelConfig, SFTRunError
from verlog.sft.data import DataReport, check_data, data_texts, resolve_data
from verlog.sft.tapes import TapeSelection, is_tapes, select_episodes, write_tape_rows

HF_EXPORT = "model"
TAPE_DATA = "data"
"""Where the rows made from tapes go, under ``output_dir`` (train.parquet, val.parquet, tapes.json)."""
CHECKPOINTS = "checkpoints"
METRICS_FILE = "sft_metrics.jsonl"
SFT_LOG = "logs/sft.log"
"""verl's SFT trainer's output, under ``output_dir`` (appended at every start)."""
_STEP_LINE = re.compile(r"(?:^|\W)step:(\d+) - (.*)$")  # tqdm may print its bar first on the line


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
        overrides += ["data.custom_cls.path=pkg://verlog.sft.data", "data.custom_cls.name=LastTurnSFTDataset"]
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


def _will_build(config: SFTModelConfig) -> bool:
    """Whether the run builds a tiny model at ``model.path`` (``build_tiny`` and no model there yet)."""
    return config.build_tiny and not (Path(config.path) / "config.json").is_file()


def _tiny_corpus(config: SFTModelConfig, train_file: str | None, texts: list[str] | None) -> list[str]:
    from verlog.models.tiny_model import DEFAULT_CORPUS

    corpus = [*DEFAULT_CORPUS, *config.tokenizer_corpus]
    if config.tokenizer_from_data and train_file:
        corpus += data_texts(train_file)
    if config.tokenizer_from_data and texts:
        corpus += texts
    return corpus


def _tiny_spec(config: SFTModelConfig) -> Any:
    """The sizes of the tiny model to build (``model.tiny``), checked; :class:`SFTConfigError` naming the bad one."""
    from verlog.models.folder import TinyModelSpec

    try:
        spec = TinyModelSpec(**dict(config.tiny))
        spec.validate()
    except (TypeError, ValueError) as exc:
        raise SFTConfigError(f"model.tiny: {exc}; see configs/sft/cpu.yaml for sizes that work") from None
    return spec


def model_path_problem(config: SFTModelConfig) -> str | None:
    """Why ``model.path`` names no model (a local path without config.json, and no ``build_tiny``), or None."""
    path = Path(config.path)
    if (path / "config.json").is_file() or config.build_tiny:
        return None
    # a Hugging Face id is `name` or `namespace/name`; more slashes, a leading . or / or an existing path is local
    if config.path.startswith((".", "/", "~")) or path.exists() or config.path.count("/") > 1:
        return (
            f"model.path {config.path!r} is not a model folder (no config.json): give the folder of the model to "
            "fine-tune (e.g. model.path=outputs/tiny, from `verlog tiny-model outputs/tiny`), a Hugging Face id such "
            "as Qwen/Qwen2.5-0.5B-Instruct, or model.build_tiny=true to build a tiny model there"
        )
    return None


def model_tokenizer(
    config: SFTModelConfig, train_file: str | None = None, texts: list[str] | None = None
) -> tuple[Any, Any]:
    """The tokenizer of the model :func:`prepare_model` will give, without building that model, and (for a tiny model
    to build) the trained tokenizer to build it with, else None: loaded from ``model.path``, or trained as
    ``build_tiny_model`` trains it (on the same corpus). The data are checked with it before anything is built or
    launched."""
    problem = model_path_problem(config)
    if problem is not None:
        raise SFTConfigError(problem)
    if _will_build(config):
        return _tiny_tokenizer(config, train_file, texts)
    path = Path(config.path)
    return _load_tokenizer(str(path.resolve()) if (path / "config.json").is_file() else config.path), None


def _tiny_tokenizer(config: SFTModelConfig, train_file: str | None, texts: list[str] | None) -> tuple[Any, Any]:
    """The tokenizer of the tiny model to build, trained now, as the model folder will load it: transformers loads a
    Qwen2 folder's tokenizer with Qwen2's own pre-tokenizer (digits one by one), not as it was trained, so it goes
    through a throwaway folder with the model's config (kilobytes, in the system's temporary folder). The model is
    then built with the trained one (:func:`prepare_model`). Returns (as loaded, as trained)."""
    import tempfile

    from transformers import AutoTokenizer, Qwen2Config

    from verlog.models.tiny_model import train_tokenizer

    trained = train_tokenizer(_tiny_corpus(config, train_file, texts), _tiny_spec(config).vocab_size)
    with tempfile.TemporaryDirectory(prefix="verlog-sft-tokenizer-") as folder:
        Qwen2Config(vocab_size=len(trained)).save_pretrained(folder)
        trained.save_pretrained(folder)
        loaded = AutoTokenizer.from_pretrained(folder)
    return loaded, trained


def prepare_model(
    config: SFTModelConfig, train_file: str | None = None, texts: list[str] | None = None, tokenizer: Any = None
) -> str:
    """The model folder; built with ``verlog.models.tiny_model.build_tiny_model`` when missing and ``build_tiny`` is set
    (its tokenizer also trained on ``train_file``'s message texts, or on ``texts``, when ``tokenizer_from_data`` is set;
    or ``tokenizer``, the one :func:`model_tokenizer` trained and the data were checked with)."""
    path = Path(config.path)
    if (path / "config.json").is_file():
        return str(path.resolve())
    if config.build_tiny:
        from verlog.models.tiny_model import build_tiny_model

        corpus = _tiny_corpus(config, train_file, texts) if tokenizer is None else None
        print(f"[verlog sft] building a tiny model at {path}", flush=True)
        build_tiny_model(path, corpus=corpus, tokenizer=tokenizer, **dict(config.tiny))
        return str(path.resolve())
    problem = model_path_problem(config)
    if problem is not None:
        raise SFTConfigError(problem)
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


def run_sft(config: SFTConfig, *, dry_run: bool = False, verbose: bool = False) -> SFTResult | list[str]:
    """Check the data, launch verl's SFT trainer, export ``<output_dir>/model``; ``dry_run`` returns the command.
    verl's output goes to ``<output_dir>/logs/sft.log`` and about ten progress lines to the console (``verbose``:
    verl's output on the console as well).

    Tapes (``data.train`` a tapes folder or file) are selected before the model is prepared (an empty selection is
    refused first), then replayed into ``<output_dir>/data`` with the model's tokenizer (a dry run writes them too).

    Raises:
        SFTDataError / SFTConfigError: before anything is launched.
        SFTRunError: verl's trainer exited with an error or saved no Hugging Face folder.
    """
    config.validate()
    selection: TapeSelection | None = None
    texts: list[str] | None = None
    # the data are checked with the model's tokenizer before the model is built (a dry run builds none)
    if is_tapes(config.data.train):
        selection = select_episodes(config.data.train, config.data.tapes)
        texts = selection.texts()
        tokenizer, trained = model_tokenizer(config.model, texts=texts)
        train_file, val_file, manifest = write_tape_rows(
            selection, tokenizer, config.data.tapes, Path(config.output_dir) / TAPE_DATA
        )
        if config.data.val:
            val_file = resolve_data(dataclasses.replace(config.data, train=train_file))[1]
        print(
            f"[verlog sft] tapes of {config.data.train}: {manifest['counts']['kept']} of "
            f"{manifest['counts']['episodes']} episodes kept, {manifest['rows_train']} train rows, "
            f"{manifest['rows_val']} val rows in {Path(config.output_dir) / TAPE_DATA}",
            flush=True,
        )
    else:
        train_file, val_file = resolve_data(config.data)
        tokenizer, trained = model_tokenizer(config.model, train_file)
    report, val_file = _check_rows(config, train_file, val_file, tokenizer, _image_tokens(config, train_file))
    t = config.train
    steps_per_epoch = (report.rows // t.nproc) // (t.batch_size // t.nproc)  # each rank drops its incomplete batch
    if t.steps is not None and t.steps > t.epochs * steps_per_epoch:  # verl stops after the epochs, saving nothing
        t.epochs = -(-t.steps // steps_per_epoch)
        print(f"[verlog sft] train.steps = {t.steps} needs {t.epochs} epochs of {steps_per_epoch} steps", flush=True)
    from verlog.platform import enable_cpu_platform

    cpu = enable_cpu_platform()
    if dry_run:  # the command the run would launch, with the model folder it would build: nothing is built
        local = Path(config.model.path)
        model_path = str(local.resolve()) if local.exists() or _will_build(config.model) else config.model.path
        return build_command(config, model_path, train_file, val_file, cpu)
    # a tiny model gets the tokenizer the data were checked with (BPE training may break ties otherwise next time)
    model_path = prepare_model(config.model, train_file if selection is None else None, texts, tokenizer=trained)
    command = build_command(config, model_path, train_file, val_file, cpu)
    out = Path(config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    print(
        f"[verlog sft] {report.rows} rows (mean {report.mean_tokens:.0f} tokens, longest {report.max_tokens}), "
        f"{'CPU' if cpu else 'GPU'} x {config.train.nproc}, loss on {config.data.loss_on} assistant message(s)",
        flush=True,
    )
    start = time.perf_counter()
    log = out / SFT_LOG
    total = t.steps if t.steps is not None else t.epochs * steps_per_epoch
    if not verbose:
        print(f"[verlog sft] verl's output: {log} (--verbose shows it here)", flush=True)
    losses, val_losses, last_step, tail = _stream(command, out / METRICS_FILE, log, total, verbose)
    wall = time.perf_counter() - start
    if tail is not None:
        raise SFTRunError(f"verl's SFT trainer failed ({tail[0]}; full log: {log}); its last output lines:\n{tail[1]}")
    checkpoint = _latest_checkpoint(out / CHECKPOINTS)
    model_dir = export_hf_model(checkpoint / "huggingface", out / HF_EXPORT, tokenizer_from=model_path)
    print(f"[verlog sft] done in {wall:.0f} s: model in {model_dir} (use it as model.path of `verlog train`)")
    return SFTResult(str(model_dir), str(checkpoint), last_step, losses, val_losses, report, wall, command)


def _image_tokens(config: SFTConfig, train_file: str) -> Any:
    """For rows with images (an ``images`` column): the tokens per image of ``model.path``'s processor, which must be
    a vision-language model folder (SFTConfigError naming the fix otherwise); None for text rows."""
    import pyarrow.parquet as pq

    from verlog.sft.data import IMAGES_COLUMN

    if IMAGES_COLUMN not in pq.read_schema(train_file).names:
        return None
    from verlog.errors import ImageSetupError
    from verlog.models.vision import ImageTokenCounter, is_vision_model, load_vision_processor

    if _will_build(config.model) or not is_vision_model(config.model.path):
        raise SFTConfigError(
            f"{train_file} has images: model.path must be a vision-language model folder (a config.json with a "
            "vision_config, and its processor; e.g. `verlog tiny-model --vision OUT`, then model.path=OUT "
            "model.build_tiny=false)"
        )
    try:
        return ImageTokenCounter(load_vision_processor(config.model.path))
    except ImageSetupError as exc:
        raise SFTConfigError(f"model.path: {exc}") from None


def _check_rows(
    config: SFTConfig, train_file: str, val_file: str | None, tokenizer: Any, image_tokens: Any = None
) -> tuple[DataReport, str | None]:
    """The train file's :class:`DataReport` and the validation file to use (None when it has fewer rows than a
    batch: verl would average zero batches into a nan val/loss). Raises SFTConfigError when the train file has fewer
    rows than a batch."""
    data = config.data
    report = check_data(train_file, tokenizer, data.max_length, data.loss_on, image_tokens=image_tokens)
    if val_file:
        val_rows = check_data(val_file, tokenizer, data.max_length, data.loss_on, image_tokens=image_tokens).rows
        if val_rows < config.train.batch_size:
            print(f"[verlog sft] {val_file} has {val_rows} rows < train.batch_size: no validation", flush=True)
            val_file = None
    if report.rows < config.train.batch_size:
        raise SFTConfigError(
            f"{train_file} has {report.rows} rows, fewer than train.batch_size = {config.train.batch_size}: verl "
            "drops incomplete batches, so no step would run; lower train.batch_size, or give more rows (more demos or "
            "taped episodes)"
        )
    return report, val_file


def _load_tokenizer(model_path: str) -> Any:
    """The tokenizer of ``model_path``, or :class:`SFTConfigError` naming model.path when none loads."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(model_path)
    except (OSError, ValueError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SFTConfigError(
            f"model.path {model_path!r}: no tokenizer loads from it ({reason}); give a model folder with a tokenizer, "
            "or model.build_tiny=true with a new path"
        ) from None


def _stream(
    command: list[str], metrics_path: Path, log_path: Path, total_steps: int, verbose: bool
) -> tuple[list[float], list[float], int, tuple[str, str] | None]:
    """Run ``command``, its output into ``log_path`` (and the console when ``verbose``), ``train/loss`` and
    ``val/loss`` per step into ``metrics_path``, a progress line about every tenth of ``total_steps``."""
    env = dict(os.environ)
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env.setdefault("WANDB_MODE", "disabled")
    losses: list[float] = []
    val_losses: list[float] = []
    last_step = 0
    recent: list[str] = []
    every = max(1, total_steps // 10)
    started = time.monotonic()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with (
        open(metrics_path, "w") as metrics,
        open(log_path, "a", encoding="utf-8") as log,
        subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, bufsize=1
        ) as proc,
    ):
        assert proc.stdout is not None
        log.write(f"\n===== {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(command)}\n")
        for line in proc.stdout:
            log.write(line)
            log.flush()
            if verbose:
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
            if not verbose and "train/loss" in fields and (step % every == 0 or step in (1, total_steps)):
                elapsed = time.monotonic() - started
                eta = elapsed / step * max(total_steps - step, 0)
                numbers = ", ".join(f"{k} {fields[k]:.4f}" for k in ("train/loss", "val/loss") if k in fields)
                print(
                    f"[verlog sft] step {step}/{total_steps} | {numbers}, elapsed {duration(elapsed)}, "
                    f"ETA {duration(eta)}",
                    flush=True,
                )
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
    record_stored_dtype(out)
    if tokenizer_from is not None and not (out / "tokenizer_config.json").is_file():
        from transformers import AutoTokenizer

        AutoTokenizer.from_pretrained(tokenizer_from).save_pretrained(out)
    return out
