"""verlog's FSDP engines: verl 0.9.1's actor and critic engines with shared-prefix passes (``hardware.prefix_sharing``).

verl builds its training engines through a registry keyed by device and vendor
(``verl.workers.engine.base.EngineRegistry``): this module registers two subclasses of verl's FSDP engines under the
vendor ``verlog`` (devices cuda, npu and cpu), and the launcher selects them with ``VERL_ENGINE_VENDOR=verlog``, an
override verl's lookup reads. Nothing of verl is patched.

Each engine replaces one method, ``forward_step`` (one micro-batch: forward, outputs, loss), and only for micro-batches
it can share: the rows are grouped by their token prefixes (:func:`verlog.trainer.prefix_sharing.find_prefix_groups`),
every prefix runs once, and the outputs are laid out exactly as verl's own (nested, one value per position) with the
positions nobody reads left at 0: log-probs and entropy from logits computed at the answer positions only (the last
prompt position and the response), values likewise. verl's losses and verlog's value loss read them unchanged.

A micro-batch falls back to verl's own ``forward_step`` when it carries ``verlog_prefix_sharing=False`` (the
first-iteration check of :class:`~verlog.trainer.ppo.VerlogPPOTrainer` computes one micro-batch both ways), images
(``multi_modal_inputs``), 3-D position ids, a prompt of one token, or asks for outputs the shared path does not
compute (``calculate_sum_pi_squared``, distillation, fused kernels). ``tests/verlog/trainer`` checks outputs and
gradients against verl's path.

The module imports nothing of verl at import time: verl imports it in every process (``VERL_USE_EXTERNAL_MODULES``)
and the classes are defined when verl's FSDP engine module is first imported.
"""

from __future__ import annotations

import types
from contextlib import nullcontext
from typing import Any

VENDOR = "verlog"
"""The vendor key verlog's engines are registered under (``VERL_ENGINE_VENDOR`` selects them)."""
VENDOR_ENV = "VERL_ENGINE_VENDOR"
SHARING_KEY = "verlog_prefix_sharing"
"""Non-tensor key of a batch: False makes verlog's engines run verl's own path for it (default True)."""
FSDP_ENGINE_MODULE = "verl.workers.engine.fsdp.transformer_impl"
ENGINES_MODULE = "verlog.trainer.engines"

_classes: dict[str, type] = {}


def engine_classes() -> dict[str, type]:
    """verlog's engine classes by model type (``language_model``, ``value_model``), defined on first use."""
    import importlib

    _define(importlib.import_module(FSDP_ENGINE_MODULE))
    return dict(_classes)


class SharedPrefixMixin:
    """``forward_step`` with shared prefixes for verlog's engine classes (``kind``: what the model outputs). It sits
    before verl's FSDP engine in their bases; verl's modules are imported when a method first runs (see the module
    docstring)."""

    kind = "lm"

    def _shared_plan(self, micro_batch: Any, forward_only: bool) -> Any:
        """The packed layout of the shared pass, or None when this micro-batch takes verl's own path."""
        from verl.utils import tensordict_utils as tu
        from verl.utils.model import extract_multi_modal_inputs

        from verlog.trainer.prefix_sharing import find_prefix_groups, full_attention_only, pack_rows

        if not tu.get_non_tensor_data(data=micro_batch, key=SHARING_KEY, default=True):
            return None
        module = getattr(self.module, "module", self.module)  # type: ignore[attr-defined]
        if not forward_only and getattr(module, "is_gradient_checkpointing", False):
            # activation recomputation would re-run the attention without the packed layout
            _warn_once(
                "prefix sharing is off for the actor and critic updates: the model recomputes activations "
                "(gradient checkpointing); the forward-only passes still share. Set "
                "verl.actor_rollout_ref.model.enable_gradient_checkpointing=false and "
                "verl.critic.model.enable_gradient_checkpointing=false to share there too (docs/row-cost.md)"
            )
            return None
        if not full_attention_only(getattr(module, "config", None)):
            return None
        for key in ("calculate_sum_pi_squared", "distillation_use_topk", "distillation_only", "use_fused_kernels"):
            if tu.get_non_tensor_data(data=micro_batch, key=key, default=False):
                return None
        if extract_multi_modal_inputs(micro_batch.get("multi_modal_inputs", [])):
            return None  # images: verl's path
        if "prompts" not in micro_batch.keys() or "attention_mask" not in micro_batch.keys():
            return None
        input_ids, positions = micro_batch["input_ids"], micro_batch["position_ids"]
        if not input_ids.is_nested or positions.dim() != 2:
            return None
        prompts = micro_batch["prompts"]
        if prompts.is_nested:
            prompt_lens = prompts.offsets().diff().tolist()
        else:
            prompt_lens = micro_batch["attention_mask"][:, : prompts.shape[1]].sum(dim=1).tolist()
        rows = list(input_ids.unbind())
        if any(int(p) >= int(r.shape[0]) for p, r in zip(prompt_lens, rows)):
            return None  # a row without a response token
        groups = find_prefix_groups([r[: int(p)].tolist() for r, p in zip(rows, prompt_lens)])
        if groups is None:
            return None
        return pack_rows(rows, list(positions.unbind()), prompt_lens, groups)

    def forward_step(self, micro_batch: Any, loss_function: Any, forward_only: bool) -> Any:
        import torch
        from verl.utils.device import get_device_id, get_device_name
        from verl.workers.engine.utils import detach_tree

        from verlog.trainer.prefix_sharing import shared_forward

        micro_batch = micro_batch.to(get_device_id())
        layout = self._shared_plan(micro_batch, forward_only)
        if layout is None:
            return super().forward_step(micro_batch, loss_function, forward_only)  # type: ignore[misc]
        autocast_dtype = getattr(self, "_autocast_dtype", torch.bfloat16)
        autocast_ctx = (
            nullcontext()
            if autocast_dtype == torch.float32
            else torch.autocast(device_type=get_device_name(), dtype=autocast_dtype)
        )
        with autocast_ctx:
            read = shared_forward(self.module, layout, self.kind)  # type: ignore[attr-defined]
            model_output = self._outputs(read, layout, micro_batch)
            if loss_function is not None:
                loss, metrics = loss_function(
                    model_output=model_output,
                    data=micro_batch,
                    dp_group=self.get_data_parallel_group(),  # type: ignore[attr-defined]
                )
            else:
                assert forward_only, "forward_only must be True when loss_function is None"
                loss, metrics = torch.tensor(1.0, device=get_device_name()), {}
            output = {"model_output": detach_tree(model_output), "loss": loss.detach().item(), "metrics": metrics}
            return loss, output

    def _outputs(self, read: Any, layout: Any, micro_batch: Any) -> dict[str, Any]:
        """The value head's outputs (``read``: ``[K]`` values at the read positions) as verl's nested per-row values."""
        import torch

        from verlog.trainer.prefix_sharing import scatter_to_rows

        offsets = micro_batch["input_ids"].offsets()
        return {"values": torch.nested.nested_tensor_from_jagged(scatter_to_rows(read, layout), offsets)}


