"""VerlogPPOTrainer: verl 0.9.1's legacy RayPPOTrainer with multi-turn per-turn rows and the dual-discount GAE.

verl's ``fit()`` loop runs unchanged; verlog plugs into its seams:

- ``_create_dataloader``: a *tick* data set of ``num_slots x turns_per_slot`` items per iteration (no prompt parquet):
  the batch only fixes how many rows the rollout returns;
- the rollout: :class:`~verlog.trainer.agent_loop.VerlogAgentLoopManager` (``generate_sequences``) runs the
  :class:`~verlog.rollout.manager.RolloutManager`, generating through verl's vLLM servers;
- ``_compute_values``: the critic's values of the rows, plus ``V(s_{t+1})`` of the bootstrap prompts (a second critic
  call on prompt-only rows, padded to the number of ranks) as ``next_values``;
- the advantage: ``verl.trainer.ppo.ray_trainer.compute_advantage`` (looked up at call time in ``fit``) is replaced
  during ``fit`` by :meth:`VerlogPPOTrainer.compute_advantage`, which wires pure functions
  (:mod:`verlog.trainer.advantage_step`): the advantage step asks ``algorithm.estimator``'s registry entry
  (:mod:`verlog.estimators`: dual-discount GAE over the rows, linked by (episode id, turn index) whatever order verl's
  balancing left, then masked whitening; or GRPO / GiGPO, for which no critic is built: ``critic.enable`` is False,
  so verl never calls ``_compute_values``); then the run-level hooks on the trained rows: tapes and the curriculum;
- the critic loss: verlog's clipped value loss with the first position weighted (``set_loss_fn``);
- checkpoints: verl's, plus every slot's env state and memory (``verlog_rollout.pkl``); ``_load_checkpoint`` is also
  the start hook (``_on_fit_start``: the critic warm-up on fresh runs);
- metrics: env and rollout stats, advantage stats, progress and ETA go to verl's tracking backends and to
  ``<output_dir>/metrics.jsonl``; each seam hands its metrics to the iteration's log by the iteration's number
  (:class:`StepValue`), never through an attribute read later;
- ``_validate`` (verl's validation hook, ``trainer.test_freq`` = ``evaluation.every``): verlog's evaluation on held-out
  seeds (:mod:`verlog.trainer.evaluation`), logged as ``eval/*`` metrics.

KL in reward, the critic-only iterations (``trainer.critic_warmup``), the once-per-iteration weight sync and
checkpoint/resume are verl's own mechanisms. verlog/trainer/seams.py lists every seam and checks, when the trainer is
built, that the installed verl still calls each one as 0.9.1 does.
"""

from __future__ import annotations

import os
import pickle
import shutil
import time
from functools import partial
from typing import Any, Generic, TypeVar

import numpy as np
import torch
from omegaconf import open_dict
from torch.utils.data import Dataset, SequentialSampler
from verl import DataProto
from verl.protocol import pad_dataproto_to_divisor
from verl.trainer.ppo import ray_trainer
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl.utils.metric import reduce_metrics
from verl.utils.model import compute_position_id_with_mask

from verlog.async_modes import AsyncMode, get_async_mode, mode_names
from verlog.config.env_backend import env_pool_arguments, ray_workers_line
from verlog.config.schema import TrainConfig
from verlog.console import say
from verlog.errors import VerlogError
from verlog.estimators import Estimator, Grouping, get_estimator
from verlog.fault_points import reached
from verlog.files import append_jsonl
from verlog.rollout.build import build_rollout
from verlog.rollout.generator import VerlServerGenerator
from verlog.rollout.manager import RolloutManager
from verlog.run_folder import (
    ROLLOUT_STATE_FILE,
    CheckpointWriteError,
    RunFolder,
    commit_checkpoint,
    describe_os_error,
    incoming_root,
    os_error_in,
    step_folder,
)
from verlog.run_summary import iteration_line
from verlog.trainer.advantage_step import BatchLayout, advantage_step, record_tapes, update_curriculum
from verlog.trainer.async_rollout import WeightSync, lag_step
from verlog.trainer.engines import SHARING_KEY
from verlog.trainer.lora_check import SERVER_GAP_WARN, LoraCheck, lora_gaps
from verlog.trainer.seams import check_seams

