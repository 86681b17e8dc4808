"""The model a training run trained, as a Hugging Face folder: what ``verlog eval --model RUN_DIR`` loads.

A run folder (``OUTPUT_DIR``), its ``checkpoints/`` folder, one ``global_step_K`` folder or its ``actor/`` folder
all designate the actor of a checkpoint: the latest complete one (the tracker ``latest_checkpointed_iteration.txt``
names only complete ones, docs/reliability.md) unless a step is given. verl keeps the actor as FSDP shards plus a
``huggingface/`` folder with the config and tokenizer, and full weights there only when
``checkpoint.save_contents`` includes ``hf_model``; without them the shards are merged on demand with verl's model
merger into ``actor/huggingface_merged/`` (once; later calls find it), written to a temporary folder that is renamed
into place when complete, so a kill never leaves half a model that looks complete. A LoRA run's checkpoint holds the
base weights and the adapter: the adapter is folded into the weights there (kept beside them in ``lora_adapter/``).
``verlog export`` (:mod:`verlog.trainer.export`) copies that folder, or its adapter, out of the checkpoint.

verl's model merger lives here (verlog/trainer/ is where verl's internals are used, checked against its version).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from verlog.console import QuietConsole
from verlog.errors import VerlogError
from verlog.models.folder import has_weights, record_stored_dtype
from verlog.run.folder import CHECKPOINTS, STEP_PREFIX, TRACKER, latest_step, step_folder

HF_SUBFOLDER = "huggingface"
"""The Hugging Face folder inside a checkpoint's ``actor/`` (verl's name)."""
SHARD_GLOB = "model_world_size_*_rank_*.pt"
"""verl's FSDP model shards in a checkpoint's ``actor/`` folder."""
ADAPTER_SUBFOLDER = "lora_adapter"
"""Where verl's model merger puts a LoRA run's adapter (a PEFT folder), inside the merged folder."""
MERGED_SUBFOLDER = "huggingface_merged"
"""Where verlog merges the shards of a checkpoint's ``actor/`` without Hugging Face weights (config, weights,
tokenizer and chat template: a complete Hugging Face folder)."""
LORA_META = "lora_train_meta.json"
"""verl's record of a LoRA checkpoint's rank and alpha in its ``actor/`` (absent from a full fine-tuning one)."""
MERGE_LOG = "huggingface_merged.log"
"""The merge's own output (verl's merger, torch, transformers), beside the merged folder in ``actor/``."""


class CheckpointModelError(VerlogError, ValueError):
    """A run or checkpoint folder that holds no model to load: the message names what is missing and the fix."""


def checkpoint_actor(path: str | os.PathLike[str], step: int | None = None) -> Path | None:
    """The ``actor/`` folder of the checkpoint that ``path`` designates (a run folder, its checkpoints/ folder, a
    ``global_step_K`` folder or an ``actor/`` folder), or None when ``path`` is none of these.

    Args:
        step: the iteration K of the checkpoint (``global_step_K``) in a run or checkpoints folder; None = the latest
            complete one. Given with a ``global_step_K`` or ``actor/`` folder, it must be that folder's K.

    Raises:
        CheckpointModelError: a run or checkpoints folder without a complete checkpoint (or without the one asked
            for), or a checkpoint folder of another iteration than ``step``.
    """
    root = Path(path).expanduser()
    if root.name == HF_SUBFOLDER and any(root.parent.glob(SHARD_GLOB)):  # actor/huggingface/ given itself
        root = root.parent
    if any(root.glob(SHARD_GLOB)) and (root / HF_SUBFOLDER).is_dir():
        actor = root
    elif (root / "actor").is_dir():
        actor = root / "actor"
    else:
        checkpoints = root / CHECKPOINTS if (root / CHECKPOINTS).is_dir() else root
        if not (checkpoints / TRACKER).exists() and not any(checkpoints.glob(f"{STEP_PREFIX}*")):
            return None
        return _step_actor(checkpoints, step)
    own = checkpoint_step(actor)
    if step is not None and own != step:
        raise CheckpointModelError(
            f"{actor.parent} is the checkpoint of iteration {own}, not {step}: give the run folder with that step, or "
            f"its global_step_{step} folder"
        )
    return actor


def checkpoint_step(actor: Path) -> int | None:
    """The iteration K of the checkpoint whose ``actor/`` folder this is (its parent's name ``global_step_K``)."""
    name = actor.parent.name
    tail = name.removeprefix(STEP_PREFIX)
    return int(tail) if tail != name and tail.isdigit() else None


def checkpoint_steps(checkpoints: Path) -> list[int]:
    """The iterations of the checkpoint folders (``global_step_K`` with an ``actor/``) in ``checkpoints``, sorted."""
    steps = (checkpoint_step(folder / "actor") for folder in checkpoints.glob(f"{STEP_PREFIX}*"))
    return sorted(k for k in steps if k is not None and (step_folder(checkpoints, k) / "actor").is_dir())


def _step_actor(checkpoints: Path, step: int | None) -> Path:
    """The ``actor/`` folder of checkpoint ``step`` in ``checkpoints`` (None: the latest complete one)."""
    if step is not None:
        actor = step_folder(checkpoints, step) / "actor"
        if not actor.is_dir():
            saved = ", ".join(map(str, checkpoint_steps(checkpoints))) or "none"
            raise CheckpointModelError(
                f"{checkpoints} holds no checkpoint of iteration {step} (iterations saved: {saved}): give one of those"
            )
        return actor
    latest = latest_step(checkpoints)
    if latest is None:
        raise CheckpointModelError(
            f"{checkpoints} holds no complete checkpoint (no {TRACKER}): the run saved none yet; wait for one "
            "(checkpoint.save_freq) or give a global_step_K folder"
        )
    actor = step_folder(checkpoints, latest) / "actor"
    if not actor.is_dir():
        raise CheckpointModelError(f"{actor} is missing although {checkpoints / TRACKER} names iteration {latest}")
    return actor


def lora_settings(actor: Path) -> dict[str, Any] | None:
    """A LoRA checkpoint's adapter settings as verl records them in ``actor/lora_train_meta.json`` (``r``,
    ``lora_alpha``, ``task_type``); None for a full fine-tuning checkpoint (verl writes that file for LoRA only).

    Raises:
        CheckpointModelError: the file does not parse.
    """
    path = actor / LORA_META
    if not path.is_file():
        return None
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CheckpointModelError(f"{path} cannot be read ({exc}): the checkpoint is damaged") from None
    if not isinstance(meta, dict):
        raise CheckpointModelError(f"{path} is not a JSON object: the checkpoint is damaged")
    return meta


def trained_model_folder(
    path: str | os.PathLike[str], on_merge: Callable[[str], None] | None = None, step: int | None = None
) -> Path | None:
    """The Hugging Face folder (config, weights, tokenizer) of the checkpoint ``path`` designates
    (:func:`checkpoint_actor`; ``step`` as there), merged by :func:`actor_model_folder`; None when ``path`` is not a
    run or checkpoint folder (then it is taken as a Hugging Face folder as is).

    Raises:
        CheckpointModelError: no complete checkpoint, no shards to merge, a merge that failed, or a checkpoint
            folder that cannot be written.
    """
    actor = checkpoint_actor(path, step)
    return None if actor is None else actor_model_folder(actor, on_merge)


def actor_model_folder(actor: Path, on_merge: Callable[[str], None] | None = None, merged_only: bool = False) -> Path:
    """The Hugging Face folder of a checkpoint's ``actor/``: ``huggingface/`` when verl saved weights there (not for a
    LoRA checkpoint: its adapter lives in the shards), else ``huggingface_merged/``, merged from verl's FSDP shards
    when missing (once; later calls find it).

    Args:
        on_merge: told one line before a merge starts (it takes a few seconds per 100M parameters).
        merged_only: always the merged folder (a LoRA checkpoint's adapter is only there, in ``lora_adapter/``).

    Raises:
        CheckpointModelError: as :func:`trained_model_folder`.
    """
    hf, merged = actor / HF_SUBFOLDER, actor / MERGED_SUBFOLDER
    full_hf = (hf / "config.json").is_file() and has_weights(hf)
    if full_hf and not merged_only and lora_settings(actor) is None:
        return hf
    if (merged / "config.json").is_file() and has_weights(merged):
        return merged
    if not any(actor.glob(SHARD_GLOB)):
        if full_hf and not merged_only:  # a LoRA run that saved Hugging Face weights only
            return hf
        raise CheckpointModelError(
            f"{actor} holds neither Hugging Face weights nor FSDP shards ({SHARD_GLOB}): the checkpoint is incomplete"
        )
    if not (hf / "config.json").is_file():
        raise CheckpointModelError(
            f"{hf} holds no config.json: verl saves it with every checkpoint; this one is damaged"
        )
    if on_merge is not None:
        on_merge(f"merging the FSDP shards of {actor} into {merged} (once)")
    merge_shards(actor, hf, merged)
    return merged


FILES_BESIDE_WEIGHTS = (
    "chat_template.jinja",
    "generation_config.json",
    "processor_config.json",
    "preprocessor_config.json",
    "video_preprocessor_config.json",
)
"""What a merged folder takes from the checkpoint's ``huggingface/`` besides the tokenizer: the chat template and
generation config (the tokenizer's save may leave them out) and a vision-language model's processor files (without
them its images cannot be prepared: ``verlog eval --max-image-history``)."""


def merge_shards(actor: Path, hf: Path, target: Path) -> None:
    """Merge the FSDP shards of ``actor`` into a Hugging Face folder ``target`` (config and tokenizer from ``hf``),
    through a temporary folder beside it, renamed into place when complete."""
    from verl.model_merger.base_model_merger import ModelMergerConfig

    try:
        scratch = Path(tempfile.mkdtemp(prefix=".verlog-merge-", dir=actor))
    except OSError as exc:
        raise CheckpointModelError(
            f"cannot write into {actor} to merge its shards ({exc.strerror or exc}): copy the checkpoint folder "
            "somewhere writable and give that"
        ) from None
    try:
        config = ModelMergerConfig(
            operation="merge",
            backend="fsdp",
            target_dir=str(scratch),
            local_dir=str(actor),
            hf_model_config_path=str(hf),
        )
        # the merger, torch and transformers print progress and warnings (some through logging handlers bound to
        # the terminal, which contextlib.redirect_* misses): all of it into actor/MERGE_LOG, at the descriptors
        try:
            with QuietConsole(actor / MERGE_LOG, title=f"merge {actor} -> {target}"):
                merger = full_precision_merger(config)
                merger.merge_and_save()
                merger.cleanup()
                if (scratch / ADAPTER_SUBFOLDER).is_dir():  # a LoRA run: the merger wrote base weights and adapter
                    merge_adapter(scratch, scratch / ADAPTER_SUBFOLDER)
        except Exception as exc:  # the merger raises ValueError, KeyError, RuntimeError, OSError, ...
            reason = " ".join(str(exc).split())[:300]
            raise CheckpointModelError(
                f"merging the FSDP shards of {actor} failed ({type(exc).__name__}: {reason}; log: "
                f"{actor / MERGE_LOG}); save Hugging Face weights with checkpoint.save_contents including hf_model"
            ) from None
        if not has_weights(scratch) or not (scratch / "config.json").is_file():
            raise CheckpointModelError(f"verl's model merger wrote no weights for {actor}")
        record_stored_dtype(scratch)
        for extra in FILES_BESIDE_WEIGHTS:
            if (hf / extra).is_file() and not (scratch / extra).exists():
                shutil.copy2(hf / extra, scratch / extra)
        os.replace(scratch, target)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def merge_adapter(folder: Path, adapter: Path) -> None:
    """Fold the PEFT LoRA ``adapter`` into the weights of the Hugging Face ``folder`` (in place: its weights become
    base + ``alpha / r * B A``), so that transformers and vLLM load the trained policy without PEFT. The adapter
    folder stays beside them (``--adapter-only`` exports it as it is)."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    merged = PeftModel.from_pretrained(base, adapter).merge_and_unload()
    for old in folder.glob("*.safetensors"):
        old.unlink()
    for old in folder.glob("*.safetensors.index.json"):
        old.unlink()
    merged.save_pretrained(folder, safe_serialization=True)


def full_precision_merger(config: object) -> object:
    """verl's FSDP model merger, keeping the shards' dtype: verl 0.9.1's casts every tensor to bfloat16, which on a
    CPU run (fp32 weights, docs/design.md "CPU precision") would evaluate and export another policy than the one
    trained (layer norms moved by up to 4e-3). Supports FSDP without tensor parallelism (a 1-D device mesh: what
    verlog trains with); other layouts fall back to verl's merge (bfloat16)."""
    import torch
    from torch.distributed.tensor import DTensor
    from verl.model_merger.fsdp_model_merger import FSDPModelMerger

    class FullPrecisionMerger(FSDPModelMerger):  # type: ignore[misc, valid-type]
        def _load_and_merge_state_dicts(
            self, world_size: int, total_shards: int, mesh_shape: tuple[int, ...], mesh_dim_names: tuple[str, ...]
        ) -> dict[str, torch.Tensor]:
            if len(mesh_shape) != 1 or total_shards != world_size:
                return super()._load_and_merge_state_dicts(world_size, total_shards, mesh_shape, mesh_dim_names)
            local = Path(self.config.local_dir)
            shards = [
                torch.load(
                    local / f"model_world_size_{world_size}_rank_{rank}.pt", map_location="cpu", weights_only=False
                )
                for rank in range(world_size)
            ]
            merged: dict[str, torch.Tensor] = {}
            for key in shards[0]:
                parts = [shard[key] for shard in shards]
                if not isinstance(parts[0], DTensor):
                    merged[key] = parts[0]
                    continue
                placement = parts[0].placements[-1]
                tensors = [part._local_tensor for part in parts]
                if placement.is_shard():
                    merged[key] = torch.cat(tensors, dim=placement.dim).contiguous()
                elif placement.is_replicate():
                    merged[key] = tensors[0]
                else:
                    return super()._load_and_merge_state_dicts(world_size, total_shards, mesh_shape, mesh_dim_names)
            return merged

    return FullPrecisionMerger(config)
