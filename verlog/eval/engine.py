"""The model an evaluation talks to: resolve a model path, load its tokenizer, start one generation engine.

``--model`` may be a Hugging Face folder, a verl checkpoint's ``huggingface/`` folder, a ``global_step_K`` folder
(its ``actor/huggingface`` or ``huggingface`` is used), a checkpoints folder with ``latest_checkpointed_iteration.txt``
(the latest step is used) or the run folder of ``verlog train`` (the latest step of its ``checkpoints/``). The
engines are those of :mod:`verlog.rollout.generator`: a standalone vLLM engine (CPU or GPU; start-up takes tens of
seconds, so an evaluation starts it once for all its tasks) or transformers.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from verlog.errors import EngineStartError, VerlogError
from verlog.models.folder import ModelFolderError, has_weights, load_chat_tokenizer
from verlog.models.vision import is_vision_model, placeholder_token_ids, vllm_vision_kwargs
from verlog.prompting.sampling import SamplingConfig
from verlog.rollout.generator import Generator, TransformersGenerator, VllmEngineGenerator
from verlog.rollout.stepper import GeneratorPolicy, Policy
from verlog.run.folder import RunFolder, latest_step, step_folder

ENGINES = ("vllm", "transformers")
DTYPES = ("auto", "float32", "bfloat16", "float16")


class EvalModelError(VerlogError, ValueError):
    """The model to evaluate cannot be found or loaded as given."""


def resolve_model_path(path: str | Path) -> Path:
    """The Hugging Face folder (config and weights) that ``path`` designates; see the module docstring.

    Raises:
        EvalModelError: nothing loadable there; the message lists the folders checked and the fix.
    """
    root = Path(path).expanduser()
    if not root.exists():
        raise EvalModelError(f"model path {str(root)!r} does not exist: give a Hugging Face folder or a checkpoint")
    run = RunFolder(root)
    if run.checkpoints.is_dir() and not (root / "config.json").is_file():  # the run folder of verlog train
        if not run.tracker.is_file():
            raise EvalModelError(
                f"the run {str(root)!r} saved no checkpoint yet: train with checkpoint.save_freq > 0 (a checkpoint "
                "every that many iterations and at the last), or give a Hugging Face folder"
            )
        return resolve_model_path(run.checkpoints)
    candidates = [root, root / "huggingface", root / "actor" / "huggingface"]
    step = latest_step(root)  # root: a checkpoints folder
    if step is not None:
        step_dir = step_folder(root, step)
        candidates += [step_dir / "actor" / "huggingface", step_dir / "huggingface"]
    configs_without_weights = []
    for folder in candidates:
        if (folder / "config.json").is_file():
            if has_weights(folder):
                return folder
            configs_without_weights.append(folder)
    if configs_without_weights:
        raise EvalModelError(
            f"{configs_without_weights[0]} has a config but no weights: verl saves the model weights there only "
            "with checkpoint.save_contents including hf_model (the recipes in recipes/ set it); for an older "
            "checkpoint merge the FSDP shards first: python -m verl.model_merger merge --backend fsdp "
            "--local_dir <.../actor> --target_dir <out>"
        )
    checked = ", ".join(str(c) for c in candidates)
    raise EvalModelError(f"no Hugging Face model (config.json + weights) found; checked {checked}")


def resolve_dtype(dtype: str, on_gpu: bool) -> str:
    """``auto`` means float32 on CPU (faster than bf16 there, and verl's checkpoints hold fp32) and the model's own
    dtype on a GPU."""
    if dtype not in DTYPES:
        raise EvalModelError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    if dtype == "auto":
        return "auto" if on_gpu else "float32"
    return dtype


class EvalModel(Protocol):
    """What an evaluation needs of a model: a local engine (:class:`LoadedModel`) or a served one
    (:class:`verlog.eval.endpoint.EndpointModel`); the runner does not know which."""

    tokenizer: Any
    engine: str

    @property
    def model_path(self) -> Path | str: ...

    def policy(self, sampling: SamplingConfig, retries: int = 1) -> Policy: ...

    def describe(self) -> dict[str, Any]: ...

    def close(self) -> None: ...


@dataclass
class LoadedModel:
    """A started engine with its tokenizer, and what was loaded (for the summary)."""

    generator: Generator
    tokenizer: Any
    model_path: Path
    engine: str
    dtype: str
    device: str
    seed: int | None = None
    """Each request's sampling seed derives from it (:func:`verlog.rollout.stepper.request_seed`)."""

    def describe(self) -> dict[str, str]:
        return {"path": str(self.model_path), "engine": self.engine, "dtype": self.dtype, "device": self.device}

    def policy(self, sampling: SamplingConfig, retries: int = 1) -> Policy:
        """What the runner plays with: the engine behind a :class:`~verlog.rollout.stepper.GeneratorPolicy`."""
        return GeneratorPolicy(self.generator, self.tokenizer, sampling, retries=retries, seed=self.seed)

    def close(self) -> None:
        """Stop the engine (vLLM's processes; nothing for transformers)."""
        close = getattr(self.generator, "close", None)
        if callable(close):
            close()


CPU_KV_CACHE_GIB = 1
"""KV cache of an evaluation's vLLM engine on CPU, in GiB, unless ``VLLM_CPU_KVCACHE_SPACE`` sets it (about a million
tokens of the tiny test models; vLLM queues what does not fit)."""


def vllm_engine_kwargs(
    folder: Path,
    dtype: str,
    max_model_len: int,
    seed: int,
    on_gpu: bool,
    gpu_memory_utilization: float,
    images_per_prompt: int = 1,
) -> dict[str, Any]:
    """The arguments of the evaluation's ``vllm.LLM``.

    A vision-language model (``verlog.models.vision.is_vision_model``) gets the training rollout's VLM settings
    (``verlog.models.vision.vllm_vision_kwargs``: ``images_per_prompt`` images, no videos, pixels normalised by the
    processor).

    On CPU the KV cache is sized explicitly (:data:`CPU_KV_CACHE_GIB`): left to vLLM, it reserves
    ``gpu_memory_utilization`` (0.92) of the machine's memory, and refuses to start while anything else, a training
    run for example, holds more than the remaining 8%.
    """
    kwargs: dict[str, Any] = {
        "model": str(folder),
        "tokenizer": str(folder),
        "dtype": dtype,
        "max_model_len": int(max_model_len),
        "seed": int(seed),
    }
    if is_vision_model(folder):
        kwargs.update(vllm_vision_kwargs(images_per_prompt))
    if on_gpu:
        kwargs["gpu_memory_utilization"] = gpu_memory_utilization
    else:
        kwargs["enforce_eager"] = True  # CUDA graphs do not exist on CPU
        kwargs["kv_cache_memory_bytes"] = CPU_KV_CACHE_GIB * 2**30  # VLLM_CPU_KVCACHE_SPACE, when set, wins
    return kwargs


def load_model(
    path: str | Path,
    *,
    engine: str = "vllm",
    dtype: str = "auto",
    max_model_len: int = 2048,
    seed: int = 0,
    gpu_memory_utilization: float = 0.9,
    images_per_prompt: int = 1,
) -> LoadedModel:
    """Start ``engine`` on the model at ``path`` (resolved by :func:`resolve_model_path`).

    Args:
        engine: ``vllm`` (batched; on CPU the calling script needs an ``if __name__ == "__main__":`` guard, which the
            ``verlog`` command has) or ``transformers`` (one sequence at a time; no start-up cost).
        dtype: ``auto``, ``float32``, ``bfloat16`` or ``float16`` (see :func:`resolve_dtype`).
        max_model_len: prompt plus response tokens the vLLM engine must hold.
        seed: sampling seed of the engine.
        gpu_memory_utilization: vLLM's share of GPU memory (ignored on CPU).
        images_per_prompt: most images in one prompt of a vision-language model (the memory's
            ``max_image_history``; vLLM's ``limit_mm_per_prompt``).
    """
    if engine not in ENGINES:
        raise EvalModelError(f"engine must be one of {ENGINES}, got {engine!r}")
    from verlog.platform.detect import gpu_present

    folder = resolve_model_path(path)
    on_gpu = gpu_present()
    chosen = resolve_dtype(dtype, on_gpu)
    try:
        tokenizer = load_chat_tokenizer(folder)
    except ModelFolderError as exc:
        raise EvalModelError(str(exc)) from None
    device = "cuda" if on_gpu else "cpu"
    if engine == "transformers":
        import torch
        from transformers import AutoModelForCausalLM

        torch_dtype = "auto" if chosen == "auto" else getattr(torch, chosen)
        model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch_dtype).to(device)
        generator: Generator = TransformersGenerator(model, tokenizer, seed=seed)
    else:
        from vllm import LLM

        if is_vision_model(folder):  # vLLM's Qwen2-VL module and processor without torchvision (patches 9 and 10)
            from verlog.platform.cpu import apply_vision_shims

            apply_vision_shims()
        kwargs = vllm_engine_kwargs(
            folder, chosen, max_model_len, seed, on_gpu, gpu_memory_utilization, images_per_prompt
        )
        try:
            llm = LLM(**kwargs)
        except Exception as exc:  # vLLM's engine process logs the cause; its exception says only that it failed
            first = (str(exc).splitlines() or [""])[0]
            raise EngineStartError(
                f"vLLM did not start on {folder} ({type(exc).__name__}: {first}); its log above names the cause (on"
                " CPU, often memory: VLLM_CPU_KVCACHE_SPACE sets the KV cache in GiB); --engine transformers needs no"
                " vLLM"
            ) from None
        placeholders = placeholder_token_ids(tokenizer) if is_vision_model(folder) else []
        generator = VllmEngineGenerator(llm, placeholders)
    return LoadedModel(generator, tokenizer, folder, engine, chosen, device, seed)
