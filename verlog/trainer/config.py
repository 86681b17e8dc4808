"""verlog's training config -> verl 0.9.1's PPO config.

verlog's own config (``configs/train.yaml`` and the env/, model/, hardware/, algorithm/ groups it composes) holds the
settings a user of verlog thinks in: env slots and turns, memory, the dual-discount GAE, critic warm-up, hardware.
:func:`build_verl_config` composes verl's own ``ppo_trainer`` config with Hydra and sets verl's keys from it; the
``verl:`` section of verlog's config is merged last, so any verl key can still be set (``verl.trainer.logger=[...]``);
an unknown verl key is an error.
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from verlog.advantage import ADVANTAGE_LEVELS
from verlog.errors import VerlogError
from verlog.memory import check_answer_format

AGENT_LOOP_MANAGER = "verlog.trainer.agent_loop.VerlogAgentLoopManager"


class TrainConfigError(VerlogError, ValueError):
    """A training setting is out of range or contradicts another one (the message names both and the fix)."""


def check_config(cfg: DictConfig) -> None:
    """Reject settings verl would fail on later, with the numbers and the fix."""
    slots, turns = int(cfg.rollout.num_slots), int(cfg.rollout.turns_per_slot)
    ranks = int(cfg.hardware.n_gpus_per_node) * int(cfg.hardware.nnodes)
    rows = slots * turns
    if slots < 1 or turns < 1:
        raise TrainConfigError(f"rollout.num_slots ({slots}) and rollout.turns_per_slot ({turns}) must be >= 1")
    minis = int(cfg.algorithm.mini_batches)
    if minis < 1 or rows % minis:
        raise TrainConfigError(
            f"the {rows} rows of an iteration (num_slots {slots} x turns_per_slot {turns}) must split into "
            f"algorithm.mini_batches={minis} equal mini-batches: change one of them"
        )
    if (rows // minis) % ranks:
        raise TrainConfigError(
            f"a mini-batch of {rows // minis} rows must divide by the {ranks} training ranks "
            f"(hardware.n_gpus_per_node x hardware.nnodes): change rollout.num_slots, turns_per_slot or mini_batches"
        )
    if int(cfg.iterations) < 1:
        raise TrainConfigError(f"iterations must be >= 1, got {cfg.iterations}")
    try:
        check_answer_format(str(cfg.memory.get("answer_format", "cot")))
    except ValueError as exc:
        raise TrainConfigError(f"memory.answer_format: {exc}") from None
    level = str(cfg.algorithm.get("advantage_level", "token"))
    if level not in ADVANTAGE_LEVELS:
        raise TrainConfigError(
            f"algorithm.advantage_level={level!r} is not one of {', '.join(ADVANTAGE_LEVELS)} (token: per-token GAE; "
            "turn: every token of a turn gets the turn's first-position advantage)"
        )
    _check_estimator(cfg)
    from verlog.tapes import TapeConfigError, TapeSettings

    try:
        TapeSettings.from_config(cfg)
    except TapeConfigError as exc:
        raise TrainConfigError(str(exc)) from exc
    from verlog.trainer.evaluation import check_evaluation

    check_evaluation(cfg)  # evaluation inside training: settings, seeds disjoint from training's, the env builds


def estimator_of(cfg: DictConfig) -> str:
    """``algorithm.estimator`` (``dual_gae`` when the key is absent, as in configs saved before it existed)."""
    return str(OmegaConf.select(cfg, "algorithm.estimator", default="dual_gae"))


def _check_estimator(cfg: DictConfig) -> None:
    """The advantage estimator and its group rollouts (docs/algorithms.md, "Group estimators")."""
    from verlog.group_advantage import ESTIMATORS, GROUP_ESTIMATORS, GROUP_NORMS

    estimator = estimator_of(cfg)
    if estimator not in ESTIMATORS:
        raise TrainConfigError(
            f"algorithm.estimator={estimator!r} is not one of {', '.join(ESTIMATORS)} (dual_gae: critic-based "
            "dual-discount GAE; grpo, gigpo: critic-free group estimators)"
        )
    slots = int(cfg.rollout.num_slots)
    k = int(OmegaConf.select(cfg, "rollout.group_size", default=1))
    if estimator not in GROUP_ESTIMATORS:
        if k != 1:
            raise TrainConfigError(
                f"rollout.group_size={k} groups slots for the group estimators, but algorithm.estimator={estimator}: "
                "set algorithm.estimator=grpo or gigpo, or rollout.group_size=1"
            )
        return
    if k < 2 or slots % k:
        raise TrainConfigError(
            f"algorithm.estimator={estimator} compares the episodes of a group: rollout.group_size ({k}) must be >= 2 "
            f"and divide rollout.num_slots ({slots}), e.g. rollout.group_size=4 with num_slots a multiple of 4"
        )
    norm = str(OmegaConf.select(cfg, "algorithm.group_norm", default="mean_std"))
    if norm not in GROUP_NORMS:
        raise TrainConfigError(f"algorithm.group_norm={norm!r} is not one of {', '.join(GROUP_NORMS)}")
    gamma = float(OmegaConf.select(cfg, "algorithm.gigpo_step_gamma", default=0.95))
    omega = float(OmegaConf.select(cfg, "algorithm.gigpo_omega", default=1.0))
    if not 0.0 <= gamma <= 1.0 or omega < 0.0:
        raise TrainConfigError(
            f"algorithm.gigpo_step_gamma must lie in [0, 1] and algorithm.gigpo_omega be >= 0, got {gamma} and {omega}"
        )
    if int(cfg.algorithm.warmup_rollout_multiplier) > 1:
        raise TrainConfigError(
            f"algorithm.estimator={estimator} trains no critic, so the critic warm-up rollout "
            f"(algorithm.warmup_rollout_multiplier={cfg.algorithm.warmup_rollout_multiplier}) has nothing to train: "
            "set it to 1"
        )
    minis = int(cfg.algorithm.mini_batches)
    if slots < minis:
        raise TrainConfigError(
            f"with algorithm.estimator={estimator} a slot's rows after its episode ended are left out of the loss; "
            f"the first turns of the {slots} slots must fill the {minis} mini-batches: raise rollout.num_slots or "
            "lower algorithm.mini_batches"
        )
    max_steps = OmegaConf.select(cfg, "env.kwargs.max_steps", default=None)
    turns = int(cfg.rollout.turns_per_slot)
    if max_steps is not None and int(max_steps) > turns:
        raise TrainConfigError(
            f"algorithm.estimator={estimator} plays whole episodes per iteration, but env.kwargs.max_steps="
            f"{max_steps} lets an episode run past rollout.turns_per_slot={turns}: set rollout.turns_per_slot="
            f"{max_steps} or env.kwargs.max_steps={turns} (an env's own limit is checked when the slots start)"
        )


def verl_overrides(cfg: DictConfig) -> list[str]:
    """Hydra override strings for verl's ``ppo_trainer`` config, derived from verlog's config."""
    alg, hw, ro = cfg.algorithm, cfg.hardware, cfg.rollout
    ranks = int(hw.n_gpus_per_node) * int(hw.nnodes)
    rows = int(ro.num_slots) * int(ro.turns_per_slot)
    mini = rows // int(alg.mini_batches)
    micro = max(1, min(int(hw.micro_batch_size_per_gpu), mini // ranks))
    model_path = str(cfg.model.path)
    on_cpu = bool(hw.cpu)
    from verlog.trainer.evaluation import evaluation_every

    every = evaluation_every(cfg)
    # the group estimators (grpo, gigpo) need no critic: verl builds none (need_critic reads critic.enable), never
    # calls _compute_values, and trains the actor from the first iteration
    critic = estimator_of(cfg) == "dual_gae"
    out = [
        # data: the rollout manager replaces the prompt data set (train/val files are never read)
        f"data.train_batch_size={rows}",
        f"data.max_prompt_length={int(ro.max_prompt_tokens)}",
        f"data.max_response_length={int(ro.max_response_tokens)}",
        "data.dataloader_num_workers=0",
        # algorithm: verlog computes the advantage itself (dual-discount GAE); KL in reward through verl
        f"algorithm.adv_estimator={'gae' if critic else 'grpo'}",
        f"algorithm.use_kl_in_reward={bool(alg.kl_in_reward)}",
        f"algorithm.kl_ctrl.kl_coef={float(alg.kl_coef)}",
        # actor
        f"actor_rollout_ref.model.path={model_path}",
        f"actor_rollout_ref.actor.optim.lr={float(alg.actor_lr)}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={mini}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={micro}",
        f"actor_rollout_ref.actor.ppo_epochs={int(alg.ppo_epochs)}",
        f"actor_rollout_ref.actor.clip_ratio={float(alg.clip_ratio)}",
        f"actor_rollout_ref.actor.entropy_coeff={float(alg.entropy_coeff)}",
        "actor_rollout_ref.actor.use_kl_loss=False",
        f"actor_rollout_ref.actor.optim.clip_grad={float(alg.grad_clip)}",
        f"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu={micro}",
        # rollout: verl's vLLM async server, driven token-in-token-out by verlog's rollout manager
        "actor_rollout_ref.rollout.name=vllm",
        "actor_rollout_ref.rollout.n=1",
        f"actor_rollout_ref.rollout.temperature={float(cfg.sampling.temperature)}",
        f"actor_rollout_ref.rollout.top_p={float(cfg.sampling.top_p)}",
        f"actor_rollout_ref.rollout.top_k={int(cfg.sampling.top_k)}",
        f"actor_rollout_ref.rollout.prompt_length={int(ro.max_prompt_tokens)}",
        f"actor_rollout_ref.rollout.response_length={int(ro.max_response_tokens)}",
        f"actor_rollout_ref.rollout.tensor_model_parallel_size={int(hw.rollout_tp)}",
        f"actor_rollout_ref.rollout.gpu_memory_utilization={float(hw.rollout_gpu_memory_utilization)}",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={micro}",
        "actor_rollout_ref.rollout.calculate_log_probs=True",
        "actor_rollout_ref.rollout.agent.num_workers=1",
        f"+actor_rollout_ref.rollout.agent.agent_loop_manager_class={AGENT_LOOP_MANAGER}",
        # critic
        f"critic.model.path={model_path}",
        f"critic.optim.lr={float(alg.critic_lr)}",
        f"critic.ppo_mini_batch_size={mini}",
        f"critic.ppo_micro_batch_size_per_gpu={micro}",
        f"critic.ppo_epochs={int(alg.ppo_epochs)}",
        f"critic.cliprange_value={float(alg.cliprange_value)}",
        # trainer
        f"trainer.n_gpus_per_node={int(hw.n_gpus_per_node)}",
        f"trainer.nnodes={int(hw.nnodes)}",
        "trainer.total_epochs=1",
        f"trainer.total_training_steps={int(cfg.iterations)}",
        # verl trains the critic only while global_steps < critic_warmup (steps count from 1); 0 without a critic
        f"trainer.critic_warmup={int(alg.critic_warmup) + 1 if int(alg.critic_warmup) > 0 and critic else 0}",
        f"trainer.save_freq={int(cfg.checkpoint.save_freq)}",
        # verl's validation hook runs verlog's evaluation (VerlogPPOTrainer._validate) every evaluation.every
        # iterations and at the last one; off (-1) when evaluation.every is 0
        f"trainer.test_freq={every if every > 0 else -1}",
        f"trainer.val_before_train={every > 0 and bool(OmegaConf.select(cfg, 'evaluation.before_train'))}",
        f"trainer.project_name={cfg.project}",
        f"trainer.experiment_name={cfg.run_name}",
        f"trainer.default_local_dir={cfg.output_dir}/checkpoints",
        f"trainer.logger=[{','.join(str(x) for x in cfg.logger)}]",
        "reward.num_workers=1",
    ]
    if not critic:
        out.append("critic.enable=False")
    resume = str(cfg.checkpoint.resume)
    if resume in ("auto", "disable"):
        out.append(f"trainer.resume_mode={resume}")
    else:
        out += ["trainer.resume_mode=resume_path", f"trainer.resume_from_path={resume}"]
    if on_cpu:
        out += [
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
        ]
    return out


_FP32 = "{param_dtype:fp32,reduce_dtype:fp32,buffer_dtype:fp32}"


def build_verl_config(cfg: DictConfig) -> DictConfig:
    """verl's full PPO config for verlog's ``cfg`` (Hydra-composed from verl's own config files).

    verlog's settings travel inside it under the top-level key ``verlog`` (the rollout manager reads them in the
    trainer's process).
    """
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    check_config(cfg)
    overrides = verl_overrides(cfg)
    hydra_was = GlobalHydra.instance().is_initialized()
    if hydra_was:
        GlobalHydra.instance().clear()
    try:
        with initialize_config_module(config_module="verl.trainer.config", version_base=None):
            verl_cfg = compose(config_name="ppo_trainer", overrides=overrides)
    finally:
        GlobalHydra.instance().clear()
    extra = cfg.get("verl")
    if extra:
        try:
            verl_cfg = OmegaConf.merge(verl_cfg, extra)
        except Exception as exc:  # omegaconf raises several kinds for unknown keys / bad types
            raise TrainConfigError(f"the verl: section does not fit verl's PPO config: {exc}") from exc
    with open_dict(verl_cfg):
        verl_cfg.verlog = OmegaConf.to_container(cfg, resolve=True)
    return verl_cfg


def to_plain(cfg: Any) -> Any:
    """A resolved plain-Python copy of an OmegaConf node (or the value itself)."""
    return OmegaConf.to_container(cfg, resolve=True) if OmegaConf.is_config(cfg) else cfg
