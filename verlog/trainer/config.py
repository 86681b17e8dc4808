"""verlog's typed training config -> verl 0.9.1's PPO config.

verlog's own config (:class:`verlog.config.TrainConfig`: configs/train.yaml and its env/, model/, hardware/,
algorithm/ groups, typed and checked by :mod:`verlog.config`) holds the settings a user of verlog thinks in: env slots
and turns, memory, the dual-discount GAE, critic warm-up, hardware. :func:`build_verl_config` composes verl's own
``ppo_trainer`` config with Hydra and sets verl's keys from it; the ``verl:`` section of verlog's config is merged
last, so any verl key can still be set (``verl.trainer.logger=[...]``); an unknown verl key is an error.
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from verlog.algorithms.estimators import get_estimator
from verlog.config import TrainConfig
from verlog.config.async_modes import get_async_mode
from verlog.config.checks import TrainConfigError, check_config
from verlog.config.compose import format_override
from verlog.run.folder import RunFolder

__all__ = ["AGENT_LOOP_MANAGER", "TrainConfigError", "build_verl_config", "check_config", "verl_overrides"]

AGENT_LOOP_MANAGER = "verlog.trainer.agent_loop.VerlogAgentLoopManager"


def _require_typed(cfg: object) -> TrainConfig:
    """The trainer takes the config typed and checked once (``check_config`` or ``preflight``), never re-types it."""
    if not isinstance(cfg, TrainConfig):
        raise TypeError(f"expected a checked TrainConfig (verlog.config.checks.check_config), got {type(cfg).__name__}")
    return cfg


def lora_overrides(cfg: TrainConfig, critic: bool) -> list[str]:
    """verl's LoRA keys for ``model.lora`` (none when ``rank`` is 0): the actor's, and the critic's with
    ``lora.critic``. verl gives vLLM ``enable_lora`` and a ``max_lora_rank`` rounded up to one vLLM allows, and syncs
    only the adapter after each update."""
    lora = cfg.model.lora
    if lora.rank <= 0:
        return []
    targets = lora.target_modules
    targets_text = targets if isinstance(targets, str) else "[" + ",".join(str(t) for t in targets) + "]"
    roles = ["actor_rollout_ref.model"] + (["critic.model"] if critic and lora.critic else [])
    return [
        override
        for role in roles
        for override in (
            f"{role}.lora_rank={lora.rank}",
            f"{role}.lora_alpha={lora.alpha}",
            f"{role}.target_modules={targets_text}",
        )
    ]


def verl_overrides(cfg: TrainConfig) -> list[str]:
    """Hydra override strings for verl's ``ppo_trainer`` config, derived from verlog's checked config."""
    cfg = _require_typed(cfg)
    # an estimator without a critic (grpo, gigpo: its registry entry says so): verl builds none (need_critic reads
    # critic.enable), never calls _compute_values, and trains the actor from the first iteration
    critic = get_estimator(cfg.algorithm.estimator).needs_critic
    out = [
        *_data_and_algorithm_overrides(cfg, critic),
        *_actor_overrides(cfg),
        *_rollout_overrides(cfg),
        *_critic_overrides(cfg),
        *_trainer_overrides(cfg, critic),
    ]
    if not critic:
        out.append("critic.enable=False")
    out += lora_overrides(cfg, critic)
    algorithm = cfg.algorithm
    if get_async_mode(cfg.rollout.async_mode).corrects(algorithm):
        # rows sampled by an older policy: verl's rollout correction in decoupled mode (truncated importance weights
        # pi_old / pi_rollout in the policy loss; no rejection sampling, which edits the response mask)
        out += [
            f"algorithm.rollout_correction.rollout_is={algorithm.rollout_is}",
            f"algorithm.rollout_correction.rollout_is_threshold={algorithm.rollout_is_threshold}",
        ]
    resume = cfg.checkpoint.resume
    if resume in ("auto", "disable"):
        out.append(f"trainer.resume_mode={resume}")
    else:
        out += ["trainer.resume_mode=resume_path", f"trainer.resume_from_path={resume}"]
    if cfg.hardware.cpu:
        out += list(CPU_OVERRIDES)
    return out


def _data_and_algorithm_overrides(cfg: TrainConfig, critic: bool) -> list[str]:
    """The data section (the rollout manager replaces the prompt data set: train/val files are never read) and the
    algorithm's (verlog computes the advantage itself; KL in reward through verl)."""
    rollout, algorithm = cfg.rollout, cfg.algorithm
    return [
        f"data.train_batch_size={cfg.rows_per_iteration}",
        f"data.max_prompt_length={rollout.max_prompt_tokens}",
        f"data.max_response_length={rollout.max_response_tokens}",
        "data.dataloader_num_workers=0",
        f"algorithm.adv_estimator={'gae' if critic else 'grpo'}",
        f"algorithm.use_kl_in_reward={algorithm.kl_in_reward}",
        f"algorithm.kl_ctrl.kl_coef={algorithm.kl_coef}",
    ]


