"""Running a verlog training job: platform, model, Ray, verl's workers, the PPO loop.

The trainer runs in the calling process (the Ray driver); verl's FSDP actor/critic workers and vLLM servers run as
Ray actors. :func:`train` is what ``verlog train`` and ``python -m verlog.train`` call.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from verlog.config import TrainConfig
from verlog.console import say


def prepare_model(cfg: TrainConfig) -> str:
    """The model folder; built with ``verlog.models.tiny_model.build_tiny_model`` when it is missing and ``build_tiny``
    is set (a missing local folder without ``build_tiny`` is refused before launch:
    verlog.config.preflight.check_model)."""
    model = cfg.model
    path = model.path
    if os.path.isdir(path) and os.path.exists(os.path.join(path, "config.json")):
        return path
    if model.build_tiny:
        from verlog.models.tiny_model import build_tiny_model

        say(f"[verlog] building a tiny model at {path}")
        build_tiny_model(path, **dict(getattr(model, "tiny", None) or {}))
    return path


def _platform_env(cfg: TrainConfig) -> None:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if cfg.hardware.cpu:
        os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(cfg.hardware.vllm_kv_cache_gib)
        from verlog.platform import enable_cpu_platform

        enable_cpu_platform(force=True)
    if cfg.hardware.prefix_sharing:
        from verlog.trainer.engines import ENGINES_MODULE, VENDOR, VENDOR_ENV

        # verl imports the engines' module in every process and builds its FSDP engines from the vendor's entries
        _import_in_verl_processes(ENGINES_MODULE)
        os.environ[VENDOR_ENV] = VENDOR
    else:
        os.environ.pop("VERL_ENGINE_VENDOR", None)
    from verlog.models.vision import is_vision_model

    if is_vision_model(cfg.model.path):
        from verlog.trainer.value_model import VALUE_MODEL_MODULE
        from verlog.trainer.vlm_text_rows import VLM_TEXT_ROWS_MODULE

        _import_in_verl_processes(VALUE_MODEL_MODULE)  # the critic on a VLM: verl's loader finds verlog's class
        _import_in_verl_processes(VLM_TEXT_ROWS_MODULE)  # micro-batches without images through verl's forward


def _import_in_verl_processes(module: str) -> None:
    """Have verl import ``module`` in every process that imports verl (``VERL_USE_EXTERNAL_MODULES``)."""
    modules = [m for m in os.environ.get("VERL_USE_EXTERNAL_MODULES", "").split(",") if m]
    if module not in modules:
        os.environ["VERL_USE_EXTERNAL_MODULES"] = ",".join([*modules, module])


def _tracker_env(cfg: TrainConfig) -> None:
    """Trackers' files inside the run folder (verlog.config.trackers), one line each on the console."""
    from verlog.config.trackers import tracker_environment

    env, lines = tracker_environment(list(cfg.logger), cfg.output_dir)
    os.environ.update(env)
    for line in lines:
        say(f"[verlog] {line}")


def _init_ray(cfg: TrainConfig, verl_cfg: DictConfig) -> None:
    import ray

    if ray.is_initialized():
        return
    from verl.trainer.constants_ppo import get_ppo_ray_runtime_env

    runtime_env = OmegaConf.to_container(OmegaConf.create(get_ppo_ray_runtime_env(verl_cfg)), resolve=True)
    env_vars = dict(runtime_env.get("env_vars") or {})
    for key in (
        "VERL_USE_EXTERNAL_MODULES",
        "VERLOG_PLATFORM",
        "VERL_ENGINE_DEVICE",
        "VERL_ENGINE_VENDOR",
        "VLLM_CPU_KVCACHE_SPACE",
        "VLLM_CPU_OMP_THREADS_BIND",
    ):
        if key in os.environ:
            env_vars[key] = os.environ[key]
    runtime_env["env_vars"] = env_vars
    hardware = cfg.hardware
    kwargs: dict[str, Any] = {"runtime_env": runtime_env, "include_dashboard": False}
    if hardware.ray.num_cpus:
        kwargs["num_cpus"] = hardware.ray.num_cpus
    if hardware.ray.object_store_memory:
        kwargs["object_store_memory"] = hardware.ray.object_store_memory
    if hardware.ray.temp_dir:
        kwargs["_temp_dir"] = hardware.ray.temp_dir
    if hardware.cpu:  # logical GPUs: one per CPU rank, so verl's placement groups work unchanged
        kwargs["num_gpus"] = hardware.n_gpus_per_node
    ray.init(**kwargs)


