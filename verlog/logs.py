"""Episode logs: JSONL files with one record per agent turn, written by evaluation and usable by training.

One line is one :class:`TurnLog`: the prompt messages the model saw, its response, the action the env's parser read
and the one executed, whether it was valid, the reward, how the episode stood after the step, and, when training
writes it, the critic's value and the advantage of the turn; log-probability statistics of the response and timings.
Lines carry ``"format": "verlog.turnlog/1"`` so that readers can refuse files they do not understand.

API::

    with TurnLogWriter(path) as log:          # append=True continues an existing file
        log.write(TurnLog(episode_id="babyai/goto/run_00", turn=0, ...))
    turns = read_turn_logs(path)               # list[TurnLog], file order
    by_episode = group_episodes(turns)         # {episode_id: [TurnLog, ...] sorted by turn}
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from verlog.errors import VerlogError

LOG_FORMAT = "verlog.turnlog/1"


class TurnLogError(VerlogError, ValueError):
    """A turn-log file or record that cannot be read (bad JSON, other format, missing fields)."""


@dataclass(frozen=True)
class LogProbStats:
    """Summary of a response's per-token log-probabilities under the sampling policy."""

    n: int
    sum: float
    mean: float
    min: float

    @classmethod
    def of(cls, log_probs: Sequence[float] | None) -> LogProbStats | None:
        """Statistics of ``log_probs`` (None for None or an empty list)."""
        if not log_probs:
            return None
        values = [float(x) for x in log_probs]
        total = math.fsum(values)
        return cls(n=len(values), sum=total, mean=total / len(values), min=min(values))


@dataclass
class TurnLog:
    """One agent turn.

    Attributes:
        episode_id: names the episode (evaluation: ``<env id>/run_<NN>``; training: the rollout's episode id).
        turn: index of the turn in its episode (0 = first action).
        env_id: the registered env id.
        seed: the seed the episode was reset with, when known.
        prompt_messages: the chat messages of the prompt (role, content).
        response: the model's text.
        parsed_action: the answer the env's parser read out of the response (valid or not).
        action: the action the env executed (the default action when the answer was invalid).
        action_valid: whether the response named a valid action.
        reward: the env's reward for this step.
        terminated: the episode reached a terminal state at this step.
        truncated: the episode was cut at this step (step limit or failure).
        progression: BALROG's progression after this step, in [0, 1].
        value: the critic's value V(s_t) of the prompt (training), or None.
        advantage: the turn's advantage (training; e.g. at the first response token), or None.
        logprobs: statistics of the response's token log-probabilities, or None.
        prompt_tokens: length of the prompt in tokens.
        response_tokens: length of the response in tokens.
        timings: seconds spent, by stage (e.g. ``generate_s``, ``env_s``).
        extra: anything else (kept on reading, including fields a newer writer added).
    """

    episode_id: str
    turn: int
    env_id: str = ""
    seed: int | None = None
    prompt_messages: list[dict[str, str]] = field(default_factory=list)
    response: str = ""
    parsed_action: str = ""
    action: str = ""
    action_valid: bool = True
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    progression: float | None = None
    value: float | None = None
    advantage: float | None = None
    logprobs: LogProbStats | None = None
    prompt_tokens: int | None = None
    response_tokens: int | None = None
    timings: dict[str, float] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict, with the format marker first."""
        return {"format": LOG_FORMAT, **asdict(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TurnLog:
        """Rebuild a record written by :meth:`to_dict`; unknown keys go into ``extra``."""
        if not isinstance(data, dict):
            raise TurnLogError(f"a turn record is a JSON object, got {type(data).__name__}")
        found = data.get("format")
        if found != LOG_FORMAT:
            raise TurnLogError(f"not a verlog turn record (format {found!r}, expected {LOG_FORMAT!r})")
        names = {f.name for f in fields(cls)}
        missing = [n for n in ("episode_id", "turn") if n not in data]
        if missing:
            raise TurnLogError(f"turn record lacks required field(s) {missing}")
        kwargs = {k: v for k, v in data.items() if k in names}
        unknown = {k: v for k, v in data.items() if k not in names and k != "format"}
        if unknown:
            kwargs["extra"] = {**kwargs.get("extra", {}), **unknown}
        stats = kwargs.get("logprobs")
        if stats is not None:
            try:
                kwargs["logprobs"] = LogProbStats(**stats)
            except TypeError as exc:
                raise TurnLogError(f"malformed logprobs field {stats!r}: {exc}") from exc
        return cls(**kwargs)


class TurnLogWriter:
    """Writes :class:`TurnLog` records to a JSONL file, one line each, flushed per record.

    Args:
        path: the file (its folder is created).
        append: continue an existing file instead of starting it anew.
    """

    def __init__(self, path: str | Path, append: bool = False) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[str] | None = self.path.open("a" if append else "w", encoding="utf-8")
        self.count = 0

    def write(self, record: TurnLog) -> None:
        if self._file is None:
            raise TurnLogError(f"the turn log {self.path} is closed: open a new TurnLogWriter(append=True)")
        self._file.write(json.dumps(record.to_dict(), ensure_ascii=False) + "\n")
        self._file.flush()
        self.count += 1

    def write_all(self, records: Iterable[TurnLog]) -> None:
        for record in records:
            self.write(record)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> TurnLogWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def iter_turn_logs(path: str | Path) -> Iterator[TurnLog]:
    """The records of a turn-log file in file order (blank lines skipped).

    Raises:
        TurnLogError: a line is not JSON or not a turn record; the message names the file and line.
    """
    with Path(path).open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                yield TurnLog.from_dict(json.loads(line))
            except json.JSONDecodeError as exc:
                raise TurnLogError(f"{path}:{number}: not valid JSON ({exc.msg}); was the writer interrupted?") from exc
            except TurnLogError as exc:
                raise TurnLogError(f"{path}:{number}: {exc}") from exc


def read_turn_logs(path: str | Path) -> list[TurnLog]:
    """Every record of a turn-log file, in file order."""
    return list(iter_turn_logs(path))


def group_episodes(records: Iterable[TurnLog]) -> dict[str, list[TurnLog]]:
    """Records by episode id (in order of first appearance), each episode's turns sorted by turn index."""
    out: dict[str, list[TurnLog]] = {}
    for record in records:
        out.setdefault(record.episode_id, []).append(record)
    for turns in out.values():
        turns.sort(key=lambda r: r.turn)
    return out
