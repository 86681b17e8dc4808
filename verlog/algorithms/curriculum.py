"""Which task family the next episode plays: uniform, fixed weights, or a self-evolving curriculum (SEC).

SEC (Chen et al. 2025, "Self-Evolving Curriculum for LLM Reasoning", arXiv:2505.14970) treats each task family as
an arm of a non-stationary bandit:

- the arm reward of family ``c`` in an iteration is the mean absolute advantage of that family's trained rows,
  ``r_c = mean_{rows i of c} |A_i|`` (:func:`family_abs_advantage`; a row's ``|A_i|`` is the mean of ``|A|`` over
  its masked tokens, so any estimator's advantages work, per row or per token);
- its value is updated by TD(0), ``Q_c <- alpha * r_c + (1 - alpha) * Q_c``, only for families that had rows in the
  iteration (:func:`update_q`); the others keep their value;
- families are drawn from the Boltzmann distribution ``p_c = exp(Q_c / tau) / sum_k exp(Q_k / tau)``
  (:func:`boltzmann`; ``tau = 0`` is the greedy limit: the best families share the probability equally).

``uniform`` draws every family with probability ``1 / n``; ``weighted`` with fixed weights ``w_c / sum_k w_k``.
:class:`TaskCurriculum` keeps the Q values (tracked under every kind, used only by ``sec``), draws families with its
own numpy Generator and saves all of it as a plain dict (``state_dict`` / ``load_state_dict``), so a resumed run
draws the same families. :func:`curriculum_metrics` gives the per-family metrics (docs/curriculum.md).
"""

from __future__ import annotations

import copy
import difflib
import math
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from verlog.errors import VerlogError

CURRICULUM_KINDS = ("uniform", "weighted", "sec")
"""How families are drawn: ``uniform`` (1/n each), ``weighted`` (fixed weights), ``sec`` (Boltzmann over Q)."""

SEC_ALPHA = 0.5
"""SEC's TD(0) step size: Chen et al. 2025 use 0.5 in every experiment (their README's commands set
``trainer.sec.bandit.lr=0.5``)."""

SEC_TAU = 1.0
"""SEC's Boltzmann temperature: 1.0 in Chen et al.'s Countdown runs (the default of their code); they lower it for
some runs (0.4 for math, 0.2 for the two-dimensional curriculum). docs/curriculum.md has the details."""

_STATE_FORMAT = "verlog.curriculum/1"

__all__ = [
    "CURRICULUM_KINDS",
    "SEC_ALPHA",
    "SEC_TAU",
    "CurriculumConfig",
    "CurriculumSettingsError",
    "CurriculumStateError",
    "FinishedEpisode",
    "TaskCurriculum",
    "TaskFamily",
    "boltzmann",
    "check_curriculum_settings",
    "curriculum_metrics",
    "family_abs_advantage",
    "family_probabilities",
    "family_weights",
    "parse_task_families",
    "update_q",
]


class CurriculumSettingsError(VerlogError, ValueError):
    """Curriculum settings that cannot work (unknown kind, alpha outside (0, 1], negative tau, bad weights); the
    message lists every problem and its fix."""


class CurriculumStateError(VerlogError, ValueError):
    """A saved curriculum state that does not fit this curriculum (other families or kind), or bad inputs to it."""


@dataclass
class CurriculumConfig:
    """How multi-task training (``env.tasks``) draws the task family of each new episode: the training config's
    ``curriculum`` section (docs/curriculum.md). The families' weights are not here: they are the ``weight`` of each
    ``env.tasks`` entry (:class:`TaskFamily`), handed over beside this section.

    Attributes:
        kind: ``uniform``, ``weighted`` (the families' ``weight``) or ``sec`` (self-evolving curriculum: a bandit
            over families rewarded by their mean absolute advantage); :data:`CURRICULUM_KINDS`.
        alpha: SEC's TD(0) step size in (0, 1]: ``Q <- alpha * r + (1 - alpha) * Q`` (Chen et al. 2025: 0.5).
        tau: SEC's Boltzmann temperature >= 0 (1.0); 0 draws only the families of highest Q (ties share).
    """

    kind: str = "uniform"
    alpha: float = SEC_ALPHA
    tau: float = SEC_TAU


