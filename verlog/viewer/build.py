"""Building ``verlog view``'s page: the run's data as one JSON payload inside one self-contained HTML file.

The page (``static/viewer.js`` and ``static/viewer.css``, inlined) needs no server and no network: it opens from disk.
Its size is bounded: every taped episode appears in the episode list (about 200 bytes each), but the turns (texts,
values, frames) of at most ``max_episodes`` of them are embedded, an evenly spaced sample over the run when there are
more; the others are listed as not embedded.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from verlog.run.files import nested_value
from verlog.run.folder import VIEW_PAGE
from verlog.tapes.record import SCHEMA_VERSION, TurnLog
from verlog.tapes.recorders import split_response
from verlog.viewer.data import RunData, ViewError, load_run

DEFAULT_MAX_EPISODES = 300
PAYLOAD_FORMAT = "verlog.view/1"
VIEW_FILE = VIEW_PAGE

# learning curves shown first, where the run has them (any other numeric key can be added on the page)
DEFAULT_CURVES = (
    "env/return_mean",
    "env/success_rate",
    "eval/success",
    "eval/return",
    "env/valid_action_ratio",
    "env/length_mean",
    "critic/vf_loss",
    "actor/pg_loss",
    "actor/entropy",
    "actor/ppo_kl",
    "adv/mean",
    "actor/reward_kl_penalty",
)


@dataclass
class ViewResult:
    """What :func:`build_view` wrote."""

    path: Path
    bytes: int
    episodes: int
    embedded: int
    turns: int
    seconds: float
    warnings: list[str] = field(default_factory=list)
    """What the console should say: each torn last line skipped (:attr:`verlog.viewer.data.RunData.warnings`)."""


def _num(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def _round(x: Any, digits: int = 5) -> float | None:
    v = _num(x)
    return None if v is None else float(f"{v:.{digits}g}")


def _natural(text: str) -> list[Any]:
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", text)]


def metrics_payload(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Columnar numeric series by step: ``{"steps": [...], "series": {key: [value or None, ...]}}`` (a step logged
    twice, e.g. by a resumed run, keeps its later values)."""
    by_step: dict[int, dict[str, float]] = {}
    for record in records:
        row = by_step.setdefault(int(record["step"]), {})
        for key, value in record.items():
            v = _num(value)
            if key != "step" and v is not None:
                row[key] = v
    steps = sorted(by_step)
    keys = sorted({k for row in by_step.values() for k in row})
    series = {k: [_round(by_step[s].get(k), 6) for s in steps] for k in keys}
    return {"steps": steps, "series": series, "defaults": [k for k in DEFAULT_CURVES if k in series]}


def _span(stats: Any) -> list[Any] | None:
    if stats is None:
        return None
    return [stats.tokens, _round(stats.logprob_sum), _round(stats.kl_sum), _round(stats.entropy_sum)]


def turn_payload(t: TurnLog, frames: bool) -> dict[str, Any]:
    """One turn as the page reads it (short keys; None where the record has no value)."""
    thought, action_text = split_response(t.response)
    split = t.token_split
    end = "terminated" if t.terminated else ("truncated" if t.truncated else "")
    return {
        "t": t.turn,
        "it": t.iteration,
        "obs": t.observation or _last_user_message(t),
        "th": thought,
        "at": action_text,
        "pa": t.parsed_action,
        "a": t.action,
        "ok": bool(t.action_valid),
        "r": _round(t.reward),
        "v": _round(t.value),
        "adv": _round(t.advantage),
        "advr": _round(t.advantage_raw),
        "g": _round(t.gae_return),
        "kl": _round(t.kl_ref),
        "lp": _round(t.logprobs.sum) if t.logprobs is not None else None,
        "sr": _span(split.reasoning) if split else None,
        "sa": _span(split.action) if split else None,
        "pt": t.prompt_tokens,
        "rt": t.response_tokens,
        "mem": t.memory_turns,
        "end": end,
        "err": t.extra.get("env_error") or t.extra.get("generation_error"),
        "f": t.frame if frames else None,
    }


def _last_user_message(t: TurnLog) -> str:
    """The observation of a record without one (schema 1): the prompt's last user message."""
    for message in reversed(t.prompt_messages):
        if message.get("role") == "user":
            return str(message.get("content", ""))
    return ""


