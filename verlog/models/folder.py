"""What a Hugging Face model folder must hold before anything loads it from there.

A ``config.json`` that parses, weights, a tokenizer with a chat template (every prompt is rendered with it), and a
context (``max_position_embeddings``) that holds the prompt budget plus the response; and the sizes of a tiny model
to build there (:class:`TinyModelSpec`), checked before it is built. ``verlog eval``, ``verlog
demos`` and ``verlog train``'s preflight check these first, so that a truncated copy or a base model's folder is one
line naming the file and the fix, not a traceback after Ray or an engine started.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verlog.errors import VerlogError

WEIGHT_GLOBS = ("*.safetensors", "pytorch_model*.bin", "model*.bin")
"""The weight files of a Hugging Face folder (one file or shards)."""
CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length")
"""Where a config.json gives the model's context length, in the order looked at."""


@dataclass(frozen=True)
class TinyModelSpec:
    """The sizes of a tiny random-weight model (``verlog tiny-model``, ``model.build_tiny``:
    :func:`verlog.models.tiny_model.build_tiny_model` builds it). head_dim must be >= 32 for vLLM's CPU attention."""

    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 2
    num_kv_heads: int = 1
    intermediate_size: int = 128
    vocab_size: int = 512
    max_position_embeddings: int = 4096
    seed: int = 0

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    def qwen2_sizes(self) -> dict[str, int]:
        """The model's sizes under Qwen2Config's names (``vocab_size`` aside: the tokenizer decides it)."""
        return {
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads,
            "max_position_embeddings": self.max_position_embeddings,
        }

    def validate(self) -> None:
        """Raise ValueError naming a size the model cannot have, and the fix."""
        if self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size {self.hidden_size} must divide by num_heads {self.num_heads}")
        if self.head_dim < 32:
            raise ValueError(
                f"head_dim = hidden_size / num_heads = {self.head_dim}; vLLM's CPU attention needs >= 32: "
                "raise hidden_size or lower num_heads"
            )
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads {self.num_heads} must divide by num_kv_heads {self.num_kv_heads}")
        if self.vocab_size < 300:
            raise ValueError(f"vocab_size {self.vocab_size} is below the 256 byte tokens plus merges: use >= 300")


class ModelFolderError(VerlogError, ValueError):
    """A model folder that cannot be loaded as it is: the message names the file and the fix."""


def has_weights(folder: str | os.PathLike) -> bool:
    """Whether ``folder`` holds weight files (:data:`WEIGHT_GLOBS`)."""
    return any(any(Path(folder).glob(pattern)) for pattern in WEIGHT_GLOBS)


def read_config(folder: str | os.PathLike) -> dict[str, Any]:
    """The parsed ``config.json`` of ``folder``.

    Raises:
        ModelFolderError: it is missing, does not parse (a truncated copy) or is not a JSON object.
    """
    path = Path(folder) / "config.json"
    if not path.is_file():
        raise ModelFolderError(f"{folder} holds no config.json: give a Hugging Face model folder")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ModelFolderError(
            f"{path} does not parse ({exc}): the file is truncated or damaged; copy or download the model again"
        ) from None
    if not isinstance(config, dict):
        raise ModelFolderError(f"{path} is not a JSON object: copy or download the model again")
    return config


def context_length(config: dict[str, Any]) -> int | None:
    """The most tokens the model takes (prompt plus response), from its config; None when the config does not say."""
    for section in (config, config.get("text_config") or {}):
        for key in CONTEXT_KEYS:
            value = section.get(key) if isinstance(section, dict) else None
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    return None


def context_problem(
    folder: str | os.PathLike, prompt_tokens: int, response_tokens: int, prompt_option: str, response_option: str
) -> str | None:
    """Why a prompt budget of ``prompt_tokens`` plus ``response_tokens`` does not fit the model's context, or None.

    The options name the two settings in the message (``rollout.max_prompt_tokens``, ``--max-prompt-tokens``).
    """
    limit = context_length(read_config(folder))
    total = prompt_tokens + response_tokens
    if limit is None or total <= limit:
        return None
    prompt = limit - response_tokens if response_tokens <= limit // 2 else limit - limit // 4
    example = f"{prompt_option}={prompt}" + (
        f" {response_option}={limit - prompt}" if prompt + response_tokens > limit else ""
    )
    return (
        f"{prompt_option}={prompt_tokens} + {response_option}={response_tokens} = {total} tokens exceed the model's "
        f"context of {limit} tokens (max_position_embeddings in {Path(folder) / 'config.json'}): lower them to "
        f"{limit} tokens together, e.g. {example}"
    )


def folder_problems(folder: str | os.PathLike) -> list[str]:
    """Why ``folder`` is not a loadable model folder: its config.json (missing, truncated), its weights (none)."""
    try:
        read_config(folder)
    except ModelFolderError as exc:
        return [str(exc)]
    if not has_weights(folder):
        globs = ", ".join(WEIGHT_GLOBS)
        return [f"{folder} holds a config.json but no weights ({globs}): the copy is incomplete; copy the model again"]
    return []


