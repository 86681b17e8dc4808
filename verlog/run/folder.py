"""A training run's folder made crash-safe: a lock, checkpoints that become the latest only when complete, and logs
that a kill cannot leave in a state a resume would trip on (docs/reliability.md).

- :class:`RunLock`: ``<output_dir>/run.lock``, an exclusive ``flock`` held by the ``verlog train`` process for its
  life. The kernel releases it when the process dies, however it dies, so a killed run leaves no lock to clean; the
  file keeps the holder's pid, host, start time and command, so a second run names the one in its way.
- Checkpoints: verl writes each checkpoint into ``checkpoints/.incoming/`` (:func:`incoming_root`); once every
  file is there, :func:`commit_checkpoint` renames the folder into ``checkpoints/`` and then, last, rewrites
  ``latest_checkpointed_iteration.txt`` (a temporary file renamed over it). A kill at any point leaves the previous
  checkpoint the latest one; :func:`recover_checkpoints` (at the next start) removes a half-written checkpoint and
  says so in one line.
- Logs (written and read by :mod:`verlog.run.files`, whose rule skips a torn last line): :func:`cut_logs` (at a resume)
  moves the records of iterations after the resumed checkpoint, and a torn line, to ``superseded/``, so no iteration
  appears twice and nothing is deleted.
- :class:`RunFolder` names every path of a run; the names are defined here once.
"""

from __future__ import annotations

import datetime
import errno
import fcntl
import json
import os
import shutil
import socket
import sys
from pathlib import Path
from typing import Any

from verlog.errors import RunFault, VerlogError
from verlog.run.files import lines_of, write_atomically

LOCK_FILE = "run.lock"
CHECKPOINTS = "checkpoints"
TRACKER = "latest_checkpointed_iteration.txt"
INCOMING = ".incoming"
STEP_PREFIX = "global_step_"
SUPERSEDED = "superseded"
ROLLOUT_STATE_FILE = "verlog_rollout.pkl"
CHECKPOINT_FILES = ("actor", "data.pt", ROLLOUT_STATE_FILE)
"""What every complete checkpoint folder holds (plus ``critic`` in runs with a critic)."""
METRICS_FILE = "metrics.jsonl"
ROLLOUT_LOG = "rollout.jsonl"
TAPES_DIR = "tapes"
TRAIN_TAPES = f"{TAPES_DIR}/train.jsonl"
EVAL_TAPES = f"{TAPES_DIR}/eval.jsonl"
EVAL_EPISODES = "eval/episodes.jsonl"
CONFIG_FILE = "config.yaml"
VERL_CONFIG_FILE = "verl_config.yaml"
LEARNING_CURVE = "learning_curve.png"
VIEW_PAGE = "view.html"
"""``verlog view``'s page of the run (written there by default)."""
LOGS_DIR = "logs"
"""Where the logs of Ray's workers, verl and vLLM go (verlog.console; ``--verbose`` shows them on the terminal)."""
TRAIN_LOG = f"{LOGS_DIR}/train.log"
"""The log of ``verlog train`` in its output_dir (appended at every start)."""
TENSORBOARD_DIR = "tensorboard"
"""The tensorboard tracker's event files (``logger=[console,tensorboard]``)."""
WANDB_DIR = "wandb"
"""The wandb tracker's run folders (offline unless WANDB_MODE says otherwise)."""
STEP_LOGS: tuple[tuple[str, str], ...] = (
    (METRICS_FILE, "step"),
    (ROLLOUT_LOG, "step"),
    (TRAIN_TAPES, "iteration"),
    (EVAL_TAPES, "iteration"),
    (EVAL_EPISODES, "iteration"),
)
"""The run's JSON-lines logs and the key that holds each record's iteration."""
RUN_OUTPUTS = (
    METRICS_FILE,
    ROLLOUT_LOG,
    CHECKPOINTS,
    TAPES_DIR,
    EVAL_EPISODES.split("/")[0],
    CONFIG_FILE,
    VERL_CONFIG_FILE,
    LEARNING_CURVE,
    VIEW_PAGE,
    SUPERSEDED,  # log records and checkpoints a resume set aside (cut_logs, recover_checkpoints)
    LOGS_DIR,  # the logs of Ray's workers, verl and vLLM (verlog.console)
    TENSORBOARD_DIR,  # the trackers' files (verlog.config.trackers)
    WANDB_DIR,
)
"""What a training run writes at the top of its output_dir (its lock, ``run.lock``, aside): ``--overwrite`` removes
these, and only these."""
RUN_DATA = RUN_OUTPUTS[:5]
"""The outputs that mean a run took place there (a run that failed while starting leaves only its config files)."""