def family_weights(families: Sequence[TaskFamily]) -> dict[str, float] | None:
    """The weights of ``env.tasks``' families (family -> ``weight``, those that give one), None when none does:
    what ``kind="weighted"`` draws with (under another kind :func:`check_curriculum_settings` refuses them)."""
    weights = {f.name: f.weight for f in families if f.weight is not None}
    return weights or None


def _close(name: str, known: Sequence[str]) -> str:
    match = difflib.get_close_matches(str(name), [str(k) for k in known], n=1, cutoff=0.5)
    return f" (did you mean {match[0]!r}?)" if match else ""


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


def check_curriculum_settings(
    settings: CurriculumConfig, families: Sequence[str], weights: Mapping[str, float] | None = None
) -> None:
    """Raise :class:`CurriculumSettingsError` listing every problem of ``settings`` and ``weights`` (family ->
    weight, :func:`family_weights`) for these ``families``.

    Checked: the family names (at least one, no repeats), ``kind``, ``alpha`` in (0, 1], ``tau`` finite and >= 0,
    and ``weights`` (only with ``weighted``, there required: one finite weight >= 0 per family, some > 0).
    """
    problems: list[str] = []
    names = [str(f) for f in families]
    if not names:
        problems.append("no task families: list at least one task in env.tasks")
    repeated = sorted({f for f in names if names.count(f) > 1})
    if repeated:
        problems.append(f"task families {repeated} are listed more than once: give each task a distinct name")
    kind = settings.kind
    if kind not in CURRICULUM_KINDS:
        problems.append(
            f"curriculum.kind is {kind!r}{_close(kind, CURRICULUM_KINDS)}: use one of {', '.join(CURRICULUM_KINDS)}"
        )
    alpha = settings.alpha
    if not _is_number(alpha) or not 0.0 < float(alpha) <= 1.0:
        problems.append(
            f"curriculum.alpha is {alpha!r}: SEC's step size must lie in (0, 1] (the paper uses {SEC_ALPHA})"
        )
    tau = settings.tau
    if not _is_number(tau) or not math.isfinite(float(tau)) or float(tau) < 0.0:
        problems.append(
            f"curriculum.tau is {tau!r}: the temperature must be a finite number >= 0 (0 = greedy; the paper uses "
            f"{SEC_TAU})"
        )
    if kind == "weighted":
        if not isinstance(weights, Mapping) or not weights:
            problems.append(
                "curriculum.kind is 'weighted' but no weights are given: set a weight for every task in env.tasks"
            )
        else:
            for name in weights:
                if str(name) not in names:
                    problems.append(
                        f"curriculum weight for {name!r}, which is not a task family{_close(name, names)}: the "
                        f"families are {names}"
                    )
            missing = [f for f in names if f not in {str(k) for k in weights}]
            if missing:
                problems.append(f"no curriculum weight for {missing}: give every task family a weight (0 skips one)")
            bad = {k: v for k, v in weights.items() if not _is_number(v) or not math.isfinite(v) or v < 0}
            if bad:
                problems.append(f"curriculum weights {bad} are not finite numbers >= 0: fix them")
            elif not missing and sum(float(v) for k, v in weights.items() if str(k) in names) <= 0:
                problems.append("every curriculum weight is 0: give at least one task family a weight > 0")
    elif weights:
        problems.append(
            f"curriculum weights are given but curriculum.kind is {kind!r}, which ignores them: set "
            "curriculum.kind=weighted, or drop the weights"
        )
    if problems:
        listing = "\n".join(f"  - {p}" for p in problems)
        raise CurriculumSettingsError(f"{len(problems)} problem(s) with the curriculum settings:\n{listing}")


# --------------------------------------------------------------------------------------------- pure functions
def _as_numpy(x: Any, name: str) -> np.ndarray:
    """``x`` (numpy array, torch tensor, list) as a float64 numpy array."""
    if hasattr(x, "detach"):  # a torch tensor, without importing torch here
        x = x.detach().float().cpu().numpy()
    try:
        return np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise CurriculumStateError(f"{name} cannot be read as numbers ({exc})") from exc