PENDING_KEY = "collected_ahead"
"""Key of the rollout state file holding the iterations collected ahead and not trained yet (async rollout)."""

PREFIX_SHARING_GAP_WARN = 1e-4
"""A larger gap between the shared-prefix passes and verl's per-row passes on the same rows is printed as a warning
(fp32 float noise is about 1e-6; bf16 kernels drift more, docs/row-cost.md)."""

BOOTSTRAP_GAP_WARN = 1e-3
"""A larger gap between the bootstrap values and an ordinary critic call on the same prompt is printed as a warning.
In fp32 on a CPU both calls agree to float noise; bf16 kernels may differ by more without any fault."""


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


T = TypeVar("T")


class StepValue(Generic[T]):
    """A value one seam of verl's ``fit`` hands to a later seam of the same iteration: :meth:`put` at iteration
    ``step``, :meth:`take` at that ``step`` (once). A value of another iteration is never handed out, so a seam that
    did not run in an iteration leaves nothing stale for the next."""

    def __init__(self) -> None:
        self._step: int | None = None
        self._value: T | None = None

    def put(self, step: int, value: T) -> None:
        self._step, self._value = step, value

    def take(self, step: int, default: T) -> T:
        if self._step != step or self._value is None:
            return default
        value = self._value
        self._step, self._value = None, None
        return value