class RunFolder:
    """Every path of one training run's ``output_dir``: the names above joined to ``root``, nothing created.

    Args:
        root: the run's ``output_dir``.
    """

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def __repr__(self) -> str:
        return f"RunFolder({str(self.root)!r})"

    @property
    def lock(self) -> Path:
        """``run.lock``: :class:`RunLock`'s file."""
        return self.root / LOCK_FILE

    @property
    def checkpoints(self) -> Path:
        """``checkpoints/``: verl's checkpoint folders."""
        return self.root / CHECKPOINTS

    @property
    def tracker(self) -> Path:
        """The file naming the latest complete checkpoint."""
        return self.checkpoints / TRACKER

    @property
    def incoming(self) -> Path:
        """Checkpoints being written."""
        return incoming_root(self.checkpoints)

    @property
    def metrics(self) -> Path:
        """One record per iteration (``step``)."""
        return self.root / METRICS_FILE

    @property
    def rollout_log(self) -> Path:
        """Each iteration's episodes and seeds."""
        return self.root / ROLLOUT_LOG

    @property
    def tapes(self) -> Path:
        """``tapes/``: the episode tapes."""
        return self.root / TAPES_DIR

    @property
    def train_tapes(self) -> Path:
        """The training episodes' tapes."""
        return self.root / TRAIN_TAPES

    @property
    def eval_tapes(self) -> Path:
        """The in-training evaluations' tapes."""
        return self.root / EVAL_TAPES

    @property
    def eval_episodes(self) -> Path:
        """Every in-training evaluation episode."""
        return self.root / EVAL_EPISODES

    @property
    def config(self) -> Path:
        """The resolved verlog config."""
        return self.root / CONFIG_FILE

    @property
    def verl_config(self) -> Path:
        """The config handed to verl."""
        return self.root / VERL_CONFIG_FILE

    @property
    def learning_curve(self) -> Path:
        """The learning curve drawn at the end of a run."""
        return self.root / LEARNING_CURVE

    @property
    def superseded(self) -> Path:
        """What a resume set aside."""
        return self.root / SUPERSEDED

    @property
    def logs(self) -> Path:
        """``logs/``: Ray's, verl's and vLLM's logs."""
        return self.root / LOGS_DIR

    @property
    def train_log(self) -> Path:
        """``verlog train``'s own log."""
        return self.root / TRAIN_LOG

    @property
    def tensorboard(self) -> Path:
        """The tensorboard tracker's files."""
        return self.root / TENSORBOARD_DIR

    @property
    def wandb(self) -> Path:
        """The wandb tracker's files."""
        return self.root / WANDB_DIR

    def checkpoint(self, step: int) -> Path:
        """``checkpoints/global_step_<step>``."""
        return step_folder(self.checkpoints, step)

    def latest_step(self) -> int | None:
        """The iteration of the latest complete checkpoint (the tracker's), or None."""
        return latest_step(self.checkpoints)

    def step_logs(self) -> list[tuple[Path, str]]:
        """The run's JSON-lines logs with the key of each record's iteration (:data:`STEP_LOGS`)."""
        return [(self.root / name, key) for name, key in STEP_LOGS]


class RunFolderError(VerlogError):
    """The run folder cannot be used: another live run holds it, or it cannot be written."""


class CheckpointWriteError(RunFault):
    """A checkpoint could not be written or made the latest (a full disk, a folder gone): the previous complete
    checkpoint stays the latest."""


