"""A trained policy out of verlog: a checkpoint as a plain Hugging Face folder, or its LoRA adapter as a PEFT folder
(``verlog export``, docs/export.md).

The model comes from :mod:`verlog.trainer.checkpoint_model` (verl's FSDP shards merged in full precision, a LoRA
adapter folded into the weights); the export copies what transformers and vLLM load (weights in safetensors,
config.json with the dtype the weights are stored in, generation config, tokenizer, chat template) and writes
``verlog_export.json`` (where it came from). An adapter export holds the PEFT adapter and the tokenizer, with the base
model named in ``adapter_config.json``: the model the run started from (``model.path``), whose weights a LoRA run
never changes.

Everything is written into a hidden folder beside the destination and renamed into place when complete: a killed
export leaves ``.NAME.export-*`` beside it, never a folder named NAME that looks complete.
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verlog.errors import RunFault, VerlogError
from verlog.models.folder import has_weights, record_stored_dtype
from verlog.run.folder import CHECKPOINTS, CONFIG_FILE, VERL_CONFIG_FILE
from verlog.trainer.checkpoint_model import (
    ADAPTER_SUBFOLDER,
    CheckpointModelError,
    actor_model_folder,
    checkpoint_actor,
    checkpoint_step,
    lora_settings,
)
from verlog.version import __version__

EXPORT_META = "verlog_export.json"
"""What the export holds and where it came from, written into every export."""
EXPORT_FORMAT = "verlog.export/1"
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")
"""A PEFT adapter folder, as verl's model merger writes it."""
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "chat_template.jinja",
    "chat_template.json",
)
"""The tokenizer and its chat template (whichever of these files the model has)."""
MODEL_FILES = ("config.json", "generation_config.json", "*.safetensors", "*.safetensors.index.json", "*.py")
"""The model: config, generation config, weights (one file or shards with their index), custom code if any."""


class ExportError(VerlogError, ValueError):
    """An export that cannot be made as asked: the message names the input and the fix."""


class ExportWriteError(RunFault):
    """The export could not be written (a full disk, a folder gone): nothing was left under the destination."""


@dataclass(frozen=True)
class ExportSource:
    """The checkpoint an export reads.

    Attributes:
        actor: the checkpoint's ``actor/`` folder.
        step: its iteration (``global_step_K``), when its folder says.
        lora: verl's LoRA settings of the checkpoint (``r``, ``lora_alpha``); None for full fine-tuning.
        base_model: the model the run started from (its ``model.path``), when the run's config is beside the
            checkpoint; a LoRA adapter applies to it.
    """

    actor: Path
    step: int | None
    lora: dict[str, Any] | None
    base_model: str | None

    def describe(self) -> str:
        kind = f"LoRA rank {self.lora.get('r')}" if self.lora else "full fine-tuning"
        return f"{self.actor.parent} (iteration {self.step}, {kind})"


def out_problem(out: Path) -> str | None:
    """Why ``out`` cannot receive an export, or None: it must not exist, or be an empty folder (never overwritten)."""
    from verlog.run.output_folder import creation_problem

    if out.exists() and not out.is_dir():
        return f"--out {str(out)!r} is a file: give a new folder"
    if out.is_dir() and any(out.iterdir()):
        return (
            f"--out {str(out)!r} exists and is not empty (an export never overwrites): give a new folder, or remove "
            "that one first"
        )
    problem = creation_problem(out.parent)
    return None if problem is None else f"--out {str(out)!r} cannot be created: {problem}"


def find_source(path: str | os.PathLike[str], step: int | None = None) -> ExportSource:
    """The checkpoint that ``path`` designates (a run folder, its ``checkpoints/``, a ``global_step_K`` folder or its
    ``actor/``; the latest complete checkpoint unless ``step`` is given), checked before anything is loaded.

    Raises:
        ExportError: ``path`` does not exist, is not a run or a checkpoint, or holds no (such) checkpoint.
    """
    root = Path(path).expanduser()
    if not root.exists():
        raise ExportError(f"{path} does not exist: give the output_dir of a verlog train run, or a checkpoint in it")
    try:
        actor = checkpoint_actor(root, step)
        lora = None if actor is None else lora_settings(actor)
    except CheckpointModelError as exc:
        raise ExportError(str(exc)) from None
    if actor is None:
        if (root / "config.json").is_file() and has_weights(root):
            raise ExportError(
                f"{path} is a Hugging Face model folder already, not a run or a checkpoint: use it as it is (copy it), "
                "or give the run folder it was trained in"
            )
        raise ExportError(
            f"{path} is neither a run folder nor a checkpoint (no {CHECKPOINTS}/, global_step_K/ or actor/ with FSDP "
            "shards): give the output_dir of verlog train, or one of its checkpoints/global_step_K folders"
        )
    return ExportSource(actor, checkpoint_step(actor), lora, run_base_model(actor))