def family_abs_advantage(
    advantages: Any, families: Sequence[str], mask: Any = None, *, trained: Sequence[bool] | None = None
) -> dict[str, float]:
    """SEC's arm reward of each family present: the mean over its rows of the row's mean absolute advantage.

    Args:
        advantages: shape ``(rows,)`` (one advantage per row, e.g. GRPO) or ``(rows, tokens)`` (per token, e.g.
            GAE); numpy, torch or nested lists.
        families: shape ``(rows,)``: the task family of each row.
        mask: same shape as ``advantages``; 1 = the entry counts (a response token in the loss), 0 = ignored.
            None: every entry counts.
        trained: shape ``(rows,)``; False drops a row (idle or unfinished rows outside the loss). None: all rows.

    Returns:
        ``{family: r}`` for the families with at least one row with a counted entry, where a row's value is the mean
        of ``|A|`` over its counted entries and ``r`` the mean of its rows' values (each row weighs the same,
        however many tokens it has). Families without such rows are absent (their Q is not updated).
    """
    adv = _as_numpy(advantages, "advantages")
    if adv.ndim == 1:
        adv = adv[:, None]
    if adv.ndim != 2:
        raise CurriculumStateError(f"advantages must have shape (rows,) or (rows, tokens), got {adv.shape}")
    rows = adv.shape[0]
    if len(families) != rows:
        raise CurriculumStateError(f"{len(families)} family labels for {rows} rows of advantages: give one per row")
    if mask is None:
        weight = np.ones_like(adv)
    else:
        weight = _as_numpy(mask, "mask")
        if weight.ndim == 1:
            weight = weight[:, None]
        if weight.shape != adv.shape:
            raise CurriculumStateError(
                f"mask has shape {weight.shape}, advantages {adv.shape}: give one mask entry per advantage"
            )
        weight = (weight != 0).astype(np.float64)
    if trained is not None:
        if len(trained) != rows:
            raise CurriculumStateError(f"{len(trained)} trained flags for {rows} rows: give one per row")
        weight = weight * np.asarray(trained, dtype=bool)[:, None]
    if not np.isfinite(adv[weight > 0]).all():
        raise CurriculumStateError("advantages hold NaN or infinite values inside the mask")
    counts = weight.sum(axis=1)
    sums = (np.abs(np.where(weight > 0, adv, 0.0))).sum(axis=1)
    total: dict[str, float] = {}
    n_rows: dict[str, int] = {}
    for i in np.flatnonzero(counts > 0):
        family = str(families[i])
        total[family] = total.get(family, 0.0) + sums[i] / counts[i]
        n_rows[family] = n_rows.get(family, 0) + 1
    return {family: float(total[family] / n_rows[family]) for family in total}


def update_q(q: Mapping[str, float], rewards: Mapping[str, float], alpha: float) -> dict[str, float]:
    """TD(0): ``Q_c <- alpha * r_c + (1 - alpha) * Q_c`` for each family ``c`` in ``rewards``; the others keep Q.

    Raises:
        CurriculumStateError: a reward for a family not in ``q``, or a reward that is not a finite number.
    """
    out = dict(q)
    for family, reward in rewards.items():
        if family not in out:
            raise CurriculumStateError(
                f"arm reward for {family!r}, which is not a task family{_close(family, list(out))}: the families "
                f"are {list(out)}"
            )
        if not _is_number(reward) or not math.isfinite(reward):
            raise CurriculumStateError(f"the arm reward of {family!r} is {reward!r}, not a finite number")
        out[family] = alpha * float(reward) + (1.0 - alpha) * out[family]
    return out


def boltzmann(q: Sequence[float] | np.ndarray, tau: float) -> np.ndarray:
    """``softmax(q / tau)``, computed stably (``q - max(q)`` first), shape ``(n,)``.

    ``tau = 0`` is the limit tau -> 0 taken exactly: the families whose Q equals the maximum share probability 1
    equally, the others get 0.
    """
    values = np.asarray(q, dtype=np.float64)
    if values.ndim != 1 or values.size == 0:
        raise CurriculumStateError(f"Q values must be a non-empty 1-d sequence, got shape {values.shape}")
    if not np.isfinite(values).all():
        raise CurriculumStateError(f"Q values must be finite, got {values.tolist()}")
    if tau < 0 or not math.isfinite(tau):
        raise CurriculumStateError(f"tau must be a finite number >= 0, got {tau}")
    shifted = values - values.max()
    if tau == 0:
        best = (shifted == 0).astype(np.float64)
        return best / best.sum()
    weights = np.exp(shifted / tau)  # the maximum gives exp(0) = 1, so the sum is >= 1: no overflow, no 0/0
    return weights / weights.sum()


