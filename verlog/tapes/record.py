"""Episode logs ("tapes"): JSONL files with one record per agent turn, written by evaluation and by training.

One line is one :class:`TurnLog`: the observation and prompt the model saw, its full output, the answer the env's
parser read and the action executed, whether it was valid, the reward, how the episode stood after the step, and,
when training writes it, the policy version (iteration), the critic's value ``V(s_t)``, the advantage and the return of
the turn, the KL to the reference policy, and log-probability, KL and entropy sums split between the reasoning tokens
and the action tokens (:class:`TokenSplit`); optionally a small PNG frame of the env. docs/viewer.md lists the fields.

Lines carry ``"format": "verlog.turnlog/<version>"`` (the schema version, :data:`SCHEMA_VERSION`). Readers load every
version up to theirs (version 1 lacks the fields added in 2, which read as their defaults) and refuse a newer one, or
another format, with a message naming the file, the line and the fix.

API::

    with TurnLogWriter(path) as log:          # append=True continues an existing file
        log.write(TurnLog(episode_id="babyai/goto/run_00", turn=0, ...))
    turns = read_turn_logs(path)               # list[TurnLog], file order
    by_episode = group_episodes(turns)         # {episode_id: [TurnLog, ...] sorted by turn}
"""

from __future__ import annotations

import functools
import json
import math
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from verlog.errors import VerlogError
from verlog.run.files import JsonLinesError, json_lines

SCHEMA_VERSION = 3
"""Version of the turn-record schema this verlog writes. 1: evaluation's records (verlog eval --log-turns); 2: adds
source, iteration, observation, success, gae_return, advantage_raw, kl_ref, token_split, memory_turns, frame; 3: adds
next_value and turn_reward."""
FORMAT_PREFIX = "verlog.turnlog/"
LOG_FORMAT = f"{FORMAT_PREFIX}{SCHEMA_VERSION}"


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


@dataclass(frozen=True)
class SpanStats:
    """Sums over one span of a response's tokens (None where the quantity was not available).

    Attributes:
        tokens: number of tokens in the span.
        logprob_sum: sum of the tokens' log-probabilities under the policy that sampled them.
        kl_sum: sum over the tokens of ``log pi(a) - log pi_ref(a)`` (verl's ``kl`` estimator, the one its KL-in-reward
            penalty uses by default) against the reference policy.
        entropy_sum: sum of the policy's entropy at each token position (the whole next-token distribution).
    """

    tokens: int
    logprob_sum: float | None = None
    kl_sum: float | None = None
    entropy_sum: float | None = None


