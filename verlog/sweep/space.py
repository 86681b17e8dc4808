"""A sweep's search space and its trials, drawn with Ray Tune's search-space primitives and variant generation.

The space is read from its YAML file by :mod:`verlog.sweep.space_file` (docs/sweeps.md has the format). Each swept key
(:class:`Param`) becomes Ray Tune's own primitive: ``tune.choice``, ``tune.uniform``, ``tune.loguniform``,
``tune.randint`` for random sampling, ``tune.grid_search`` for a grid, and the trials are Ray's variants
(:func:`ray.tune.search.variant_generator.generate_variants`, what ``tune.search.BasicVariantGenerator`` runs) with the
random state ``numpy.random.default_rng(sampling.seed)``: the same space gives the same trials. verlog adds what
Ray's generator does not do, each for a reason docs/sweeps.md gives:

- a conditional key (``when:``) is unset where its condition fails (Ray sets every key of every variant): a random
  draw sets every key, then the inactive ones are removed; a grid nests a conditional key's ``grid_search`` in the
  branches of the key its condition names (Ray's nested grid), so the grid holds only the active keys;
- sampled floats are rounded to :data:`SIGNIFICANT_DIGITS` significant digits (readable overrides, stable labels);
- the training seeds are a ``grid_search`` over ``seed`` with ``constant_grid_search`` (each drawn configuration
  runs once per seed), then numbered per configuration (trial ids ``007-s1``).

The trial list is drawn once, checked and printed (``--dry-run``) before anything starts, and kept in the sweep
folder: a resumed sweep runs the trials its folder lists (:mod:`verlog.sweep.folder`), whatever Ray's version.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from verlog.config.compose import format_override, format_value
from verlog.errors import VerlogError

PARAM_KINDS = ("choice", "uniform", "loguniform", "int")
"""How a swept key takes its values: one of a list, a float range (uniform or log-uniform), an integer range."""
METHODS = ("random", "grid")
SCHEDULERS = ("asha", "median")
MODES = ("max", "min")
SCHEDULER_KEYS = ("kind", "metric", "grace_period", "reduction_factor", "min_samples_required")
SWEEP_OWNED_KEYS = ("output_dir", "checkpoint.resume")
"""Keys the sweep sets for each trial (its own folder, resumed after a kill): a space may not set them."""
EVAL_METRIC_PREFIX = "verlog_eval/"
"""Objective metrics read from the trial's ``verlog eval`` summary rather than from metrics.jsonl."""
EVAL_FIELDS = ("success_rate", "mean_return", "progression_percentage", "valid_action_rate", "average_steps")
SIGNIFICANT_DIGITS = 3
"""Sampled floats are rounded to this many significant digits (readable overrides, stable labels)."""
SEED_KEY = "seed"
"""verlog train's config key of the training seed (``sampling.seeds`` sweeps it)."""
_BRANCH_VALUE = "__value__"
"""In a grid, the key of a branch dict that holds the value of the key whose dependants the branch nests."""


class SweepSpaceError(VerlogError, ValueError):
    """A search space that cannot be swept: the message names the key and the fix."""


