"""Building the training rollout: the env pool (one env id, or a multi-task env per slot with its curriculum), the
sliding memory and the generator, as one :class:`~verlog.rollout.manager.RolloutManager`.

The trainer calls :func:`build_rollout` once in ``init_workers`` with its typed config's sections spelled out as
arguments (this layer does not import the config, see docs/design.md), so the rollout a run trains on is built in one
place and can be built without verl in a test.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from verlog.algorithms.curriculum import CurriculumConfig, TaskCurriculum, family_weights, parse_task_families
from verlog.errors import ImageSetupError
from verlog.models.vision import ImageTokenCounter
from verlog.prompting.memory import MemoryConfig, SlidingMemory
from verlog.prompting.sampling import SamplingConfig
from verlog.rollout.generator import Generator
from verlog.rollout.manager import RolloutManager, make_env_pool
from verlog.tapes.recorders import frame_env_kwargs


def build_rollout(
    *,
    env_id: str,
    env_kwargs: Mapping[str, Any],
    tasks: Mapping[str, Any] | None,
    num_slots: int,
    tokenizer: Any,
    generator: Generator,
    sampling: SamplingConfig,
    memory: MemoryConfig,
    max_prompt_tokens: int,
    curriculum: CurriculumConfig | None = None,
    in_process: bool = True,
    num_workers: int | None = None,
    backend: str | None = None,
    ray_options: Mapping[str, Any] | None = None,
    frames: bool = False,
    seed: int = 0,
    run_id: str = "",
    generation_retries: int = 0,
    group_size: int | None = None,
    pipeline_groups: int | None = None,
    processor: Any = None,
) -> RolloutManager:
    """The rollout of a training run.

    Args:
        env_id, env_kwargs: ``env.id`` and ``env.kwargs``.
        tasks: ``env.tasks`` (multi-task training: every slot a ``MultiTaskEnv`` whose families ``curriculum`` draws);
            empty or None for one task.
        in_process, num_workers, backend, ray_options: where the env workers run (:func:`make_env_pool`):
            ``backend`` (``env.backend``; None leaves it to ``in_process``) and the Ray workers' resources.
        frames: keep observation images for the tapes (turns the family's image switch on).
        group_size: rollouts per group for the estimators that group them (GRPO, GiGPO), else None.
        pipeline_groups: slot groups of the ``pipeline`` rollout (``rollout.pipeline_groups`` when
            ``rollout.async_mode=pipeline``), else None (lockstep).
        processor: the vision-language model's processor (``verlog.models.vision.rollout_processor``; None for a
            text model): with ``memory.max_image_history`` > 0 it counts each image's tokens (the memory's budget,
            the prompt's expanded ``<|image_pad|>`` runs); the trainer builds the rows' ``multi_modal_inputs`` and
            multimodal rotary positions with it, images or not.
        The rest are the ``rollout``, ``memory`` and ``sampling`` sections and the run's seed and name.
    """
    if memory.max_image_history > 0 and processor is None:
        raise ImageSetupError(
            "memory.max_image_history > 0 needs the model's image processor (verlog.models.vision.rollout_processor) "
            "to build prompts with images"
        )
    image_tokens = ImageTokenCounter(processor) if memory.max_image_history > 0 else None
    env_kwargs, keep_images = image_pool_settings(env_kwargs, memory, frames)
    pool_env_id, pool_kwargs, task_curriculum = _pool_env(env_id, env_kwargs, tasks, curriculum, frames, seed)
    pool = make_env_pool(
        pool_env_id,
        num_slots,
        env_kwargs=pool_kwargs,
        in_process=in_process,
        num_workers=num_workers,
        backend=backend,
        ray_options=ray_options,
        seed=seed,
        keep_images=keep_images,
    )
    try:
        return RolloutManager(
            pool,
            tokenizer,
            generator,
            sampling,
            max_prompt_tokens=max_prompt_tokens,
            memory_factory=lambda: SlidingMemory.from_config(memory, image_tokens),
            seed=seed,
            run_id=run_id,
            generation_retries=generation_retries,
            group_size=group_size,
            curriculum=task_curriculum,
            pipeline_groups=pipeline_groups,
            processor=processor,
        )
    except BaseException:  # settings the manager refuses: stop the pool's workers before the error goes up
        pool.close()
        raise


def image_pool_settings(
    env_kwargs: Mapping[str, Any], memory: MemoryConfig, frames: bool
) -> tuple[dict[str, Any], bool]:
    """The env kwargs and the pool's ``keep_images``: with ``memory.max_image_history`` > 0 the envs draw images
    (``images=True``) and the pool carries them to the memory; tapes (``frames``) keep them too."""
    if memory.max_image_history > 0:
        return {**env_kwargs, "images": True}, True
    return dict(env_kwargs), frames


def _pool_env(
    env_id: str,
    env_kwargs: Mapping[str, Any],
    tasks: Mapping[str, Any] | None,
    curriculum: CurriculumConfig | None,
    frames: bool,
    seed: int,
) -> tuple[str, dict[str, Any], TaskCurriculum | None]:
    """The pool's env id and kwargs, and the curriculum of a multi-task run (None for one task)."""
    kwargs = dict(env_kwargs)
    if not tasks:
        return env_id, frame_env_kwargs(env_id, kwargs) if frames else kwargs, None
    from envs.multitask import MULTITASK_ENV_ID

    families = parse_task_families(tasks)
    per_family = {
        f.name: {
            "env_id": f.env_id,
            "kwargs": frame_env_kwargs(f.env_id, {**kwargs, **f.kwargs}) if frames else dict(f.kwargs),
        }
        for f in families
    }
    drawn = TaskCurriculum(
        [f.name for f in families], curriculum or CurriculumConfig(), seed=seed, weights=family_weights(families)
    )
    return MULTITASK_ENV_ID, {"tasks": per_family, "env_kwargs": kwargs}, drawn