def _actor_overrides(cfg: TrainConfig) -> list[str]:
    """The actor's optimizer, PPO batch sizes and loss, and the reference model's micro-batch."""
    algorithm, micro = cfg.algorithm, cfg.micro_batch_rows
    return [
        f"actor_rollout_ref.model.path={cfg.model.path}",
        f"actor_rollout_ref.actor.optim.lr={algorithm.actor_lr}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={cfg.mini_batch_rows}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={micro}",
        f"actor_rollout_ref.actor.ppo_epochs={algorithm.ppo_epochs}",
        f"actor_rollout_ref.actor.clip_ratio={algorithm.clip_ratio}",
        f"actor_rollout_ref.actor.entropy_coeff={algorithm.entropy_coeff}",
        "actor_rollout_ref.actor.use_kl_loss=False",
        f"actor_rollout_ref.actor.optim.clip_grad={algorithm.grad_clip}",
        f"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu={micro}",
    ]


def _rollout_overrides(cfg: TrainConfig) -> list[str]:
    """verl's vLLM async server, driven token-in-token-out by verlog's rollout manager."""
    rollout, hardware, sampling = cfg.rollout, cfg.hardware, cfg.sampling
    return [
        "actor_rollout_ref.rollout.name=vllm",
        "actor_rollout_ref.rollout.n=1",
        f"actor_rollout_ref.rollout.temperature={sampling.temperature}",
        f"actor_rollout_ref.rollout.top_p={sampling.top_p}",
        f"actor_rollout_ref.rollout.top_k={sampling.top_k}",
        f"actor_rollout_ref.rollout.prompt_length={rollout.max_prompt_tokens}",
        f"actor_rollout_ref.rollout.response_length={rollout.max_response_tokens}",
        f"actor_rollout_ref.rollout.tensor_model_parallel_size={hardware.rollout_tp}",
        f"actor_rollout_ref.rollout.gpu_memory_utilization={hardware.rollout_gpu_memory_utilization}",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={cfg.micro_batch_rows}",
        "actor_rollout_ref.rollout.calculate_log_probs=True",
        "actor_rollout_ref.rollout.agent.num_workers=1",
        f"+actor_rollout_ref.rollout.agent.agent_loop_manager_class={AGENT_LOOP_MANAGER}",
        *_vision_engine_overrides(cfg.model.path, cfg.memory.max_image_history),
    ]


def _vision_engine_overrides(model_path: str, max_image_history: int) -> list[str]:
    """The vLLM engine settings of the vision-language path (``verlog.models.vision.vllm_vision_kwargs``: images
    per prompt, no videos, pixels normalised by the processor), the same for a VLM trained on text only."""
    from verlog.models.vision import multimodal_rows, vllm_vision_kwargs

    if not multimodal_rows(model_path, max_image_history):
        return []
    return [
        format_override(f"+actor_rollout_ref.rollout.engine_kwargs.vllm.{key}", value)
        for key, value in vllm_vision_kwargs(max_image_history).items()
    ]


def _critic_overrides(cfg: TrainConfig) -> list[str]:
    algorithm = cfg.algorithm
    return [
        f"critic.model.path={cfg.model.path}",
        f"critic.optim.lr={algorithm.critic_lr}",
        f"critic.ppo_mini_batch_size={cfg.mini_batch_rows}",
        f"critic.ppo_micro_batch_size_per_gpu={cfg.micro_batch_rows}",
        f"critic.ppo_epochs={algorithm.ppo_epochs}",
        f"critic.cliprange_value={algorithm.cliprange_value}",
    ]


