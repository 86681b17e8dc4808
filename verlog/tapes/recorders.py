"""Episode tapes: the per-turn records (:class:`verlog.tapes.record.TurnLog`) that training and evaluation write for a
sample of their episodes, and the helpers both use (the reasoning/action token split, small PNG frames).

Files, under a training run's ``output_dir``:

- ``tapes/train.jsonl``: every turn of ``tapes.episodes_per_iteration`` episodes picked among those that start in each
  iteration's rollout, followed to their end across iterations (:class:`TrainingTapes`), with the policy version,
  ``V(s_t)``, the advantage, the return, the KL to the reference and the per-span sums of :class:`TokenSplit`;
- ``tapes/eval.jsonl``: every turn of the first ``tapes.eval_episodes`` episodes of each in-training evaluation (the
  same seeds every time), episode ids ``eval@<iteration>/<env id>/run_<NN>`` (:class:`EvalTapeWriter`).

and, under a ``verlog play --record DIR`` folder, ``tapes/play.jsonl``: every turn a person played
(:class:`PlayTapeWriter`).

``verlog view RUN_DIR`` turns them into one HTML page (docs/viewer.md); ``verlog sft data.train=DIR`` trains on them
(verlog.sft.tapes, docs/sft.md). Nothing here imports verl.
"""

from __future__ import annotations

import base64
import random
import re
import struct
import traceback
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from verlog.errors import VerlogError
from verlog.run.folder import EVAL_TAPES as EVAL_TAPES
from verlog.run.folder import TAPES_DIR as TAPES_DIR
from verlog.run.folder import TRAIN_TAPES as TRAIN_TAPES
from verlog.run.folder import RunFolder
from verlog.tapes.record import LogProbStats, SpanStats, TokenSplit, TurnLog, TurnLogWriter

PLAY_TAPES = f"{TAPES_DIR}/play.jsonl"

# The last "action:" marker in any case, with markdown emphasis before the colon ("ACTION:", "**Action:**"): the
# lenient parser's marker (envs/actions.py), which also finds the strict parser's case-sensitive "ACTION:".
_ACTION_MARKER = re.compile(r"(?<![a-z])action[\s*_`]*:", re.IGNORECASE)

# The keyword that makes each env family put an RGB frame into its observations (TextObservation.image).
FRAME_KWARGS = {"babyai": "render_image", "crafter": "render_image", "babaisai": "include_image"}


class TapeConfigError(VerlogError, ValueError):
    """A ``tapes.*`` setting out of range."""


class TapeRowsError(VerlogError, RuntimeError):
    """The trained batch holds rows that are not in the rollout the tapes are written from: their turns would be
    lost (verlog.trainer.advantage_step.record_tapes)."""


# ---------------------------------------------------------------------------------------------- settings
@dataclass
class TapesConfig:
    """Episode tapes for ``verlog view``: the training config's ``tapes`` section (the trainer hands this module the
    typed section; a saved config without one gets these defaults from :func:`verlog.config.checks.typed_config`).

    Attributes:
        episodes_per_iteration: training episodes newly taped per iteration; 0 = none.
        eval_episodes: episodes taped per in-training evaluation, the first ones of its seeds; 0 = none.
        frames: also store each taped turn's env frame (a PNG); switches on the env's image rendering.
        frame_size: longest side of a stored frame in pixels (larger frames are shrunk by an integer factor).
    """

    episodes_per_iteration: int = 4
    eval_episodes: int = 4
    frames: bool = False
    frame_size: int = 128

    def check(self) -> None:
        if self.episodes_per_iteration < 0:
            raise TapeConfigError(
                f"tapes.episodes_per_iteration must be >= 0 (0: no training tapes), got {self.episodes_per_iteration}"
            )
        if self.eval_episodes < 0:
            raise TapeConfigError(
                f"tapes.eval_episodes must be >= 0 (0: no evaluation tapes), got {self.eval_episodes}"
            )
        if self.frame_size < 8:
            raise TapeConfigError(f"tapes.frame_size must be >= 8 pixels, got {self.frame_size}")


def frame_env_kwargs(env_id: str, env_kwargs: dict[str, Any]) -> dict[str, Any]:
    """``env_kwargs`` with the env family's image switch on (BabyAI, Crafter: ``render_image``; BabaIsAI:
    ``include_image``); other envs unchanged (their frames show when their observations carry an image)."""
    key = FRAME_KWARGS.get(env_id.split("/", 1)[0])
    out = dict(env_kwargs)
    if key is not None and key not in out:
        out[key] = True
    return out


# ---------------------------------------------------------------------------------------------- responses
def action_offset(text: str) -> int | None:
    """Character offset of the last ``ACTION:`` marker (any case, markdown allowed) in ``text``, or None."""
    last = None
    for match in _ACTION_MARKER.finditer(text):
        last = match
    return None if last is None else last.start()