def load_chat_tokenizer(folder: str | os.PathLike) -> Any:
    """The tokenizer of ``folder`` (transformers' AutoTokenizer), which must have a chat template.

    Raises:
        ModelFolderError: it cannot be loaded (the reason), or it has no chat template (a base model).
    """
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(os.fspath(folder))
    except Exception as exc:  # transformers raises OSError, ValueError, KeyError, ... for a folder it cannot read
        reason = " ".join(str(exc).split())[:300]
        raise ModelFolderError(f"no tokenizer can be loaded from {folder} ({type(exc).__name__}: {reason})") from None
    if getattr(tokenizer, "chat_template", None) is None:
        raise ModelFolderError(
            f"the tokenizer in {folder} has no chat template, and every prompt is rendered with it: use an instruct "
            "(chat) model, or set tokenizer.chat_template and save it there (tokenizer.save_pretrained)"
        )
    return tokenizer


def tiny_model_problem(sizes: dict[str, Any], prompt_tokens: int, response_tokens: int) -> str | None:
    """Why a tiny model of ``sizes`` (:class:`TinyModelSpec`'s fields, ``model.tiny``) cannot be built or cannot hold
    ``prompt_tokens + response_tokens``; None when it can."""
    names = [f.name for f in dataclasses.fields(TinyModelSpec)]
    unknown = sorted(set(sizes) - set(names))
    if unknown:
        return f"model.tiny has no size {', '.join(unknown)}: its sizes are {', '.join(names)}"
    try:
        spec = TinyModelSpec(**sizes)
        spec.validate()
    except (TypeError, ValueError) as exc:
        return f"model.tiny: {exc}"
    if prompt_tokens + response_tokens > spec.max_position_embeddings:
        return (
            f"rollout.max_prompt_tokens={prompt_tokens} + rollout.max_response_tokens={response_tokens} exceed the "
            f"tiny model's context of {spec.max_position_embeddings} tokens: lower them, or raise "
            "model.tiny.max_position_embeddings"
        )
    return None


LORA_RANK_MAX = 512
"""The largest LoRA rank vLLM serves (its ``max_lora_rank`` choices end at 512; verl rounds a rank up to one)."""


def linear_module_names(config: dict[str, Any]) -> set[str]:
    """The names (last component, e.g. ``q_proj``) of the ``torch.nn.Linear`` layers of a causal LM with this
    ``config.json`` content, found by building it on the meta device (no weights, no memory)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    model_type = config.get("model_type")
    if not model_type:
        raise ModelFolderError("config.json has no model_type: the model's layers cannot be listed")
    hf_config = AutoConfig.for_model(model_type, **{k: v for k, v in config.items() if k != "model_type"})
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(hf_config)
    return {name.rsplit(".", 1)[-1] for name, module in model.named_modules() if isinstance(module, torch.nn.Linear)}


def lora_target_problem(config: dict[str, Any], target_modules: Any) -> str | None:
    """Why ``model.lora.target_modules`` cannot apply to the model of ``config`` (a name it has no linear layer of),
    or None. ``all-linear`` applies to any model."""
    if isinstance(target_modules, str):
        if target_modules == "all-linear":
            return None
        targets = [target_modules]
    else:
        targets = [str(t) for t in target_modules]
    if not targets:
        return "model.lora.target_modules is empty: give all-linear or module names such as [q_proj,v_proj]"
    try:
        names = linear_module_names(config)
    except Exception as exc:  # an architecture transformers does not know: the launch would fail the same way
        return f"the model's layers cannot be listed to check model.lora.target_modules ({type(exc).__name__}: {exc})"
    unknown = [t for t in targets if t not in names]
    if not unknown:
        return None
    listed = ", ".join(sorted(names))
    return (
        f"model.lora.target_modules names {', '.join(unknown)}, which the model ({config.get('model_type')}) has no "
        f"linear layer of: its linear layers are {listed}; give some of them, or all-linear"
    )


DTYPE_NAMES = {"F32": "float32", "BF16": "bfloat16", "F16": "float16"}
"""safetensors' dtype codes of floating tensors, as transformers names them."""


def stored_dtype(folder: Path) -> str | None:
    """The dtype of the first floating tensor in ``folder``'s safetensors files (read from their headers only)."""
    for file in sorted(folder.glob("*.safetensors")):
        with open(file, "rb") as fh:
            size = int.from_bytes(fh.read(8), "little")
            header = json.loads(fh.read(size))
        for key, info in header.items():
            if key != "__metadata__" and info.get("dtype") in DTYPE_NAMES:
                return DTYPE_NAMES[info["dtype"]]
    return None


def record_stored_dtype(folder: Path) -> None:
    """Set ``config.json``'s dtype to the one the weights are stored in: the config verl keeps in a checkpoint is the
    base model's (a Qwen2.5 model's says ``bfloat16``) whatever the shards hold, and transformers and vLLM load a
    folder in its config's dtype."""
    stored = stored_dtype(folder)
    path = folder / "config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    if stored is None or config.get("dtype") == stored:
        return
    config["dtype"] = stored
    config.pop("torch_dtype", None)
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
