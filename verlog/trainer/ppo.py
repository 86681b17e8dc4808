"""VerlogPPOTrainer: verl 0.9.1's legacy RayPPOTrainer with multi-turn per-turn rows and the dual-discount GAE.

verl's ``fit()`` loop runs unchanged; verlog plugs into its seams:

- ``_create_dataloader``: a *tick* data set of ``num_slots x turns_per_slot`` items per iteration (no prompt parquet):
  the batch only fixes how many rows the rollout returns;
- the rollout: :class:`~verlog.trainer.agent_loop.VerlogAgentLoopManager` (``generate_sequences``) runs the
  :class:`~verlog.rollout.manager.RolloutManager`, generating through verl's vLLM servers;
- ``_compute_values``: the critic's values of the rows, plus ``V(s_{t+1})`` of the bootstrap prompts (a second critic
  call on prompt-only rows, padded to the number of ranks) as ``next_values``;
- the advantage: ``verl.trainer.ppo.ray_trainer.compute_advantage`` (looked up at call time in ``fit``) is replaced
  during ``fit`` by :meth:`VerlogPPOTrainer.compute_advantage`: dual-discount GAE over the rows, linked by (episode
  id, turn index) whatever order verl's balancing left, then masked whitening; or, with ``algorithm.estimator`` =
  ``grpo`` / ``gigpo``, the group advantages of :mod:`verlog.group_advantage` (no critic is built: ``critic.enable``
  is False, so verl never calls ``_compute_values``);
- the critic loss: verlog's clipped value loss with the first position weighted (``set_loss_fn``);
- checkpoints: verl's, plus every slot's env state and memory (``verlog_rollout.pkl``); ``_load_checkpoint`` is also
  the start hook (``_on_fit_start``: the critic warm-up on fresh runs);
- metrics: env and rollout stats, advantage stats, progress and ETA go to verl's tracking backends and to
  ``<output_dir>/metrics.jsonl``;
- ``_validate`` (verl's validation hook, ``trainer.test_freq`` = ``evaluation.every``): verlog's evaluation on held-out
  seeds (:mod:`verlog.trainer.evaluation`), logged as ``eval/*`` metrics.

KL in reward, the critic-only iterations (``trainer.critic_warmup``), the once-per-iteration weight sync and
checkpoint/resume are verl's own mechanisms. verlog/trainer/seams.py lists every seam and checks, when the trainer is
built, that the installed verl still calls each one as 0.9.1 does.
"""

from __future__ import annotations

import json
import os
import pickle
import time
from functools import partial
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset, SequentialSampler
from verl import DataProto
from verl.protocol import pad_dataproto_to_divisor
from verl.trainer.ppo import ray_trainer
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl.utils.metric import reduce_metrics
from verl.utils.model import compute_position_id_with_mask

from verlog.advantage import advantage_metrics, dual_discount_gae, masked_whiten, turn_level_advantages
from verlog.config.schema import TrainConfig
from verlog.errors import VerlogError
from verlog.estimators import Estimator, Grouping, get_estimator
from verlog.group_advantage import group_advantages, spread_untrained_rows
from verlog.rollout.batch import link_turns
from verlog.rollout.generator import SamplingConfig, VerlServerGenerator
from verlog.rollout.manager import RolloutManager, make_env_pool
from verlog.trainer.seams import check_seams

ROLLOUT_STATE_FILE = "verlog_rollout.pkl"


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


