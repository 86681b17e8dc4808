"""VerlogPPOTrainer: verl 0.9.1's legacy RayPPOTrainer with multi-turn per-turn rows and the dual-discount GAE.

verl's ``fit()`` loop runs unchanged; verlog plugs into its seams. One iteration, in the order ``fit`` runs it (the
verl-free parts are the library's :mod:`verlog.rollout.iteration`, which ``bench/soak.py`` runs as one function):

1. the tick batch (``_create_dataloader``, here): ``num_slots x turns_per_slot`` items per iteration (no prompt
   parquet); it only fixes how many rows the rollout returns;
2. the rollout (:class:`~verlog.trainer.agent_loop.VerlogAgentLoopManager`, ``generate_sequences``):
   :func:`~verlog.rollout.iteration.collect_iteration` on the :class:`~verlog.rollout.manager.RolloutManager`,
   generating through verl's vLLM servers, or the rows a driver thread collected ahead (``rollout.async_mode``);
3. the batch order (``_balance_batch``), the old log-probs (``_compute_old_log_prob``, keeping the entropies for the
   tapes) and the critic's values with ``V(s_{t+1})`` of the bootstrap prompts as ``next_values``
   (``_compute_values``): :class:`~verlog.trainer.model_passes.ModelPasses`;
4. the advantage (:meth:`VerlogPPOTrainer.compute_advantage`, here; swapped for verl's module-level
   ``compute_advantage`` during ``fit``): :func:`~verlog.trainer.advantage_step.advantage_step` asks
   ``algorithm.estimator``'s registry entry through :func:`~verlog.rollout.iteration.estimate_advantages`
   (dual-discount GAE over the rows, linked by (episode id, turn index) whatever order verl's balancing left, then
   masked whitening; or GRPO / GiGPO, for which no critic is built: ``critic.enable`` is False, so verl never calls
   ``_compute_values``); then the run-level hooks on the trained rows: tapes
   (:func:`~verlog.rollout.iteration.record_iteration_tapes`) and the curriculum;
5. verl's critic and actor updates (the critic loss: verlog's clipped value loss with the first position weighted,
   ``set_loss_fn`` in ``init_workers``);
6. the iteration's log (:meth:`VerlogPPOTrainer.extra_metrics`, :meth:`VerlogPPOTrainer.log_jsonl`, here): env and
   rollout stats, advantage stats, progress and ETA to verl's tracking backends and, through
   :func:`~verlog.rollout.iteration.append_iteration_logs`, to ``metrics.jsonl`` and ``rollout.jsonl``; each seam hands
   its metrics to the iteration's log by the iteration's number (:class:`~verlog.trainer.step_value.StepValue`), never
   through an attribute read later;
7. evaluation (``_validate``, here; verl's validation hook, ``trainer.test_freq`` = ``evaluation.every``): verlog's
   evaluation on held-out seeds (:mod:`verlog.trainer.evaluation`), logged as ``eval/*`` metrics;
8. checkpoints (``_save_checkpoint``): verl's, plus every slot's env state and memory (``verlog_rollout.pkl``);
   ``_load_checkpoint`` is also the start hook (``_on_fit_start``: the critic warm-up on fresh runs):
   :class:`~verlog.trainer.run_state.RunState`.

KL in reward, the critic-only iterations (``trainer.critic_warmup``), the once-per-iteration weight sync and
checkpoint/resume are verl's own mechanisms. verlog/trainer/seams.py lists every seam and checks, when the trainer is
built, that the installed verl still calls each one as 0.9.1 does.
"""

from __future__ import annotations

import time
from functools import partial
from typing import Any

import torch
from torch.utils.data import Dataset, SequentialSampler
from verl import DataProto
from verl.trainer.ppo import ray_trainer

from verlog.algorithms.estimators import Estimator, Grouping, get_estimator
from verlog.config.async_modes import AsyncMode, get_async_mode
from verlog.config.env_backend import env_pool_arguments, ray_workers_line
from verlog.config.schema import TrainConfig
from verlog.console import say
from verlog.models.vision import ImageTokenCounter, rollout_processor
from verlog.rollout.build import build_rollout
from verlog.rollout.generator import VerlServerGenerator
from verlog.rollout.iteration import append_iteration_logs
from verlog.rollout.manager import RolloutManager
from verlog.run.summary import EngineGapWarner, iteration_line
from verlog.trainer.advantage_step import BatchLayout, advantage_step, record_tapes, update_curriculum
from verlog.trainer.async_rollout import WeightSync, lag_step
from verlog.trainer.model_passes import ModelPasses
from verlog.trainer.run_state import RunState
from verlog.trainer.seams import check_seams
from verlog.trainer.step_value import StepValue