def episodes_payload(run: RunData) -> list[dict[str, Any]]:
    """One summary per episode (tapes grouped by episode id, turns in order), plus the evaluation episodes of an
    evaluation folder that have no turns."""
    groups: dict[str, list[TurnLog]] = {}
    for record in run.turns:
        groups.setdefault(record.episode_id, []).append(record)
    out = []
    for eid, turns in groups.items():
        turns.sort(key=lambda r: r.turn)
        first, last = turns[0], turns[-1]
        outcome = run.outcomes.get(eid, {})
        ended = bool(last.terminated or last.truncated)
        success = last.success if last.success is not None else outcome.get("success")
        its = [t.iteration for t in turns if t.iteration is not None]
        values = [t.value for t in turns if t.value is not None]
        out.append(
            {
                "id": eid,
                "src": first.source or ("eval" if run.kind == "eval" else "train"),
                "env": first.env_id or str(outcome.get("env_id", "")),
                "seed": first.seed if first.seed is not None else outcome.get("seed"),
                "it0": min(its) if its else None,
                "it1": max(its) if its else None,
                "t0": first.turn,
                "n": len(turns),
                "ret": _round(sum(t.reward for t in turns)),
                "ok": (bool(success) if success is not None else None) if ended else None,
                "end": ("terminated" if last.terminated else "truncated") if ended else "open",
                "valid": _round(sum(t.action_valid for t in turns) / len(turns), 3),
                "v0": _round(values[0]) if values else None,
                "d": False,
            }
        )
    if run.kind == "eval":
        for eid, rec in run.outcomes.items():
            if eid in groups:
                continue
            out.append(
                {
                    "id": eid,
                    "src": "eval",
                    "env": str(rec.get("env_id", "")),
                    "seed": rec.get("seed"),
                    "it0": None,
                    "it1": None,
                    "t0": 0,
                    "n": int(rec.get("num_steps", 0) or 0),
                    "ret": _round(rec.get("episode_return")),
                    "ok": bool(rec.get("success")),
                    "end": "truncated" if rec.get("truncated") else "terminated",
                    "valid": _round((rec.get("valid_actions") or 0) / max(int(rec.get("num_steps") or 0), 1), 3),
                    "v0": None,
                    "d": False,
                }
            )
    out.sort(key=lambda e: (e["src"] != "train", e["it0"] if e["it0"] is not None else -1, _natural(e["id"])))
    return out


def sample_indices(n: int, k: int) -> list[int]:
    """``k`` evenly spaced indices of ``range(n)`` (all of them when ``k >= n``), first and last included."""
    if k <= 0 or n <= 0:
        return []
    if k >= n:
        return list(range(n))
    if k == 1:
        return [0]
    return sorted({round(i * (n - 1) / (k - 1)) for i in range(k)})


def summary_payload(run: RunData, episodes: list[dict[str, Any]]) -> list[list[Any]]:
    """(label, value) lines of the run summary."""
    lines: list[list[Any]] = [["folder", str(run.folder.resolve())], ["kind", run.kind]]
    cfg = run.config

    def get(path: str) -> Any:
        return nested_value(cfg, path)

    if run.kind == "train":
        for label, path in (
            ("run", "run_name"),
            ("env", "env.id"),
            ("model", "model.path"),
            ("iterations", "iterations"),
            ("env slots", "rollout.num_slots"),
            ("turns per slot", "rollout.turns_per_slot"),
            ("memory n", "memory.n"),
            ("answer format", "memory.answer_format"),
            ("step gamma / lambda", None),
        ):
            if path is None:
                g, lam = get("algorithm.step_gamma"), get("algorithm.step_lam")
                if g is not None:
                    lines.append([label, f"{g} / {lam}"])
                continue
            value = get(path)
            if value is not None:
                lines.append([label, value])
        if run.metrics:
            steps = [int(m["step"]) for m in run.metrics]
            lines.append(["iterations logged", f"{len([s for s in set(steps) if s > 0])} (last step {max(steps)})"])
            last = run.metrics[-1]
            for key in ("env/success_rate", "env/return_mean", "eval/success"):
                v = _num(last.get(key))
                if v is not None:
                    lines.append([f"last {key}", _round(v, 4)])
            total = sum(_num(m.get("timing_s/step")) or 0.0 for m in run.metrics)
            if total:
                lines.append(["training time", f"{total / 60:.1f} min (sum of timing_s/step)"])
    else:
        model = cfg.get("model")
        if isinstance(model, dict):
            model = model.get("path") or model.get("name") or json.dumps(model)
        for label, value in (
            ("model", model),
            ("episodes", cfg.get("episodes")),
            ("average progress %", _round(cfg.get("average_progress"), 4)),
            ("standard error %", _round(cfg.get("standard_error"), 4)),
            ("started", cfg.get("started_at")),
        ):
            if value is not None:
                lines.append([label, value])
        for env_name, block in (cfg.get("environments") or {}).items():
            for task, stats in (block.get("tasks") or {}).items():
                lines.append(
                    [
                        f"{env_name}/{task}",
                        f"success {_round(stats.get('success_rate'), 3)}, return {_round(stats.get('mean_return'), 3)}"
                        f", {stats.get('episodes')} episodes",
                    ]
                )
    n_train = sum(e["src"] == "train" for e in episodes)
    lines.append(["episodes on tape", f"{len(episodes)} ({n_train} training, {len(episodes) - n_train} evaluation)"])
    lines.append(["turns on tape", len(run.turns)])
    if run.schema_versions:
        versions = ", ".join(f"v{v}: {n}" for v, n in sorted(run.schema_versions.items()))
        lines.append(["turn-record schema", f"{versions} (this verlog writes v{SCHEMA_VERSION})"])
    return lines