# ------------------------------------------------------------------------------------------------ lock
class RunLock:
    """The exclusive lock of one run folder, held from :meth:`acquire` to :meth:`release` (or the process's end).

    Args:
        folder: the run's ``output_dir`` (created if missing).
    """

    def __init__(self, folder: str | Path) -> None:
        self.path = RunFolder(folder).lock
        self._fd: int | None = None
        self._record: dict[str, Any] = {}  # what acquire wrote into the file

    def acquire(self) -> str | None:
        """Take the lock; returns a line to print when it was left by a run that stopped without releasing it.

        Raises:
            RunFolderError: a live process holds it (named), or the folder cannot be written.
        """
        folder = self.path.parent
        try:
            folder.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise RunFolderError(_unwritable(folder, exc)) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            raise RunFolderError(in_use(folder, holder)) from None
        previous = _read_holder(fd)
        record = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join(sys.argv),
            "released": False,
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(record) + "\n").encode(), 0)
        self._fd, self._record = fd, record
        if previous and not previous.get("released", True):
            return (
                f"output_dir={folder}: took over the lock of a run that stopped without releasing it "
                f"({describe_holder(previous)}; no process holds it now)"
            )
        return None

    def release(self) -> None:
        """Mark the lock released and let it go (idempotent)."""
        if self._fd is None:
            return
        try:
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, (json.dumps({**self._record, "released": True}) + "\n").encode(), 0)
        except OSError:
            pass  # the lock goes with the descriptor anyway
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def lock_holder(folder: str | Path) -> dict[str, Any] | None:
    """The live process holding ``folder``'s lock (its record), or None when no process holds it. Reads only."""
    path = RunFolder(folder).lock
    if not path.is_file():
        return None
    fd = os.open(path, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read_holder(fd) or {}
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def in_use(folder: str | Path, holder: dict[str, Any] | None) -> str:
    """The one-line refusal of a run into ``folder`` while ``holder`` (a live process) holds its lock."""
    return (
        f"output_dir={folder} is in use by another run ({describe_holder(holder)}): wait for it to end or stop it, "
        "or train into another output_dir"
    )


def describe_holder(holder: dict[str, Any] | None) -> str:
    if not holder:
        return "a process that left no record"
    parts = [f"pid {holder.get('pid', '?')}"]
    if holder.get("host"):
        parts.append(f"on {holder['host']}")
    if holder.get("started"):
        parts.append(f"started {holder['started']}")
    if holder.get("command"):
        parts.append(f"`{holder['command']}`")
    return ", ".join(parts)


def _read_holder(fd: int) -> dict[str, Any] | None:
    try:
        data = os.pread(fd, 65536, 0).decode("utf-8", "replace").strip()
        found = json.loads(data) if data else None
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


_WRITABLE_FIX = "give an output_dir you can write to (check its permissions and free space)"


def _unwritable(folder: Path, exc: OSError) -> str:
    return f"output_dir={folder} cannot be written ({describe_os_error(exc)}): {_WRITABLE_FIX}"


def os_error_in(exc: BaseException) -> OSError | None:
    """``exc`` itself or the first ``OSError`` in its cause chain (Ray wraps a worker's error), else None."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, OSError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def describe_os_error(exc: OSError) -> str:
    """``the disk is full``, ``permission denied``, ... or the error's own text."""
    if exc.errno == errno.ENOSPC:
        return "the disk is full"
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return "permission denied" if exc.errno != errno.EROFS else "read-only file system"
    return exc.strerror or type(exc).__name__


def check_writable(folder: str | Path) -> None:
    """Create ``folder`` if needed and write and remove a probe file there.

    Raises:
        RunFolderError: it cannot be created or written (the reason: permissions, a full disk, a file in the way).
    """
    folder = Path(folder)
    for parent in [folder, *folder.parents]:
        if parent.exists():
            if not parent.is_dir():
                raise RunFolderError(f"output_dir={folder}: {parent} is a file, not a folder: {_WRITABLE_FIX}")
            break
    probe = folder / f".write-probe-{os.getpid()}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"ok")
        probe.unlink()
    except OSError as exc:
        raise RunFolderError(_unwritable(folder, exc)) from exc


# ------------------------------------------------------------------------------------------------ checkpoints
def incoming_root(checkpoints: str | Path) -> Path:
    """Where a checkpoint is written before it is complete (``checkpoints/.incoming``)."""
    return Path(checkpoints) / INCOMING


def step_folder(root: str | Path, step: int) -> Path:
    """``<root>/global_step_<step>`` (``root``: ``checkpoints/`` or its ``.incoming/``)."""
    return Path(root) / f"{STEP_PREFIX}{step}"


def latest_step(checkpoints: str | Path) -> int | None:
    """The iteration ``latest_checkpointed_iteration.txt`` names, or None."""
    tracker = Path(checkpoints) / TRACKER
    try:
        return int(tracker.read_text(encoding="utf-8").strip())
    except (OSError, ValueError):
        return None


def missing_files(folder: str | Path, critic: bool | None = None) -> list[str]:
    """What a complete checkpoint folder would hold and ``folder`` lacks (``critic``: None = not checked)."""
    folder = Path(folder)
    need = list(CHECKPOINT_FILES) + (["critic"] if critic else [])
    return [name for name in need if not (folder / name).exists()]


def commit_checkpoint(checkpoints: str | Path, step: int) -> Path:
    """Make the complete checkpoint ``.incoming/global_step_<step>`` the latest: rename it into ``checkpoints/``
    (a folder of that name from an abandoned branch of the run moves to ``superseded/``), then rewrite the tracker.

    Raises:
        RunFolderError: the incoming folder is not complete, or the disk refused the rename or the tracker.
    """
    checkpoints = Path(checkpoints)
    source = step_folder(incoming_root(checkpoints), step)
    lacking = missing_files(source)
    if lacking:
        raise RunFolderError(f"checkpoint {source} is not complete (no {', '.join(lacking)}): it was not made latest")
    target = step_folder(checkpoints, step)
    try:
        if target.exists():
            _move_aside(target, checkpoints.parent)
        os.rename(source, target)
        write_atomically(checkpoints / TRACKER, str(step))
        shutil.rmtree(incoming_root(checkpoints), ignore_errors=True)  # verl's own tracker file, written there too
    except OSError as exc:
        raise CheckpointWriteError(
            f"the checkpoint of iteration {step} could not be made the latest ({describe_os_error(exc)}); the latest "
            f"complete checkpoint is still iteration {latest_step(checkpoints)}: free space (or fix the folder)"
        ) from exc
    return target


def recover_checkpoints(checkpoints: str | Path, critic: bool | None = None) -> list[str]:
    """Before a run starts in a folder a kill may have stopped: remove half-written checkpoints from
    ``.incoming/`` and, if the tracker names a folder that is missing or incomplete (a checkpoint written by a verlog
    without staging), move that folder to ``superseded/`` and point the tracker at the latest complete one.

    Returns: one line per thing done (for the user), empty when there was nothing to do.
    """
    checkpoints = Path(checkpoints)
    lines: list[str] = []
    latest = latest_step(checkpoints)
    incoming = incoming_root(checkpoints)
    if incoming.is_dir():
        for folder in sorted(incoming.glob(f"{STEP_PREFIX}*")):  # (verl also leaves its own tracker file there)
            shutil.rmtree(folder, ignore_errors=True)
            then = (
                f"resuming from the last complete one, global_step_{latest}"
                if latest is not None
                else "no complete checkpoint exists, so this run starts fresh"
            )
            lines.append(
                f"the checkpoint {folder.name} was being written when the run stopped and is incomplete: "
                f"removed; {then}"
            )
        shutil.rmtree(incoming, ignore_errors=True)
    if latest is None:
        return lines
    current = step_folder(checkpoints, latest)
    lacking = ["the folder"] if not current.is_dir() else missing_files(current, critic)
    if not lacking:
        return lines
    complete = [
        step
        for step in _steps(checkpoints)
        if step != latest and not missing_files(step_folder(checkpoints, step), critic)
    ]
    fallback = max(complete) if complete else None
    if current.is_dir():
        moved = _move_aside(current, checkpoints.parent)
        where = f"moved to {moved}"
    else:
        where = "missing"
    if fallback is None:
        (checkpoints / TRACKER).unlink()
        lines.append(
            f"the latest checkpoint global_step_{latest} is incomplete (no {', '.join(lacking)}; {where}) and no "
            "earlier complete checkpoint exists: this run starts fresh"
        )
    else:
        write_atomically(checkpoints / TRACKER, str(fallback))
        lines.append(
            f"the latest checkpoint global_step_{latest} is incomplete (no {', '.join(lacking)}; {where}): "
            f"resuming from the last complete one, global_step_{fallback}"
        )
    return lines


def _steps(checkpoints: Path) -> list[int]:
    out = []
    for p in checkpoints.glob(f"{STEP_PREFIX}*"):
        tail = p.name.removeprefix(STEP_PREFIX)
        if p.is_dir() and tail.isdigit():
            out.append(int(tail))
    return sorted(out)


def _move_aside(path: Path, run_folder: Path) -> Path:
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    target = run_folder / SUPERSEDED / f"{path.name}-{stamp}"
    target.parent.mkdir(parents=True, exist_ok=True)
    os.rename(path, target)
    return target


# ------------------------------------------------------------------------------------------------ logs
def cut_logs(run_folder: str | Path, step: int) -> list[str]:
    """A resume from the checkpoint of iteration ``step``: in each of the run's logs (:data:`STEP_LOGS`), the records
    of later iterations, and torn lines, move to ``superseded/<log path>`` (appended), so the resumed run logs each
    iteration once. Returns one line per log that changed."""
    run = RunFolder(run_folder)
    lines: list[str] = []
    for path, key in run.step_logs():
        if not path.is_file():
            continue
        kept, cut = [], []
        for line in lines_of(path.read_bytes(), path):  # a torn line is never kept where readers expect records
            record = line.value
            later = line.torn or (isinstance(record, dict) and isinstance(record.get(key), int) and record[key] > step)
            (cut if later else kept).append(line.raw)
        if not cut:
            continue
        name = path.relative_to(run.root)
        aside = run.superseded / name
        aside.parent.mkdir(parents=True, exist_ok=True)
        with open(aside, "ab") as f:
            f.write(b"".join(r + b"\n" for r in cut))
        write_atomically(path, b"".join(r + b"\n" for r in kept))
        lines.append(
            f"{name}: {len(cut)} record(s) of iterations after {step} (or torn by the kill) moved to "
            f"{aside.relative_to(run.root)}"
        )
    return lines