def _lm_outputs(impl: types.ModuleType, engine: Any, read: Any, layout: Any, micro_batch: Any) -> dict[str, Any]:
    """The LM head's outputs as verl's nested per-row log-probs (and entropy when asked for); ``read``: logits
    ``[K, V]``, read position k predicting ``layout.labels[k]``."""
    import torch
    import verl.utils.torch_functional as verl_F
    from verl.utils import tensordict_utils as tu

    from verlog.trainer.prefix_sharing import scatter_to_rows

    temperature = micro_batch["temperature"]
    unit = impl._is_scalar_unit_temperature(temperature)
    if not isinstance(temperature, torch.Tensor):
        temperature = torch.tensor([temperature] * len(layout.prompt_lens), device=read.device)
    per_read = torch.repeat_interleave(
        temperature.to(torch.float32).view(-1),
        torch.tensor(layout.response_lens, device=read.device),
    ).view(-1, 1)  # [K, 1]: each read position's row temperature
    logits = impl._scale_logits_by_temperature(read, per_read, is_unit_temperature=unit)
    offsets = micro_batch["input_ids"].offsets()
    calculate_entropy = tu.get_non_tensor_data(data=micro_batch, key="calculate_entropy", default=False)
    out: dict[str, Any] = {}
    if calculate_entropy:
        if engine.engine_config.entropy_checkpointing:
            entropy = torch.utils.checkpoint.checkpoint(verl_F.entropy_from_logits, logits)
        else:
            entropy = verl_F.entropy_from_logits(logits)
        out["entropy"] = torch.nested.nested_tensor_from_jagged(scatter_to_rows(entropy, layout), offsets)
    log_probs = impl.logprobs_from_logits(logits=logits, labels=layout.labels, inplace_backward=not calculate_entropy)
    out["log_probs"] = torch.nested.nested_tensor_from_jagged(scatter_to_rows(log_probs, layout), offsets)
    return out


def _define(impl: types.ModuleType) -> None:
    """verlog's actor and critic engines over ``impl`` (verl's FSDP engine module), registered under :data:`VENDOR`."""
    if _classes:
        return
    from verl.workers.engine.base import EngineRegistry

    class SharedPrefixLMEngine(SharedPrefixMixin, impl.FSDPEngineWithLMHead):  # type: ignore[name-defined]
        """verl's actor / reference engine with shared prefixes and logits at the answer positions only."""

        kind = "lm"

        def _outputs(self, read: Any, layout: Any, micro_batch: Any) -> dict[str, Any]:
            return _lm_outputs(impl, self, read, layout, micro_batch)

    class SharedPrefixValueEngine(SharedPrefixMixin, impl.FSDPEngineWithValueHead):  # type: ignore[name-defined]
        """verl's critic engine with shared prefixes and values at the answer positions only."""

        kind = "value"

    devices = ["cuda", "npu", "cpu"]
    EngineRegistry.register(model_type="language_model", backend=["fsdp", "fsdp2"], device=devices, vendor=VENDOR)(
        SharedPrefixLMEngine
    )
    EngineRegistry.register(model_type="value_model", backend=["fsdp", "fsdp2"], device=devices, vendor=VENDOR)(
        SharedPrefixValueEngine
    )
    _classes["language_model"] = SharedPrefixLMEngine
    _classes["value_model"] = SharedPrefixValueEngine


_warned: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        print(f"[verlog] warning: {message}", flush=True)


def install() -> None:
    """Define and register the engines once verl's FSDP engine module is imported in this process."""
    from verlog.platform.cpu import when_imported

    when_imported(FSDP_ENGINE_MODULE, _define)


# verl imports this module in every process (VERL_USE_EXTERNAL_MODULES, set by the launcher with prefix sharing on)
install()