# ------------------------------------------------------------------------------------------------ the parsed space
@dataclass(frozen=True)
class Param:
    """One swept key: its kind, its values (choice) or range (low, high), grid points and conditions.

    ``when`` holds ``(other key, allowed values)`` pairs; the key is set only in trials where every other key took one
    of its allowed values (and is absent, so verlog train's default applies, elsewhere).
    """

    key: str
    kind: str
    values: tuple[Any, ...] = ()
    low: float = 0.0
    high: float = 0.0
    points: int | None = None
    when: tuple[tuple[str, tuple[Any, ...]], ...] = ()

    @property
    def discrete(self) -> bool:
        """Whether the key takes exact values that a condition can name (a choice or an integer range)."""
        return self.kind in ("choice", "int")

    def grid_values(self) -> list[Any]:
        """The values a grid takes: every choice; every integer of an integer range (or ``points`` of them); ``points``
        evenly spaced values of a float range (geometrically for log-uniform)."""
        if self.kind == "choice":
            return list(self.values)
        if self.kind == "int":
            if self.points is None:
                return list(range(int(self.low), int(self.high) + 1))
            return sorted({round(float(x)) for x in np.linspace(self.low, self.high, self.points)})
        if self.points is None:
            raise SweepSpaceError(f"params.{self.key}: a {self.kind} range in a grid needs points: N (values taken)")
        spaced = np.geomspace if self.kind == "loguniform" else np.linspace
        return [_round(float(x), self.low, self.high) for x in spaced(self.low, self.high, self.points)]

    def grid_count(self) -> int:
        """How many values :meth:`grid_values` gives, without listing them (an integer range may be huge)."""
        if self.kind == "int" and self.points is None:
            return int(self.high) - int(self.low) + 1
        return len(self.grid_values())

    def ray_domain(self) -> Any:
        """This key's Ray Tune search-space primitive for random sampling: ``tune.choice``, ``tune.uniform``,
        ``tune.loguniform`` or ``tune.randint`` (its upper end included)."""
        from ray import tune

        if self.kind == "choice":
            return tune.choice(list(self.values))
        if self.kind == "int":
            return tune.randint(int(self.low), int(self.high) + 1)
        return tune.uniform(self.low, self.high) if self.kind == "uniform" else tune.loguniform(self.low, self.high)

    def active(self, chosen: Mapping[str, Any]) -> bool:
        """Whether this key is set in a trial whose other keys took ``chosen``."""
        return all(key in chosen and chosen[key] in allowed for key, allowed in self.when)

    def as_dict(self) -> dict[str, Any]:
        """The YAML form :func:`parse_space` reads back."""
        if self.kind == "choice":
            spec: dict[str, Any] = {"choice": list(self.values)}
        elif self.kind == "int":
            spec = {"int": [int(self.low), int(self.high)]}
        else:
            spec = {self.kind: [self.low, self.high]}
        if self.points is not None:
            spec["points"] = self.points
        if self.when:
            spec["when"] = {key: list(allowed) for key, allowed in self.when}
        return spec


@dataclass(frozen=True)
class Objective:
    """What a trial is judged by: the last value of ``metric`` in its metrics.jsonl (or ``verlog_eval/<field>`` of its
    evaluation summary), to maximise or minimise."""

    metric: str = "eval/success"
    mode: str = "max"


@dataclass(frozen=True)
class Scheduler:
    """Early stopping through a Ray Tune scheduler: ``asha`` (AsyncHyperBand) or ``median`` (median stopping rule),
    judged on ``metric`` after each verlog iteration that logs it."""

    kind: str
    metric: str
    grace_period: int = 1
    reduction_factor: float = 2.0
    min_samples_required: int = 3


@dataclass(frozen=True)
class EvalSettings:
    """An optional ``verlog eval`` of each trained model: ``episodes`` seeds from ``seed_start``; ``args``: more
    of its options."""

    episodes: int = 32
    seed_start: int = 1_000_000
    temperature: float | None = None
    args: tuple[str, ...] = ()