def run_base_model(actor: Path) -> str | None:
    """The ``model.path`` the run of this checkpoint started from (``verl_config.yaml``, the path verl loaded, else
    verlog's ``config.yaml``, in the run folder above ``checkpoints/``); None when neither is there."""
    import yaml

    run = actor.parent.parent.parent
    if actor.parent.parent.name != CHECKPOINTS:
        return None
    sources = ((VERL_CONFIG_FILE, ("actor_rollout_ref", "model", "path")), (CONFIG_FILE, ("model", "path")))
    for name, keys in sources:
        try:
            node: Any = yaml.safe_load((run / name).read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError):
            continue
        for key in keys:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, str) and node:
            local = Path(node).expanduser()
            return str(local.resolve()) if not local.is_absolute() and local.exists() else node
    return None


def export_checkpoint(
    source: ExportSource, out: Path, adapter_only: bool = False, say: Callable[[str], None] = print
) -> Path:
    """Write the export of ``source`` into ``out`` (which :func:`out_problem` accepts): the model with any LoRA
    adapter merged, or with ``adapter_only`` the adapter as a PEFT folder; returns ``out``.

    Raises:
        ExportError: ``adapter_only`` for a full fine-tuning checkpoint, or a merge that failed.
        ExportWriteError: the disk refused a write.
    """
    if adapter_only and source.lora is None:
        raise ExportError(
            f"{source.actor.parent} is a full fine-tuning checkpoint (no LoRA adapter): drop --adapter-only to export "
            "the whole model"
        )
    what = "its LoRA adapter" if adapter_only else "the model" + (", LoRA merged," if source.lora else "")
    say(f"{what} of checkpoint {source.describe()}")
    try:
        model = actor_model_folder(source.actor, on_merge=say, merged_only=adapter_only)
    except CheckpointModelError as exc:
        raise ExportError(str(exc)) from None
    scratch = out.parent / f".{out.name}.export-{uuid.uuid4().hex[:8]}"
    try:
        scratch.mkdir(parents=True)  # the umask's mode (a temporary folder's would be private)
    except OSError as exc:
        raise ExportWriteError(f"cannot write beside {out}: {exc.strerror or exc}") from None
    try:
        if adapter_only:
            files = _copy_adapter(model / ADAPTER_SUBFOLDER, model, scratch, source.base_model)
        else:
            files = _copy_model(model, scratch)
        _write_meta(scratch, source, adapter_only, files)
        say(f"wrote {len(files) + 1} files ({_megabytes(scratch)}) into {scratch}; renaming it to {out}")
        os.replace(scratch, out)  # replaces an empty folder, never one that holds something
    except OSError as exc:
        reason = exc.strerror or exc
        raise ExportWriteError(f"writing the export {out} failed ({reason}); nothing was left there") from None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return out


def _copy_model(model: Path, dest: Path) -> list[str]:
    """Copy the Hugging Face folder ``model`` (no LoRA adapter subfolder, no logs) into ``dest``."""
    files = _matching(model, MODEL_FILES + TOKENIZER_FILES)
    for name in files:
        shutil.copyfile(model / name, dest / name)
    record_stored_dtype(dest)
    return files


def _copy_adapter(adapter: Path, model: Path, dest: Path, base_model: str | None) -> list[str]:
    """Copy the PEFT adapter and the tokenizer into ``dest``, naming ``base_model`` in ``adapter_config.json``."""
    missing = [name for name in ADAPTER_FILES if not (adapter / name).is_file()]
    if missing:
        raise ExportError(f"{adapter} lacks {', '.join(missing)}: the merge was cut; delete {model} and export again")
    config = json.loads((adapter / ADAPTER_FILES[0]).read_text(encoding="utf-8"))
    config["base_model_name_or_path"] = base_model
    config["inference_mode"] = True
    (dest / ADAPTER_FILES[0]).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    shutil.copyfile(adapter / ADAPTER_FILES[1], dest / ADAPTER_FILES[1])
    tokenizer = _matching(model, TOKENIZER_FILES)
    for name in tokenizer:
        shutil.copyfile(model / name, dest / name)
    return [*ADAPTER_FILES, *tokenizer]


def _matching(folder: Path, patterns: tuple[str, ...]) -> list[str]:
    """The names of the files directly in ``folder`` that match any of ``patterns``, sorted."""
    return sorted({p.name for pattern in patterns for p in folder.glob(pattern) if p.is_file()})


def _write_meta(dest: Path, source: ExportSource, adapter_only: bool, files: list[str]) -> None:
    lora = source.lora
    meta = {
        "format": EXPORT_FORMAT,
        "verlog_version": __version__,
        "exported_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "source": str(source.actor.parent.resolve()),
        "step": source.step,
        "contents": "lora_adapter" if adapter_only else "model",
        "lora": None if lora is None else {"rank": lora.get("r"), "alpha": lora.get("lora_alpha")},
        "lora_merged": lora is not None and not adapter_only,
        "base_model": source.base_model if lora is not None else None,
        "files": files,
    }
    (dest / EXPORT_META).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")


def _megabytes(folder: Path) -> str:
    return f"{sum(p.stat().st_size for p in folder.iterdir() if p.is_file()) / 1e6:.1f} MB"
