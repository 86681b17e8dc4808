"""The model passes of verl's PPO iteration as verlog changes them: the critic's values (with the bootstrap values of
the next states), the old log-probs (keeping the entropies for the tapes), the batch order for shared prefixes, and
the once-a-run checks that these seams still compute what verl's own path does.

:class:`ModelPasses` sits between :class:`~verlog.trainer.ppo.VerlogPPOTrainer` and verl's ``RayPPOTrainer``: each
override calls verl's own pass (``super()``) and adds verlog's part. It reads from the trainer ``settings`` (the typed
config), ``_tapes`` and ``_estimator()``; what it measures goes to the iteration's log through :class:`StepValue`
(``_value_metrics``, ``_check_metrics``, ``_entropys``), read by the trainer's advantage and logging seams.
"""

from __future__ import annotations

from typing import Any

import torch
from verl import DataProto
from verl.protocol import pad_dataproto_to_divisor
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl.utils.model import compute_position_id_with_mask

from verlog.console import say
from verlog.trainer.async_rollout import WeightSync
from verlog.trainer.engines import SHARING_KEY
from verlog.trainer.lora_check import SERVER_GAP_WARN, LoraCheck, lora_gaps
from verlog.trainer.step_value import StepValue

PREFIX_SHARING_GAP_WARN = 1e-4
"""A larger gap between the shared-prefix passes and verl's per-row passes on the same rows is printed as a warning
(fp32 float noise is about 1e-6; bf16 kernels drift more, docs/row-cost.md)."""

BOOTSTRAP_GAP_WARN = 1e-3
"""A larger gap between the bootstrap values and an ordinary critic call on the same prompt is printed as a warning.
In fp32 on a CPU both calls agree to float noise; bf16 kernels may differ by more without any fault."""


class ModelPasses(RayPPOTrainer):
    """verl's values, old log-probs and batch balancing with verlog's additions (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # what a pass hands to a later seam of the same iteration, by the iteration's number (verl's global_steps)
        self._entropys: StepValue[torch.Tensor] = StepValue()  # _compute_old_log_prob -> the tapes
        self._value_metrics: StepValue[dict[str, float]] = StepValue()  # _compute_values -> the iteration's log
        self._check_metrics: StepValue[dict[str, float]] = StepValue()  # the checks below -> the iteration's log
        self._bootstrap_checked = False  # the bootstrap values are checked once a run (_bootstrap_value_gap)
        self._sharing_checked: set[str] = set()  # the shared passes checked against verl's, once a run per pass
        self._lora_check = LoraCheck()  # with model.lora: the adapter reaches vLLM (_check_lora)

    def _world_size(self) -> int:
        return int(self.config.trainer.n_gpus_per_node) * int(self.config.trainer.nnodes)

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
            rows = self._prompt_only_rows(prompts, batch.meta_info, self._bootstrap_images(batch, need))
            padded, _ = pad_dataproto_to_divisor(rows, self._world_size())
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
        images = self._bootstrap_images(batch, rows)
        non_tensors = self._with_vision(tensors, images) if images is not None else None
        ordinary = DataProto.from_dict(tensors=tensors, non_tensors=non_tensors, meta_info=dict(batch.meta_info))
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

    def _bootstrap_images(self, batch: DataProto, rows: list[int]) -> list[list[Any]] | None:
        """The images of ``rows``' bootstrap prompts when the batch's rows carry images (verl's ``[B, 4, L]``
        multimodal positions), else None (a text run)."""
        if batch.batch["position_ids"].dim() != 3:
            return None
        column = batch.non_tensor_batch.get("bootstrap_images")
        return [list(column[i]) if column is not None else [] for i in rows]

    def _with_vision(self, tensors: dict[str, torch.Tensor], images: list[list[Any]]) -> dict[str, Any]:
        """Give rows of a multimodal run their vision inputs, as the rollout gives its rows: ``tensors``'
        ``position_ids`` become verl's ``[k, 4, L]`` and the returned non-tensor column ``multi_modal_inputs``
        holds each row's ``pixel_values`` / ``image_grid_thw`` (``{}`` without images)."""
        import numpy as np

        from verlog.models.vision import pixel_inputs
        from verlog.trainer.vision_rows import mrope_position_ids

        processor = self.rollout.processor  # type: ignore[attr-defined]
        column = np.empty(len(images), dtype=object)
        positions = []
        for i, row_images in enumerate(images):
            column[i] = pixel_inputs(processor, row_images) if row_images else {}
            grid = column[i].get("image_grid_thw")
            positions.append(mrope_position_ids(processor, tensors["input_ids"][i], tensors["attention_mask"][i], grid))
        tensors["position_ids"] = torch.stack(positions)
        return {"multi_modal_inputs": column}

    def _prompt_only_rows(
        self, prompts: list[list[int]], meta_info: dict[str, Any], images: list[list[Any]] | None = None
    ) -> DataProto:
        """Rows of a prompt and one pad token (attended, outside the response mask): ``values[:, 0]`` is V(prompt).
        ``images``: each prompt's images in a multimodal run (their vision inputs go with the rows), else None."""
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
        non_tensors = self._with_vision(tensors, images) if images is not None else None
        return DataProto.from_dict(tensors=tensors, non_tensors=non_tensors, meta_info=dict(meta_info))

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

    # ------------------------------------------------------------------------------------------ log-probs
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