@dataclass(frozen=True)
class SearchSpace:
    """A parsed search space (see the module docstring); ``params`` are ordered so that a key comes after the keys its
    ``when`` names."""

    base: tuple[str, ...]
    params: tuple[Param, ...]
    method: str = "random"
    trials: int = 0
    sampling_seed: int = 0
    seeds: tuple[int, ...] | None = None
    objective: Objective = field(default_factory=Objective)
    scheduler: Scheduler | None = None
    eval: EvalSettings | None = None
    parallel: int = 1
    config_dir: str | None = None
    imports: tuple[str, ...] = ()
    name: str = "sweep"
    source: str = "the search space"

    def param(self, key: str) -> Param:
        return next(p for p in self.params if p.key == key)

    def as_dict(self) -> dict[str, Any]:
        """The space as YAML-ready data that :func:`parse_space` reads back to an equal space."""
        sampling: dict[str, Any] = {"method": self.method, "seed": self.sampling_seed}
        if self.method == "random":
            sampling["trials"] = self.trials
        if self.seeds is not None:
            sampling["seeds"] = list(self.seeds)
        data: dict[str, Any] = {
            "name": self.name,
            "base": list(self.base),
            "params": {p.key: p.as_dict() for p in self.params},
            "sampling": sampling,
            "objective": {"metric": self.objective.metric, "mode": self.objective.mode},
            "parallel": self.parallel,
            "imports": list(self.imports),
        }
        if self.config_dir is not None:
            data["config_dir"] = self.config_dir
        if self.scheduler is not None:
            data["scheduler"] = {k: getattr(self.scheduler, k) for k in SCHEDULER_KEYS}
        if self.eval is not None:
            ev = self.eval
            data["eval"] = {"episodes": ev.episodes, "seed_start": ev.seed_start, "args": list(ev.args)}
            if ev.temperature is not None:
                data["eval"]["temperature"] = ev.temperature
        return data

    def fingerprint(self) -> str:
        """A hash of everything that decides the trials and their outcome (not ``parallel``, nor the name); the order
        of ``params`` counts (Ray's variant generator draws the keys in that order)."""
        data = {k: v for k, v in self.as_dict().items() if k not in ("parallel", "name")}
        return hashlib.sha256(json.dumps(data).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Trial:
    """One configuration to train: ``params`` (the swept keys set in it) and the training ``seed`` (None: the one in
    ``base`` or verlog's default). ``config`` numbers the configuration; trials differing only in seed share it."""

    id: str
    config: int
    params: dict[str, Any]
    seed: int | None = None

    def overrides(self, space: SearchSpace) -> list[str]:
        """verlog train's overrides of this trial: the space's base, then its params, then its seed."""
        out = [*space.base, *(format_override(k, v) for k, v in self.params.items())]
        return out + ([f"seed={self.seed}"] if self.seed is not None else [])

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "config": self.config, "params": dict(self.params), "seed": self.seed}


def _round(x: float, low: float, high: float) -> float:
    """``x`` to :data:`SIGNIFICANT_DIGITS` significant digits, kept inside ``[low, high]``."""
    return min(max(float(f"{x:.{SIGNIFICANT_DIGITS}g}"), low), high)


# ------------------------------------------------------------------------------------------------ trials, by Ray
def ray_space(space: SearchSpace) -> dict[str, Any]:
    """``space`` as Ray Tune's ``param_space``: each unconditional key's primitive (random) or ``tune.grid_search``
    (grid), a conditional key nested in the branches of the key its first condition names (grid) or drawn like the
    others (random); with ``sampling.seeds``, ``seed`` as a ``tune.grid_search``."""
    from ray import tune

    nested = {p.key: [q for q in space.params if q.when and q.when[0][0] == p.key] for p in space.params}

    def grid_entry(p: Param) -> Any:
        if not nested[p.key]:
            return tune.grid_search(p.grid_values())
        branches = []
        for value in p.grid_values():
            kids = [q for q in nested[p.key] if value in q.when[0][1]]
            branches.append({_BRANCH_VALUE: value, **{q.key: grid_entry(q) for q in kids}})
        return tune.grid_search(branches)

    if space.method == "grid":
        out = {p.key: grid_entry(p) for p in space.params if not p.when}
    else:
        out = {p.key: p.ray_domain() for p in space.params}
    if space.seeds is not None:
        out[SEED_KEY] = tune.grid_search(list(space.seeds))
    return out


def _variants(space: SearchSpace) -> Iterator[tuple[int, dict[str, Any]]]:
    """Ray's variants of :func:`ray_space` in Ray's order, each as (draw, key -> value with branches flattened):
    random, ``trials`` draws of one variant per seed, the random keys drawn once for all seeds
    (``constant_grid_search``); a grid, one draw."""
    from ray.tune.search.variant_generator import generate_variants

    spec = ray_space(space)
    rng = np.random.default_rng(space.sampling_seed)
    for draw in range(space.trials if space.method == "random" else 1):
        for _resolved, variant in generate_variants(spec, constant_grid_search=True, random_state=rng):
            yield draw, _flatten(variant)