_Weights = Mapping[str, float] | None


def _uniform(settings: CurriculumConfig, families: Sequence[str], q: Mapping[str, float], w: _Weights) -> np.ndarray:
    return np.full(len(families), 1.0 / len(families))


def _weighted(settings: CurriculumConfig, families: Sequence[str], q: Mapping[str, float], w: _Weights) -> np.ndarray:
    weights = np.asarray([float((w or {})[f]) for f in families])
    return weights / weights.sum()


def _sec(settings: CurriculumConfig, families: Sequence[str], q: Mapping[str, float], w: _Weights) -> np.ndarray:
    return boltzmann([q[f] for f in families], float(settings.tau))


_PROBABILITIES = {"uniform": _uniform, "weighted": _weighted, "sec": _sec}  # one per CURRICULUM_KINDS


def family_probabilities(
    settings: CurriculumConfig,
    families: Sequence[str],
    q: Mapping[str, float],
    weights: Mapping[str, float] | None = None,
) -> dict[str, float]:
    """The probability of drawing each family under ``settings`` (``q`` is used only by ``sec``, ``weights`` only by
    ``weighted``)."""
    if settings.kind not in _PROBABILITIES:
        raise CurriculumSettingsError(f"curriculum.kind is {settings.kind!r}: use one of {CURRICULUM_KINDS}")
    probs = _PROBABILITIES[settings.kind](settings, families, q, weights)
    return {f: float(p) for f, p in zip(families, probs)}


# --------------------------------------------------------------------------------------------- the sampler
@dataclass(frozen=True)
class TaskFamily:
    """One task family of a multi-task run (an entry of ``env.tasks``).

    Attributes:
        name: the family's name (the curriculum's arm, the ``<family>`` of the metrics).
        env_id: its registered env id (or ``module:attr`` factory).
        kwargs: its own env keyword arguments (over the run's ``env.kwargs``).
        weight: its weight under ``curriculum.kind=weighted``; None when not given.
    """

    name: str
    env_id: str
    kwargs: dict[str, Any]
    weight: float | None = None


def parse_task_families(tasks: Mapping[str, Any] | None) -> list[TaskFamily]:
    """``env.tasks`` -> the families, in order; empty for a single-task run.

    Each entry is ``name: env_id`` or ``name: {id: env_id, kwargs: {...}, weight: w}`` (``kwargs`` and ``weight``
    optional). Raises :class:`CurriculumSettingsError` listing every malformed entry.
    """
    if not tasks:
        return []
    if not isinstance(tasks, Mapping):
        raise CurriculumSettingsError(
            f"env.tasks must map a family name to an env id or to {{id, kwargs, weight}}, got {tasks!r}"
        )
    out, problems = [], []
    for name, spec in tasks.items():
        if isinstance(spec, str):
            out.append(TaskFamily(str(name), spec, {}))
            continue
        if not isinstance(spec, Mapping) or not isinstance(spec.get("id"), str):
            problems.append(
                f"env.tasks.{name}: give an env id (env.tasks.{name}=babyai/goto) or a mapping with 'id' (and "
                f"optionally 'kwargs', 'weight'), got {spec!r}"
            )
            continue
        unknown = sorted(set(spec) - {"id", "kwargs", "weight"})
        if unknown:
            problems.append(f"env.tasks.{name}: unknown keys {unknown}; the keys are id, kwargs, weight")
        kwargs = spec.get("kwargs") or {}
        if not isinstance(kwargs, Mapping):
            problems.append(f"env.tasks.{name}.kwargs must be a mapping of env keyword arguments, got {kwargs!r}")
            kwargs = {}
        weight = spec.get("weight")
        if weight is not None and not _is_number(weight):
            problems.append(f"env.tasks.{name}.weight must be a number >= 0, got {weight!r}")
            weight = None
        out.append(TaskFamily(str(name), spec["id"], dict(kwargs), None if weight is None else float(weight)))
    if problems:
        raise CurriculumSettingsError("env.tasks has problems:\n  - " + "\n  - ".join(problems))
    return out


