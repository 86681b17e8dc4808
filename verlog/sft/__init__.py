"""The SFT warm start: verl 0.9.1's own SFT trainer (``verl.trainer.sft_trainer``) on demonstrations, CPU or GPU.

:func:`run_sft` checks the data against the model's chat template and length limit *before* anything heavy starts,
builds a tiny model with :mod:`verlog.models.tiny_model` when the config asks for one, launches
``torchrun --standalone --nproc_per_node=N -m verl.trainer.sft_trainer`` with the overrides the CPU needs (through
:func:`verlog.platform.enable_cpu_platform`; on a GPU machine the platform stays inert and the same overrides are
harmless), streams verl's progress and losses, and exports the final checkpoint's Hugging Face folder to
``<output_dir>/model``, a folder ``verlog train`` (``model.path=...``), transformers and vLLM load as is.

Two things verl does that we adjust:

- **Loss on the final answer only.** verl's ``MultiTurnSFTDataset`` puts loss on every assistant message of a row.
  A demo row (verlog.sft.demos) is one RL turn: the memory window, whose assistant messages are the expert's earlier
  answers under "Previous plan:", then the answer of this turn. :class:`LastTurnSFTDataset` (the default,
  ``data.loss_on: last``) keeps the loss on the final assistant message, the tokens the policy writes in RL;
  ``data.loss_on: all`` keeps verl's behaviour.
- **dtype of the exported config.** verl writes ``config.json`` with ``dtype: bfloat16`` although the safetensors
  hold float32, so transformers 5 would load the weights as bf16; the export sets ``dtype`` to the dtype the weights
  are stored in.

Data: demonstrations (``verlog demos``), or tapes (a training run's, an evaluation's, ``verlog play --record``'s):
:mod:`.tapes` keeps the finished episodes that pass ``data.tapes``' filters and replays them with the memory settings
of the run that will train, so each row's prompt is the rollout's.

Modules: :mod:`.config` (settings), :mod:`.data` (checks before launch, the last-turn dataset), :mod:`.tapes` (tapes
as rows), :mod:`.launch` (torchrun, progress, export), ``python -m verlog.sft`` (what each rank runs on the CPU route).

Config: :class:`SFTConfig` (typed defaults; YAML in ``configs/sft/``; unknown keys are errors), see docs/sft.md.
"""

from __future__ import annotations

from verlog.sft.config import (
    SFTConfig,
    SFTConfigError,
    SFTDataConfig,
    SFTDataError,
    SFTModelConfig,
    SFTRunError,
    SFTTapesConfig,
    SFTTrainConfig,
    load_config,
)
from verlog.sft.data import DataReport, check_data, keep_last_run, resolve_data
from verlog.sft.launch import SFTResult, build_command, export_hf_model, prepare_model, run_sft, verl_overrides
from verlog.sft.tapes import TapeEpisode, TapeSelection, is_tapes, select_episodes, write_tape_rows

__all__ = [
    "DataReport",
    "SFTConfig",
    "SFTConfigError",
    "SFTDataConfig",
    "SFTDataError",
    "SFTModelConfig",
    "SFTResult",
    "SFTRunError",
    "SFTTapesConfig",
    "SFTTrainConfig",
    "TapeEpisode",
    "TapeSelection",
    "build_command",
    "check_data",
    "export_hf_model",
    "is_tapes",
    "keep_last_run",
    "load_config",
    "prepare_model",
    "resolve_data",
    "run_sft",
    "select_episodes",
    "verl_overrides",
    "write_tape_rows",
]
