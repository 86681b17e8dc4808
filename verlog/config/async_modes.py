"""The asynchronous rollout modes (``rollout.async_mode``), one registry entry each.

Like the estimators (:mod:`verlog.algorithms.estimators`), a mode is an entry (:class:`AsyncMode`) that declares what
the rest of verlog needs to know about it, so that nothing else names modes:

- ``capacity``: how many collects may be done or running ahead of training (0: the rollout is collected inside
  verl's ``generate_sequences``; the trainer's ``RolloutAhead`` otherwise, verlog/trainer/async_rollout.py);
- ``weight_sync``: when verl's weight sync may reach the inference servers (:class:`WeightSyncPolicy`);
- ``correction``: whether rows can be sampled by an older policy than the one trained, which turns on verl's rollout
  correction (``algorithm.rollout_is``), allows ``algorithm.turn_trace=vtrace`` and applies ``rollout.max_lag``;
- ``pipelined``: whether a collect pipelines slot groups (``rollout.pipeline_groups``,
  :class:`verlog.rollout.collectors.PipelinedCollector`);
- ``groupings``: the estimators' rollout groupings it can run (:class:`verlog.algorithms.estimators.Grouping`);
- ``keeps_rows_ahead``: whether a checkpoint holds the rows collected ahead and not trained yet;
- ``checks``: its own config problems (:func:`verlog.config.checks.check_async` asks :meth:`AsyncMode.problems`);
- ``overlaps``, ``staleness``: its line of the table in docs/async.md (a test compares them).

Adding a mode is one more :func:`register_async_mode` here, the trainer's support for what it declares, and its row
in docs/async.md (docs/async.md, "Adding a mode").

Layer: with the config (tests/test_import_layers.py), like the estimators: the checks before a launch ask it.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

from verlog.algorithms.estimators import REGISTRY as ESTIMATORS
from verlog.algorithms.estimators import Grouping
from verlog.config.problems import Problem
from verlog.config.registry import Registry
from verlog.config.schema import AlgorithmConfig, RolloutConfig, TrainConfig
from verlog.config.verl_section import VERL_CORRECTION, is_true, verl_setting

LOCKSTEP = "off"
"""The mode that overlaps nothing (``rollout.async_mode``'s default)."""

VERL_SLEEP_KEYS = {
    "actor_rollout_ref.rollout.enable_sleep_mode": "sleep mode",
    "actor_rollout_ref.rollout.free_cache_engine": "cache freeing",
}
"""``verl:`` keys that let the hybrid engine free the inference server's weights between rollouts -> their name."""


class WeightSyncPolicy(enum.Enum):
    """When the new weights of an optimizer step reach the inference servers."""

    EACH_ITERATION = "each_iteration"
    """verl's own sync after the iteration's update: no collect runs then."""
    DEFER = "defer"
    """A sync that arrives while a collect runs waits for the next hand-off (between collects)."""
    INTERRUPT = "interrupt"
    """At once, between tokens: running requests are aborted, the weights updated, generation resumed."""


Checks = Callable[[TrainConfig, set[str]], list[Problem]]
"""A mode's config checks: the typed config and the keys that already have a problem -> its problems."""


@dataclass(frozen=True)
class AsyncMode:
    """One registry entry: an async mode and everything verlog needs to know about it (module docstring)."""

    name: str
    overlaps: str
    staleness: str
    capacity: Callable[[RolloutConfig], int]
    weight_sync: WeightSyncPolicy
    correction: bool
    pipelined: bool
    groupings: frozenset[Grouping]
    keeps_rows_ahead: bool
    checks: tuple[Checks, ...] = ()

    def pipeline_groups(self, rollout: RolloutConfig) -> int | None:
        """The rollout's slot groups (``rollout.pipeline_groups``) when this mode pipelines them, else None."""
        return rollout.pipeline_groups if self.pipelined else None

    def corrects(self, alg: AlgorithmConfig) -> bool:
        """Whether verl's rollout correction is set (rows of an older policy and ``algorithm.rollout_is`` not off)."""
        return self.correction and alg.rollout_is != "off"

    def problems(self, cfg: TrainConfig, bad: set[str]) -> list[Problem]:
        """What this mode cannot honour in ``cfg`` (``bad``: keys with a problem already): V-trace on rows that are
        all on-policy, an estimator whose grouping it cannot run, then its own checks."""
        alg = cfg.algorithm
        problems = []
        if not self.correction and alg.turn_trace == "vtrace" and "algorithm.turn_trace" not in bad:
            problems.append(
                Problem(
                    "algorithm.turn_trace",
                    f"vtrace cuts the trace at turns sampled by an older policy, but with rollout.async_mode="
                    f"{self.name} every turn is sampled by the policy being trained (nothing is off-policy): set "
                    "algorithm.turn_trace=full, or an async mode that runs ahead (rollout.async_mode="
                    f"{'|'.join(mode_names(lambda m: m.correction))})",
                )
            )
        estimator = ESTIMATORS.get(alg.estimator)
        if "algorithm.estimator" not in bad and estimator is not None and estimator.grouping not in self.groupings:
            problems.append(self._grouping_problem(alg.estimator, estimator.grouping))
        for check in self.checks:
            problems += check(cfg, bad)
        return problems

    def _grouping_problem(self, estimator: str, needed: Grouping) -> Problem:
        fitting = " or ".join(n for n, e in ESTIMATORS.items() if e.grouping in self.groupings)
        runs_on = " and ".join(_GROUPING_WORDS[g] for g in sorted(self.groupings, key=lambda g: g.value))
        modes = "|".join(mode_names(lambda m: needed in m.groupings))
        return Problem(
            "rollout.async_mode",
            f"{self.name} runs on {runs_on}, but algorithm.estimator={estimator} needs {_GROUPING_WORDS[needed]}"
            f"{_GROUPING_DETAIL[needed]}: set rollout.async_mode={modes}, or algorithm.estimator={fitting}",
        )


_GROUPING_WORDS = {Grouping.SLOTS: "persistent slots", Grouping.GROUPS: "group rollouts"}
_GROUPING_DETAIL = {Grouping.SLOTS: "", Grouping.GROUPS: " (whole episodes of a group in each iteration)"}

REGISTRY: Registry[AsyncMode] = Registry("async mode")
"""Mode name -> entry, in registration order (the order ``rollout.async_mode``'s choices are listed in)."""


def register_async_mode(mode: AsyncMode) -> AsyncMode:
    """Add ``mode`` to the registry.

    Raises:
        ValueError: the name is registered already, or the entry contradicts itself (a mode keeps rows ahead in its
            checkpoint exactly when it collects ahead, and then verl's own sync cannot be its weight sync).
    """
    ahead = mode.capacity(RolloutConfig()) > 0
    if mode.keeps_rows_ahead != ahead or ahead == (mode.weight_sync is WeightSyncPolicy.EACH_ITERATION):
        raise ValueError(
            f"async mode {mode.name!r}: a mode with a capacity ahead keeps those rows in its checkpoint and times "
            "its own weight syncs (keeps_rows_ahead, weight_sync), one without does neither"
        )
    return REGISTRY.add(mode.name, mode)


def get_async_mode(name: str) -> AsyncMode:
    """The entry of ``rollout.async_mode`` ``name`` (ValueError when none: :meth:`Registry.entry`)."""
    return REGISTRY.entry(name)


def mode_names(where: Callable[[AsyncMode], bool] | None = None) -> tuple[str, ...]:
    """The registered names (those whose entry ``where`` accepts), in registration order."""
    return tuple(name for name, mode in REGISTRY.items() if where is None or where(mode))


# ------------------------------------------------------------------------------------------------ config checks
def pipeline_groups_fit(cfg: TrainConfig, bad: set[str]) -> list[Problem]:
    """The pipeline's slot groups: at most one per slot (at least 2 is ``rollout.pipeline_groups``' own range)."""
    ro = cfg.rollout
    if {"rollout.pipeline_groups", "rollout.num_slots"} & bad or ro.pipeline_groups <= ro.num_slots:
        return []
    return [
        Problem(
            "rollout.pipeline_groups",
            f"{ro.pipeline_groups} slot groups for {ro.num_slots} slots (rollout.num_slots): a group needs a slot; "
            f"set rollout.pipeline_groups={max(2, min(ro.pipeline_groups, ro.num_slots))} or raise rollout.num_slots",
        )
    ]


def server_stays_awake(cfg: TrainConfig, bad: set[str]) -> list[Problem]:
    """No hybrid-engine sleep or cache freeing: the rollout outside verl's generation step needs the weights."""
    mode = cfg.rollout.async_mode
    return [
        Problem(
            f"verl.{key}",
            f"verl's {what} frees the inference server's weights outside verl's own generation step, and with "
            f"rollout.async_mode={mode} the background rollout is using them then: set verl.{key}=false, or "
            f"rollout.async_mode={LOCKSTEP}",
        )
        for key, what in VERL_SLEEP_KEYS.items()
        if is_true(verl_setting(cfg, key))
    ]


def decoupled_correction(cfg: TrainConfig, bad: set[str]) -> list[Problem]:
    """verl's rollout correction in decoupled mode (old log-probs recomputed), never its bypass mode."""
    if not is_true(verl_setting(cfg, f"{VERL_CORRECTION}.bypass_mode")):
        return []
    return [
        Problem(
            f"verl.{VERL_CORRECTION}.bypass_mode",
            f"with rollout.async_mode={cfg.rollout.async_mode} verlog corrects stale rows in verl's decoupled mode "
            f"(old log-probs recomputed; algorithm.rollout_is, algorithm.turn_trace): drop "
            f"verl.{VERL_CORRECTION}.bypass_mode or set it to false",
        )
    ]


# ------------------------------------------------------------------------------------------------ the modes
def _none_ahead(_: RolloutConfig) -> int:
    return 0


def _one_ahead(_: RolloutConfig) -> int:
    return 1


def _max_lag_ahead(rollout: RolloutConfig) -> int:
    return rollout.max_lag


_OVERLAPPING: tuple[Checks, ...] = (server_stays_awake, decoupled_correction)
_SLOTS_ONLY = frozenset({Grouping.SLOTS})

register_async_mode(
    AsyncMode(
        name=LOCKSTEP,
        overlaps="nothing (today's code path, unchanged)",
        staleness="0",
        capacity=_none_ahead,
        weight_sync=WeightSyncPolicy.EACH_ITERATION,
        correction=False,
        pipelined=False,
        groupings=frozenset(Grouping),
        keeps_rows_ahead=False,
    )
)
register_async_mode(
    AsyncMode(
        name="pipeline",
        overlaps="within an iteration: one slot group's env steps while another group generates",
        staleness="0",
        capacity=_none_ahead,
        weight_sync=WeightSyncPolicy.EACH_ITERATION,
        correction=False,
        pipelined=True,
        groupings=_SLOTS_ONLY,
        keeps_rows_ahead=False,
        checks=(pipeline_groups_fit, *_OVERLAPPING),
    )
)
register_async_mode(
    AsyncMode(
        name="one_step_off",
        overlaps="iteration k+1's rollout (generation and env steps) while iteration k trains",
        staleness="exactly 1 version",
        capacity=_one_ahead,
        weight_sync=WeightSyncPolicy.DEFER,
        correction=True,
        pipelined=False,
        groupings=_SLOTS_ONLY,
        keeps_rows_ahead=True,
        checks=_OVERLAPPING,
    )
)
register_async_mode(
    AsyncMode(
        name="in_flight",
        overlaps="as `one_step_off`, and weight updates reach the server between tokens (PipelineRL)",
        staleness="at most `rollout.max_lag` versions",
        capacity=_max_lag_ahead,
        weight_sync=WeightSyncPolicy.INTERRUPT,
        correction=True,
        pipelined=False,
        groupings=_SLOTS_ONLY,
        keeps_rows_ahead=True,
        checks=_OVERLAPPING,
    )
)


def table_rows() -> list[str]:
    """The registry as the Markdown rows of docs/async.md's table: ``| `name` | overlaps | staleness |``."""
    return [f"| `{m.name}` | {m.overlaps} | {m.staleness} |" for m in REGISTRY.values()]
