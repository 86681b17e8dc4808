"""``verlog train --dry-run``: the checked config, the command and verl's derived keys; nothing starts.

No Ray, no GPU, no model download, no verl import (unless the ``verl:`` section is non-empty, which is then checked
against verl's PPO config). The output is one YAML document (the resolved config) with the command, the run's sizes
and verl's derived overrides as ``#`` comment lines, so scripts and tests can parse it.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from omegaconf import OmegaConf

from verlog.config.schema import TrainConfig
from verlog.trainer.config import build_verl_config, verl_overrides


def command_line(overrides: Sequence[str], config_dir: str | None, config_name: str) -> str:
    """The ``python -m verlog.train`` command that runs this config for real."""
    parts = ["python", "-m", "verlog.train"]
    if config_dir is not None:
        parts += ["--config-dir", str(config_dir)]
    if config_name != "train":
        parts += ["--config-name", config_name]
    return shlex.join(parts + list(overrides))


def describe_run(
    cfg: TrainConfig, overrides: Sequence[str] = (), config_dir: str | None = None, config_name: str = "train"
) -> str:
    """Describe the run of the checked config ``cfg`` (see the module docstring)."""
    if cfg.verl:
        build_verl_config(cfg)  # merges the verl: section into verl's PPO config (unknown verl keys are errors)
    rollout, hardware = cfg.rollout, cfg.hardware
    lines = [
        "# verlog train --dry-run: nothing was started",
        f"# command: {command_line(overrides, config_dir, config_name)}",
        f"# turns per iteration: {cfg.rows_per_iteration} ({rollout.num_slots} slots x {rollout.turns_per_slot} "
        f"turns), mini-batch {cfg.mini_batch_rows} turns, {cfg.ranks} ranks ({hardware.nnodes} node(s) x "
        f"{hardware.n_gpus_per_node})",
        _evaluation_line(cfg),
        "# verl overrides derived from this config (then the verl: section is merged):",
        *(f"#   {item}" for item in verl_overrides(cfg)),
        OmegaConf.to_yaml(OmegaConf.structured(cfg)).rstrip("\n"),
    ]
    return "\n".join(lines)


def _evaluation_line(cfg: TrainConfig) -> str:
    evaluation = cfg.evaluation
    if evaluation.every == 0:
        return "# evaluation inside training: off (evaluation.every=0)"
    when = "before the first iteration, " if evaluation.before_train else ""
    return (
        f"# evaluation inside training: {when}every {evaluation.every} iteration(s) and at the last one, "
        f"{evaluation.episodes} episodes of {cfg.env.id} on seeds {evaluation.seed_start}.."
        f"{evaluation.seed_start + evaluation.episodes - 1}, temperature {evaluation.temperature}"
    )