def split_response(text: str) -> tuple[str, str]:
    """(thought, action part) of a response: the text before its last ``ACTION:`` marker and the rest; a response
    without a marker is all thought."""
    offset = action_offset(text)
    if offset is None:
        return text, ""
    return text[:offset], text[offset:]


def action_token_start(tokenizer: Any, token_ids: Sequence[int], text: str | None = None) -> int:
    """Index of the token that holds the first character of the last ``ACTION:`` marker of the decoded response
    (``len(token_ids)`` when there is no marker): tokens before it are reasoning, the rest the action."""
    ids = list(token_ids)
    if text is None:
        text = tokenizer.decode(ids, skip_special_tokens=True)
    offset = action_offset(text)
    if offset is None or not ids:
        return len(ids)
    # smallest k whose decoded prefix reaches past the offset; that prefix's last token holds the marker
    low, high = 1, len(ids)
    while low < high:
        mid = (low + high) // 2
        if len(tokenizer.decode(ids[:mid], skip_special_tokens=True)) > offset:
            high = mid
        else:
            low = mid + 1
    return low - 1


def _span_sum(values: Any, start: int, stop: int) -> float | None:
    if values is None:
        return None
    part = values[start:stop]
    return float(sum(float(x) for x in part)) if len(part) else 0.0


def token_split(
    action_start: int,
    n_tokens: int,
    *,
    logprobs: Sequence[float] | None = None,
    kl: Sequence[float] | None = None,
    entropy: Sequence[float] | None = None,
) -> TokenSplit:
    """Per-span sums of per-token ``logprobs``, ``kl`` and ``entropy`` (each a sequence over the response's tokens,
    None when not available) for tokens ``[0, action_start)`` and ``[action_start, n_tokens)``."""
    cut = max(0, min(action_start, n_tokens))

    def span(a: int, b: int) -> SpanStats:
        return SpanStats(
            tokens=b - a,
            logprob_sum=_span_sum(logprobs, a, b),
            kl_sum=_span_sum(kl, a, b),
            entropy_sum=_span_sum(entropy, a, b),
        )

    return TokenSplit(action_start=cut, reasoning=span(0, cut), action=span(cut, n_tokens))