@dataclass(frozen=True)
class TokenSplit:
    """A response split at its last ``ACTION:`` marker: reasoning tokens before it, action tokens from it on.

    Attributes:
        action_start: index of the first action token (the token holding the marker's first character); the number
            of response tokens when the response has no marker (then every token counts as reasoning).
        reasoning: sums over tokens ``[0, action_start)``.
        action: sums over tokens ``[action_start, n)``.
    """

    action_start: int
    reasoning: SpanStats
    action: SpanStats

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TokenSplit:
        return cls(
            action_start=int(data["action_start"]),
            reasoning=SpanStats(**data["reasoning"]),
            action=SpanStats(**data["action"]),
        )


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
        source: who wrote the record: ``train`` (a training rollout), ``eval`` (an evaluation), or empty.
        iteration: the policy version: the training iteration (``step`` of metrics.jsonl) whose rollout this turn
            belongs to (its policy had ``iteration - 1`` updates), or after which an evaluation ran (0: before
            training); None for a standalone evaluation.
        observation: the current observation as shown to the model this turn.
        success: the env's success flag, on an episode's last turn (None on other turns).
        gae_return: the return target of the turn's first response token (training).
        advantage_raw: the advantage of the first response token before whitening (training; ``advantage`` is the
            one the actor used, after whitening).
        kl_ref: sum over the response tokens of ``log pi - log pi_ref`` (training with a reference policy).
        token_split: log-prob, KL and entropy sums of the reasoning and of the action tokens.
        memory_turns: past turns the prompt held (the sliding memory's, after the token budget).
        frame: the env's frame of the observation, a base64 PNG (optional).
        next_value: the bootstrap value ``V(s_{t+1})`` the advantage used for this turn (training: the last turn of an
            episode in its iteration that did not terminate, e.g. at the iteration boundary; else None).
        turn_reward: the sum of the turn's token-level rewards the advantage used (training: the env reward plus the
            per-token KL penalty when ``algorithm.kl_in_reward``).
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
    source: str = ""
    iteration: int | None = None
    observation: str = ""
    success: bool | None = None
    gae_return: float | None = None
    advantage_raw: float | None = None
    kl_ref: float | None = None
    token_split: TokenSplit | None = None
    memory_turns: int | None = None
    frame: str | None = field(default=None, repr=False)
    next_value: float | None = None
    turn_reward: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict, with the format marker first."""
        return {"format": LOG_FORMAT, **asdict(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TurnLog:
        """Rebuild a record written by :meth:`to_dict` (any schema version up to :data:`SCHEMA_VERSION`); unknown
        keys go into ``extra``."""
        if not isinstance(data, dict):
            raise TurnLogError(f"a turn record is a JSON object, got {type(data).__name__}")
        schema_version(data.get("format"))
        names = _field_names(cls)
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
        split = kwargs.get("token_split")
        if split is not None:
            try:
                kwargs["token_split"] = TokenSplit.from_dict(split)
            except (KeyError, TypeError, ValueError) as exc:
                raise TurnLogError(f"malformed token_split field {split!r}: {exc!r}") from exc
        return cls(**kwargs)


@functools.cache
def _field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in fields(cls))


def schema_version(found: Any) -> int:
    """The schema version of a record's ``format`` value.

    Raises:
        TurnLogError: not a verlog turn record, or one written by a newer verlog (the message says to upgrade).
    """
    if not isinstance(found, str) or not found.startswith(FORMAT_PREFIX):
        raise TurnLogError(f"not a verlog turn record (format {found!r}, expected {LOG_FORMAT!r})")
    try:
        version = int(found[len(FORMAT_PREFIX) :])
    except ValueError:
        raise TurnLogError(f"not a verlog turn record (format {found!r}, expected {LOG_FORMAT!r})") from None
    if version < 1:
        raise TurnLogError(f"not a verlog turn record (format {found!r}, expected {LOG_FORMAT!r})")
    if version > SCHEMA_VERSION:
        raise TurnLogError(
            f"written by a newer verlog (turn-record schema version {version}); this verlog reads versions 1 to "
            f"{SCHEMA_VERSION}: upgrade verlog to read it"
        )
    return version


class TurnLogWriter:
    """Writes :class:`TurnLog` records to a JSONL file, one line each, flushed per record.

    Args:
        path: the file (its folder is created).
        append: continue an existing file instead of starting it anew.
    """

    def __init__(self, path: str | Path, append: bool = False) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # unbuffered bytes: each record is one write() of a whole line, so a kill tears at most the line being written
        self._file: IO[bytes] | None = self.path.open("ab" if append else "wb", buffering=0)
        self.count = 0

    def wants(self, episode_id: str) -> bool:
        """Whether :meth:`write` keeps the records of ``episode_id`` (a writer that samples episodes says no to the
        others, so callers can skip building their records)."""
        return True

    def write(self, record: TurnLog) -> None:
        if self._file is None:
            raise TurnLogError(f"the turn log {self.path} is closed: open a new TurnLogWriter(append=True)")
        data = (json.dumps(record.to_dict(), ensure_ascii=False) + "\n").encode("utf-8")
        while data:
            data = data[self._file.write(data) or 0 :]
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
    """The records of a turn-log file in file order (blank lines skipped). A torn last line (no newline and not
    JSON: the writer was killed while writing it) is skipped with a warning on stderr (:mod:`verlog.run.files`' rule).

    Raises:
        TurnLogError: a line is not JSON or not a turn record; the message names the file and line.
    """
    try:
        for number, value in json_lines(path, on_torn=lambda torn: print(f"[verlog] {torn}", file=sys.stderr)):
            try:
                yield TurnLog.from_dict(value)
            except TurnLogError as exc:
                raise TurnLogError(f"{path}:{number}: {exc}") from exc
    except JsonLinesError as exc:
        raise TurnLogError(f"{exc}; was the writer interrupted?") from exc


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
