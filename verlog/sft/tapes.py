"""Tapes as SFT data: the episodes of a training run's, an evaluation's or a person's tapes, filtered, replayed with
the memory settings of the run that will train, written as SFT rows (docs/sft.md, "Tapes as SFT data").

A tape keeps what each turn showed and answered, not the prompt the next run will build: training tapes hold the
observation alone, and a prompt depends on the memory settings (past turns, reasoning kept, answer format, token
budget) of the run that trains on the result. So each kept episode is *replayed*: its env is reset with the tape's
seed and stepped by the rollout's own loop (:class:`verlog.rollout.stepper.EpisodeStepper`) with a
:class:`~verlog.prompting.memory.SlidingMemory` of those settings and the tape's answers as the policy. Every prompt is
then the rollout's for the same answers, token for token. Each replayed turn must show the taped observation, execute
the taped action and give the taped reward, so tapes replayed with other env settings are refused, not turned into wrong
rows.

Two stages, so that a bad selection is refused before any model loads: :func:`select_episodes` (read the tapes, keep
the finished episodes that pass the filters) and :func:`write_tape_rows` (replay them, write ``train.parquet``,
``val.parquet`` and the manifest ``tapes.json``).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from verlog.errors import PromptTooLongError
from verlog.eval.report import SUMMARY_FILE, TURNS_FILE
from verlog.prompting.memory import SlidingMemory
from verlog.rollout.stepper import EpisodeStepper, LocalEnv, PolicyInput, TextPolicy
from verlog.run.folder import CONFIG_FILE
from verlog.sft.config import SFTDataError, SFTTapesConfig
from verlog.tapes.record import TurnLog, TurnLogError, group_episodes, iter_turn_logs
from verlog.tapes.recorders import EVAL_TAPES, PLAY_TAPES, TRAIN_TAPES, action_offset

TAPE_FILES = (TRAIN_TAPES, EVAL_TAPES, PLAY_TAPES, TURNS_FILE)
"""The tape files a folder may hold: a training run's (training and in-training evaluation tapes), a ``verlog play
--record`` folder's, a ``verlog eval --log-turns`` folder's."""
RUN_CONFIG = CONFIG_FILE
MANIFEST = "tapes.json"
FORMAT = "verlog.sft-tapes/1"
TRAIN_FILE = "train.parquet"
VAL_FILE = "val.parquet"


# ------------------------------------------------------------------------------------------------ reading
@dataclass
class TapeEpisode:
    """One taped episode and the env settings it was played with.

    Attributes:
        episode_id: the tape's episode id.
        env_id: the env it was played on.
        seed: the seed its env was reset with (None: unknown, it cannot be replayed).
        turns: its turn records, sorted by turn.
        file: the tape file it comes from.
        env_kwargs: the env keyword arguments it was played with; ``settings_from`` says where they were read.
        problem: why it cannot be replayed (unfinished, no seed, an env error...), or None.
    """

    episode_id: str
    env_id: str
    seed: int | None
    turns: list[TurnLog]
    file: str
    env_kwargs: dict[str, Any]
    settings_from: str
    problem: str | None = None

    @property
    def ret(self) -> float:
        return math.fsum(t.reward for t in self.turns)

    @property
    def success(self) -> bool:
        return bool(self.turns[-1].success)

    @property
    def iteration(self) -> int | None:
        """The iteration the episode started in (training tapes) or after which it was evaluated; None: none."""
        return self.turns[0].iteration


@dataclass
class TapeSelection:
    """The episodes :func:`select_episodes` kept, and how many each filter left out (in filter order)."""

    source: str
    files: list[str]
    episodes: list[TapeEpisode]
    counts: dict[str, int]
    imports: list[str] = field(default_factory=list)

    def texts(self) -> list[str]:
        """Every observation, response and prompt message of the kept episodes (a tokenizer corpus)."""
        out = []
        for episode in self.episodes:
            for t in episode.turns:
                out += [t.observation, t.response, *(m.get("content", "") for m in t.prompt_messages)]
        return [text for text in out if text]


def is_tapes(path: str | Path) -> bool:
    """Whether ``path`` is tapes: a ``.jsonl`` file, or a folder with a tape file (:data:`TAPE_FILES`) and no
    train.parquet (a demos folder)."""
    p = Path(path)
    if p.is_file():
        return p.suffix == ".jsonl"
    return p.is_dir() and not (p / TRAIN_FILE).is_file() and any((p / name).is_file() for name in TAPE_FILES)


def tape_files(path: str | Path) -> list[Path]:
    """The tape files of ``path`` (a tape file, or a folder's :data:`TAPE_FILES`)."""
    p = Path(path)
    return [p] if p.is_file() else [p / name for name in TAPE_FILES if (p / name).is_file()]


@dataclass
class _FileSettings:
    """The env settings of one tape file's episodes, read from the folder that holds it."""

    kwargs: dict[str, Any]
    by_env_id: dict[str, dict[str, Any]]  # multi-task runs: a family's env id -> its kwargs
    imports: list[str]
    where: str
    multi_task_training: bool = False  # a multi-task run's training tapes: the task of an episode is not recorded


def _file_settings(file: Path) -> _FileSettings:
    """Where the env settings of ``file`` come from: a run's config.yaml, an evaluation's summary.json, or none (a
    recording keeps them in each episode's first turn)."""
    in_run = f"{file.parent.name}/{file.name}"  # tapes/train.jsonl, tapes/eval.jsonl in a training run's folder
    if in_run in (TRAIN_TAPES, EVAL_TAPES):
        config = file.parent.parent / RUN_CONFIG
        if config.is_file():
            return _run_settings(config, training=in_run == TRAIN_TAPES)
    if file.name == TURNS_FILE and (file.parent / SUMMARY_FILE).is_file():
        try:
            protocol = json.loads((file.parent / SUMMARY_FILE).read_text(encoding="utf-8")).get("protocol") or {}
        except (OSError, json.JSONDecodeError, AttributeError) as exc:
            raise SFTDataError(
                f"{file.parent / SUMMARY_FILE} is not readable JSON ({exc}); restore it, or set data.tapes.env_kwargs "
                "to the evaluation's env settings"
            ) from None
        kwargs = dict(protocol.get("env_kwargs") or {})
        if protocol.get("max_steps") is not None:
            kwargs["max_steps"] = protocol["max_steps"]
        return _FileSettings(kwargs, {}, [], str(file.parent / SUMMARY_FILE))
    return _FileSettings({}, {}, [], "")


def _run_settings(config_path: Path, training: bool) -> _FileSettings:
    """The env settings of a training run's config.yaml: ``env.kwargs``, ``env.imports``, ``env.tasks``."""
    import yaml

    try:
        env = (yaml.safe_load(config_path.read_text(encoding="utf-8")) or {}).get("env") or {}
    except (OSError, yaml.YAMLError, AttributeError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SFTDataError(
            f"{config_path} is not readable YAML ({reason}); restore it, or set data.tapes.env_kwargs to the run's "
            "env.kwargs"
        ) from None
    kwargs = dict(env.get("kwargs") or {})
    by_env_id = {}
    for entry in (env.get("tasks") or {}).values():
        env_id, extra = (entry, {}) if isinstance(entry, str) else (entry.get("id"), entry.get("kwargs") or {})
        by_env_id[str(env_id)] = {**kwargs, **extra}
    imports = [str(m) for m in env.get("imports") or []]
    return _FileSettings(kwargs, by_env_id, imports, str(config_path), multi_task_training=training and bool(by_env_id))


def _read_file(file: Path, override: dict[str, Any] | None) -> tuple[list[TapeEpisode], list[str]]:
    """The episodes of one tape file (each with its env settings and, if any, why it cannot be replayed)."""
    settings = _file_settings(file)
    try:
        by_id = group_episodes(iter_turn_logs(file))
    except TurnLogError as exc:
        raise SFTDataError(f"{exc}; give tapes this verlog can read, or remove the bad lines") from None
    except OSError as exc:
        raise SFTDataError(f"{file} cannot be read ({exc}); give a readable tape file") from None
    out = []
    for episode_id, turns in by_id.items():
        first = turns[0]
        kwargs, where = settings.by_env_id.get(first.env_id, settings.kwargs), settings.where
        if "env_kwargs" in first.extra and isinstance(first.extra["env_kwargs"], dict):  # a recording's own
            kwargs, where = dict(first.extra["env_kwargs"]), f"{file} (the episode's first turn)"
        if override is not None:
            kwargs, where = dict(override), "data.tapes.env_kwargs"
        episode = TapeEpisode(episode_id, first.env_id, first.seed, turns, str(file), kwargs, where or "none found")
        episode.problem = _problem(episode, settings)
        out.append(episode)
    return out, settings.imports


def _problem(episode: TapeEpisode, settings: _FileSettings) -> str | None:
    """Why ``episode`` cannot be replayed into rows, or None."""
    turns = episode.turns
    if [t.turn for t in turns] != list(range(len(turns))):
        return "unfinished"  # taped from a later turn on, or turns missing or repeated
    if not (turns[-1].terminated or turns[-1].truncated) or any(t.terminated or t.truncated for t in turns[:-1]):
        return "unfinished"
    if any(t.extra.get("env_error") for t in turns):
        return "env error"  # cut by an env fault or an oversized observation: a replay would go on
    if episode.seed is None or not episode.env_id:
        return "no seed"
    if settings.multi_task_training:
        return "multi-task"  # the tape does not say which task family the episode was
    return None


# ------------------------------------------------------------------------------------------------ selecting
_FILTER_FIXES = {
    "unfinished": "tape whole episodes (`verlog eval --log-turns` tapes every episode; training tapes follow an "
    "episode to its end, so the last iterations' may be unfinished)",
    "env error": "these episodes were cut by an env fault",
    "no seed": "these tapes do not record the episode's seed",
    "multi-task": "a multi-task run's training tapes do not record each episode's task: use its evaluation tapes",
    "other env": "data.tapes.env_ids lists none of the tapes' env ids",
    "older iterations": "raise data.tapes.last_iterations",
    "not successful": "set data.tapes.success_only=false, or collect more episodes (more seeds, a stronger model)",
    "return below": "lower data.tapes.min_return",
}


def select_episodes(path: str | Path, settings: SFTTapesConfig) -> TapeSelection:
    """The replayable episodes of the tapes at ``path`` that pass ``settings``' filters, in file order.

    Filters, in order: finished and replayable; ``env_ids``; ``last_iterations``; ``success_only``; ``min_return``.

    Raises:
        SFTDataError: no tape file there, an unreadable one, or no episode passing the filters (the message gives
            the count each filter left out and the fix).
    """
    files = tape_files(path)
    if not files:
        raise SFTDataError(
            f"data.train {str(path)!r} holds no tapes ({', '.join(TAPE_FILES)}) and no {TRAIN_FILE}; give a training "
            "run's or an evaluation's folder (`verlog eval --log-turns`), a `verlog play --record` folder, a .jsonl "
            "tape file, or demonstrations"
        )
    episodes: list[TapeEpisode] = []
    imports = list(settings.imports)
    for file in files:
        found, file_imports = _read_file(file, settings.env_kwargs)
        episodes += found
        imports += [m for m in file_imports if m not in imports]
    counts = {"episodes": len(episodes)}
    kept = [e for e in episodes if e.problem is None]
    for reason in ("unfinished", "env error", "no seed", "multi-task"):
        counts[reason] = sum(e.problem == reason for e in episodes)
    kept, counts["other env"] = _keep(kept, lambda e: not settings.env_ids or e.env_id in settings.env_ids)
    if settings.last_iterations is not None:
        iterations = [e.iteration for e in kept if e.iteration is not None]
        if kept and not iterations:
            raise SFTDataError(
                f"data.tapes.last_iterations = {settings.last_iterations}, but the episodes of {str(path)!r} carry no "
                "iteration (only a training run's tapes do); set data.tapes.last_iterations=null"
            )
        newest = max(iterations, default=0)
        since = newest - settings.last_iterations + 1
        kept, counts["older iterations"] = _keep(kept, lambda e: e.iteration is not None and e.iteration >= since)
    if settings.success_only:
        kept, counts["not successful"] = _keep(kept, lambda e: e.success)
    if settings.min_return is not None:
        floor = settings.min_return
        kept, counts["return below"] = _keep(kept, lambda e: e.ret >= floor)
    counts["kept"] = len(kept)
    if not kept:
        raise SFTDataError(_nothing_kept(str(path), episodes, counts, settings))
    _import(imports)
    return TapeSelection(str(path), [str(f) for f in files], kept, counts, imports)


def _import(modules: list[str]) -> None:
    """Import the modules that register the tapes' envs (the run's ``env.imports``, ``data.tapes.imports``)."""
    from envs import registry
    from envs.errors import EnvError

    try:
        registry.import_modules(modules)
    except EnvError as exc:
        raise SFTDataError(f"data.tapes.imports: {exc}") from None


def _keep(episodes: list[TapeEpisode], test: Any) -> tuple[list[TapeEpisode], int]:
    kept = [e for e in episodes if test(e)]
    return kept, len(episodes) - len(kept)


def _nothing_kept(path: str, episodes: list[TapeEpisode], counts: dict[str, int], settings: SFTTapesConfig) -> str:
    out = {k: v for k, v in counts.items() if k not in ("episodes", "kept") and v}
    left = ", ".join(f"{v} {k}" for k, v in out.items()) or "none"
    fixes = [_FILTER_FIXES[k] for k in out if k in _FILTER_FIXES]
    if "other env" in out:
        ids = sorted({e.env_id for e in episodes if e.problem is None})
        fixes[list(out).index("other env")] += f" ({', '.join(ids)})"
    if "return below" in out:
        best = max((e.ret for e in episodes if e.problem is None), default=float("nan"))
        fixes[list(out).index("return below")] += f" (now {settings.min_return}; the best return is {best:g})"
    return (
        f"no episode of the {counts['episodes']} in the tapes of {path!r} passes the filters (left out: {left}); "
        + ("; or ".join(fixes) if fixes else "give tapes with finished episodes")
    )


# ------------------------------------------------------------------------------------------------ replaying
class _TapeAnswers(TextPolicy):
    """The tape's answers as the stepper's policy (a person's bare action gets the prompt's answer format)."""

    def __init__(self, episode: TapeEpisode, local: LocalEnv, answer_format: str) -> None:
        super().__init__()
        self.episode, self.local, self.answer_format = episode, local, answer_format

    def answer_text(self, turn: PolicyInput) -> str:
        return tape_answer(self.episode.turns[turn.turn], self.local.env, self.answer_format)


def tape_answer(record: TurnLog, env: Any, answer_format: str) -> str:
    """The answer a row trains on: the taped response; for a turn a person played with a bare valid action (no
    ``ACTION:`` line), the answer the prompt asks for, written as ``verlog demos`` writes the expert's."""
    if record.source != "play" or not record.action_valid or action_offset(record.response) is not None:
        return record.response
    from verlog.sft.demos import format_answer, think_text

    return format_answer(think_text(record.env_id, env, record.action), record.action, answer_format)


def replay_episode(episode: TapeEpisode, tokenizer: Any, settings: SFTTapesConfig) -> list[dict[str, Any]]:
    """The SFT rows of one episode: its env replayed from the tape's seed with the tape's answers, each turn's prompt
    built by the rollout's stepper with ``settings.memory`` and ``settings.max_prompt_tokens`` (and ``tokenizer``).

    Raises:
        SFTDataError: the env does not build, a prompt does not fit the budget, or the replay differs from the tape.
    """
    from envs import registry
    from envs.errors import EnvError

    def build() -> Any:
        return registry.build_env(episode.env_id, episode.env_kwargs, "the tapes' env settings", reset=False)

    try:
        local = LocalEnv(build(), rebuild=build)
    except EnvError as exc:
        raise SFTDataError(
            f"{exc} (episode {episode.episode_id} of {episode.file}); set data.tapes.env_kwargs to the settings it "
            "was played with, or data.tapes.imports to the module that registers your env"
        ) from None
    pool = local.pool()
    rows: list[dict[str, Any]] = []
    try:
        memory = SlidingMemory.from_config(settings.memory)
        stepper = EpisodeStepper(
            pool, tokenizer, [memory], max_prompt_tokens=settings.max_prompt_tokens, bootstrap_prompts=False
        )
        stepper.reset([episode.seed], episode_ids=[episode.episode_id])
        policy = _TapeAnswers(episode, local, settings.memory.answer_format)
        for taped in episode.turns:
            try:
                (turn,) = stepper.step(policy, continue_episodes=False)
            except PromptTooLongError as exc:
                raise SFTDataError(
                    f"episode {episode.episode_id} turn {taped.turn}: {exc} (data.tapes.max_prompt_tokens is the "
                    "setting)"
                ) from None
            _check_replay(episode, taped, turn)
            if settings.valid_only and not turn.row.action_valid:
                continue
            rows.append(
                {
                    "messages": [*turn.prompt.messages, {"role": "assistant", "content": turn.answer.text}],
                    "env_id": episode.env_id,
                    "seed": int(episode.seed),  # type: ignore[arg-type]
                    "turn": int(taped.turn),
                    "action": turn.row.action,
                    "episode_id": episode.episode_id,
                    "source": taped.source,
                }
            )
    finally:
        pool.close()
    return rows


def _check_replay(episode: TapeEpisode, taped: TurnLog, turn: Any) -> None:
    """The replayed turn shows the taped observation, executes the taped action, gives its reward and ends with it."""
    row = turn.row
    differs = []
    if taped.observation and row.observation != taped.observation:
        differs.append("the observation")
    if row.action != taped.action:
        differs.append(f"the action ({row.action!r}, taped {taped.action!r})")
    if not math.isclose(row.reward, taped.reward, rel_tol=1e-6, abs_tol=1e-6):
        differs.append(f"the reward ({row.reward:g}, taped {taped.reward:g})")
    if (turn.episode is not None) != (taped.terminated or taped.truncated):
        differs.append("the end of the episode")
    if differs:
        raise SFTDataError(
            f"replaying episode {episode.episode_id} ({episode.env_id}, seed {episode.seed}) of {episode.file}: turn "
            f"{taped.turn} differs from the tape in {', '.join(differs)}, so the env settings are not the ones it "
            f"was played with (used {episode.env_kwargs}, from {episode.settings_from}); set data.tapes.env_kwargs "
            "to those settings"
        )


def write_tape_rows(
    selection: TapeSelection, tokenizer: Any, settings: SFTTapesConfig, out_dir: str | Path
) -> tuple[str, str | None, dict[str, Any]]:
    """Replay the selected episodes and write ``train.parquet`` (the last ``settings.val_episodes`` episodes in
    ``val.parquet``) and ``tapes.json`` into ``out_dir``; returns the train file, the val file (or None) and the
    manifest.

    Raises:
        SFTDataError: a replay fails (see :func:`replay_episode`), or no row is left (every answer invalid).
    """
    import pandas as pd

    episodes = selection.episodes
    n_val = min(settings.val_episodes, len(episodes) - 1)
    parts = {"train": episodes[: len(episodes) - n_val], "val": episodes[len(episodes) - n_val :]}
    rows: dict[str, list[dict[str, Any]]] = {}
    listed: dict[str, list[dict[str, Any]]] = {}
    for part, chosen in parts.items():
        rows[part], listed[part] = [], []
        for episode in chosen:
            episode_rows = replay_episode(episode, tokenizer, settings)
            rows[part] += episode_rows
            listed[part].append(_listing(episode, len(episode_rows)))
    if not rows["train"]:
        raise SFTDataError(
            f"the {len(parts['train'])} kept episodes of {selection.source!r} have no turn with a valid answer, so "
            "there is nothing to learn; set data.tapes.valid_only=false to train on them anyway"
        )
    out = Path(out_dir)  # created once every episode has replayed: a failing replay writes nothing
    out.mkdir(parents=True, exist_ok=True)
    train_file = out / TRAIN_FILE
    pd.DataFrame(rows["train"]).to_parquet(train_file, index=False)
    val_file: Path | None = out / VAL_FILE
    if rows["val"]:
        pd.DataFrame(rows["val"]).to_parquet(val_file, index=False)
    else:
        if val_file.exists():  # type: ignore[union-attr]
            val_file.unlink()  # type: ignore[union-attr]
        val_file = None
    seeds: dict[str, list[int]] = {}
    for episode in episodes:
        seeds.setdefault(episode.env_id, []).append(int(episode.seed))  # type: ignore[arg-type]
    manifest = {
        "format": FORMAT,
        "source": selection.source,
        "files": selection.files,
        "settings": asdict(settings),
        "counts": selection.counts,
        "rows_train": len(rows["train"]),
        "rows_val": len(rows["val"]),
        "episodes_train": listed["train"],
        "episodes_val": listed["val"],
        "seeds": {k: sorted(set(v)) for k, v in seeds.items()},
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return str(train_file), None if val_file is None else str(val_file), manifest


def _listing(episode: TapeEpisode, rows: int) -> dict[str, Any]:
    return {
        "episode_id": episode.episode_id,
        "env_id": episode.env_id,
        "seed": episode.seed,
        "file": episode.file,
        "turns": len(episode.turns),
        "rows": rows,
        "return": episode.ret,
        "success": episode.success,
        "iteration": episode.iteration,
        "env_kwargs": episode.env_kwargs,
    }


def used_seeds(data_dir: str | Path) -> dict[str, list[int]]:
    """Env id -> the seeds of the episodes an SFT data folder (``<output_dir>/data``) was made from: evaluate the
    fine-tuned model on other seeds."""
    path = Path(data_dir) / MANIFEST
    if not path.is_file():
        raise SFTDataError(f"{path} does not exist; give the data folder `verlog sft` wrote from tapes")
    return {k: list(v) for k, v in json.loads(path.read_text())["seeds"].items()}