# ---------------------------------------------------------------------------------------------- frames
def encode_png(image: np.ndarray) -> bytes:
    """An ``[H, W, 3]`` (or ``[H, W]``) uint8 array as PNG bytes (8-bit RGB or grey, no filter, zlib level 9)."""
    arr = np.asarray(image)
    if arr.dtype != np.uint8:
        arr = np.clip(arr, 0, 255).astype(np.uint8)
    if arr.ndim == 3 and arr.shape[2] == 4:
        arr = arr[:, :, :3]
    if arr.ndim == 2:
        colour = 0
    elif arr.ndim == 3 and arr.shape[2] == 3:
        colour = 2
    else:
        raise ValueError(f"a frame is an [H, W, 3] or [H, W] array, got shape {arr.shape}")
    height, width = arr.shape[:2]
    raw = b"".join(b"\x00" + arr[y].tobytes() for y in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, colour, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")


def shrink(image: np.ndarray, max_side: int) -> np.ndarray:
    """``image`` shrunk by the smallest integer factor that brings its longest side to ``max_side`` or less
    (block averages)."""
    arr = np.asarray(image)
    factor = -(-max(arr.shape[0], arr.shape[1]) // max_side)
    if factor <= 1:
        return arr
    h, w = (arr.shape[0] // factor) * factor, (arr.shape[1] // factor) * factor
    blocks = arr[:h, :w].reshape(h // factor, factor, w // factor, factor, *arr.shape[2:]).astype(np.float32)
    return blocks.mean(axis=(1, 3)).round().astype(np.uint8)


def encode_frame(image: Any, max_side: int = 128) -> str | None:
    """A frame for a tape: the base64 PNG of ``image`` shrunk to ``max_side`` (None for None or a bad array)."""
    if image is None:
        return None
    try:
        return base64.b64encode(encode_png(shrink(np.asarray(image), max_side))).decode("ascii")
    except (ValueError, TypeError):
        return None


# ---------------------------------------------------------------------------------------------- training
def _first(x: Any, i: int) -> float:
    return float(x[i, 0])


class TrainingTapes:
    """Writes ``tapes/train.jsonl`` for a sample of training episodes (see the module docstring).

    Each iteration, up to ``episodes_per_iteration`` of the episodes whose first turn is in the rollout are picked
    (a seeded draw); a picked episode is taped at every later iteration until its last turn. A resumed run starts a
    fresh pick (episodes taped before the checkpoint are not continued).

    Args:
        output_dir: the run's folder (the file goes to ``<output_dir>/tapes/train.jsonl``, appended to).
        settings: the ``tapes`` settings.
        tokenizer: the policy's tokenizer (to find the action tokens).
        env_id: the env id written into the records.
        parse_mode: the env's parse mode (for ``parsed_action``).
        seed: seed of the episode draw.
    """

    def __init__(
        self,
        output_dir: str | Path,
        settings: TapesConfig,
        tokenizer: Any,
        *,
        env_id: str,
        parse_mode: str = "strict",
        seed: int = 0,
    ) -> None:
        settings.check()
        self.path = RunFolder(output_dir).train_tapes
        self.settings = settings
        self.tokenizer = tokenizer
        self.env_id = env_id
        self.parse_mode = parse_mode
        self.seed = seed
        self.taped: set[str] = set()
        self.turns_written = 0

    @property
    def enabled(self) -> bool:
        return self.settings.episodes_per_iteration > 0

    def pick(self, rows: Sequence[Any], iteration: int) -> set[str]:
        """Add up to ``episodes_per_iteration`` episodes that start in ``rows`` to the taped ones; returns them all."""
        starting = sorted({r.episode_id for r in rows if int(r.turn_index) == 0} - self.taped)
        k = min(self.settings.episodes_per_iteration, len(starting))
        if k:
            self.taped.update(random.Random(f"{self.seed}:{iteration}").sample(starting, k))
        return set(self.taped)

    def record(
        self,
        rows: Sequence[Any],
        tensors: dict[str, Any],
        iteration: int,
    ) -> int:
        """Write the taped episodes' turns of one iteration; returns how many turns were written.

        Args:
            rows: the iteration's :class:`~verlog.rollout.batch.TurnRow` objects in the order of the tensors' rows.
            tensors: per-row ``[B, R]`` tensors: ``response_mask`` (required), ``values``, ``advantages``,
                ``returns``, ``advantages_raw``, ``old_log_probs``, ``ref_log_prob``, ``entropys``,
                ``token_level_rewards``, and ``next_values`` (``[B]``: the bootstrap values) (each may be None or
                absent, e.g. ``values`` without a critic; what is absent is written as None).
            iteration: the training iteration (metrics.jsonl's ``step``).
        """
        if not self.enabled or not rows:
            return 0
        taped = self.pick(rows, iteration)
        chosen = [i for i, r in enumerate(rows) if r.episode_id in taped]
        if not chosen:
            return 0
        chosen.sort(key=lambda i: (int(rows[i].slot), int(rows[i].turn_index)))
        cpu = {k: (v.detach().float().cpu() if v is not None else None) for k, v in tensors.items()}
        written = 0
        with TurnLogWriter(self.path, append=True) as writer:
            for i in chosen:
                writer.write(self._turn(rows[i], i, cpu, iteration))
                written += 1
        for i in chosen:
            if rows[i].terminated or rows[i].truncated:
                self.taped.discard(rows[i].episode_id)
        self.turns_written += written
        return written

    def _turn(self, row: Any, i: int, t: dict[str, Any], iteration: int) -> TurnLog:
        from envs import actions as action_parsing

        mask = t["response_mask"][i]
        n = int(mask.sum())
        ids = list(row.response_ids)[:n]
        text = row.response_text
        start = action_token_start(self.tokenizer, ids, text)
        old, ref, ent = t.get("old_log_probs"), t.get("ref_log_prob"), t.get("entropys")
        rollout_lp = row.response_logprobs
        lp = old[i, :n].tolist() if old is not None else (list(rollout_lp)[:n] if rollout_lp else None)
        kl = (old[i, :n] - ref[i, :n]).tolist() if old is not None and ref is not None else None
        entropy = ent[i, :n].tolist() if ent is not None else None
        split = token_split(start, n, logprobs=lp, kl=kl, entropy=entropy)

        def first(key: str) -> float | None:  # the tensor's value at the first response token (None: absent)
            x = t.get(key)
            return _first(x, i) if (x is not None and n) else None

        frame = encode_frame(row.frame, self.settings.frame_size) if self.settings.frames else None
        return TurnLog(
            episode_id=str(row.episode_id),
            turn=int(row.turn_index),
            env_id=self.env_id,
            seed=row.seed,
            response=text,
            parsed_action=action_parsing.extract(text, self.parse_mode),  # type: ignore[arg-type]
            action=row.action,
            action_valid=bool(row.action_valid),
            reward=float(row.reward),
            terminated=bool(row.terminated),
            truncated=bool(row.truncated),
            value=first("values"),
            advantage=first("advantages"),
            logprobs=LogProbStats.of(rollout_lp[:n] if rollout_lp else None),
            prompt_tokens=len(row.prompt_ids),
            response_tokens=n,
            extra={"env_error": row.env_error} if row.env_error else {},
            source="train",
            iteration=int(iteration),
            observation=row.observation,
            success=row.success,
            gae_return=first("returns"),
            advantage_raw=first("advantages_raw"),
            kl_ref=float(sum(kl)) if kl is not None else None,
            token_split=split,
            memory_turns=row.memory_turns,
            frame=frame,
            next_value=self._next_value(row, i, t),
            turn_reward=self._turn_reward(i, n, t),
        )

    @staticmethod
    def _turn_reward(i: int, n: int, t: dict[str, Any]) -> float | None:
        """The sum of row ``i``'s token-level rewards over its ``n`` response tokens (None: not given)."""
        x = t.get("token_level_rewards")
        return None if x is None else float(x[i, :n].sum())

    @staticmethod
    def _next_value(row: Any, i: int, t: dict[str, Any]) -> float | None:
        """The bootstrap value of a row whose episode goes on past the batch (it has a bootstrap prompt), else None."""
        x = t.get("next_values")
        if x is None or not getattr(row, "bootstrap_prompt_ids", None):
            return None
        return float(x[i])


def record_training_tapes(tapes: TrainingTapes | None, rows: Sequence[Any], tensors: dict[str, Any], step: int) -> int:
    """:meth:`TrainingTapes.record`, where a failure is printed and training goes on (tapes are diagnostics)."""
    if tapes is None or not tapes.enabled:
        return 0
    try:
        return tapes.record(rows, tensors, step)
    except Exception as exc:  # a tape must never end a training run
        traceback.print_exc()
        print(f"[verlog] writing the tapes of iteration {step} failed ({type(exc).__name__}: {exc})", flush=True)
        return 0


# ---------------------------------------------------------------------------------------------- evaluation
class EvalTapeWriter(TurnLogWriter):
    """The turn log of one in-training evaluation: only the ``episode_ids`` given, renamed
    ``eval@<iteration>/<episode id>`` (each evaluation replays the same seeds), tagged ``source="eval"`` and the
    iteration, without the prompt messages (the observation and the response are kept); appends to
    ``tapes/eval.jsonl``."""

    def __init__(self, output_dir: str | Path, iteration: int, episode_ids: Iterable[str]) -> None:
        super().__init__(Path(output_dir) / EVAL_TAPES, append=True)
        self.iteration = int(iteration)
        self.episode_ids = set(episode_ids)

    def wants(self, episode_id: str) -> bool:
        return episode_id in self.episode_ids

    def write(self, record: TurnLog) -> None:
        if not self.wants(record.episode_id):
            return
        super().write(
            replace(
                record,
                episode_id=f"eval@{self.iteration}/{record.episode_id}",
                source="eval",
                iteration=self.iteration,
                prompt_messages=[],
            )
        )


# ---------------------------------------------------------------------------------------------- play
class PlayTapeWriter(TurnLogWriter):
    """``verlog play --record DIR``: every turn a person plays, appended to ``DIR/tapes/play.jsonl``, tagged
    ``source="play"``, with the prompt messages; each episode's first turn keeps the env keyword arguments in
    ``extra["env_kwargs"]`` (the episode is replayed with them when it becomes SFT data).

    Args:
        folder: the recording folder.
        env_id: the env played.
        env_kwargs: its keyword arguments (``--env-arg``, ``--parse-mode``).
        parse_mode: the env's parse mode (for ``parsed_action``).
    """

    def __init__(self, folder: str | Path, env_id: str, env_kwargs: dict[str, Any], parse_mode: str = "strict") -> None:
        super().__init__(Path(folder) / PLAY_TAPES, append=True)
        self.env_id = env_id
        self.env_kwargs = dict(env_kwargs)
        self.parse_mode = parse_mode

    def record(self, stepped: Any) -> None:
        """Write one played turn (a :class:`verlog.rollout.stepper.Stepped`)."""
        from envs import actions as action_parsing

        row = stepped.row
        extra: dict[str, Any] = {"env_kwargs": self.env_kwargs} if int(row.turn_index) == 0 else {}
        if row.env_error:
            extra["env_error"] = row.env_error
        progression = stepped.info.get("progression")
        self.write(
            TurnLog(
                episode_id=str(row.episode_id),
                turn=int(row.turn_index),
                env_id=self.env_id,
                seed=row.seed,
                prompt_messages=list(stepped.prompt.messages),
                response=row.response_text,
                parsed_action=action_parsing.extract(row.response_text, self.parse_mode),  # type: ignore[arg-type]
                action=row.action,
                action_valid=bool(row.action_valid),
                reward=float(row.reward),
                terminated=bool(row.terminated),
                truncated=bool(row.truncated),
                progression=None if progression is None else float(progression),
                extra=extra,
                source="play",
                observation=row.observation,
                success=bool(row.success) if stepped.episode is not None else None,
                memory_turns=row.memory_turns,
            )
        )