def _trainer_overrides(cfg: TrainConfig, critic: bool) -> list[str]:
    """Devices, iterations, the critic-only iterations, checkpoints, evaluation, tracking and the run folder."""
    hardware, algorithm, evaluation = cfg.hardware, cfg.algorithm, cfg.evaluation
    critic_warmup = algorithm.critic_warmup + 1 if algorithm.critic_warmup > 0 and critic else 0
    return [
        f"trainer.n_gpus_per_node={hardware.n_gpus_per_node}",
        f"trainer.nnodes={hardware.nnodes}",
        "trainer.total_epochs=1",
        f"trainer.total_training_steps={cfg.iterations}",
        # verl trains the critic only while global_steps < critic_warmup (steps count from 1); 0 without a critic
        f"trainer.critic_warmup={critic_warmup}",
        f"trainer.save_freq={cfg.checkpoint.save_freq}",
        # verl's validation hook runs verlog's evaluation (VerlogPPOTrainer._validate) every evaluation.every
        # iterations and at the last one; off (-1) when evaluation.every is 0
        f"trainer.test_freq={evaluation.every if evaluation.every > 0 else -1}",
        f"trainer.val_before_train={evaluation.every > 0 and evaluation.before_train}",
        f"trainer.project_name={cfg.project}",
        f"trainer.experiment_name={cfg.run_name}",
        f"trainer.default_local_dir={RunFolder(cfg.output_dir).checkpoints}",
        f"trainer.logger=[{','.join(cfg.logger)}]",
        "reward.num_workers=1",
    ]


_FP32 = "{param_dtype:fp32,reduce_dtype:fp32,buffer_dtype:fp32}"

CPU_OVERRIDES = (
    "trainer.device=cpu",
    "actor_rollout_ref.actor.strategy=fsdp2",
    "critic.strategy=fsdp2",
    "actor_rollout_ref.ref.strategy=fsdp2",
    "actor_rollout_ref.model.use_remove_padding=False",
    "critic.model.use_remove_padding=False",
    "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
    "+critic.model.override_config.attn_implementation=sdpa",
    "actor_rollout_ref.actor.use_torch_compile=False",
    "actor_rollout_ref.actor.fsdp_config.use_torch_compile=False",
    "actor_rollout_ref.ref.fsdp_config.use_torch_compile=False",
    "critic.fsdp.use_torch_compile=False",
    # fp32 compute and no activation recomputation: on a CPU without bf16 units verl's defaults (bf16 mixed
    # precision, gradient checkpointing) are slower (docs/design.md, "CPU precision")
    f"+actor_rollout_ref.actor.fsdp_config.mixed_precision={_FP32}",
    f"+actor_rollout_ref.ref.fsdp_config.mixed_precision={_FP32}",
    f"+critic.fsdp.mixed_precision={_FP32}",
    "actor_rollout_ref.model.enable_gradient_checkpointing=False",
    "critic.model.enable_gradient_checkpointing=False",
    "actor_rollout_ref.rollout.dtype=float32",
    "actor_rollout_ref.rollout.enforce_eager=True",
    "actor_rollout_ref.rollout.free_cache_engine=False",
    "+actor_rollout_ref.rollout.enable_sleep_mode=False",
)
"""verl's settings on a CPU (``hardware.cpu``): FSDP2, no remove-padding, sdpa, no torch.compile, fp32."""


def build_verl_config(cfg: TrainConfig) -> DictConfig:
    """verl's full PPO config for verlog's ``cfg`` (Hydra-composed from verl's own config files).

    verlog's settings travel inside it under the top-level key ``verlog`` (the rollout manager reads them in the
    trainer's process).
    """
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    overrides = verl_overrides(cfg)
    hydra_was = GlobalHydra.instance().is_initialized()
    if hydra_was:
        GlobalHydra.instance().clear()
    try:
        with initialize_config_module(config_module="verl.trainer.config", version_base=None):
            verl_cfg = compose(config_name="ppo_trainer", overrides=overrides)
    finally:
        GlobalHydra.instance().clear()
    if cfg.verl:
        try:
            verl_cfg = OmegaConf.merge(verl_cfg, cfg.verl)
        except Exception as exc:  # omegaconf raises several kinds for unknown keys / bad types
            raise TrainConfigError(f"the verl: section does not fit verl's PPO config: {exc}") from exc
    with open_dict(verl_cfg):
        verl_cfg.verlog = OmegaConf.to_container(OmegaConf.structured(cfg))
    return verl_cfg


def to_plain(cfg: Any) -> Any:
    """A resolved plain-Python copy of an OmegaConf node (or the value itself)."""
    return OmegaConf.to_container(cfg, resolve=True) if OmegaConf.is_config(cfg) else cfg
