"""``verlog train``'s config: typed schema, composition from verlog/configs/, checks before launch, dry run.

- :mod:`verlog.config.schema`: :class:`TrainConfig`, one dataclass per section, and the derived sizes.
- :mod:`verlog.config.compose`: :func:`load_config` (Hydra over verlog/configs/ and ``--config-dir``), override
  errors with the closest key.
- :mod:`verlog.config.checks`: typing and value/size checks, all problems at once (:class:`TrainConfigError`).
- :mod:`verlog.config.preflight`: the checks that look outside the config (env, prompt budget, model, checkpoint,
  output folder).
- :mod:`verlog.config.dry_run`: what ``verlog train --dry-run`` prints.

Data flow: YAML + overrides -> ``load_config`` (DictConfig) -> ``preflight`` (TrainConfig, or every problem) ->
``verlog.trainer.config.build_verl_config`` (verl's DictConfig) -> ``verlog.trainer.runner.train``.
"""

from verlog.config.schema import TrainConfig

__all__ = ["TrainConfig"]