def build_payload(run: RunData, *, max_episodes: int = DEFAULT_MAX_EPISODES, frames: bool = True) -> dict[str, Any]:
    """The page's data: summary, curves, episode list, and the turns of at most ``max_episodes`` episodes."""
    episodes = episodes_payload(run)
    ids = {t.episode_id for t in run.turns}
    with_turns = [i for i, e in enumerate(episodes) if e["id"] in ids]
    chosen = [with_turns[i] for i in sample_indices(len(with_turns), max_episodes)]
    turns_by_episode: dict[str, list[TurnLog]] = {}
    wanted = {episodes[i]["id"] for i in chosen}
    for record in run.turns:
        if record.episode_id in wanted:
            turns_by_episode.setdefault(record.episode_id, []).append(record)
    details = {}
    for i in chosen:
        eid = episodes[i]["id"]
        episodes[i]["d"] = True
        details[eid] = [turn_payload(t, frames) for t in sorted(turns_by_episode[eid], key=lambda r: r.turn)]
    notes = list(run.notes)
    if len(chosen) < len(with_turns):
        notes.append(
            f"{len(with_turns)} episodes on tape; the turns of {len(chosen)} evenly spaced ones are embedded "
            "(verlog view --max-episodes N embeds more)"
        )
    return {
        "format": PAYLOAD_FORMAT,
        "title": _title(run),
        "kind": run.kind,
        "generated": time.strftime("%Y-%m-%d %H:%M:%S"),
        "summary": summary_payload(run, episodes),
        "notes": notes,
        "metrics": metrics_payload(run.metrics),
        "episodes": episodes,
        "turns": details,
    }


def _title(run: RunData) -> str:
    name = run.config.get("run_name") if run.kind == "train" else None
    return f"verlog view: {name or run.folder.resolve().name}"


def render_html(payload: dict[str, Any]) -> str:
    """The self-contained page: inline CSS, inline JS, the payload as a JSON script element."""
    static = resources.files("verlog.viewer") / "static"
    css = (static / "viewer.css").read_text(encoding="utf-8")
    js = (static / "viewer.js").read_text(encoding="utf-8")
    data = json.dumps(payload, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    data = data.replace("<", "\\u003c")  # no "</script>" or "<!--" can end or confuse the data element
    title = str(payload.get("title", "verlog view")).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; img-src data:; '
        "style-src 'unsafe-inline'; script-src 'unsafe-inline'\">\n"
        f"<title>{title}</title>\n<style>\n{css}\n</style>\n</head>\n<body>\n"
        '<div id="app"><noscript>This page needs JavaScript.</noscript></div>\n'
        f'<script id="verlog-data" type="application/json">{data}</script>\n'
        f"<script>\n{js}\n</script>\n</body>\n</html>\n"
    )


def build_view(
    folder: str | Path,
    out: str | Path | None = None,
    *,
    max_episodes: int = DEFAULT_MAX_EPISODES,
    frames: bool = True,
) -> ViewResult:
    """Read ``folder`` and write its page to ``out`` (default ``<folder>/view.html``).

    Raises:
        ViewError: the folder cannot be shown (:func:`verlog.viewer.data.load_run`), or ``max_episodes`` < 0.
    """
    if max_episodes < 0:
        raise ViewError(f"max_episodes must be >= 0, got {max_episodes}")
    start = time.perf_counter()
    run = load_run(folder)
    payload = build_payload(run, max_episodes=max_episodes, frames=frames)
    html = render_html(payload)
    path = Path(out) if out is not None else run.folder / VIEW_FILE
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(html, encoding="utf-8")
    except OSError as exc:
        raise ViewError(f"cannot write {path}: {exc}") from exc
    return ViewResult(
        path=path,
        bytes=len(html.encode("utf-8")),
        episodes=len(payload["episodes"]),
        embedded=len(payload["turns"]),
        turns=len(run.turns),
        seconds=time.perf_counter() - start,
        warnings=list(run.warnings),
    )