class TaskCurriculum:
    """The curriculum of one run: Q values, draw counts and a numpy Generator, drawing the next episodes' families.

    Args:
        families: the task family names (the arms), e.g. ``["goto", "pickup", "open"]``.
        settings: the ``curriculum`` section (checked here with :func:`check_curriculum_settings`).
        seed: seeds the Generator that draws families.
        weights: family -> weight for ``kind="weighted"`` (:func:`family_weights` of ``env.tasks``); None otherwise.

    Use: ``draw()`` when a slot needs its next episode's task; after the iteration's advantages are known,
    ``update(family_abs_advantage(...))`` (Q is tracked under every kind, so a uniform run logs what SEC would
    see); ``state_dict()`` into the checkpoint; ``load_state_dict()`` on resume, after which draws continue exactly.
    """

    def __init__(
        self,
        families: Sequence[str],
        settings: CurriculumConfig,
        seed: int = 0,
        weights: Mapping[str, float] | None = None,
    ) -> None:
        check_curriculum_settings(settings, families, weights)
        self.families: tuple[str, ...] = tuple(str(f) for f in families)
        self.settings = settings
        self.weights: dict[str, float] | None = dict(weights) if weights else None
        self.q: dict[str, float] = dict.fromkeys(self.families, 0.0)
        """Each family's Q value (starts at 0, so SEC starts uniform)."""
        self.draws: dict[str, int] = dict.fromkeys(self.families, 0)
        """How many times each family was drawn."""
        self.updates: dict[str, int] = dict.fromkeys(self.families, 0)
        """How many iterations updated each family's Q (those in which it had rows)."""
        self.last_rewards: dict[str, float] = {}
        """The arm rewards of the last :meth:`update`."""
        self.rng = np.random.default_rng(seed)
        self._lock = threading.RLock()
        """Held by every read or write of Q, the counts and the Generator: under async rollout the collector's thread
        draws while the trainer's thread updates (docs/async.md)."""

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_lock", None)  # a lock does not pickle; a copy gets its own
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.RLock()

    def probabilities(self) -> dict[str, float]:
        """The current probability of drawing each family."""
        with self._lock:
            return family_probabilities(self.settings, self.families, self.q, self.weights)

    def draw(self) -> str:
        """The family of the next episode, drawn from :meth:`probabilities`."""
        return self.draw_many(1)[0]

    def draw_many(self, n: int) -> list[str]:
        """``n`` families drawn independently from one snapshot of the probabilities (one Generator call), atomic
        with respect to :meth:`update` and :meth:`state_dict`."""
        with self._lock:
            snapshot = self.probabilities()
            probs = np.asarray([snapshot[f] for f in self.families])
            picks = self.rng.choice(len(self.families), size=int(n), p=probs)
            out = [self.families[k] for k in picks]
            for family in out:
                self.draws[family] += 1
        return out

    def update(self, rewards: Mapping[str, float]) -> dict[str, float]:
        """Apply one iteration's arm rewards (``{family: r}``, e.g. from :func:`family_abs_advantage`) by TD(0);
        returns the new Q values."""
        with self._lock:
            self.q = update_q(self.q, rewards, float(self.settings.alpha))
            for family in rewards:
                self.updates[family] += 1
            self.last_rewards = {f: float(r) for f, r in rewards.items()}
            return dict(self.q)

    def state_dict(self) -> dict[str, Any]:
        """Everything a resumed run needs, as plain Python values (Q, counts, the Generator's state), one consistent
        snapshot."""
        with self._lock:
            return {
                "format": _STATE_FORMAT,
                "kind": self.settings.kind,
                "families": list(self.families),
                "q": dict(self.q),
                "draws": dict(self.draws),
                "updates": dict(self.updates),
                "last_rewards": dict(self.last_rewards),
                "rng": copy.deepcopy(self.rng.bit_generator.state),
            }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s dict; draws continue as in the run that saved it.

        Raises:
            CurriculumStateError: not a curriculum state, or one saved with other families or another kind (the
                curriculum is then unchanged).
        """
        if not isinstance(state, Mapping) or state.get("format") != _STATE_FORMAT:
            raise CurriculumStateError(
                "not a curriculum state: give the dict TaskCurriculum.state_dict() returned (its 'format' is "
                f"{_STATE_FORMAT!r})"
            )
        missing = [k for k in ("kind", "families", "q", "draws", "updates", "rng") if k not in state]
        if missing:
            raise CurriculumStateError(f"the curriculum state lacks {missing}: it is damaged; use another checkpoint")
        if list(state["families"]) != list(self.families):
            raise CurriculumStateError(
                f"the curriculum state was saved for task families {list(state['families'])}, this run has "
                f"{list(self.families)}: resume with the same env.tasks (same names, same order)"
            )
        if state["kind"] != self.settings.kind:
            raise CurriculumStateError(
                f"the curriculum state was saved by a {state['kind']!r} curriculum, this run's curriculum.kind is "
                f"{self.settings.kind!r}: resume with curriculum.kind={state['kind']}"
            )
        rng = np.random.default_rng()
        try:
            rng.bit_generator.state = dict(state["rng"])
        except (TypeError, ValueError, KeyError) as exc:
            raise CurriculumStateError(f"the curriculum state's generator state cannot be restored ({exc})") from exc
        with self._lock:
            self.q = {f: float(state["q"][f]) for f in self.families}
            self.draws = {f: int(state["draws"][f]) for f in self.families}
            self.updates = {f: int(state["updates"][f]) for f in self.families}
            self.last_rewards = {str(f): float(r) for f, r in state.get("last_rewards", {}).items()}
            self.rng = rng


# --------------------------------------------------------------------------------------------- metrics
class FinishedEpisode(Protocol):
    """What :func:`curriculum_metrics` reads of a finished episode (``verlog.rollout.batch.EpisodeStats`` once it
    carries its task)."""

    task: str
    ret: float
    success: bool


def curriculum_metrics(
    curriculum: TaskCurriculum, episodes: Iterable[FinishedEpisode], row_families: Sequence[str]
) -> dict[str, float]:
    """Per-family metrics of one iteration (docs/curriculum.md lists them).

    Args:
        curriculum: the run's curriculum, after this iteration's :meth:`TaskCurriculum.update`.
        episodes: the episodes that finished during the iteration, each with its ``task`` (family).
        row_families: the family of each trained row of the iteration, shape ``(rows,)``.

    Returns:
        For every family ``f``: ``curriculum/f/prob`` (probability of drawing it next), ``curriculum/f/q``,
        ``curriculum/f/draws`` (episodes assigned so far), ``family/f/episodes`` (finished this iteration),
        ``family/f/row_share`` (its share of the rows); ``curriculum/f/reward`` when it had rows (the arm reward
        used in the update); ``family/f/success_rate`` and ``family/f/return_mean`` when episodes finished.
    """
    out: dict[str, float] = {}
    probs = curriculum.probabilities()
    finished: dict[str, list[FinishedEpisode]] = {f: [] for f in curriculum.families}
    for episode in episodes:
        if episode.task not in finished:
            raise CurriculumStateError(
                f"a finished episode of task {episode.task!r}, which is not a task family"
                f"{_close(episode.task, curriculum.families)}: the families are {list(curriculum.families)}"
            )
        finished[episode.task].append(episode)
    total_rows = len(row_families)
    for f in curriculum.families:
        out[f"curriculum/{f}/prob"] = probs[f]
        out[f"curriculum/{f}/q"] = curriculum.q[f]
        out[f"curriculum/{f}/draws"] = float(curriculum.draws[f])
        if f in curriculum.last_rewards:
            out[f"curriculum/{f}/reward"] = curriculum.last_rewards[f]
        eps = finished[f]
        out[f"family/{f}/episodes"] = float(len(eps))
        if eps:
            out[f"family/{f}/success_rate"] = sum(bool(e.success) for e in eps) / len(eps)
            out[f"family/{f}/return_mean"] = sum(float(e.ret) for e in eps) / len(eps)
        rows = sum(1 for r in row_families if r == f)
        out[f"family/{f}/row_share"] = rows / total_rows if total_rows else 0.0
    return out
