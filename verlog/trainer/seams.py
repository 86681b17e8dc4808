"""Where verlog plugs into verl 0.9.1's ``RayPPOTrainer``, checked against the installed verl before a run.

verlog trains through verl's own ``fit()``; it changes verl's behaviour only at these seams (docs/design.md, "Seams
in verl"). Overriding a method or swapping a module attribute silently does nothing, or the wrong thing, once a new
verl stops calling it the way 0.9.1 does, so :func:`check_seams` reads the installed verl's source and refuses to start
when a seam moved: an upgrade of verl is then a local change here and in :mod:`verlog.trainer.ppo` (with its parts
:mod:`verlog.trainer.model_passes` and :mod:`verlog.trainer.run_state`), found before any worker starts, like the
CPU platform patches (verlog/platform/cpu.py).

Swapped at run time, for the duration of ``fit()`` only:
- ``verl.trainer.ppo.ray_trainer.compute_advantage`` (``fit`` calls the module global): the advantage step of
  ``algorithm.estimator``'s registry entry (verlog/algorithms/estimators.py, verlog/trainer/advantage_step.py), then the
  tapes and the curriculum on the rows it trains;
- ``verl.utils.tracking.Tracking`` (``fit`` imports it when it starts): verlog's metrics merged into every record and
  written to metrics.jsonl.

Overridden methods of ``RayPPOTrainer``: ``_create_dataloader`` (tick data set), ``init_workers`` (the rollout),
``_compute_values`` (bootstrap values), ``_compute_old_log_prob`` (entropies for tapes), ``_save_checkpoint`` /
``_load_checkpoint`` (env slots' state; the start hook: critic warm-up) and ``_validate`` (evaluation).

Replaced on the trainer with ``rollout.async_mode`` one_step_off / in_flight: its ``checkpoint_manager`` attribute,
which ``fit`` calls to sync the weights (verlog/trainer/async_rollout.py times those syncs against the background
rollout).

Registered with verl (``hardware.prefix_sharing``): verlog's FSDP engines for the actor, reference and critic, under
the vendor ``verlog`` of verl's engine registry (verlog/trainer/engines.py), with ``_balance_batch`` overridden.

Replaced in every process for runs of a vision-language model:
``verl.utils.tensordict_utils.nested_tensor_from_tensor_list``, which loses the shape of ``[4, L]`` position ids
under torch 2.13 (verlog/trainer/nested_rows.py), and
``verl.models.transformers.qwen2_vl._get_input_embeds`` wrapped for micro-batches without images
(verlog/trainer/vlm_text_rows.py).

Read from verl: the iteration's number that ``fit`` puts in the rollout's batch (``meta_info["global_steps"]``): the
rollout manager keeps the iteration's rollout under it, and the trainer's hooks ask for the rollout of their iteration.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
from dataclasses import dataclass

from verlog.errors import VerlogError

VERL_VERSION = "0.9.1"
"""The verl release the seams were written against."""


class VerlSeamError(VerlogError, RuntimeError):
    """The installed verl no longer has a seam verlog's trainer relies on (the message lists each and the fix)."""


@dataclass(frozen=True)
class Seam:
    """One place verlog relies on: ``target`` (``module:attribute.path``) exists and, when ``needle`` is set, its
    source contains it; ``why`` is what verlog does there."""

    target: str
    needle: str | None
    why: str