class TickDataset(Dataset):
    """``length`` items ``{"tick": i}``: one per row of rollout; it sizes verl's batches, nothing more."""

    def __init__(self, length: int) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {"tick": index}


def tick_collate(items: list[dict[str, Any]]) -> dict[str, Any]:
    return {"tick": torch.tensor([item["tick"] for item in items], dtype=torch.long)}


class VerlogPPOTrainer(RunState, ModelPasses):
    """verl's PPO trainer driving verlog's multi-turn rollout (see the module docstring for the seams): the model
    passes in :class:`~verlog.trainer.model_passes.ModelPasses`, checkpoints and the run's start in
    :class:`~verlog.trainer.run_state.RunState`, the rest of an iteration here."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        check_seams()  # before any worker starts: verl's fit must still call what verlog overrides
        super().__init__(*args, **kwargs)
        self._tapes: Any = None  # the run's TrainingTapes (init_workers)
        self._step_metrics: StepValue[dict[str, float]] = StepValue()  # compute_advantage -> the iteration's log

    def _create_dataloader(self, train_dataset: Any, val_dataset: Any, collate_fn: Any, train_sampler: Any) -> None:
        rows = int(self.config.data.train_batch_size)
        iterations = int(self.config.trainer.total_training_steps)
        train = TickDataset(rows * iterations)
        super()._create_dataloader(train, TickDataset(rows), tick_collate, SequentialSampler(train))

    @property
    def verlog(self) -> Any:
        """verlog's own config as verl carries it (``config.verlog``, a DictConfig; the trainer's tests build it)."""
        return self.config.verlog

    @property
    def settings(self) -> TrainConfig:
        """``config.verlog`` typed (:class:`verlog.config.schema.TrainConfig`; checked before launch), read once."""
        cached = self.__dict__.get("_settings")
        if cached is None:
            from verlog.config.checks import typed_config

            cached, _ = typed_config(self.verlog)
            self.__dict__["_settings"] = cached
        return cached

    # ------------------------------------------------------------------------------------------ workers
    def init_workers(self) -> None:
        super().init_workers()
        algorithm = self.settings.algorithm
        if self.use_critic and algorithm.first_position_weight != 1.0:
            from verl.utils.config import omega_conf_to_dataclass

            from verlog.trainer.losses import critic_loss

            critic_cfg = omega_conf_to_dataclass(self.config.critic)
            self.critic_wg.set_loss_fn(
                partial(critic_loss, config=critic_cfg, first_position_weight=algorithm.first_position_weight)
            )
        self.rollout = self._build_rollout()
        rollout_settings, mode = self.settings.rollout, self._async_mode()
        manager = self.async_rollout_manager
        manager.attach(self.rollout, rollout_settings.turns_per_slot, ahead_capacity=mode.capacity(rollout_settings))
        if manager.ahead is not None:  # verl's fit syncs weights through this attribute (verlog/trainer/seams.py)
            self.checkpoint_manager = WeightSync(self.checkpoint_manager, mode.weight_sync, manager.ahead.busy)
            manager.ahead.before_start = self.checkpoint_manager.apply_deferred
        self._tapes = self._build_tapes()
        self._engine_gap = EngineGapWarner(older_rows=mode.correction)  # warn_engine_gap

    def _build_rollout(self) -> RolloutManager:
        """The run's rollout (:func:`verlog.rollout.build.build_rollout`), generating through verl's vLLM servers."""
        settings = self.settings
        pool_arguments = env_pool_arguments(settings, say=say)
        rollout = build_rollout(
            env_id=str(settings.env.id),
            env_kwargs=dict(settings.env.kwargs),
            tasks=settings.env.tasks,
            num_slots=settings.rollout.num_slots,
            tokenizer=self.tokenizer,
            generator=VerlServerGenerator(self.async_rollout_manager.llm_client),
            sampling=settings.rollout_sampling,
            memory=settings.memory,
            max_prompt_tokens=settings.rollout.max_prompt_tokens,
            curriculum=settings.curriculum,
            in_process=settings.env.in_process,
            **pool_arguments,
            num_workers=settings.env.num_workers,
            frames=settings.tapes.frames,
            seed=settings.seed,
            run_id=settings.run_name,
            generation_retries=settings.rollout.generation_retries,
            group_size=settings.rollout.group_size if self._estimator().grouping is Grouping.GROUPS else None,
            pipeline_groups=self._async_mode().pipeline_groups(settings.rollout),
            processor=rollout_processor(settings.model.path, settings.memory.max_image_history),
        )
        if pool_arguments["backend"] == "ray":
            say(f"[verlog] env workers: {ray_workers_line(rollout.pool, pool_arguments['ray_options'])}")
        return rollout

    def _estimator(self) -> Estimator:
        """``algorithm.estimator``'s registry entry (verlog/algorithms/estimators.py)."""
        return get_estimator(self.settings.algorithm.estimator)

    def _async_mode(self) -> AsyncMode:
        """``rollout.async_mode``'s registry entry (verlog/config/async_modes.py)."""
        return get_async_mode(self.settings.rollout.async_mode)

    def _build_tapes(self) -> Any:
        """The run's training tapes; a run with images stores each taped turn's frame (the viewer shows it beside
        the turn) whatever ``tapes.frames`` says: the rollout holds the frames already."""
        import dataclasses

        from verlog.tapes.recorders import TrainingTapes

        settings = self.settings
        tapes = settings.tapes
        if settings.memory.max_image_history > 0 and not tapes.frames:
            tapes = dataclasses.replace(tapes, frames=True)
        return TrainingTapes(
            settings.output_dir,
            tapes,
            self.tokenizer,
            env_id=str(settings.env.id),
            parse_mode=str(settings.env.kwargs.get("parse_mode", "strict")),
            seed=settings.seed,
        )

    def _batch_layout(self) -> BatchLayout:
        """How verl cuts the batch into PPO mini-batches (verl's config, ``verl:`` overrides included)."""
        actor = self.config.actor_rollout_ref.actor
        return BatchLayout(
            ranks=self._world_size(),
            mini_batch_rows=int(actor.ppo_mini_batch_size),
            shuffle=bool(actor.get("shuffle", False)),
        )

    # ------------------------------------------------------------------------------------------ advantage
    def compute_advantage(self, data: DataProto, *args: Any, **kwargs: Any) -> DataProto:
        """verl's ``compute_advantage`` during ``fit`` (verl's own arguments are ignored): the advantage step of
        ``algorithm.estimator``, then the run-level hooks on the rows it trains, given this iteration's rollout
        (tapes, the curriculum); the step's metrics go to this iteration's log (:meth:`extra_metrics`)."""
        step = int(self.global_steps)
        data, metrics, raw_advantages = advantage_step(data, self.settings, self._batch_layout())
        if isinstance(self.checkpoint_manager, WeightSync):  # rows written by older policies: lag, max_lag
            metrics.update(lag_step(data, self.checkpoint_manager.latest, self.settings.rollout.max_lag))
            metrics.update(self.checkpoint_manager.metrics())
        record = self.async_rollout_manager.rollout_at(step)
        entropys = self._entropys.take(step, None)
        if self._estimator().tapes and record is not None and self._tapes is not None and self._tapes.enabled:
            written = record_tapes(self._tapes, data, record.batch.rows, raw_advantages, entropys, step)
            record.log["taped_turns"] = written  # in rollout.jsonl: 0 where writing failed (printed)
        curriculum = self.rollout.curriculum
        episodes = record.batch.episodes if record is not None else []
        metrics = {**metrics, **update_curriculum(curriculum, data, episodes, step)}
        self._step_metrics.put(step, metrics)
        return data

    # ------------------------------------------------------------------------------------------ evaluation
    def _validate(self, merged: bool = False) -> dict[str, float]:
        """verlog's evaluation in place of verl's validation data: verl calls this every ``trainer.test_freq``
        (``evaluation.every``) iterations, at the last one and, with ``val_before_train``, before a fresh run's first
        (``_load_checkpoint`` turns it off on resume), after the actor's weights are in vLLM; the metrics join that
        iteration's record (verlog/trainer/evaluation.py)."""
        from verlog.trainer.evaluation import TrainingEvaluator

        if getattr(self, "_evaluator", None) is None:
            self._evaluator = TrainingEvaluator.from_config(self.verlog, self.settings)
        sync = self.checkpoint_manager
        if isinstance(sync, WeightSync):  # evaluate the newest weights, and only them
            self.async_rollout_manager.ahead.settle()
            sync.apply_deferred()
        generator = VerlServerGenerator(self.async_rollout_manager.llm_client)
        processor = getattr(self.async_rollout_manager.rollout, "processor", None)
        images = processor is not None and self.settings.memory.max_image_history > 0
        image_tokens = ImageTokenCounter(processor) if images else None
        metrics = self._evaluator.run(generator, self.tokenizer, int(self.global_steps), image_tokens)
        if isinstance(sync, WeightSync) and sync.version is not None:
            metrics["eval/policy_version"] = float(sync.version)
        return metrics

    # ------------------------------------------------------------------------------------------ fit
    def fit(self) -> None:
        """verl's PPO loop with verlog's advantage and metrics patched in for its duration."""
        import verl.utils.tracking as tracking

        original_adv, original_tracking = ray_trainer.compute_advantage, tracking.Tracking
        ray_trainer.compute_advantage = self.compute_advantage
        tracking.Tracking = _tracking_with(original_tracking, self)
        self._fit_start = time.time()
        self._first_step: int | None = None
        try:
            super().fit()
        finally:
            ray_trainer.compute_advantage = original_adv
            tracking.Tracking = original_tracking
            if self.async_rollout_manager.ahead is not None:
                self.async_rollout_manager.ahead.close()

    def extra_metrics(self, step: int) -> dict[str, float]:
        """verlog's metrics for the step being logged (the rollout's, then the advantage step's and the curriculum's,
        each of this very iteration), and a progress line on stdout."""
        metrics: dict[str, float] = {}
        record = self.async_rollout_manager.rollout_at(step)
        metrics.update(record.metrics if record is not None else {})
        metrics.update(self._value_metrics.take(step, {}))
        metrics.update(self._check_metrics.take(step, {}))
        metrics.update(self._step_metrics.take(step, {}))
        if self._first_step is None:
            self._first_step = step
        done = step - self._first_step + 1
        elapsed = time.time() - self._fit_start
        remaining = max(self.total_training_steps - step, 0)
        eta = elapsed / done * remaining
        metrics["progress/iteration"] = float(step)
        metrics["progress/eta_s"] = eta
        metrics["progress/elapsed_s"] = elapsed
        return metrics

    def warn_engine_gap(self, step: int, data: dict[str, Any]) -> None:
        """Once a run: say when vLLM and the actor disagree on rows of the current weights
        (:func:`verlog.run.summary.engine_gap_warning`; modes that train on older rows are left out)."""
        warning = self._engine_gap.check(step, data)
        if warning is not None:
            say(warning, err=True)

    def log_jsonl(self, data: dict[str, Any], step: int, rollout: bool = True) -> None:
        """The iteration's lines of ``metrics.jsonl`` and ``rollout.jsonl``
        (:func:`verlog.rollout.iteration.append_iteration_logs`)."""
        this_rollout = self.async_rollout_manager.rollout_at(step) if rollout else None
        append_iteration_logs(
            self.settings.output_dir, step, data, this_rollout.log if this_rollout is not None else None
        )


def _tracking_with(base: type, trainer: VerlogPPOTrainer) -> type:
    """verl's Tracking class with verlog's metrics merged into every training log."""

    class VerlogTracking(base):  # type: ignore[misc, valid-type]
        def log(self, data: dict[str, Any], step: int, *args: Any, **kwargs: Any) -> Any:
            if "training/global_step" in data:
                data = {**data, **trainer.extra_metrics(step)}
                trainer.log_jsonl(data, step)
                say(
                    iteration_line(
                        step, trainer.total_training_steps, data, data["progress/elapsed_s"], data["progress/eta_s"]
                    )
                )
                trainer.warn_engine_gap(step, data)
            elif any(str(k).startswith("eval/") for k in data):  # the evaluation before the first iteration
                trainer.log_jsonl(data, step, rollout=False)
            return super().log(data, step, *args, **kwargs)

    return VerlogTracking
