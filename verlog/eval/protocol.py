"""BALROG's evaluation protocol with explicit seeds: which episodes an evaluation runs.

BALROG (docs/evaluation.md) runs a fixed number of episodes per task (10 for each BabyAI task and for
Crafter), each in a fresh env with a fresh agent, and reports progression per environment. It draws every episode's
seed from a hash of the process id and the clock, so its runs cannot be repeated from a config. verlog keeps the
episode counts and the statistics but makes the seeds explicit: episode ``i`` of every task gets ``seed_start + i``
(or the i-th of an explicit seed list), and every seed is written into the results. Evaluation seeds can then be
kept disjoint from the seeds used for training and demonstrations (:meth:`EvalProtocol.check_disjoint`).

A task is a registered env id such as ``babyai/goto``; its environment is the part before the first ``/``. A bare
environment name (``babyai``) stands for all of its registered tasks.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from verlog.errors import VerlogError

BALROG_EPISODES_PER_TASK = 10
"""BALROG's ``eval.num_episodes`` for BabyAI tasks and Crafter."""

MAX_SEED = 2**32 - 1
"""Largest seed every built-in env accepts (NumPy's legacy seeding range)."""


class EvalProtocolError(VerlogError, ValueError):
    """An evaluation asked for unknown tasks, bad episode counts or seeds, or seeds that overlap training's."""


def split_task(env_id: str) -> tuple[str, str]:
    """``"babyai/goto"`` -> ``("babyai", "goto")``; an id without ``/`` is its own environment and task."""
    env, sep, task = env_id.partition("/")
    return (env, task) if sep else (env_id, env_id)


def expand_tasks(names: Iterable[str], registered: Sequence[str] | None = None) -> list[str]:
    """Registered env ids for ``names`` (ids, or bare environment names meaning all their tasks), in order, unique.

    Raises:
        EvalProtocolError: a name is neither a registered id nor an environment prefix (the message suggests one).
    """
    if registered is None:
        import envs

        registered = envs.list_envs()
    known = list(registered)
    out: list[str] = []
    for raw in names:
        name = raw.strip()
        if not name:
            continue
        if name in known:
            matches = [name]
        else:
            matches = [env_id for env_id in known if env_id.startswith(name.rstrip("/") + "/")]
        if not matches:
            close = difflib.get_close_matches(name, known, n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else "; `verlog envs` lists the ids"
            hint += " (an env of your own: --import MODULE, the module that registers it)"
            raise EvalProtocolError(f"unknown task {name!r}{hint}")
        out.extend(m for m in matches if m not in out)
    if not out:
        raise EvalProtocolError("no tasks given: pass e.g. --tasks babyai/goto,babyai/pickup (or --tasks babyai)")
    return out


class EpisodeNaming:
    """Names derived from ``env_id`` and ``episode_index`` (shared by episode specs and episode records)."""

    env_id: str
    episode_index: int

    @property
    def env_name(self) -> str:
        """The env family, e.g. ``babyai``."""
        return split_task(self.env_id)[0]

    env = env_name

    @property
    def task(self) -> str:
        """The task within the family, e.g. ``goto``."""
        return split_task(self.env_id)[1]

    @property
    def episode_id(self) -> str:
        """A stable name, e.g. ``babyai/goto/run_03``."""
        return f"{self.env_id}/run_{self.episode_index:02d}"


@dataclass(frozen=True)
class EpisodeSpec(EpisodeNaming):
    """One evaluation episode: which env, which seed, its index within the task."""

    env_id: str
    episode_index: int
    seed: int


@dataclass(frozen=True)
class EvalProtocol:
    """Which episodes an evaluation runs.

    Attributes:
        tasks: registered env ids (``babyai/goto``), in order.
        episodes_per_task: episodes of each task (BALROG: 10).
        seed_start: episode ``i`` of each task uses seed ``seed_start + i`` (the same seeds for every task, so two
            models or two tasks are compared on the same layouts).
        seeds: explicit seeds instead (one per episode; overrides ``seed_start``, sets ``episodes_per_task``).
        max_steps: step limit per episode (None: the env's own, as in BALROG).
        env_kwargs: keyword arguments for ``envs.make`` of every task (e.g. ``{"parse_mode": "lenient"}``).
    """

    tasks: tuple[str, ...]
    episodes_per_task: int = BALROG_EPISODES_PER_TASK
    seed_start: int = 0
    seeds: tuple[int, ...] | None = None
    max_steps: int | None = None
    env_kwargs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.tasks:
            raise EvalProtocolError("an evaluation needs at least one task, e.g. tasks=('babyai/goto',)")
        if len(set(self.tasks)) != len(self.tasks):
            raise EvalProtocolError(f"tasks listed twice in {list(self.tasks)}: list each task once")
        if self.seeds is not None:
            seeds = tuple(int(s) for s in self.seeds)
            object.__setattr__(self, "seeds", seeds)
            object.__setattr__(self, "episodes_per_task", len(seeds))
            if len(set(seeds)) != len(seeds):
                raise EvalProtocolError("explicit seeds repeat a value: each episode of a task needs its own seed")
        if self.episodes_per_task < 1:
            raise EvalProtocolError(f"episodes_per_task must be >= 1, got {self.episodes_per_task}")
        low, high = min(self.seed_list()), max(self.seed_list())
        if low < 0 or high > MAX_SEED:
            raise EvalProtocolError(f"seeds must lie in [0, {MAX_SEED}], got {low}..{high}: choose another seed_start")
        if self.max_steps is not None and self.max_steps < 1:
            raise EvalProtocolError(f"max_steps must be >= 1 or None (the env's limit), got {self.max_steps}")

    def seed_list(self) -> list[int]:
        """The seeds of episodes ``0..episodes_per_task-1`` (the same for every task)."""
        if self.seeds is not None:
            return list(self.seeds)
        return [self.seed_start + i for i in range(self.episodes_per_task)]

    def episodes(self) -> list[EpisodeSpec]:
        """Every episode of the evaluation, task-major (all episodes of the first task first)."""
        seeds = self.seed_list()
        return [EpisodeSpec(env_id, i, seed) for env_id in self.tasks for i, seed in enumerate(seeds)]

    def check_disjoint(self, used_seeds: Iterable[int], what: str = "training") -> None:
        """Raise when an evaluation seed was also used for ``what`` (training, demonstrations...)."""
        overlap = sorted(set(self.seed_list()) & {int(s) for s in used_seeds})
        if overlap:
            shown = ", ".join(str(s) for s in overlap[:5]) + (" ..." if len(overlap) > 5 else "")
            raise EvalProtocolError(
                f"{len(overlap)} evaluation seed(s) were also used for {what} ({shown}): move seed_start past "
                f"them (e.g. seed_start={max(overlap) + 1}) so evaluation measures unseen episodes"
            )

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready description, with the seeds written out."""
        return {
            "tasks": list(self.tasks),
            "episodes_per_task": self.episodes_per_task,
            "seed_start": None if self.seeds is not None else self.seed_start,
            "seeds": self.seed_list(),
            "max_steps": self.max_steps,
            "env_kwargs": dict(self.env_kwargs),
        }