_FIT = "verl.trainer.ppo.ray_trainer:RayPPOTrainer.fit"
SEAMS: tuple[Seam, ...] = (
    Seam(
        "verl.utils.tensordict_utils:index_select_tensor_dict",
        "nested_tensor_from_tensor_list(",
        "cuts mini-batches through the module's nested_tensor_from_tensor_list, which loses the ragged dimension of "
        "[4, L] position ids under torch 2.13: runs with images swap it (verlog/trainer/nested_rows.py)",
    ),
    Seam(
        "verl.models.transformers.qwen2_vl:qwen2_vl_base_forward",
        "_get_input_embeds(",
        "Qwen2-VL's forward builds its embeddings through the module's _get_input_embeds, whose branch for a "
        "micro-batch without images fails under transformers 5: a VLM's runs wrap it (verlog/trainer/vlm_text_rows.py)",
    ),
    Seam("verl.trainer.ppo.ray_trainer:compute_advantage", None, "swapped for verlog's advantage during fit"),
    Seam(_FIT, "compute_advantage(", "fit calls the module's compute_advantage, which verlog swaps"),
    Seam("verl.utils.tracking:Tracking", None, "swapped for a Tracking that adds verlog's metrics"),
    Seam(_FIT, "from verl.utils.tracking import Tracking", "fit imports Tracking when it starts (after the swap)"),
    Seam(
        _FIT,
        "self._load_checkpoint()",
        "fit loads the checkpoint once before its first iteration: verlog restores the env slots and runs the "
        "critic warm-up there",
    ),
    Seam(_FIT, "self._compute_values(", "fit asks for the critic's values: verlog adds the bootstrap values"),
    Seam(_FIT, "self._validate(", "fit validates every test_freq iterations: verlog's evaluation"),
    Seam(_FIT, "self._save_checkpoint()", "fit saves checkpoints: verlog adds the env slots' state"),
    Seam(_FIT, "self._compute_old_log_prob(", "fit computes old log-probs: verlog keeps the entropies for tapes"),
    Seam(
        _FIT,
        'gen_batch.meta_info["global_steps"] = self.global_steps',
        "fit numbers the rollout's batch with the iteration: verlog's tapes, curriculum and metrics find that "
        "iteration's rollout by it",
    ),
    Seam(
        "verl.trainer.ppo.ray_trainer:RayPPOTrainer._create_dataloader",
        None,
        "verlog's tick data set sizes each iteration's batch",
    ),
    Seam("verl.trainer.ppo.ray_trainer:RayPPOTrainer.init_workers", None, "verlog builds its rollout after verl's"),
    Seam(
        "verl.trainer.ppo.ray_trainer:RayPPOTrainer._update_critic",
        None,
        "the critic warm-up before the first iteration trains the critic through it",
    ),
    Seam(
        "verl.experimental.agent_loop.agent_loop:AgentLoopManager.create",
        "await instance._init_agent_loop_workers()",
        "verlog's manager overrides this private async method: no agent-loop worker actors (generation goes to the "
        "vLLM servers directly)",
    ),
    Seam(
        "verl.experimental.agent_loop.agent_loop:AgentLoopManager.generate_sequences",
        None,
        "verlog's manager overrides it: one iteration of the multi-turn rollout",
    ),
    Seam(
        "verl.workers.utils.losses:value_loss",
        'data["batch_num_tokens"]',
        "verlog's critic loss (verlog/trainer/losses.py) reads the same batch keys verl's value loss reads "
        "(dp_size, batch_num_tokens, global_batch_size) to normalise over the global mini-batch",
    ),
    Seam("verl.workers.utils.losses:value_loss", 'data["dp_size"]', "as above"),
    Seam("verl.workers.utils.losses:value_loss", 'data["global_batch_size"]', "as above"),
    Seam(
        _FIT,
        "self.checkpoint_manager.update_weights(self.global_steps)",
        "fit syncs the weights into the vLLM servers through the trainer's checkpoint_manager attribute: with "
        "rollout.async_mode one_step_off / in_flight verlog puts its WeightSync there "
        "(verlog/trainer/async_rollout.py)",
    ),
    Seam(
        "verl.trainer.ppo.ray_trainer:RayPPOTrainer._compute_ref_log_prob",
        'metadata["no_lora_adapter"] = True',
        "the LoRA check (verlog/trainer/lora_check.py) gets the base model's log-probs from the actor with its "
        "adapter disabled, verl's reference pass for a LoRA actor",
    ),
    Seam(
        "verl.checkpoint_engine.base:CheckpointEngineManager.abort_replicas",
        None,
        "in_flight: running requests are aborted before a weight update (they return their tokens so far)",
    ),
    Seam(
        "verl.checkpoint_engine.base:CheckpointEngineManager.resume_generation_replicas",
        None,
        "in_flight: generation resumes after the weight update",
    ),
    Seam(
        "verl.trainer.ppo.ray_trainer:RayPPOTrainer.fit",
        "compute_rollout_correction_and_add_to_batch(batch, rollout_corr_config)",
        "asynchronous rollouts are corrected by verl's rollout correction in decoupled mode "
        "(algorithm.rollout_correction, set from algorithm.rollout_is)",
    ),
    Seam(
        _FIT,
        "self._balance_batch(batch, metrics=metrics)",
        "fit balances the batch over the ranks: with hardware.prefix_sharing verlog orders the rows into micro-batches "
        "of shared prefixes there instead",
    ),
    Seam(
        "verl.workers.engine.base:EngineRegistry.get_engine_cls",
        'os.getenv("VERL_ENGINE_VENDOR")',
        "verl picks its training engines by device and vendor: VERL_ENGINE_VENDOR=verlog selects verlog's "
        "shared-prefix engines (verlog/trainer/engines.py)",
    ),
    Seam(
        "verl.workers.engine.fsdp.transformer_impl:FSDPEngine.forward_backward_batch",
        "self.forward_step(micro_batch, loss_function=loss_function, forward_only=forward_only)",
        "verl's engine runs every micro-batch through forward_step, which verlog's engines override",
    ),
    Seam(
        "verl.workers.engine.fsdp.transformer_impl:_scale_logits_by_temperature",
        None,
        "verlog's engines scale logits alike",
    ),
    Seam("verl.workers.engine.fsdp.transformer_impl:_is_scalar_unit_temperature", None, "as above"),
    Seam(
        "verl.workers.engine.fsdp.transformer_impl:logprobs_from_logits", None, "verlog's engines take log-probs alike"
    ),
    Seam(
        "verl.workers.utils.padding:no_padding_2_padding",
        "seq_offset - resp_len - 1",
        "verl reads a row's outputs at its last prompt position and its response positions but the last: the only "
        "positions verlog's engines compute",
    ),
    Seam(
        "verl.workers.rollout.llm_server:LLMServerClient.generate",
        'output.extra_fields.get("global_steps")',
        "every server output carries the policy version that wrote it: each row's policy_version",
    ),
)


