"""The run's state across processes: verlog's checkpoint seams (verl's checkpoint plus every env slot's state and the
rows collected ahead, committed only once complete), resuming them, and the start of a run (the critic warm-up).

:class:`RunState` sits between :class:`~verlog.trainer.ppo.VerlogPPOTrainer` and verl's ``RayPPOTrainer`` (after
:class:`~verlog.trainer.model_passes.ModelPasses` in the trainer's bases); it reads from the trainer ``settings``,
``rollout`` (the :class:`~verlog.rollout.manager.RolloutManager`) and ``_batch_layout()``.
"""

from __future__ import annotations

import os
import pickle
import shutil
import time
from typing import Any

from omegaconf import open_dict
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl.utils.metric import reduce_metrics

from verlog.config.async_modes import mode_names
from verlog.console import say
from verlog.errors import VerlogError
from verlog.run.fault_points import reached
from verlog.run.folder import (
    ROLLOUT_STATE_FILE,
    CheckpointWriteError,
    commit_checkpoint,
    describe_os_error,
    incoming_root,
    os_error_in,
    step_folder,
)
from verlog.trainer.advantage_step import advantage_step

PENDING_KEY = "collected_ahead"
"""Key of the rollout state file holding the iterations collected ahead and not trained yet (async rollout)."""


class RunState(RayPPOTrainer):
    """verl's checkpoint save and load with the env slots' state, and verlog's start hook (module docstring)."""

    def _step_folder(self) -> str:
        return str(step_folder(self.config.trainer.default_local_dir, self.global_steps))

    def _save_checkpoint(self) -> None:
        """verl's checkpoint and the env slots' state, written into ``checkpoints/.incoming/`` and made the latest
        only once complete (:func:`verlog.run.folder.commit_checkpoint`): a kill while it is written leaves the
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
        reached("checkpoint", step, self.settings.output_dir)  # tests' kill point (verlog.run.fault_points)
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
        turns = self.settings.warmup_rollout_turns
        updates = self.settings.algorithm.warmup_critic_updates
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