def _flatten(variant: Mapping[str, Any]) -> dict[str, Any]:
    """A grid variant's branches (``{key: {__value__: v, child: ...}}``) as plain keys."""
    out: dict[str, Any] = {}
    for key, value in variant.items():
        if isinstance(value, Mapping) and _BRANCH_VALUE in value:
            out[key] = value[_BRANCH_VALUE]
            out.update(_flatten({k: v for k, v in value.items() if k != _BRANCH_VALUE}))
        else:
            out[key] = value
    return out


def _configuration(space: SearchSpace, variant: Mapping[str, Any]) -> dict[str, Any]:
    """A variant's swept keys in the order of ``params``, without the keys whose condition fails (a random draw sets
    them all), floats rounded to :data:`SIGNIFICANT_DIGITS`."""
    chosen: dict[str, Any] = {}
    for p in space.params:
        if p.key in variant and p.active(chosen):
            value = variant[p.key]
            chosen[p.key] = _round(value, p.low, p.high) if p.kind in ("uniform", "loguniform") else value
    return chosen


def sample_trials(space: SearchSpace) -> list[Trial]:
    """The trials of ``space`` (see the module docstring): Ray's variants, each configuration (a random draw; a grid
    point, one trial even where two branches reach it) once per training seed of ``sampling.seeds`` (once, with the
    base's seed, without them). Ids: ``007``, or ``007-s1`` for configuration 7 with seed 1."""
    configs: dict[Any, tuple[dict[str, Any], list[Any]]] = {}
    for draw, variant in _variants(space):
        params = _configuration(space, variant)
        label = draw if space.method == "random" else json.dumps(params, sort_keys=True, default=str)
        seeds = configs.setdefault(label, (params, []))[1]
        seed = variant.get(SEED_KEY) if space.seeds is not None else None
        if seed not in seeds:
            seeds.append(seed)
    order = {seed: i for i, seed in enumerate(space.seeds or ())}
    width = max(3, len(str(len(configs) - 1)))
    return [
        Trial(f"{i:0{width}d}" + ("" if seed is None else f"-s{seed}"), i, params, seed)
        for i, (params, seeds) in enumerate(configs.values())
        for seed in sorted(seeds, key=lambda s: order.get(s, -1))
    ]


def sample_configurations(space: SearchSpace) -> list[dict[str, Any]]:
    """The configurations of ``space`` (swept key -> value, conditional keys only where active), in trial order."""
    seen: dict[int, dict[str, Any]] = {}
    for trial in sample_trials(space):
        seen.setdefault(trial.config, trial.params)
    return list(seen.values())


def describe_params(params: Mapping[str, Any]) -> str:
    """A trial's swept keys as space-separated ``key=value`` overrides."""
    return " ".join(format_override(k, v) for k, v in params.items())


def grid_size(space: SearchSpace, limit: int | None = None) -> int:
    """How many configurations the grid of ``space`` holds: the product of the keys' value counts without conditions
    (nothing is listed), else Ray's grid walked; with ``limit``, the walk stops past it (a huge grid is not walked to
    its end)."""
    if not any(p.when for p in space.params):
        return int(np.prod([p.grid_count() for p in space.params], dtype=object))
    seen: set[str] = set()
    for _draw, variant in _variants(dataclasses.replace(space, seeds=None)):
        seen.add(json.dumps(_configuration(space, variant), sort_keys=True, default=str))
        if limit is not None and len(seen) > limit:
            break
    return len(seen)


__all__ = [
    "EvalSettings",
    "Objective",
    "Param",
    "Scheduler",
    "SearchSpace",
    "SweepSpaceError",
    "Trial",
    "describe_params",
    "format_override",
    "format_value",
    "grid_size",
    "ray_space",
    "sample_configurations",
    "sample_trials",
]