def _resolve(target: str) -> object:
    module_name, _, path = target.partition(":")
    obj: object = importlib.import_module(module_name)
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def seam_problems(seams: tuple[Seam, ...] | None = None) -> list[str]:
    """Every seam of ``seams`` (default :data:`SEAMS`) that is missing or whose source no longer holds its needle, as
    one line each (empty: all hold)."""
    problems = []
    sources: dict[str, str] = {}
    for seam in SEAMS if seams is None else seams:
        try:
            obj = _resolve(seam.target)
        except (ImportError, AttributeError) as exc:
            problems.append(f"{seam.target} is missing ({exc}); verlog needs it: {seam.why}")
            continue
        if seam.needle is None:
            continue
        if seam.target not in sources:
            try:
                sources[seam.target] = inspect.getsource(getattr(obj, "__wrapped__", obj))
            except (OSError, TypeError) as exc:
                problems.append(f"cannot read the source of {seam.target}: {exc}")
                continue
        if seam.needle not in sources[seam.target]:
            problems.append(f"{seam.target} no longer contains {seam.needle!r}; verlog relies on it: {seam.why}")
    return problems


def check_seams() -> None:
    """Raise :class:`VerlSeamError` unless every seam of :data:`SEAMS` holds in the installed verl."""
    problems = seam_problems()
    if problems:
        try:
            found = importlib.metadata.version("verl")
        except importlib.metadata.PackageNotFoundError:
            found = "not installed"
        raise VerlSeamError(
            f"verlog's trainer was written against verl=={VERL_VERSION} (installed: {found}) and {len(problems)} of "
            "its seams in verl's PPO trainer moved:\n  - "
            + "\n  - ".join(problems)
            + f"\nInstall verl=={VERL_VERSION} (pip install -e .), or update verlog/trainer/seams.py and "
            "verlog/trainer/ppo.py (model_passes.py, run_state.py) for the new verl."
        )