def build_trainer(verl_cfg: DictConfig) -> Any:
    """verl's workers and resource pools for ``verl_cfg``, and a :class:`VerlogPPOTrainer` over them."""
    from verl.trainer.main_ppo_v0 import BaseTaskRunner
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config
    from verl.workers.config import HFModelConfig

    from verlog.trainer.ppo import VerlogPPOTrainer

    runner = BaseTaskRunner()
    _, worker_group_cls = runner.add_actor_rollout_worker(verl_cfg)
    runner.add_critic_worker(verl_cfg)
    runner.add_reward_model_resource_pool(verl_cfg)
    runner.add_teacher_model_resource_pool(verl_cfg)
    validate_config(
        config=verl_cfg, use_reference_policy=need_reference_policy(verl_cfg), use_critic=need_critic(verl_cfg)
    )
    model_config: HFModelConfig = omega_conf_to_dataclass(verl_cfg.actor_rollout_ref.model)
    return VerlogPPOTrainer(
        config=verl_cfg,
        tokenizer=model_config.tokenizer,
        processor=model_config.processor,
        role_worker_mapping=runner.role_worker_mapping,
        resource_pool_manager=runner.init_resource_pool_mgr(verl_cfg),
        ray_worker_group_cls=worker_group_cls,
    )


def prepare_resume(cfg: TrainConfig) -> int | None:
    """Before a (re)start in ``cfg.output_dir`` (its lock held): remove what a kill left half-written
    (:func:`verlog.run.folder.recover_checkpoints`) and, when the run resumes, move the log records of iterations
    after the resumed checkpoint to ``superseded/`` (:func:`verlog.run.folder.cut_logs`); one line each.

    Returns: the iteration the run resumes from, None for a fresh run."""
    from verlog.run.folder import STEP_PREFIX, RunFolder, cut_logs, recover_checkpoints

    run = RunFolder(cfg.output_dir)
    lines = recover_checkpoints(run.checkpoints)
    resume = cfg.checkpoint.resume
    if resume == "disable":
        step = None
    elif resume == "auto":
        step = run.latest_step()
        if step is None and lines:  # the only checkpoint was incomplete: a fresh start, nothing of the old logs stays
            lines += cut_logs(run.root, -1)
    else:
        step = int(Path(resume).name.removeprefix(STEP_PREFIX))
    if step is not None:
        lines += cut_logs(run.root, step)
    for line in lines:
        say(f"[verlog] {line}")
    return step


def train(cfg: TrainConfig) -> Path:
    """Train with verlog's checked config ``cfg`` (:func:`verlog.config.preflight`); returns the output folder
    (checkpoints, metrics.jsonl, config.yaml)."""
    from verlog.models.vision import multimodal_rows, prefix_sharing_off_reason
    from verlog.run.folder import RunFolder
    from verlog.trainer.config import build_verl_config

    out = Path(cfg.output_dir).absolute()
    run = RunFolder(out)
    out.mkdir(parents=True, exist_ok=True)
    model = cfg.model
    if model.build_tiny or os.path.exists(os.path.expanduser(model.path)):  # a local folder: absolute for the workers
        model = dataclasses.replace(model, path=str(Path(model.path).expanduser().absolute()))
    with_abs = dataclasses.replace(cfg, output_dir=str(out), model=model)
    unshared = prefix_sharing_off_reason(model.path, cfg.memory.max_image_history, cfg.hardware.prefix_sharing)
    if unshared is not None:
        say(f"[verlog] {unshared}")
        with_abs = dataclasses.replace(with_abs, hardware=dataclasses.replace(cfg.hardware, prefix_sharing=False))
    _platform_env(with_abs)
    if multimodal_rows(model.path, cfg.memory.max_image_history):  # rows with [4, L] positions: verl's fix everywhere
        from verlog.trainer.nested_rows import enable_for_workers

        enable_for_workers()
    _tracker_env(with_abs)
    prepare_model(with_abs)
    verl_cfg = build_verl_config(with_abs)
    OmegaConf.resolve(verl_cfg)
    OmegaConf.save(OmegaConf.structured(with_abs), run.config)
    OmegaConf.save(verl_cfg, run.verl_config)
    prepare_resume(with_abs)
    _init_ray(with_abs, verl_cfg)
    import ray

    trainer = None
    try:
        trainer = build_trainer(verl_cfg)
        trainer.init_workers()
        trainer.fit()
    finally:
        rollout = getattr(trainer, "rollout", None)
        if rollout is not None:
            rollout.close()  # the pipeline's env thread, then the env pool
        ray.shutdown()
    from verlog.run.summary import read_metrics, summary_lines, write_learning_curve

    records = read_metrics(run.metrics)
    for line in summary_lines(records):
        say(f"[verlog] {line}")
    curve = write_learning_curve(records, run.learning_curve)
    if curve is not None:
        say(f"[verlog] learning curve: {curve}")
    say(f"[verlog] outputs in {out}: checkpoints/, metrics.jsonl, rollout.jsonl, config.yaml, logs/")
    return out
