"""``verlog train``'s config: typed schema, composition from configs/, checks before launch, dry run.

- :mod:`verlog.config.schema`: :class:`TrainConfig`, one dataclass per section, and the derived sizes.
- :mod:`verlog.config.compose`: :func:`load_config` (Hydra over configs/ and ``--config-dir``), override
  errors with the closest key.
- :mod:`verlog.config.checks`: typing and value/size checks, all problems at once (:class:`TrainConfigError`).
- :mod:`verlog.config.preflight`: the checks that look outside the config (env, prompt budget, model, checkpoint,
  output folder).

It imports only ``envs`` and verlog's plain modules (errors, memory, advantage, curriculum, tapes, the evaluation's
protocol), never the trainer, the rollout manager or the commands (tests/test_import_layers.py);
``verlog train --dry-run``'s report is :mod:`verlog.trainer.dry_run` (it shows verl's derived keys).

Data flow: YAML + overrides -> ``load_config`` (DictConfig) -> ``preflight`` (TrainConfig, or every problem) ->
``verlog.trainer.config.build_verl_config`` (verl's DictConfig) -> ``verlog.trainer.runner.train``.
"""

from verlog.config.schema import TrainConfig

__all__ = ["TrainConfig"]
