"""The search space file of ``verlog sweep SPACE.yaml``: read, its shape checked, made a :class:`SearchSpace`.

:func:`load_space` reads the YAML file and :func:`parse_space` checks it (docs/sweeps.md has the format): every problem
is a :class:`SweepSpaceError` that names the key and the fix, before anything starts. The keys themselves are checked
against verlog train's config by :mod:`verlog.sweep.checks`; the trials are drawn by :mod:`verlog.sweep.space`.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from verlog.sweep.space import (
    EVAL_FIELDS,
    EVAL_METRIC_PREFIX,
    METHODS,
    MODES,
    PARAM_KINDS,
    SCHEDULERS,
    SWEEP_OWNED_KEYS,
    EvalSettings,
    Objective,
    Param,
    Scheduler,
    SearchSpace,
    SweepSpaceError,
    format_override,
)

_TOP_LEVEL = (
    "name",
    "base",
    "params",
    "sampling",
    "objective",
    "scheduler",
    "eval",
    "parallel",
    "config_dir",
    "imports",
)
_SAMPLING_KEYS = ("method", "trials", "seed", "seeds")
_OBJECTIVE_KEYS = ("metric", "mode")
SCHEDULER_KEYS = ("kind", "metric", "grace_period", "reduction_factor", "min_samples_required")
_EVAL_KEYS = ("episodes", "seed_start", "temperature", "args")
_PARAM_KEYS = (*PARAM_KINDS, "points", "when")
_METRIC = re.compile(r"^[\w.-]+(/[\w.-]+)+$")


def load_space(path: str | Path) -> SearchSpace:
    """Read and check the search space in the YAML file ``path`` (:func:`parse_space`)."""
    import yaml

    file = Path(path)
    if not file.is_file():
        what = "a folder" if file.is_dir() else "no such file"
        raise SweepSpaceError(f"search space {str(path)!r}: {what}; give the YAML file of the space (docs/sweeps.md)")
    try:
        data = yaml.safe_load(file.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" at line {where.line + 1}" if where is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SweepSpaceError(f"{path}: not valid YAML{line} ({problem}); fix the file's syntax") from None
    return parse_space(data, str(path))


def parse_space(data: Any, source: str = "the search space") -> SearchSpace:
    """The :class:`SearchSpace` that ``data`` (the loaded YAML) describes; :class:`SweepSpaceError` naming the first
    problem and its fix."""
    if not isinstance(data, Mapping):
        raise SweepSpaceError(f"{source}: a search space is a YAML mapping with base: and params: (docs/sweeps.md)")
    _refuse_unknown(data, _TOP_LEVEL, "", source)
    base = _parse_base(data.get("base") or {}, source)
    params = _order_by_conditions(_parse_params(data.get("params"), source), source)
    sampling = _section(data, "sampling", _SAMPLING_KEYS, source)
    method = _one_of(sampling.get("method", "random"), METHODS, "sampling.method", source)
    trials = sampling.get("trials")
    if method == "random":
        trials = _int_at_least(trials, 1, "sampling.trials", source, "configurations drawn, e.g. trials: 24")
    elif trials is not None:
        raise SweepSpaceError(
            f"{source}: sampling.trials is set with method: grid, which runs every point of the grid; drop trials, or "
            "use method: random"
        )
    seeds = sampling.get("seeds")
    if seeds is not None:
        seeds = _seed_list(seeds, source)
        for line in base:
            if line.lstrip("+").split("=", 1)[0] == "seed":
                raise SweepSpaceError(
                    f"{source}: base sets seed and sampling.seeds lists the training seeds; keep one of them"
                )
    space = SearchSpace(
        base=base,
        params=params,
        method=method,
        trials=trials or 0,
        sampling_seed=_int_at_least(sampling.get("seed", 0), 0, "sampling.seed", source, "e.g. seed: 0"),
        seeds=seeds,
        objective=_parse_objective(data, source),
        scheduler=None,
        eval=_parse_eval(data, source),
        parallel=_int_at_least(data.get("parallel", 1), 1, "parallel", source, "trials at once, e.g. parallel: 1"),
        config_dir=None if data.get("config_dir") is None else str(data["config_dir"]),
        imports=tuple(str(m) for m in _list(data.get("imports") or [], "imports", source)),
        name=str(data.get("name") or Path(source).stem or "sweep"),
        source=source,
    )
    if method == "grid":
        for p in params:
            if p.kind in ("uniform", "loguniform") and p.points is None:
                raise SweepSpaceError(
                    f"{source}: params.{p.key}: a {p.kind} range in a grid needs points: N (the values it takes); "
                    "add points, or use sampling.method: random"
                )
    space = _with_scheduler(space, data, source)
    if "seed" in {p.key for p in params} and seeds is not None:
        raise SweepSpaceError(f"{source}: params sweeps seed and sampling.seeds lists the training seeds; keep one")
    return space


def _refuse_unknown(data: Mapping[str, Any], known: Sequence[str], where: str, source: str) -> None:
    for key in data:
        if key not in known:
            close = difflib.get_close_matches(str(key), known, n=1, cutoff=0.6)
            hint = f" Did you mean {where}{close[0]}?" if close else ""
            of = f" of {where[:-1]}" if where else ""
            raise SweepSpaceError(
                f"{source}: unknown key {where}{key!r} in the search space.{hint} Keys{of}: {', '.join(known)} "
                "(docs/sweeps.md)"
            )


def _section(data: Mapping[str, Any], name: str, known: Sequence[str], source: str) -> Mapping[str, Any]:
    section = data.get(name) or {}
    if not isinstance(section, Mapping):
        raise SweepSpaceError(f"{source}: {name} must be a mapping of {', '.join(known)}")
    _refuse_unknown(section, known, f"{name}.", source)
    return section


def _list(value: Any, where: str, source: str) -> list[Any]:
    if not isinstance(value, list):
        raise SweepSpaceError(f"{source}: {where} must be a list, got {value!r}")
    return value


def _one_of(value: Any, choices: Sequence[str], where: str, source: str) -> str:
    if value not in choices:
        close = difflib.get_close_matches(str(value), choices, n=1, cutoff=0.5)
        hint = f" Did you mean {close[0]}?" if close else ""
        raise SweepSpaceError(f"{source}: {where} is {value!r}, not one of {', '.join(choices)}.{hint}")
    return str(value)


def _int_at_least(value: Any, low: int, where: str, source: str, example: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise SweepSpaceError(f"{source}: {where} is {value!r}, not an integer >= {low}; {example}")
    return value


def _number(value: Any, where: str, source: str) -> float:
    """A YAML number, or a string that reads as one (PyYAML reads ``1e-4``, without a dot, as a string)."""
    if isinstance(value, bool):
        raise SweepSpaceError(f"{source}: {where} is {value!r}, not a number")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise SweepSpaceError(f"{source}: {where} is {value!r}, not a number") from None
    if not math.isfinite(number):
        raise SweepSpaceError(f"{source}: {where} is {value!r}: give a finite number")
    return number


def _seed_list(value: Any, source: str) -> tuple[int, ...]:
    seeds = _list(value, "sampling.seeds", source)
    if not seeds:
        raise SweepSpaceError(f"{source}: sampling.seeds is empty; list the training seeds, e.g. seeds: [0, 1]")
    for s in seeds:
        _int_at_least(s, 0, "a seed in sampling.seeds", source, "seeds are integers >= 0, e.g. seeds: [0, 1]")
    if len(set(seeds)) != len(seeds):
        raise SweepSpaceError(f"{source}: sampling.seeds {seeds} repeats a seed; list each once")
    return tuple(seeds)


def _parse_base(base: Any, source: str) -> tuple[str, ...]:
    if isinstance(base, Mapping):
        lines = [format_override(str(k), v) for k, v in base.items()]
    elif isinstance(base, list):
        lines = [str(item) for item in base]
        for line in lines:
            if "=" not in line:
                raise SweepSpaceError(f"{source}: base entry {line!r} is not key=value; write e.g. iterations=12")
    else:
        raise SweepSpaceError(f"{source}: base must be a mapping (key: value) or a list of key=value overrides")
    for line in lines:
        key = line.split("=", 1)[0].lstrip("+~")
        if key in SWEEP_OWNED_KEYS:
            raise SweepSpaceError(
                f"{source}: base sets {key}, which the sweep sets for each trial (its own folder under --out, "
                "resumed after a kill); drop it"
            )
    return tuple(lines)


def _parse_params(params: Any, source: str) -> list[Param]:
    if not isinstance(params, Mapping) or not params:
        raise SweepSpaceError(
            f"{source}: params is {'empty' if not params else 'not a mapping'}; list the keys to sweep, e.g. "
            "params: {algorithm.actor_lr: {loguniform: [1.0e-4, 1.0e-3]}}"
        )
    out = []
    for key, spec in params.items():
        key = str(key)
        if key.lstrip("+") in SWEEP_OWNED_KEYS:
            raise SweepSpaceError(f"{source}: params sweeps {key}, which the sweep sets for each trial; drop it")
        out.append(_parse_param(key, spec, source))
    keys = {p.key for p in out}
    for p in out:
        for other, allowed in p.when:
            if other not in keys:
                raise SweepSpaceError(
                    f"{source}: params.{p.key}: when names {other!r}, which is not a swept key; condition on a key of "
                    "params (a fixed key belongs in base, where it needs no condition)"
                )
            parent = next(q for q in out if q.key == other)
            if not parent.discrete:
                raise SweepSpaceError(
                    f"{source}: params.{p.key}: when names {other!r}, a continuous range that never takes an exact "
                    "value; condition on a choice or an integer key"
                )
            reachable = (
                list(parent.values) if parent.kind == "choice" else list(range(int(parent.low), int(parent.high) + 1))
            )
            never = [v for v in allowed if v not in reachable]
            if never:
                raise SweepSpaceError(
                    f"{source}: params.{p.key}: when asks {other} to be {never[0]!r}, which it never takes "
                    f"({', '.join(repr(v) for v in reachable)}); use one of those values"
                )
    return out


def _parse_param(key: str, spec: Any, source: str) -> Param:
    where = f"params.{key}"
    if isinstance(spec, list):
        spec = {"choice": spec}
    if not isinstance(spec, Mapping):
        raise SweepSpaceError(
            f"{source}: {where} is {spec!r}, a single value; a fixed value goes in base, a swept one is a list of "
            "choices or {uniform|loguniform|int: [low, high]}"
        )
    _refuse_unknown(spec, _PARAM_KEYS, f"{where}.", source)
    kinds = [k for k in PARAM_KINDS if k in spec]
    if len(kinds) != 1:
        raise SweepSpaceError(
            f"{source}: {where} needs exactly one of {', '.join(PARAM_KINDS)}, got "
            f"{', '.join(kinds) or 'none'}; e.g. {{choice: [a, b]}} or {{loguniform: [1.0e-4, 1.0e-3]}}"
        )
    kind = kinds[0]
    points = spec.get("points")
    if points is not None:
        if kind == "choice":
            raise SweepSpaceError(
                f"{source}: {where}: points goes with a range, not a choice (a grid takes every choice)"
            )
        _int_at_least(points, 2, f"{where}.points", source, "the values a grid takes, e.g. points: 3")
    when = _parse_when(spec.get("when"), where, source)
    if kind == "choice":
        values = _list(spec["choice"], f"{where}.choice", source)
        if not values:
            raise SweepSpaceError(f"{source}: {where} is an empty choice; list at least two values, or move it to base")
        seen: list[Any] = []
        for v in values:
            if v in seen:
                raise SweepSpaceError(f"{source}: {where} lists {v!r} twice; list each value once")
            seen.append(v)
        return Param(key, kind, values=tuple(values), when=when)
    bounds = _list(spec[kind], f"{where}.{kind}", source)
    if len(bounds) != 2:
        raise SweepSpaceError(f"{source}: {where}.{kind} must be [low, high], got {bounds!r}")
    low, high = (_number(b, f"{where}.{kind}", source) for b in bounds)
    if kind == "int" and not all(float(b).is_integer() for b in (low, high)):
        raise SweepSpaceError(f"{source}: {where}.int bounds {bounds} are not integers; use uniform for a float range")
    if not low < high:
        raise SweepSpaceError(
            f"{source}: {where}.{kind} [{bounds[0]}, {bounds[1]}] is an empty range (low must be below high); widen "
            "it, or put the one value in base"
        )
    if kind == "loguniform" and low <= 0:
        raise SweepSpaceError(f"{source}: {where}.loguniform starts at {bounds[0]}; a log-uniform range needs low > 0")
    return Param(key, kind, low=low, high=high, points=points, when=when)


def _parse_when(when: Any, where: str, source: str) -> tuple[tuple[str, tuple[Any, ...]], ...]:
    if when is None:
        return ()
    if not isinstance(when, Mapping) or not when:
        raise SweepSpaceError(f"{source}: {where}.when must map a swept key to its value(s), e.g. when: {{k: [a, b]}}")
    out = []
    for key, allowed in when.items():
        values = tuple(allowed) if isinstance(allowed, list) else (allowed,)
        if not values:
            raise SweepSpaceError(f"{source}: {where}.when.{key} lists no value; give the value(s) that enable it")
        out.append((str(key), values))
    return tuple(out)


def _order_by_conditions(params: list[Param], source: str) -> tuple[Param, ...]:
    """``params`` with every key after the keys its ``when`` names (file order otherwise); a circle is an error."""
    ordered: list[Param] = []
    placed: set[str] = set()
    todo = list(params)
    while todo:
        ready = [p for p in todo if all(k in placed for k, _ in p.when)]
        if not ready:
            circle = " -> ".join(p.key for p in todo)
            raise SweepSpaceError(
                f"{source}: the when conditions of {circle} depend on each other in a circle; break it"
            )
        for p in ready:
            ordered.append(p)
            placed.add(p.key)
        todo = [p for p in todo if p.key not in placed]
    return tuple(ordered)


def _parse_objective(data: Mapping[str, Any], source: str) -> Objective:
    section = _section(data, "objective", _OBJECTIVE_KEYS, source)
    metric = _metric(section.get("metric", Objective.metric), "objective.metric", source)
    return Objective(metric=metric, mode=_one_of(section.get("mode", "max"), MODES, "objective.mode", source))


def _metric(value: Any, where: str, source: str) -> str:
    text = str(value)
    if not _METRIC.match(text):
        raise SweepSpaceError(
            f"{source}: {where} {value!r} is not a metric name; give a metrics.jsonl key such as eval/success or "
            f"env/return_mean (docs/metrics.md), or {EVAL_METRIC_PREFIX}<field> of the eval: section"
        )
    if text.startswith(EVAL_METRIC_PREFIX) and text[len(EVAL_METRIC_PREFIX) :] not in EVAL_FIELDS:
        raise SweepSpaceError(
            f"{source}: {where} {text!r}: verlog eval's summary has {', '.join(EVAL_FIELDS)}; write "
            f"{EVAL_METRIC_PREFIX}<one of them>"
        )
    return text


def _parse_eval(data: Mapping[str, Any], source: str) -> EvalSettings | None:
    if data.get("eval") is None:
        if str((data.get("objective") or {}).get("metric", "")).startswith(EVAL_METRIC_PREFIX):
            raise SweepSpaceError(
                f"{source}: objective.metric reads verlog eval's summary, but there is no eval: section; add eval: "
                "{episodes: 32}, or use an in-training metric such as eval/success"
            )
        return None
    section = _section(data, "eval", _EVAL_KEYS, source)
    temperature = section.get("temperature")
    if temperature is not None:
        temperature = _number(temperature, "eval.temperature", source)
        if temperature < 0:
            raise SweepSpaceError(f"{source}: eval.temperature is {temperature}; give a number >= 0 (0 = greedy)")
    return EvalSettings(
        episodes=_int_at_least(section.get("episodes", 32), 1, "eval.episodes", source, "e.g. episodes: 32"),
        seed_start=_int_at_least(section.get("seed_start", 1_000_000), 0, "eval.seed_start", source, "e.g. 1000000"),
        temperature=temperature,
        args=tuple(str(a) for a in _list(section.get("args") or [], "eval.args", source)),
    )


def _with_scheduler(space: SearchSpace, data: Mapping[str, Any], source: str) -> SearchSpace:
    if data.get("scheduler") is None:
        return space
    section = _section(data, "scheduler", SCHEDULER_KEYS, source)
    kind = _one_of(section.get("kind"), SCHEDULERS, "scheduler.kind", source)
    metric = _metric(section.get("metric", space.objective.metric), "scheduler.metric", source)
    if metric.startswith(EVAL_METRIC_PREFIX):
        raise SweepSpaceError(
            f"{source}: scheduler.metric {metric} is known only after training; early stopping needs a metrics.jsonl "
            "key logged during training, e.g. eval/success or env/return_mean"
        )
    factor = _number(section.get("reduction_factor", 2), "scheduler.reduction_factor", source)
    if factor <= 1:
        raise SweepSpaceError(f"{source}: scheduler.reduction_factor is {factor}; give a number > 1, e.g. 2")
    scheduler = Scheduler(
        kind=kind,
        metric=metric,
        grace_period=_int_at_least(section.get("grace_period", 1), 1, "scheduler.grace_period", source, "e.g. 4"),
        reduction_factor=factor,
        min_samples_required=_int_at_least(
            section.get("min_samples_required", 3), 1, "scheduler.min_samples_required", source, "e.g. 3"
        ),
    )
    return dataclasses.replace(space, scheduler=scheduler)
