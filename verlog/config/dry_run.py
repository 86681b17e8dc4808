"""``verlog train --dry-run``: check a training config and print it, the command and verl's derived keys.

Nothing starts: no Ray, no GPU, no model download, no verl import (unless the ``verl:`` section is non-empty, which
is then checked against verl's PPO config). The output is one YAML document (the resolved config) with the command,
the run's sizes and verl's derived overrides as ``#`` comment lines, so scripts and tests can parse it.
"""

from __future__ import annotations

import difflib
import shlex
from collections.abc import Sequence

from omegaconf import DictConfig, OmegaConf

from verlog.errors import VerlogError


class UnknownEnvIdError(VerlogError, ValueError):
    """``env.id`` is neither a registered env id nor a ``package.module:factory`` entry point."""


def check_env_id(env_id: str) -> None:
    """Raise :class:`UnknownEnvIdError` with the closest registered ids when ``env_id`` is not registered."""
    if ":" in env_id:  # an entry point, resolved when the trainer builds its env pool
        return
    from envs import list_envs

    known = list_envs()
    if env_id in known:
        return
    close = difflib.get_close_matches(env_id, known, n=3, cutoff=0.5)
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    raise UnknownEnvIdError(f"env.id {env_id!r} is not a registered env.{hint} `verlog envs` lists them all.")


def command_line(overrides: Sequence[str], config_dir: str | None, config_name: str) -> str:
    """The ``python -m verlog.train`` command that runs this config for real."""
    parts = ["python", "-m", "verlog.train"]
    if config_dir is not None:
        parts += ["--config-dir", str(config_dir)]
    if config_name != "train":
        parts += ["--config-name", config_name]
    return shlex.join(parts + list(overrides))


def describe_run(
    cfg: DictConfig, overrides: Sequence[str] = (), config_dir: str | None = None, config_name: str = "train"
) -> str:
    """Check ``cfg`` as the trainer would before launch and describe the run (see the module docstring)."""
    from verlog.trainer.config import check_config, verl_overrides

    check_config(cfg)
    check_env_id(str(cfg.env.id))
    if cfg.get("verl"):
        from verlog.trainer.config import build_verl_config

        build_verl_config(cfg)  # merges the verl: section into verl's PPO config (unknown verl keys are errors)
    ro, alg, hw = cfg.rollout, cfg.algorithm, cfg.hardware
    rows = int(ro.num_slots) * int(ro.turns_per_slot)
    lines = [
        "# verlog train --dry-run: nothing was started",
        f"# command: {command_line(overrides, config_dir, config_name)}",
        f"# turns per iteration: {rows} ({ro.num_slots} slots x {ro.turns_per_slot} turns), "
        f"mini-batch {rows // int(alg.mini_batches)} turns, {int(hw.n_gpus_per_node) * int(hw.nnodes)} ranks "
        f"({hw.nnodes} node(s) x {hw.n_gpus_per_node})",
        _evaluation_line(cfg),
        "# verl overrides derived from this config (then the verl: section is merged):",
        *(f"#   {item}" for item in verl_overrides(cfg)),
        OmegaConf.to_yaml(cfg, resolve=True).rstrip("\n"),
    ]
    return "\n".join(lines)


def _evaluation_line(cfg: DictConfig) -> str:
    from verlog.trainer.evaluation import evaluation_every

    every = evaluation_every(cfg)
    if every == 0:
        return "# evaluation inside training: off (evaluation.every=0)"
    ev = cfg.evaluation
    start, n = int(ev.seed_start), int(ev.episodes)
    when = "before the first iteration, " if bool(ev.before_train) else ""
    return (
        f"# evaluation inside training: {when}every {every} iteration(s) and at the last one, {n} episodes of "
        f"{cfg.env.id} on seeds {start}..{start + n - 1}, temperature {ev.temperature}"
    )
