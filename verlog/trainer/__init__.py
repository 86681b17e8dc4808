"""verl integration: the only place in verlog that subclasses or calls verl's trainer and workers.

- :mod:`verlog.trainer.config`: verlog's config -> verl's PPO config.
- :mod:`verlog.trainer.dry_run`: what ``verlog train --dry-run`` prints (the checked config and verl's derived keys).
- :mod:`verlog.trainer.agent_loop`: the rollout seam (verl's AgentLoopManager running verlog's RolloutManager).
- :mod:`verlog.trainer.evaluation`: evaluation inside training (``evaluation.every``; no verl import).
- :mod:`verlog.trainer.ppo`: VerlogPPOTrainer (verl's legacy RayPPOTrainer; one iteration read top to bottom in its
  docstring), built of :mod:`verlog.trainer.model_passes` (values with the bootstrap values, old log-probs, prefix
  sharing) and :mod:`verlog.trainer.run_state` (checkpoints, resume, the critic warm-up); the verl-free steps of an
  iteration are :mod:`verlog.rollout.iteration`.
- :mod:`verlog.trainer.runner`: ``train(cfg)``.

Heavy modules (verl, Ray) load only when used.
"""
