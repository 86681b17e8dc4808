"""Reading a run folder for ``verlog view``: what kind of folder it is, its metrics, tapes and episodes.

Two kinds of folders are understood:

- a training run (``verlog train``'s ``output_dir``): ``metrics.jsonl`` (one record per iteration, ``step`` first),
  ``tapes/train.jsonl`` and ``tapes/eval.jsonl`` (episode tapes), ``config.yaml`` (the resolved config),
  ``eval/episodes.jsonl`` (every in-training evaluation episode);
- an evaluation (``verlog eval --out``): ``summary.json``, ``episodes.jsonl`` and (``--log-turns``) ``turns.jsonl``.

Anything else (a missing or empty folder, another tool's files) is a :class:`ViewError` naming what was found.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verlog.errors import VerlogError
from verlog.run.files import JsonLinesError, TornLine, json_lines
from verlog.run.folder import CONFIG_FILE, EVAL_TAPES, METRICS_FILE, TRAIN_TAPES
from verlog.run.folder import EVAL_EPISODES as TRAIN_EVAL_EPISODES
from verlog.tapes.record import SCHEMA_VERSION, TurnLog, TurnLogError, schema_version

EVAL_SUMMARY = "summary.json"
EVAL_EPISODES = "episodes.jsonl"
EVAL_TURNS = "turns.jsonl"


class ViewError(VerlogError, ValueError):
    """A folder ``verlog view`` cannot show (missing, empty, another tool's, or files it cannot read)."""


@dataclass
class RunData:
    """What a run folder holds, read and checked.

    Attributes:
        folder: the run folder.
        kind: ``train`` or ``eval``.
        metrics: metrics.jsonl's records in file order (training).
        turns: every tape record (training and evaluation tapes, or an evaluation's turns.jsonl).
        outcomes: episode id -> an evaluation episode's record (``success``, ``episode_return``, ...), where known.
        config: the resolved training config (plain dict), or the evaluation's summary.
        schema_versions: turn-record schema version -> records read with it.
        notes: things the page should say (skipped lines, old schema versions, missing files).
        warnings: what the console should say too: each torn last line skipped (its file and line number).
    """

    folder: Path
    kind: str
    metrics: list[dict[str, Any]] = field(default_factory=list)
    turns: list[TurnLog] = field(default_factory=list)
    outcomes: dict[str, dict[str, Any]] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    schema_versions: dict[int, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


class Notes(list):
    """The page's notes (a list of str), and ``warnings``: those the console should show as well."""

    def __init__(self) -> None:
        super().__init__()
        self.warnings: list[str] = []


def _json_lines(path: Path, notes: list[str]) -> Iterator[tuple[int, Any]]:
    """(line number, value) of a JSONL file; a torn last line (:mod:`verlog.run.files`' rule: a writer interrupted
    mid-line) is skipped with a note (and, when ``notes`` is a :class:`Notes`, a console warning naming the file and
    line), a bad line elsewhere is a :class:`ViewError`."""

    def torn(line: TornLine) -> None:
        notes.append(f"{path.name}: its last line is cut short (a writer running or interrupted); skipped")
        if isinstance(notes, Notes):
            notes.warnings.append(
                f"{path}: line {line.number} is torn (cut short: its writer is running or was interrupted), so it "
                f"was skipped; the {line.kept} record(s) before it are shown"
            )

    try:
        yield from json_lines(path, on_torn=torn)
    except OSError as exc:
        raise ViewError(f"{path}: cannot be read ({exc})") from exc
    except JsonLinesError as exc:
        raise ViewError(f"{exc}; not a file verlog wrote") from exc


def _read_metrics(path: Path, notes: list[str]) -> list[dict[str, Any]]:
    out = []
    for number, record in _json_lines(path, notes):
        if not isinstance(record, dict) or not isinstance(record.get("step"), int):
            raise ViewError(
                f"{path}:{number}: a record without an integer 'step': this metrics.jsonl was not written by "
                "verlog train"
            )
        out.append(record)
    return out


def _read_tapes(path: Path, notes: list[str], versions: dict[int, int]) -> list[TurnLog]:
    out = []
    for number, data in _json_lines(path, notes):
        try:
            version = schema_version(data.get("format") if isinstance(data, dict) else None)
            out.append(TurnLog.from_dict(data))
        except TurnLogError as exc:
            raise ViewError(f"{path}:{number}: {exc}") from exc
        versions[version] = versions.get(version, 0) + 1
    return out


def _eval_episode_id(record: dict[str, Any]) -> str | None:
    try:
        return f"{record['env_id']}/run_{int(record['episode_index']):02d}"
    except (KeyError, TypeError, ValueError):
        return None


def _outcomes(path: Path, notes: list[str], prefix_iteration: bool) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for _number, record in _json_lines(path, notes):
        if not isinstance(record, dict):
            continue
        eid = _eval_episode_id(record)
        if eid is None:
            continue
        if prefix_iteration:
            eid = f"eval@{record.get('iteration')}/{eid}"
        out[eid] = record
    return out


def _listing(folder: Path, limit: int = 6) -> str:
    names = sorted(p.name + ("/" if p.is_dir() else "") for p in folder.iterdir())
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


EXPECTED = (
    "expected metrics.jsonl and/or tapes/*.jsonl (a `verlog train` output_dir) or summary.json with episodes.jsonl "
    "(a `verlog eval --out` folder)"
)


def load_run(folder: str | Path) -> RunData:
    """Read a run folder (see the module docstring).

    Raises:
        ViewError: the folder is missing, empty, not a verlog folder, or holds a file verlog cannot read (a turn
            record of a newer schema, a corrupt line); the message names the path and what to do.
    """
    root = Path(folder)
    if not root.exists():
        raise ViewError(f"{root}: no such folder: give a `verlog train` output_dir or a `verlog eval --out` folder")
    if not root.is_dir():
        raise ViewError(f"{root} is a file, not a run folder ({EXPECTED})")
    if not any(root.iterdir()):
        raise ViewError(f"{root} is empty: nothing to show ({EXPECTED})")
    has_metrics = (root / METRICS_FILE).is_file()
    tapes = [root / p for p in (TRAIN_TAPES, EVAL_TAPES) if (root / p).is_file()]
    is_eval = (root / EVAL_SUMMARY).is_file() and (root / EVAL_EPISODES).is_file()
    if not (has_metrics or tapes or is_eval):
        raise ViewError(f"{root} is not a verlog run folder: it holds {_listing(root)}; {EXPECTED}")
    run = RunData(folder=root, kind="train" if (has_metrics or tapes) else "eval")
    notes = Notes()
    if run.kind == "train":
        if has_metrics:
            run.metrics = _read_metrics(root / METRICS_FILE, notes)
        else:
            notes.append("no metrics.jsonl: no learning curves")
        for path in tapes:
            run.turns.extend(_read_tapes(path, notes, run.schema_versions))
        if not tapes:
            notes.append(
                "no tapes/ (tapes.episodes_per_iteration and tapes.eval_episodes were 0, or the run predates tapes): "
                "no episodes to show"
            )
        if (root / TRAIN_EVAL_EPISODES).is_file():
            run.outcomes = _outcomes(root / TRAIN_EVAL_EPISODES, notes, prefix_iteration=True)
        run.config = _read_config(root / CONFIG_FILE, notes)
    else:
        try:
            summary = json.loads((root / EVAL_SUMMARY).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise ViewError(f"{root / EVAL_SUMMARY}: not readable JSON ({exc})") from exc
        if not isinstance(summary, dict) or not str(summary.get("format", "")).startswith("verlog.eval/"):
            raise ViewError(f"{root / EVAL_SUMMARY} is not a verlog eval summary (no 'format': 'verlog.eval/...')")
        run.config = summary
        run.outcomes = _outcomes(root / EVAL_EPISODES, notes, prefix_iteration=False)
        if (root / EVAL_TURNS).is_file():
            run.turns = _read_tapes(root / EVAL_TURNS, notes, run.schema_versions)
        else:
            notes.append("no turns.jsonl (the evaluation ran without --log-turns): episodes are listed without turns")
    run.notes, run.warnings = notes, notes.warnings
    old = {v: n for v, n in run.schema_versions.items() if v < SCHEMA_VERSION}
    for version, count in sorted(old.items()):
        notes.append(
            f"{count} turn records of schema version {version} (an older verlog): they have no observation, success, "
            "return, KL, token split or frame fields; those show as -"
        )
    return run


def _read_config(path: Path, notes: list[str]) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        from omegaconf import OmegaConf

        data = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    except Exception as exc:  # a damaged config only costs the summary lines
        notes.append(f"{CONFIG_FILE} could not be read ({type(exc).__name__}); the summary lacks its settings")
        return {}
    return data if isinstance(data, dict) else {}
