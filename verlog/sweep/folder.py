"""The sweep folder (``verlog sweep SPACE --out DIR``): what it holds, and whether a space may run in it.

Layout::

    DIR/sweep.json            the format, the space (parsed) and its fingerprint, the trials, the folder the sweep runs
                              from (relative paths in the space are read from there)
    DIR/space.yaml            the search space file as given
    DIR/trials/<id>/trial.json    the trial's keys, its verlog train overrides and command, its attempts (start, last
                                  seen alive, end, exit code)
    DIR/trials/<id>/run/          verlog train's output_dir (metrics.jsonl, checkpoints/, ...)
    DIR/trials/<id>/train.log     verlog train's output (appended by each attempt)
    DIR/trials/<id>/eval/, eval.log   verlog eval's output, with an eval: section
    DIR/trials/<id>/result.json   written when the trial ends: finished, failed or stopped (early stopping)
    DIR/tune/                 Ray Tune's experiment (its state, each trial's reported results): what resumes a sweep
    DIR/summary.md            the summary table, rewritten when the sweep ends

:func:`check_folder` refuses a folder that holds a sweep of another space (its fingerprint differs), or anything
else, before anything starts; :func:`create_folder` writes ``sweep.json`` and ``space.yaml`` of a new sweep.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from verlog.run.files import write_atomically
from verlog.run.folder import RunFolder
from verlog.sweep.space import SearchSpace, SweepSpaceError, Trial
from verlog.sweep.space_file import parse_space

SWEEP_FORMAT = "verlog.sweep/1"
FINAL_STATUSES = ("finished", "stopped")
"""A trial with one of these results never runs again (a failed one is retried when the sweep resumes)."""


@dataclass(frozen=True)
class SweepFolder:
    """The paths of a sweep folder (see the module docstring)."""

    root: Path

    @property
    def sweep_file(self) -> Path:
        return self.root / "sweep.json"

    @property
    def tune_dir(self) -> Path:
        return self.root / "tune"

    def trial_dir(self, trial_id: str) -> Path:
        return self.root / "trials" / trial_id

    def run_dir(self, trial_id: str) -> Path:
        return self.trial_dir(trial_id) / "run"

    def result_file(self, trial_id: str) -> Path:
        return self.trial_dir(trial_id) / "result.json"


def starts_fresh(run_dir: Path) -> bool:
    """Whether a trial's ``verlog train`` starts afresh (``--overwrite``: no checkpoint in ``run_dir`` to continue
    from, so what a killed attempt left there is removed first) rather than resuming (``checkpoint.resume=auto``)."""
    return not RunFolder(run_dir).tracker.is_file()


def write_json(path: Path, data: Any) -> None:
    """Write ``data`` as JSON to ``path`` atomically (a kill leaves the old file or the new one, never half)."""
    write_atomically(path, json.dumps(data, indent=1) + "\n")  # keys in their order: params are sampled in order


def read_json(path: Path) -> Any:
    """The JSON in ``path``, or None when it is missing or unreadable (a file being written by a killed process)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def check_folder(out: str | os.PathLike, space: SearchSpace) -> tuple[SweepFolder, bool]:
    """The folder ``--out`` names, and whether it resumes a sweep of ``space`` (True) or starts one (False).

    Raises:
        SweepSpaceError: ``out`` is empty text or a file, holds a sweep of another search space, or holds something
            that is not a sweep.
    """
    text = os.fspath(out)
    if not text.strip():
        raise SweepSpaceError("--out is empty: give the folder to write the sweep into")
    folder = SweepFolder(Path(text))
    root = folder.root
    if root.exists() and not root.is_dir():
        raise SweepSpaceError(f"--out {text!r} is a file, not a folder: give a folder for the sweep")
    if not root.is_dir() or not any(root.iterdir()):
        return folder, False
    saved = read_json(folder.sweep_file)
    if not isinstance(saved, dict) or saved.get("format") != SWEEP_FORMAT:
        entries = sorted(p.name for p in root.iterdir())
        shown = ", ".join(entries[:3]) + (", ..." if len(entries) > 3 else "")
        raise SweepSpaceError(
            f"--out {text!r} holds something other than a sweep ({shown}) and no sweep.json; give a new or empty folder"
        )
    if saved.get("fingerprint") != space.fingerprint():
        differs = first_difference(saved.get("space") or {}, space.as_dict()) or "its keys come in another order"
        raise SweepSpaceError(
            f"--out {text!r} holds a sweep of another search space ({differs}); give a new --out folder, or resume "
            f"that sweep with its own space: verlog sweep {root / 'space.yaml'} --out {text}"
        )
    return folder, True


def first_difference(old: dict[str, Any], new: dict[str, Any], prefix: str = "") -> str:
    """The first key where two spaces (as :meth:`SearchSpace.as_dict`) differ, as ``"params.x: 1 there, 2 here"``."""
    for key in sorted(set(old) | set(new), key=str):
        if key in ("parallel", "name"):
            continue
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            found = first_difference(a, b, f"{prefix}{key}.")
            if found:
                return found
        elif a != b:
            return f"{prefix}{key}: {json.dumps(a)} there, {json.dumps(b)} here"
    return ""


def create_folder(folder: SweepFolder, space: SearchSpace, trials: list[Trial], space_text: str) -> None:
    """Write a new sweep's ``sweep.json`` and ``space.yaml``."""
    folder.root.mkdir(parents=True, exist_ok=True)
    (folder.root / "space.yaml").write_text(space_text, encoding="utf-8")
    write_json(
        folder.sweep_file,
        {
            "format": SWEEP_FORMAT,
            "fingerprint": space.fingerprint(),
            "space": space.as_dict(),
            "space_file": space.source,
            "trials": [t.as_dict() for t in trials],
            "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "cwd": os.getcwd(),
        },
    )


def read_sweep(root: str | os.PathLike) -> tuple[SweepFolder, SearchSpace, list[Trial]]:
    """A sweep folder's space and trials (for ``verlog sweep report``), or SweepSpaceError when it is not one."""
    folder = SweepFolder(Path(root))
    saved = read_json(folder.sweep_file)
    if not isinstance(saved, dict) or saved.get("format") != SWEEP_FORMAT:
        what = "is not a folder" if not folder.root.is_dir() else "holds no sweep.json"
        raise SweepSpaceError(
            f"{os.fspath(root)!r} {what}: give the --out folder of a `verlog sweep SPACE.yaml --out DIR` run"
        )
    given = str(saved.get("space_file") or folder.sweep_file)
    space = parse_space(saved["space"], Path(given).name if Path(given).is_absolute() else given)
    trials = [Trial(t["id"], int(t["config"]), dict(t["params"]), t.get("seed")) for t in saved["trials"]]
    return folder, space, trials