class VerlogPPOTrainer(RayPPOTrainer):
    """verl's PPO trainer driving verlog's multi-turn rollout (see the module docstring for the seams)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        check_seams()  # before any worker starts: verl's fit must still call what verlog overrides
        super().__init__(*args, **kwargs)
        self._tapes: Any = None  # the run's TrainingTapes (init_workers)
        # what one seam of an iteration hands to a later one, by the iteration's number (verl's global_steps)
        self._entropys: StepValue[torch.Tensor] = StepValue()  # _compute_old_log_prob -> the tapes
        self._step_metrics: StepValue[dict[str, float]] = StepValue()  # compute_advantage -> the iteration's log
        self._value_metrics: StepValue[dict[str, float]] = StepValue()  # _compute_values -> the iteration's log
        self._bootstrap_checked = False  # the bootstrap values are checked once a run (_bootstrap_value_gap)
        self._sharing_checked: set[str] = set()  # the shared passes checked against verl's, once a run per pass
        self._check_metrics: StepValue[dict[str, float]] = StepValue()  # those checks -> the iteration's log
        self._lora_check = LoraCheck()  # with model.lora: the adapter reaches vLLM (_check_lora)

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
        alg = self.settings.algorithm
        if self.use_critic and alg.first_position_weight != 1.0:
            from verl.utils.config import omega_conf_to_dataclass

            from verlog.trainer.losses import critic_loss

            critic_cfg = omega_conf_to_dataclass(self.config.critic)
            self.critic_wg.set_loss_fn(
                partial(critic_loss, config=critic_cfg, first_position_weight=alg.first_position_weight)
            )
        self.rollout = self._build_rollout()
        ro, mode = self.settings.rollout, self._async_mode()
        manager = self.async_rollout_manager
        manager.attach(self.rollout, ro.turns_per_slot, ahead_capacity=mode.capacity(ro))
        if manager.ahead is not None:  # verl's fit syncs weights through this attribute (verlog/trainer/seams.py)
            self.checkpoint_manager = WeightSync(self.checkpoint_manager, mode.weight_sync, manager.ahead.busy)
            manager.ahead.before_start = self.checkpoint_manager.apply_deferred
        self._tapes = self._build_tapes()

    def _build_rollout(self) -> RolloutManager:
        """The run's rollout (:func:`verlog.rollout.build.build_rollout`), generating through verl's vLLM servers."""
        v = self.settings
        pool_arguments = env_pool_arguments(v, say=say)
        rollout = build_rollout(
            env_id=str(v.env.id),
            env_kwargs=dict(v.env.kwargs),
            tasks=v.env.tasks,
            num_slots=v.rollout.num_slots,
            tokenizer=self.tokenizer,
            generator=VerlServerGenerator(self.async_rollout_manager.llm_client),
            sampling=v.rollout_sampling,
            memory=v.memory,
            max_prompt_tokens=v.rollout.max_prompt_tokens,
            curriculum=v.curriculum,
            in_process=v.env.in_process,
            **pool_arguments,
            num_workers=v.env.num_workers,
            frames=v.tapes.frames,
            seed=v.seed,
            run_id=v.run_name,
            generation_retries=v.rollout.generation_retries,
            group_size=v.rollout.group_size if self._estimator().grouping is Grouping.GROUPS else None,
            pipeline_groups=self._async_mode().pipeline_groups(v.rollout),
        )
        if pool_arguments["backend"] == "ray":
            say(f"[verlog] env workers: {ray_workers_line(rollout.pool, pool_arguments['ray_options'])}")
        return rollout

    def _estimator(self) -> Estimator:
        """``algorithm.estimator``'s registry entry (verlog/estimators.py)."""
        return get_estimator(self.settings.algorithm.estimator)

    def _async_mode(self) -> AsyncMode:
        """``rollout.async_mode``'s registry entry (verlog/async_modes.py)."""
        return get_async_mode(self.settings.rollout.async_mode)

    def _build_tapes(self) -> Any:
        from verlog.tapes import TrainingTapes

        v = self.settings
        return TrainingTapes(
            v.output_dir,
            v.tapes,
            self.tokenizer,
            env_id=str(v.env.id),
            parse_mode=str(v.env.kwargs.get("parse_mode", "strict")),
            seed=v.seed,
        )

    def _world_size(self) -> int:
        return int(self.config.trainer.n_gpus_per_node) * int(self.config.trainer.nnodes)

    def _batch_layout(self) -> BatchLayout:
        """How verl cuts the batch into PPO mini-batches (verl's config, ``verl:`` overrides included)."""
        actor = self.config.actor_rollout_ref.actor
        return BatchLayout(
            ranks=self._world_size(),
            mini_batch_rows=int(actor.ppo_mini_batch_size),
            shuffle=bool(actor.get("shuffle", False)),
        )

    # ------------------------------------------------------------------------------------------ values
    def _compute_values(self, batch: DataProto) -> DataProto:
        values = super()._compute_values(batch)
        self._check_sharing(batch, "values", values.batch["values"])
        boot = batch.non_tensor_batch["bootstrap_prompt_ids"]
        need = [i for i, prompt in enumerate(boot) if prompt]
        next_values = torch.zeros(len(batch), dtype=torch.float32)
        if need and self.settings.algorithm.boundary == "bootstrap":  # "cut": the boundary ends the return (0)
            # sorted by their tokens: prompts that share a prefix sit in one micro-batch (hardware.prefix_sharing)
            need = sorted(need, key=lambda i: tuple(boot[i]))
            prompts = [list(boot[i]) for i in need]
            padded, _ = pad_dataproto_to_divisor(self._prompt_only_rows(prompts, batch.meta_info), self._world_size())
            out = super()._compute_values(padded)
            next_values[need] = out.batch["values"][: len(need), 0].float()
            step = int(self.global_steps)  # 0 in the critic warm-up, which logs no iteration
            if not self._bootstrap_checked and step >= 1:  # once a run: the seam still gives V(s_{t+1})
                self._bootstrap_checked = True
                gap = self._bootstrap_value_gap(batch, need, next_values[need])
                self._value_metrics.put(step, {"check/bootstrap_value_gap": gap})
        values.batch["next_values"] = next_values
        return values

    def _bootstrap_value_gap(self, batch: DataProto, rows: list[int], next_values: torch.Tensor) -> float:
        """The largest ``|V(s_{t+1}) - V'|`` over ``rows``, with ``V'`` the critic's ordinary value of a row whose
        prompt is the bootstrap prompt, laid out as the rollout lays out rows (left-padded to the batch's prompt
        width) with the row's own response: ``values[:, 0]`` reads the state before the response, so both must be
        V(s_{t+1}) whatever the padding. Prints one line when the gap exceeds float noise."""
        prompts = [list(batch.non_tensor_batch["bootstrap_prompt_ids"][i]) for i in rows]
        width = int(batch.batch["prompts"].shape[1])
        if max(len(p) for p in prompts) > width:  # the bootstrap prompt is longer than any row's room: not checkable
            return float("nan")
        k = len(rows)
        ids, mask = _left_padded(prompts, width, self.tokenizer.pad_token_id)
        responses = batch.batch["responses"][rows]
        attention = torch.cat([mask, batch.batch["attention_mask"][rows, width:]], dim=1)
        tensors = {
            "prompts": ids,
            "responses": responses,
            "response_mask": batch.batch["response_mask"][rows],
            "input_ids": torch.cat([ids, responses], dim=1),
            "attention_mask": attention,
            "position_ids": compute_position_id_with_mask(attention),
        }
        ordinary = DataProto.from_dict(tensors=tensors, meta_info=dict(batch.meta_info))
        padded, _ = pad_dataproto_to_divisor(ordinary, self._world_size())
        again = super()._compute_values(padded).batch["values"][:k, 0].float()
        gap = float((again - next_values).abs().max())
        if gap > BOOTSTRAP_GAP_WARN:
            say(
                f"[verlog] warning: the bootstrap values V(s_T) differ from the critic's value of the same prompt "
                f"as an ordinary row by up to {gap:.3g} (check/bootstrap_value_gap); verl's critic seam may have "
                "changed (verlog/trainer/seams.py)",
                err=True,
            )
        return gap

    def _prompt_only_rows(self, prompts: list[list[int]], meta_info: dict[str, Any]) -> DataProto:
        """Rows of a prompt and one pad token (attended, outside the response mask): ``values[:, 0]`` is V(prompt)."""
        pad = self.tokenizer.pad_token_id
        k = len(prompts)
        ids, mask = _left_padded(prompts, max(len(p) for p in prompts), pad)
        responses = torch.full((k, 1), pad, dtype=torch.long)
        attention = torch.cat([mask, torch.ones((k, 1), dtype=torch.long)], dim=1)
        tensors = {
            "prompts": ids,
            "responses": responses,
            "response_mask": torch.zeros((k, 1), dtype=torch.long),
            "input_ids": torch.cat([ids, responses], dim=1),
            "attention_mask": attention,
            "position_ids": compute_position_id_with_mask(attention),
        }
        return DataProto.from_dict(tensors=tensors, meta_info=dict(meta_info))

    # ------------------------------------------------------------------------------------------ prefix sharing
    def _micro_batch_rows(self) -> int:
        return int(self.config.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu)

    def _balance_batch(self, batch: DataProto, metrics: dict[str, Any], *args: Any, **kwargs: Any) -> None:
        """verl's balancing of the ranks' tokens, or with ``hardware.prefix_sharing`` verlog's order: rows that share
        a prefix in one micro-batch, unrelated micro-batches in each mini-batch
        (:func:`verlog.trainer.prefix_sharing.order_for_sharing`); the ``prefix/`` metrics say what they share."""
        if not self.settings.hardware.prefix_sharing:
            return super()._balance_batch(batch, metrics, *args, **kwargs)
        from verlog.trainer.prefix_sharing import batch_sharing_stats, order_for_sharing

        micro = self._micro_batch_rows()
        prompts = _prompt_tokens(batch)
        order = order_for_sharing(prompts, micro, seed=int(self.global_steps))
        batch.reorder(torch.tensor(order, dtype=torch.long))
        responses = batch.batch["attention_mask"][:, batch.batch["prompts"].shape[1] :].sum(dim=1).tolist()
        stats = batch_sharing_stats([prompts[i] for i in order], responses, micro)
        metrics.update({f"prefix/{key}": value for key, value in stats.items()})
        return None

    def _check_sharing(self, batch: DataProto, output: str, shared: torch.Tensor) -> None:
        """Once a run per pass (``log_probs``, ``values``), from the first iteration: the first micro-batch of every
        rank computed again by verl's own per-row path, the largest difference over the response positions logged as
        ``check/prefix_sharing_<output>_gap`` (a warning above :data:`PREFIX_SHARING_GAP_WARN`)."""
        step = int(self.global_steps)
        if not self.settings.hardware.prefix_sharing or step < 1 or output in self._sharing_checked:
            return
        self._sharing_checked.add(output)
        rows = min(len(batch), self._micro_batch_rows() * self._world_size())
        sub = batch.slice(0, rows)
        sub.meta_info = {**batch.meta_info, SHARING_KEY: False}  # verl's own path in verlog's engines
        if output == "values":
            again = super()._compute_values(sub).batch["values"]
        else:
            again = super()._compute_old_log_prob(sub)[0].batch["old_log_probs"]
        mask = batch.batch["response_mask"][:rows].bool()
        gap = float((again.float() - shared[:rows].float()).abs()[mask].max()) if bool(mask.any()) else 0.0
        metrics = self._check_metrics.take(step, {})
        metrics[f"check/prefix_sharing_{output}_gap"] = gap
        self._check_metrics.put(step, metrics)
        if gap > PREFIX_SHARING_GAP_WARN:
            say(
                f"[verlog] warning: the shared-prefix passes' {output} differ from verl's per-row passes by up to "
                f"{gap:.3g} on the same rows (check/prefix_sharing_{output}_gap); see docs/row-cost.md, or set "
                "hardware.prefix_sharing=false",
                err=True,
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

    # ------------------------------------------------------------------------------------------ tapes
    def _compute_old_log_prob(self, batch: DataProto) -> Any:
        """verl's, keeping the per-token entropies (verl drops them after its metric) for this iteration's tapes;
        rows whose generation failed get ``rollout_log_probs`` equal to their old log-probs (importance weight 1)."""
        out, mfu = super()._compute_old_log_prob(batch)
        self._check_sharing(batch, "log_probs", out.batch["old_log_probs"])
        self._check_lora(batch)
        if "rollout_log_probs" in batch.batch and "generation_failed" in batch.non_tensor_batch:
            # a failed generation has no rollout log-probs (0s): its importance weight is 1, left out of the
            # correction, rather than exp(old log-prob)
            failed = torch.as_tensor(batch.non_tensor_batch["generation_failed"].astype(bool))
            if bool(failed.any()):
                batch.batch["rollout_log_probs"][failed] = out.batch["old_log_probs"][failed].to(
                    batch.batch["rollout_log_probs"].dtype
                )
        if self._tapes is not None and self._tapes.enabled and self._estimator().tapes:
            self._entropys.put(int(self.global_steps), out.batch["entropys"])
        return out, mfu

    def _check_lora(self, batch: DataProto) -> None:
        """With ``model.lora``: the server's, the trainer's and the base model's log-probs of a few rows, at the
        first iteration and the first after the adapter's first update (:mod:`verlog.trainer.lora_check`)."""
        if self.settings.model.lora.rank <= 0:
            return
        step = int(self.global_steps)
        sync = self.checkpoint_manager
        synced = not isinstance(sync, WeightSync) or sync.version == sync.latest
        updated = step - 1 >= max(int(self.config.trainer.critic_warmup), 1)  # verl updates the actor from then on
        if not self._lora_check.due(updated, synced):
            return
        gaps = lora_gaps(
            batch,
            self._world_size() * self._micro_batch_rows(),
            self.async_rollout_manager.llm_client,
            trainer=lambda rows: RayPPOTrainer._compute_old_log_prob(self, rows)[0].batch["old_log_probs"],
            base=lambda rows: RayPPOTrainer._compute_ref_log_prob(self, rows).batch["ref_log_prob"],
            tag=f"verlog-lora-check-{step}",
        )
        self._lora_check.record(updated)
        self._check_metrics.put(step, {**self._check_metrics.take(step, {}), **gaps})
        if not gaps.get("check/lora_server_gap", 0.0) <= SERVER_GAP_WARN:  # NaN: the server gave no log-probs
            say(
                f"[verlog] warning: the inference server's log-probs differ from the trainer's LoRA actor by up to "
                f"{gaps['check/lora_server_gap']:.3g} (check/lora_server_gap; the base model's differ by "
                f"{gaps['check/lora_base_gap']:.3g}): the adapter may not have reached vLLM (docs/lora.md)",
                err=True,
            )

    # ------------------------------------------------------------------------------------------ checkpoints
    def _step_folder(self) -> str:
        return str(step_folder(self.config.trainer.default_local_dir, self.global_steps))

    def _save_checkpoint(self) -> None:
        """verl's checkpoint and the env slots' state, written into ``checkpoints/.incoming/`` and made the latest
        only once complete (:func:`verlog.run_folder.commit_checkpoint`): a kill while it is written leaves the
        previous checkpoint the latest one."""
        trainer_cfg = self.config.trainer
        checkpoints = str(trainer_cfg.default_local_dir)
        ahead = self.async_rollout_manager.ahead
        pending = ahead.pending() if ahead is not None else []  # waits for the background rollout
        incoming = incoming_root(checkpoints)  # empty here: recover_checkpoints cleared it at start, commits clear it
        step = int(self.global_steps)
        try:
            with open_dict(trainer_cfg):
                trainer_cfg.default_local_dir = str(incoming)  # verl reads it for every path of its save
            try:
                super()._save_checkpoint()
            finally:
                with open_dict(trainer_cfg):
                    trainer_cfg.default_local_dir = checkpoints
            folder = step_folder(incoming, step)
            with open(folder / ROLLOUT_STATE_FILE, "wb") as f:
                pickle.dump({**self.rollout.state_dict(), PENDING_KEY: pending}, f)
                f.flush()
                os.fsync(f.fileno())
        except Exception as exc:
            shutil.rmtree(incoming, ignore_errors=True)  # the partial checkpoint; the latest complete one is untouched
            cause = os_error_in(exc)  # verl's workers' errors arrive wrapped by Ray
            if cause is None:
                raise
            raise CheckpointWriteError(
                f"writing the checkpoint of iteration {step} failed ({describe_os_error(cause)}); the partial "
                "checkpoint was removed and the latest complete one is untouched: free space (or fix the folder)"
            ) from exc
        reached("checkpoint", step, self.settings.output_dir)  # tests' kill point (verlog.fault_points)
        commit_checkpoint(checkpoints, step)

    def _load_checkpoint(self) -> Any:
        """verl's checkpoint loading, then the env slots' state (a resumed run) and :meth:`_on_fit_start`.

        verl 0.9.1's ``fit`` calls this once, before its first iteration and before anything else of the run
        (verlog/trainer/seams.py checks that), so it is also where verlog's start hook runs."""
        result = super()._load_checkpoint()
        if self.global_steps > 0:
            self._restore_rollout_state()
        self._on_fit_start(resumed=self.global_steps > 0)
        return result

    def _on_fit_start(self, resumed: bool) -> None:
        """verlog's start hook (after the checkpoint is loaded, before the first iteration): the critic warm-up on
        a fresh run (``algorithm.warmup_rollout_multiplier`` > 1)."""
        if not resumed and self.settings.algorithm.warmup_rollout_multiplier > 1:
            self._warmup_critic()

    def _restore_rollout_state(self) -> None:
        """The env slots and memories of the checkpoint being resumed (``verlog_rollout.pkl``)."""
        if self.config.trainer.resume_mode == "resume_path":
            folder = str(self.config.trainer.resume_from_path)
        else:
            folder = self._step_folder()
        path = os.path.join(folder, ROLLOUT_STATE_FILE)
        if not os.path.exists(path):
            raise VerlogError(
                f"checkpoint {folder} has no {ROLLOUT_STATE_FILE} (the env slots' state): it was not written by "
                "verlog's trainer; resume from another checkpoint or set checkpoint.resume=disable"
            )
        with open(path, "rb") as f:
            state = pickle.load(f)
        pending = state.pop(PENDING_KEY, [])
        self.rollout.load_state_dict(state)
        ahead = self.async_rollout_manager.ahead
        if ahead is not None:
            ahead.restore(pending)
        elif pending:
            raise VerlogError(
                f"checkpoint {folder} holds {len(pending)} iteration(s) of rows collected ahead by "
                f"rollout.async_mode={' or '.join(mode_names(lambda m: m.keeps_rows_ahead))}: resume with that mode, "
                "so they are trained and no turn is lost"
            )
        say(f"[verlog] resumed {self.rollout.num_slots} env slots at {self.rollout.current_episodes()}")
        if bool(self.config.trainer.get("val_before_train", False)):
            # evaluation.before_train is the starting model's point (a fresh run's); a resumed run's step would
            # get a second record beside the one the saving run wrote
            self.config.trainer.val_before_train = False

    def _warmup_critic(self) -> None:
        """Verlog's critic warm-up: one rollout ``warmup_rollout_multiplier`` times the usual size, then
        ``warmup_critic_updates`` critic-only updates on it, before the first PPO iteration (fresh runs only)."""
        alg = self.settings.algorithm
        turns = self.settings.warmup_rollout_turns
        updates = alg.warmup_critic_updates
        self.checkpoint_manager.update_weights(self.global_steps)  # vLLM starts from placeholder weights
        start = time.time()
        batch = self.rollout.collect(turns)
        data = self.async_rollout_manager.to_dataproto(batch)
        data.meta_info["temperature"] = float(self.config.actor_rollout_ref.rollout.temperature)
        if self.settings.hardware.prefix_sharing:  # rows that share a prefix in one micro-batch
            self._balance_batch(data, {})
        data = data.union(self._compute_values(data))
        data.batch["token_level_rewards"] = data.batch["rm_scores"]
        data, _, _ = advantage_step(data, self.settings, self._batch_layout())  # no iteration yet: no tapes, metrics
        losses = []
        for i in range(updates):
            out = self._update_critic(data)
            losses.append(float(reduce_metrics(out.meta_info["metrics"]).get("critic/vf_loss", float("nan"))))
            print(  # into the log (verlog.console); the line after it on the console
                f"[verlog] critic warm-up update {i + 1}/{updates} on {len(data)} rows: vf_loss {losses[-1]:.4f}",
                flush=True,
            )
        say(
            f"[verlog] critic warm-up: {updates} updates on {len(data)} rows in {time.time() - start:.0f} s, vf_loss "
            f"{losses[0]:.4f} -> {losses[-1]:.4f}"
        )

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
        metrics = self._evaluator.run(generator, self.tokenizer, int(self.global_steps))
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

    def log_jsonl(self, data: dict[str, Any], step: int, rollout: bool = True) -> None:
        out = self.settings.output_dir
        os.makedirs(out, exist_ok=True)
        record = {"step": step, **{k: _plain(v) for k, v in data.items()}}
        append_jsonl(RunFolder(out).metrics, [record])  # one write per line: a kill tears at most one
        this_rollout = self.async_rollout_manager.rollout_at(step) if rollout else None
        if this_rollout is not None:
            append_jsonl(RunFolder(out).rollout_log, [{"step": step, **this_rollout.log}])


def _prompt_tokens(batch: DataProto) -> list[list[int]]:
    """Each row's prompt token ids (the left padding dropped)."""
    prompts = batch.batch["prompts"]
    mask = batch.batch["attention_mask"][:, : prompts.shape[1]].bool()
    return [row[keep].tolist() for row, keep in zip(prompts, mask)]


def _left_padded(prompts: list[list[int]], width: int, pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompts right-aligned in ``[K, width]`` (verl's layout): the ids (``pad`` before each) and the attention mask."""
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
        mask[i, width - len(p) :] = 1
    return ids, mask


def _plain(v: Any) -> Any:
    if isinstance(v, torch.Tensor):
        return v.item() if v.numel() == 1 else v.tolist()
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, (int, float, str, bool)) or v is None:
        return v
    return str(v)


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
            elif any(str(k).startswith("eval/") for k in data):  # the evaluation before the first iteration
                trainer.log_jsonl(data, step, rollout=False)
            return super().log(data, step, *args, **kwargs)

    return VerlogTracking
