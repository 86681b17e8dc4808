"""The evaluation inside training, as its config sets it: its protocol and the check before a launch.

The training config's ``evaluation`` section (``every``, ``episodes``, ``seed_start``, ``temperature``) runs
``env.id`` with training's ``env.kwargs`` on fixed seeds (:func:`eval_protocol`); the trainer plays them
(:mod:`verlog.trainer.evaluation`). :func:`check_evaluation` is what ``verlog train`` checks before anything starts
(:func:`verlog.config.checks.check_evaluation` calls it): episode ``i`` gets ``evaluation.seed_start + i`` at every
evaluation, and no such seed may be one that training's slots start with (``seed .. seed + num_slots - 1``) or draw
for a later episode within the run's steps (from ``[0, 2**31 - 1)``, :func:`envs.pool.drawn_seeds`); the default
``seed_start`` of :data:`RESERVED_SEED_START` lies above every draw.

Only the env packages and the protocol are needed here (no model, no verl, no trainer), so the config's checks can
call it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from omegaconf import DictConfig, OmegaConf

from verlog.eval.protocol import EvalProtocol, EvalProtocolError

RESERVED_SEED_START = 2**31
"""The first seed no training slot can draw (``envs.pool.DRAWN_SEED_END`` is ``2**31 - 1``): the default
``evaluation.seed_start``."""


def evaluation_every(cfg: DictConfig) -> int:
    """``evaluation.every`` (0 when the config has no evaluation section, e.g. a run saved before it existed)."""
    return int(OmegaConf.select(cfg, "evaluation.every", default=0) or 0)


def eval_protocol(cfg: DictConfig) -> EvalProtocol:
    """The evaluation's episodes: ``evaluation.episodes`` of ``env.id`` from ``evaluation.seed_start``, training's env
    kwargs (the step limit included)."""
    ev, kwargs = cfg.evaluation, cfg.env.get("kwargs")
    return EvalProtocol(
        tasks=(str(cfg.env.id),),
        episodes_per_task=int(ev.episodes),
        seed_start=int(ev.seed_start),
        env_kwargs=dict(OmegaConf.to_container(kwargs, resolve=True)) if kwargs else {},
    )


def training_seed_overlap(
    cfg: DictConfig, eval_seeds: Sequence[int], steps_per_slot: int
) -> tuple[list[int], list[int]]:
    """(evaluation seeds a training slot starts with, evaluation seeds a slot can draw for a later episode within
    ``steps_per_slot`` steps: :attr:`verlog.config.schema.TrainConfig.max_turns_per_slot`)."""
    import numpy as np

    from envs.pool import DRAWN_SEED_END, drawn_seeds

    seeds = sorted({int(s) for s in eval_seeds})
    first, slots = int(cfg.seed), int(cfg.rollout.num_slots)
    starts = [s for s in seeds if first <= s < first + slots]
    drawable = np.asarray([s for s in seeds if s < DRAWN_SEED_END], dtype=np.int64)
    drawn: set[int] = set()
    if drawable.size:
        for slot in range(slots):
            stream = drawn_seeds(first + slot, steps_per_slot)
            drawn.update(int(s) for s in drawable[np.isin(drawable, stream)])
    return starts, sorted(drawn)


def check_evaluation(cfg: DictConfig, steps_per_slot: int) -> None:
    """Reject an evaluation that cannot run or that would meet training's seeds (:class:`EvalProtocolError`, the
    message naming the key and the fix); ``steps_per_slot``: the most env steps one training slot takes in the run."""
    every = evaluation_every(cfg)
    if every < 0:
        raise EvalProtocolError(f"evaluation.every must be >= 0 iterations (0 turns evaluation off), got {every}")
    if every == 0:
        return
    ev = cfg.evaluation
    if int(ev.episodes) < 1:
        raise EvalProtocolError(f"evaluation.episodes must be >= 1, got {ev.episodes} (or set evaluation.every=0)")
    if float(ev.temperature) < 0:
        raise EvalProtocolError(f"evaluation.temperature must be >= 0 (0 is greedy), got {ev.temperature}")
    try:
        protocol = eval_protocol(cfg)
    except EvalProtocolError as exc:
        raise EvalProtocolError(f"evaluation: {exc}") from exc
    seeds = protocol.seed_list()
    span = f"evaluation seeds {seeds[0]}..{seeds[-1]} (evaluation.seed_start={ev.seed_start}, episodes={ev.episodes})"
    starts, drawn = training_seed_overlap(cfg, seeds, steps_per_slot)
    if starts:
        raise EvalProtocolError(
            f"{span} include {_shown(starts)}, the seed(s) training's slots start with (seed={cfg.seed} .. "
            f"{int(cfg.seed) + int(cfg.rollout.num_slots) - 1}): evaluation would replay training layouts; use "
            f"evaluation.seed_start={RESERVED_SEED_START} (no training slot reaches seeds from there) or move seed"
        )
    if drawn:
        raise EvalProtocolError(
            f"{span} include {_shown(drawn)}, which training's slots can draw for later episodes within the run's "
            f"{steps_per_slot} steps per slot: use evaluation.seed_start={RESERVED_SEED_START} (seeds from "
            "there are never drawn) or another range"
        )
    _check_env_builds(str(cfg.env.id), protocol.env_kwargs, max(seeds))


def _shown(seeds: list[int]) -> str:
    return ", ".join(str(s) for s in seeds[:5]) + (f" and {len(seeds) - 5} more" if len(seeds) > 5 else "")


def _check_env_builds(env_id: str, env_kwargs: dict[str, Any], seed: int) -> None:
    from envs.registry import make, register_entry_point

    try:
        register_entry_point(env_id)  # an entry-point env.id: envs.make (the evaluation runner's) builds it too
        env = make(env_id, **env_kwargs)
        try:
            env.reset(seed=seed)
        finally:
            env.close()
    except Exception as exc:  # any failure here would stop the first evaluation mid-run
        raise EvalProtocolError(
            f"evaluation cannot run: building env {env_id!r} with env.kwargs {env_kwargs} and resetting it with "
            f"evaluation seed {seed} failed ({type(exc).__name__}: {exc}); fix the env settings or set "
            "evaluation.every=0"
        ) from exc