class VerlogPPOTrainer(RayPPOTrainer):
    """verl's PPO trainer driving verlog's multi-turn rollout (see the module docstring for the seams)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        check_seams()  # before any worker starts: verl's fit must still call what verlog overrides
        super().__init__(*args, **kwargs)

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
        self.async_rollout_manager.attach(self.rollout, self.settings.rollout.turns_per_slot)
        self._tapes = self._build_tapes()

    def _build_rollout(self) -> RolloutManager:
        from verlog.memory import PromptTemplate, SlidingMemory
        from verlog.tapes import TapeSettings, frame_env_kwargs

        v = self.settings
        env = v.env
        frames = TapeSettings.from_config(self.verlog).frames
        env_kwargs = dict(env.kwargs)
        env_id, curriculum = str(env.id), None
        if env.tasks:  # multi-task: every slot a MultiTaskEnv; the curriculum draws each episode's family
            env_id, env_kwargs, curriculum = self._multitask(env_kwargs, frames)
        elif frames:
            env_kwargs = frame_env_kwargs(env_id, env_kwargs)
        pool = make_env_pool(
            env_id,
            v.rollout.num_slots,
            env_kwargs=env_kwargs,
            in_process=env.in_process,
            num_workers=env.num_workers,
            seed=v.seed,
            keep_images=frames,
        )
        sampling = SamplingConfig(
            temperature=v.sampling.temperature,
            top_p=v.sampling.top_p,
            top_k=v.sampling.top_k,
            max_tokens=v.rollout.max_response_tokens,
        )
        memory = v.memory
        return RolloutManager(
            pool,
            self.tokenizer,
            VerlServerGenerator(self.async_rollout_manager.llm_client),
            sampling,
            max_prompt_tokens=v.rollout.max_prompt_tokens,
            memory_factory=lambda: SlidingMemory(
                n=memory.n,
                keep_reasoning_turns=memory.keep_reasoning_turns,
                template=PromptTemplate.for_answer_format(memory.answer_format),
            ),
            seed=v.seed,
            run_id=v.run_name,
            generation_retries=v.rollout.generation_retries,
            group_size=v.rollout.group_size if self._estimator().grouping is Grouping.GROUPS else None,
            curriculum=curriculum,
        )

    def _multitask(self, env_kwargs: dict[str, Any], frames: bool) -> tuple[str, dict[str, Any], Any]:
        """``env.tasks`` -> the pool's env id and kwargs (``envs.multitask.MultiTaskEnv``: each family's env with
        ``env.kwargs`` and its own kwargs) and the run's :class:`verlog.curriculum.TaskCurriculum`."""
        from envs.multitask import MULTITASK_ENV_ID
        from verlog.config.checks import curriculum_settings
        from verlog.curriculum import TaskCurriculum, parse_task_families
        from verlog.tapes import frame_env_kwargs

        typed = self.settings
        families = parse_task_families(typed.env.tasks)
        tasks = {
            f.name: {
                "env_id": f.env_id,
                "kwargs": frame_env_kwargs(f.env_id, {**env_kwargs, **f.kwargs}) if frames else dict(f.kwargs),
            }
            for f in families
        }
        curriculum = TaskCurriculum([f.name for f in families], curriculum_settings(typed), seed=typed.seed)
        return MULTITASK_ENV_ID, {"tasks": tasks, "env_kwargs": env_kwargs}, curriculum

    def _estimator(self) -> Estimator:
        """``algorithm.estimator``'s registry entry (verlog/estimators.py)."""
        return get_estimator(self.settings.algorithm.estimator)

    def _build_tapes(self) -> Any:
        from verlog.tapes import TapeSettings, TrainingTapes

        v = self.settings
        return TrainingTapes(
            v.output_dir,
            TapeSettings.from_config(self.verlog),
            self.tokenizer,
            env_id=str(v.env.id),
            parse_mode=str(v.env.kwargs.get("parse_mode", "strict")),
            seed=v.seed,
        )

    def _world_size(self) -> int:
        return int(self.config.trainer.n_gpus_per_node) * int(self.config.trainer.nnodes)

    # ------------------------------------------------------------------------------------------ values
    def _compute_values(self, batch: DataProto) -> DataProto:
        values = super()._compute_values(batch)
        boot = batch.non_tensor_batch["bootstrap_prompt_ids"]
        need = [i for i, prompt in enumerate(boot) if prompt]
        next_values = torch.zeros(len(batch), dtype=torch.float32)
        if need and self.settings.algorithm.boundary == "bootstrap":  # "cut": the boundary ends the return (0)
            prompts = [list(boot[i]) for i in need]
            boot = self._prompt_only_rows(prompts, batch.meta_info)
            padded, _ = pad_dataproto_to_divisor(boot, self._world_size())
            out = super()._compute_values(padded)
            next_values[need] = out.batch["values"][: len(need), 0].float()
        values.batch["next_values"] = next_values
        return values

    def _prompt_only_rows(self, prompts: list[list[int]], meta_info: dict[str, Any]) -> DataProto:
        """Rows of a prompt and one pad token (attended, outside the response mask): ``values[:, 0]`` is V(prompt)."""
        pad = self.tokenizer.pad_token_id
        width = max(len(p) for p in prompts)
        k = len(prompts)
        ids = torch.full((k, width), pad, dtype=torch.long)
        mask = torch.zeros((k, width), dtype=torch.long)
        for i, p in enumerate(prompts):
            ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
            mask[i, width - len(p) :] = 1
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

    # ------------------------------------------------------------------------------------------ advantage
    def compute_advantage(self, data: DataProto, *args: Any, **kwargs: Any) -> DataProto:
        """Dual-discount GAE over the per-turn rows (replaces verl's ``compute_advantage`` during ``fit``); the
        group estimators go to :meth:`_group_advantage`."""
        alg = self.settings.algorithm
        if self._estimator().grouping is Grouping.GROUPS:
            return self._group_advantage(data)
        nt = data.non_tensor_batch
        keys = [(str(e), int(t)) for e, t in zip(nt["episode_id"], nt["turn_index"])]
        next_row = link_turns(nt["episode_id"], nt["turn_index"], np.logical_or(nt["terminated"], nt["truncated"]))
        mask = data.batch["response_mask"]
        next_values = data.batch["next_values"] if "next_values" in data.batch.keys() else torch.zeros(len(data))
        self._check_finite(data.batch["token_level_rewards"], keys, "reward")
        advantages, returns = dual_discount_gae(
            data.batch["token_level_rewards"],
            data.batch["values"],
            mask,
            next_row,
            next_values,
            torch.as_tensor(nt["terminated"].astype(bool)),
            token_gamma=alg.token_gamma,
            token_lam=alg.token_lam,
            step_gamma=alg.step_gamma,
            step_lam=alg.step_lam,
        )
        self._check_finite(advantages, keys, "advantage (the critic's values or the bootstrap values)")
        raw = advantages
        if alg.advantage_level == "turn":
            advantages = turn_level_advantages(advantages, mask)
        if alg.whiten_advantages:
            advantages = masked_whiten(advantages, mask)
        data.batch["advantages"] = advantages
        data.batch["returns"] = returns
        # the library's diagnostics of the raw advantages (its critic/* entries are verl's own metrics already)
        stats = advantage_metrics(raw, returns, data.batch["values"], mask) if bool(mask.any()) else {}
        self._adv_metrics = {
            **{k: v for k, v in stats.items() if k.startswith("adv/")},
            "adv/linked_rows": float(sum(r >= 0 for r in next_row)),
            "adv/bootstrap_rows": float(sum(1 for i, r in enumerate(next_row) if r < 0 and not nt["terminated"][i])),
            "adv/next_value_mean": float(next_values.float().mean()),
        }
        self._write_tapes(data, raw, keys)
        self._update_curriculum(data)
        return data

    def _group_advantage(self, data: DataProto) -> DataProto:
        """GRPO / GiGPO over the rows of whole episodes (docs/algorithms.md, "Group estimators"): each row's
        advantage on all its response tokens, no whitening; untrained rows (idle, unfinished) get 0 and are dealt
        over the mini-batches so that none is left without a trained row."""
        alg = self.settings.algorithm
        nt = data.non_tensor_batch
        keys = [(str(e), int(t)) for e, t in zip(nt["episode_id"], nt["turn_index"])]
        if "group_id" not in nt:
            raise VerlogError(
                f"algorithm.estimator={self._estimator().name} needs group rollouts (rows with group ids): the rollout "
                "was built without rollout.group_size"
            )
        self._check_finite(data.batch["token_level_rewards"], keys, "reward")
        out = group_advantages(
            self._estimator().name,
            data.batch["token_level_rewards"],
            data.batch["response_mask"],
            [k[0] for k in keys],
            [k[1] for k in keys],
            np.logical_or(nt["terminated"], nt["truncated"]).tolist(),
            nt["group_id"].tolist(),
            nt["anchor"].tolist(),
            nt["trained"].astype(bool).tolist(),
            norm=alg.group_norm,
            gamma=alg.gigpo_step_gamma,
            omega=alg.gigpo_omega,
        )
        self._check_finite(out.advantages, keys, "advantage")
        data.batch["advantages"] = out.advantages
        data.batch["returns"] = out.advantages.clone()  # no critic: verl's metrics read returns; as verl's GRPO does
        self._adv_metrics = dict(out.metrics)
        if not bool(self.config.actor_rollout_ref.actor.get("shuffle", False)):
            order = spread_untrained_rows(
                nt["trained"].astype(bool).tolist(),
                self._world_size(),
                int(self.config.actor_rollout_ref.actor.ppo_mini_batch_size),
            )
            if order is not None and order != list(range(len(data))):
                data.reorder(torch.tensor(order, dtype=torch.long))
        self._update_curriculum(data)
        return data

    def _update_curriculum(self, data: DataProto) -> None:
        """Multi-task training: the curriculum's arm rewards from the advantages the policy loss uses (whatever the
        estimator: the mean |A| of each task family's trained rows, docs/curriculum.md), then its metrics. Not during
        the critic warm-up (no iteration yet, and an untrained critic's advantages say nothing about the tasks)."""
        from verlog.curriculum import curriculum_metrics, family_abs_advantage

        rollout = getattr(self, "rollout", None)
        curriculum = getattr(rollout, "curriculum", None)
        self._curriculum_metrics = {}
        if curriculum is None or "task" not in data.non_tensor_batch or int(getattr(self, "global_steps", 0)) < 1:
            return
        nt = data.non_tensor_batch
        trained = nt["trained"].astype(bool) if "trained" in nt else None
        tasks = [str(t) for t in nt["task"]]
        curriculum.update(
            family_abs_advantage(data.batch["advantages"], tasks, data.batch["response_mask"], trained=trained)
        )
        batch = getattr(self.async_rollout_manager, "last_batch", None)
        episodes = batch.episodes if batch is not None else []
        rows = [t for i, t in enumerate(tasks) if trained is None or trained[i]]
        self._curriculum_metrics = curriculum_metrics(curriculum, episodes, rows)

    # ------------------------------------------------------------------------------------------ tapes
    def _compute_old_log_prob(self, batch: DataProto) -> Any:
        """verl's, keeping the per-token entropies (verl drops them after its metric) for the tapes' token split."""
        out, mfu = super()._compute_old_log_prob(batch)
        if getattr(self, "_tapes", None) is not None and self._tapes.enabled:
            self._tape_entropys = out.batch["entropys"]
        return out, mfu

    _TAPE_TENSORS = (
        "values",
        "advantages",
        "returns",
        "response_mask",
        "old_log_probs",
        "ref_log_prob",
        "token_level_rewards",
        "next_values",
    )

    def _write_tapes(self, data: DataProto, raw_advantages: torch.Tensor | None, keys: list[tuple[str, int]]) -> None:
        """The iteration's sampled episodes into ``tapes/train.jsonl`` (verlog/tapes.py); not during the critic
        warm-up (no iteration yet). ``keys`` are the rows' (episode id, turn index) in ``data``'s order."""
        from verlog.tapes import record_training_tapes

        tapes = getattr(self, "_tapes", None)
        manager = getattr(self, "async_rollout_manager", None)
        batch = getattr(manager, "last_batch", None)
        if tapes is None or batch is None or int(getattr(self, "global_steps", 0)) < 1:
            return
        by_key = {(r.episode_id, r.turn_index): r for r in batch.rows}
        if any(k not in by_key for k in keys):
            return  # not this iteration's rollout
        entropys = getattr(self, "_tape_entropys", None)
        self._tape_entropys = None
        present = data.batch.keys()
        if entropys is not None and entropys.shape != data.batch["response_mask"].shape:
            entropys = None
        tensors = {k: data.batch[k] if k in present else None for k in self._TAPE_TENSORS}
        tensors["advantages_raw"] = raw_advantages
        tensors["entropys"] = entropys
        record_training_tapes(tapes, [by_key[k] for k in keys], tensors, int(self.global_steps))

    def _check_finite(self, x: torch.Tensor, keys: list[tuple[str, int]], what: str) -> None:
        """Stop the iteration on a NaN or infinite entry, naming the env, the episode and the turn."""
        bad = (~torch.isfinite(x.float())).any(dim=1)
        if bool(bad.any()):
            rows = torch.nonzero(bad).squeeze(1).tolist()
            where = ", ".join(f"episode {keys[i][0]} turn {keys[i][1]}" for i in rows[:5])
            raise VerlogError(
                f"a non-finite {what} in {len(rows)} row(s) of env {self.settings.env.id!r}: {where}; an env must "
                "return finite float rewards (check its step() for NaN or inf)"
            )

    # ------------------------------------------------------------------------------------------ checkpoints
    def _step_folder(self) -> str:
        return os.path.join(self.config.trainer.default_local_dir, f"global_step_{self.global_steps}")

    def _save_checkpoint(self) -> None:
        super()._save_checkpoint()
        with open(os.path.join(self._step_folder(), ROLLOUT_STATE_FILE), "wb") as f:
            pickle.dump(self.rollout.state_dict(), f)

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
            self.rollout.load_state_dict(pickle.load(f))
        print(f"[verlog] resumed {self.rollout.num_slots} env slots at {self.rollout.current_episodes()}")
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
        data = data.union(self._compute_values(data))
        data.batch["token_level_rewards"] = data.batch["rm_scores"]
        data = self.compute_advantage(data)
        for i in range(updates):
            out = self._update_critic(data)
            loss = float(reduce_metrics(out.meta_info["metrics"]).get("critic/vf_loss", float("nan")))
            print(
                f"[verlog] critic warm-up update {i + 1}/{updates} on {len(data)} rows: vf_loss {loss:.4f}", flush=True
            )
        print(f"[verlog] critic warm-up done in {time.time() - start:.0f} s ({len(data)} rows)", flush=True)

    # ------------------------------------------------------------------------------------------ evaluation
    def _validate(self, merged: bool = False) -> dict[str, float]:
        """verlog's evaluation in place of verl's validation data: verl calls this every ``trainer.test_freq``
        (``evaluation.every``) iterations, at the last one and, with ``val_before_train``, before a fresh run's first
        (``_load_checkpoint`` turns it off on resume), after the actor's weights are in vLLM; the metrics join that
        iteration's record (verlog/trainer/evaluation.py)."""
        from verlog.trainer.evaluation import TrainingEvaluator

        if getattr(self, "_evaluator", None) is None:
            self._evaluator = TrainingEvaluator.from_config(self.verlog)
        generator = VerlServerGenerator(self.async_rollout_manager.llm_client)
        return self._evaluator.run(generator, self.tokenizer, int(self.global_steps))

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

    def extra_metrics(self, step: int) -> dict[str, float]:
        """verlog's metrics for the step being logged, and a progress line on stdout."""
        metrics: dict[str, float] = {}
        metrics.update(getattr(self.async_rollout_manager, "last_metrics", {}))
        metrics.update(getattr(self, "_adv_metrics", {}))
        metrics.update(getattr(self, "_curriculum_metrics", {}))
        if self._first_step is None:
            self._first_step = step
        done = step - self._first_step + 1
        elapsed = time.time() - self._fit_start
        remaining = max(self.total_training_steps - step, 0)
        eta = elapsed / done * remaining
        metrics["progress/iteration"] = float(step)
        metrics["progress/eta_s"] = eta
        print(
            f"[verlog] iteration {step}/{self.total_training_steps} done, {elapsed:.0f} s elapsed, ETA {eta:.0f} s",
            flush=True,
        )
        return metrics

    def log_jsonl(self, data: dict[str, Any], step: int, rollout: bool = True) -> None:
        out = self.settings.output_dir
        os.makedirs(out, exist_ok=True)
        record = {"step": step, **{k: _plain(v) for k, v in data.items()}}
        with open(os.path.join(out, "metrics.jsonl"), "a") as f:
            f.write(json.dumps(record) + "\n")
        log = self.async_rollout_manager.iteration_log
        if rollout and log:
            with open(os.path.join(out, "rollout.jsonl"), "a") as f:
                f.write(json.dumps({"step": step, **log[-1]}) + "\n")


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
            elif any(str(k).startswith("eval/") for k in data):  # the evaluation before the first iteration
                trainer.log_jsonl(data, step, rollout=False)
            return super().log(data, step, *args, **kwargs)

    return VerlogTracking
