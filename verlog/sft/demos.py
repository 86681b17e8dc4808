"""Expert demonstrations for the SFT warm start: scripted experts through the text interface -> chat rows -> parquet.

An expert plays an env through the same text interface the model uses (its answer goes through the env's parser),
stepped by the RL rollout's own loop (:class:`verlog.rollout.stepper.EpisodeStepper`, the expert as its policy) with a
:class:`~verlog.prompting.memory.SlidingMemory` of the RL settings, so a demo's prompt is token for token the prompt the
policy sees in RL for the same state.

**One SFT row per turn.** The RL rollout trains on one row per turn whose prompt is the memory window, so a demo
row is that window's messages plus the expert's answer as the final assistant message. With ``n >= 1`` the window
also holds earlier assistant messages ("Previous plan: ..." of the expert itself); verl's ``MultiTurnSFTDataset``
puts loss on every assistant message, so :mod:`verlog.sft` uses :class:`verlog.sft.LastTurnSFTDataset` by default,
which keeps the loss on the final answer only (the tokens the policy generates in RL). docs/sft.md says more.

Experts: minigrid's BabyAI bot for ``babyai/*`` (:class:`envs.babyai.expert.BabyAIExpert`), the planner
:func:`envs.babaisai.solve` for ``babaisai/*``, the colour's answer for ``toy/visual``. An episode the expert does not
win is left out (and counted).

**Images** (``max_image_history`` > 0, a vision-language model's processor counting image tokens): the env draws its
frames and each row's prompt shows the newest ones as the rollout's does. A row's messages then hold one ``<image>``
placeholder per image (verl's ``MultiTurnSFTDataset`` convention) and its ``images`` column the frames as PNG bytes
(``{"bytes": ...}``), in prompt order.

Seeds: episode ``i`` uses seed ``seed_start + i``; every seed tried is written to ``demos.json`` next to the parquet
files, so evaluation can use disjoint seeds (:func:`used_seeds`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from verlog.errors import VerlogError
from verlog.prompting.memory import MemoryConfig, SlidingMemory, check_answer_format
from verlog.rollout.stepper import CallbackPolicy, EpisodeStepper, LocalEnv, PolicyInput

MANIFEST = "demos.json"
TRAIN_FILE = "train.parquet"
VAL_FILE = "val.parquet"
FORMAT = "verlog.demos/1"


class DemoError(VerlogError, ValueError):
    """Demonstrations cannot be made or read: no expert for the env, an expert answer the env rejects, bad files."""


# ------------------------------------------------------------------------------------------------ experts
Expert = Callable[[], str | None]
"""Gives the next action string of the current episode, or None when it has nothing more to play."""


def _babyai_expert(env: Any) -> Expert:
    from envs.babyai.expert import BabyAIExpert

    bot = BabyAIExpert(env)
    return bot.next_action


def _babaisai_expert(env: Any) -> Expert:
    from envs.babaisai import solve

    plan = solve(env)
    if plan is None:
        return lambda: None
    steps: Iterator[str] = iter(plan)
    return lambda: next(steps, None)


def _visual_toy_expert(env: Any) -> Expert:
    return lambda: env.answer  # the action the square's colour names (envs/toy_visual.py)


EXPERTS: dict[str, Callable[[Any], Expert]] = {
    "babyai/": _babyai_expert,
    "babaisai/": _babaisai_expert,
    "toy/visual": _visual_toy_expert,
}
"""Env id prefix -> builder of an expert for a freshly reset env of that family."""


def expert_builder(env_id: str) -> Callable[[Any], Expert]:
    """The builder of ``env_id``'s family's expert (raises :class:`DemoError` when there is none)."""
    for prefix, build in EXPERTS.items():
        if env_id.startswith(prefix):
            return build
    families = ", ".join(f"{p}*" for p in EXPERTS)
    raise DemoError(f"no scripted expert for env {env_id!r}: demonstrations exist for {families}")


def expert_for(env_id: str, env: Any) -> Expert:
    """The scripted expert of ``env_id``'s family for ``env`` (just reset)."""
    return expert_builder(env_id)(env)


# ------------------------------------------------------------------------------------------------ answers
_BABYAI_REASONS = {
    "turn left": "the way to it is on my left, so I turn left",
    "turn right": "the way to it is on my right, so I turn right",
    "go forward": "the path ahead leads there, so I go forward",
    "pick up": "the object I need is right in front of me, so I pick it up",
    "drop": "I should put down what I carry here, so I drop it",
    "toggle": "the door in front of me is in the way, so I toggle it",
}


def think_text(env_id: str, env: Any, action: str) -> str:
    """A short templated rationale for taking ``action`` in ``env`` (the THINK line of a demo answer)."""
    if env_id.startswith("babyai/"):
        reason = _BABYAI_REASONS.get(action, f"the next step is {action}")
        return f"My goal is to {env.mission}; {reason}."
    if env_id.startswith("babaisai/"):
        return f"My plan wins by the rules on the map; its next move is {action}."
    return f"The next step is {action}."


def format_answer(think: str, action: str, answer_format: str = "cot") -> str:
    """The model's answer in the format the prompt asks for: a THINK line, then an ACTION line (``cot``), or the
    ACTION line alone (``action``; ``think`` is not used)."""
    if check_answer_format(answer_format) == "action":
        return f"ACTION: {action}"
    return f"THINK: {think}\nACTION: {action}"


# ------------------------------------------------------------------------------------------------ episodes
@dataclass
class DemoTurn:
    """One turn of a demonstration: the prompt messages (the memory window), the expert's answer and the prompt's
    images (``[H, W, 3]`` uint8 each, in the order of the messages' image parts; empty for text)."""

    messages: list[dict[str, Any]]
    answer: str
    action: str
    images: list[Any] = field(default_factory=list)

    def conversation(self) -> list[dict[str, str]]:
        """The SFT conversation: the prompt messages, then the answer as the final assistant message."""
        return [*self.messages, {"role": "assistant", "content": self.answer}]


@dataclass
class DemoEpisode:
    """One expert episode."""

    env_id: str
    seed: int
    success: bool
    ret: float
    turns: list[DemoTurn] = field(default_factory=list)


@dataclass
class DemoConfig:
    """What to record.

    Attributes:
        env_id: a registered env id with a scripted expert (``babyai/*``, ``babaisai/*``).
        episodes: episodes to try (seeds ``seed_start .. seed_start + episodes - 1``).
        seed_start: seed of the first episode.
        memory_n: past turns in the prompt (the RL config's ``memory.n``).
        keep_reasoning_turns: the RL config's ``memory.keep_reasoning_turns``.
        max_prompt_tokens: the RL prompt budget (``rollout.max_prompt_tokens``); applied only with a tokenizer.
        env_kwargs: passed to ``envs.make`` (use the RL config's ``env.kwargs``).
        val_episodes: the last this-many successful episodes go to ``val.parquet`` instead of ``train.parquet``.
        answer_format: ``cot`` (THINK then ACTION) or ``action`` (the ACTION line alone): the answers and the
            prompt's format instruction (the RL config's ``memory.answer_format``).
        max_image_history: the newest this-many observations show their image (the RL config's
            ``memory.max_image_history``); > 0 needs a vision-language model's image token counter.
    """

    env_id: str
    episodes: int
    seed_start: int = 0
    memory_n: int = 1
    keep_reasoning_turns: int = 1
    max_prompt_tokens: int | None = None
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    val_episodes: int = 0
    answer_format: str = "cot"
    max_image_history: int = 0

    def __post_init__(self) -> None:
        try:
            check_answer_format(self.answer_format)
        except ValueError as exc:
            raise DemoError(str(exc)) from exc
        if self.episodes < 1:
            raise DemoError(f"episodes must be >= 1, got {self.episodes}")
        if self.seed_start < 0:
            raise DemoError(f"seed_start must be >= 0, got {self.seed_start}")
        if self.val_episodes < 0 or self.val_episodes >= self.episodes:
            raise DemoError(
                f"val_episodes must be in [0, episodes) = [0, {self.episodes}), got {self.val_episodes}: "
                "keep some episodes for training"
            )
        if self.max_prompt_tokens is not None and self.max_prompt_tokens < 1:
            raise DemoError(f"max_prompt_tokens must be >= 1 or None, got {self.max_prompt_tokens}")
        if self.max_image_history < 0:
            raise DemoError(f"max_image_history must be >= 0 (0: text only), got {self.max_image_history}")

    @property
    def memory(self) -> MemoryConfig:
        """The RL memory settings the prompts are built with."""
        return MemoryConfig(self.memory_n, self.keep_reasoning_turns, self.answer_format, self.max_image_history)

    @property
    def seeds(self) -> list[int]:
        return list(range(self.seed_start, self.seed_start + self.episodes))


class _ExpertGaveUp(Exception):
    """The expert has no next action: the episode is no demonstration."""


class _ExpertPolicy(CallbackPolicy):
    """The expert as the stepper's policy: its next action in the answer format (``last_action`` keeps it)."""

    def __init__(self, env_id: str, local: LocalEnv, expert: Expert, answer_format: str) -> None:
        super().__init__(self._answer)
        self.env_id, self.local, self.expert, self.answer_format = env_id, local, expert, answer_format
        self.last_action = ""

    def _answer(self, turn: PolicyInput) -> str:
        action = self.expert()
        if action is None:
            raise _ExpertGaveUp
        self.last_action = action
        return format_answer(think_text(self.env_id, self.local.env, action), action, self.answer_format)


def record_episode(
    env_id: str,
    seed: int,
    *,
    memory: SlidingMemory | None = None,
    env_kwargs: dict[str, Any] | None = None,
    tokenizer: Any = None,
    max_prompt_tokens: int | None = None,
    answer_format: str = "cot",
) -> DemoEpisode:
    """Play one episode with the scripted expert from ``env.reset(seed=seed)``, recording each turn's prompt.

    The expert's answer goes to ``env.step`` as text, like a model's; each turn's messages come from ``memory``
    through the rollout's stepper (with ``tokenizer`` and ``max_prompt_tokens``: after the same token budget).

    A ``memory`` that shows images (``max_image_history`` > 0, with its image token counter) makes the env draw them.

    Raises:
        DemoError: the env has no expert, or rejected an expert answer (the answer format and the parser disagree).
    """
    import envs

    build_expert = expert_builder(env_id)
    if memory is None:
        memory = SlidingMemory.from_config(MemoryConfig(answer_format=answer_format))
    images = memory.max_image_history > 0
    if images and memory.image_tokens is None:
        raise DemoError("a memory with max_image_history > 0 needs the model's image token counter (image_tokens)")
    kwargs = {**(env_kwargs or {}), **({"images": True} if images else {})}
    local = LocalEnv(envs.make(env_id, **kwargs), rebuild=lambda: envs.make(env_id, **kwargs))
    pool = local.pool(keep_images=images)
    try:
        stepper = EpisodeStepper(
            pool, tokenizer, [memory], max_prompt_tokens=max_prompt_tokens, bootstrap_prompts=False
        )
        stepper.reset([seed])
        policy = _ExpertPolicy(env_id, local, build_expert(local.env), answer_format)
        episode = DemoEpisode(env_id=env_id, seed=seed, success=False, ret=0.0)
        while True:
            try:
                (turn,) = stepper.step(policy, continue_episodes=False)
            except _ExpertGaveUp:  # the expert gave up: the episode is not a demonstration
                return episode
            row = turn.row
            if not row.action_valid or row.action != policy.last_action:
                raise DemoError(
                    f"{env_id} (seed {seed}) read the expert answer {row.response_text!r} as "
                    f"{turn.info.get('action')!r} (valid={turn.info.get('action_valid')}); the answer format and the "
                    "env's parse_mode disagree"
                )
            episode.turns.append(
                DemoTurn(turn.prompt.messages, row.response_text, row.action, images=list(turn.prompt.images))
            )
            episode.ret += row.reward
            if turn.episode is not None:
                episode.success = bool(row.success)
                return episode
    finally:
        pool.close()


def generate_demos(
    config: DemoConfig,
    tokenizer: Any = None,
    progress: Callable[[int, DemoEpisode], None] | None = None,
    image_tokens: Callable[[Any], int] | None = None,
) -> list[DemoEpisode]:
    """Every episode of ``config`` (successful or not), in seed order; ``progress(i, episode)`` after each.
    ``image_tokens`` (a vision-language model's tokens per image, :class:`verlog.models.vision.ImageTokenCounter`)
    is needed when ``config.max_image_history`` > 0."""
    out = []
    for i, seed in enumerate(config.seeds):
        memory = SlidingMemory.from_config(config.memory, image_tokens)
        episode = record_episode(
            config.env_id,
            seed,
            memory=memory,
            env_kwargs=config.env_kwargs,
            tokenizer=tokenizer,
            max_prompt_tokens=config.max_prompt_tokens,
            answer_format=config.answer_format,
        )
        out.append(episode)
        if progress is not None:
            progress(i, episode)
    return out


# ------------------------------------------------------------------------------------------------ files
def episode_rows(episode: DemoEpisode) -> list[dict[str, Any]]:
    """The SFT rows of one episode: ``messages`` (verl's MultiTurnSFTDataset column), with images an ``images``
    column (see the module docstring), and bookkeeping columns."""
    rows = []
    for t, turn in enumerate(episode.turns):
        row: dict[str, Any] = {"messages": [placeholder_message(m) for m in turn.conversation()]}
        if turn.images:
            row["images"] = [{"bytes": png_bytes(image)} for image in turn.images]
        rows.append({**row, "env_id": episode.env_id, "seed": episode.seed, "turn": t, "action": turn.action})
    return rows


IMAGE_PLACEHOLDER = "<image>"
"""Where an image stands in a row's message text (verl's MultiTurnSFTDataset splits the text there)."""


def placeholder_message(message: dict[str, Any]) -> dict[str, str]:
    """``message`` with string content: a list of chat parts becomes its texts with :data:`IMAGE_PLACEHOLDER` for
    each image part."""
    content = message["content"]
    if isinstance(content, list):
        content = "".join(IMAGE_PLACEHOLDER if p.get("type") == "image" else str(p.get("text", "")) for p in content)
    return {"role": message["role"], "content": content}


def png_bytes(image: Any) -> bytes:
    """The PNG encoding of an ``[H, W, 3]`` uint8 image (lossless: SFT sees the rollout's pixels)."""
    import io

    import numpy as np
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(np.asarray(image, dtype=np.uint8)).save(buffer, format="PNG")
    return buffer.getvalue()


def write_demos(episodes: Sequence[DemoEpisode], out_dir: str | Path, config: DemoConfig) -> dict[str, Any]:
    """Write the successful episodes as ``train.parquet`` (and ``val.parquet``) and the manifest ``demos.json``.

    Returns:
        The manifest: env, settings, every seed tried, which ones were kept, row counts and file names.
    """
    import pandas as pd

    kept = [e for e in episodes if e.success and e.turns]
    if not kept:
        raise DemoError(
            f"the expert won none of the {len(episodes)} episodes of {config.env_id} (seeds "
            f"{config.seed_start}..{config.seed_start + config.episodes - 1}): nothing to write"
        )
    n_val = min(config.val_episodes, len(kept) - 1)
    train_eps, val_eps = kept[: len(kept) - n_val], kept[len(kept) - n_val :]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = {"train": TRAIN_FILE}
    train_rows = [row for e in train_eps for row in episode_rows(e)]
    pd.DataFrame(train_rows).to_parquet(out / TRAIN_FILE, index=False)
    val_rows: list[dict[str, Any]] = [row for e in val_eps for row in episode_rows(e)]
    if val_rows:
        pd.DataFrame(val_rows).to_parquet(out / VAL_FILE, index=False)
        files["val"] = VAL_FILE
    elif (out / VAL_FILE).exists():
        (out / VAL_FILE).unlink()
    manifest = {
        "format": FORMAT,
        "config": asdict(config),
        "seeds_tried": config.seeds,
        "seeds_train": [e.seed for e in train_eps],
        "seeds_val": [e.seed for e in val_eps],
        "seeds_failed": [e.seed for e in episodes if not (e.success and e.turns)],
        "episodes_kept": len(kept),
        "rows_train": len(train_rows),
        "rows_val": len(val_rows),
        "mean_turns": sum(len(e.turns) for e in kept) / len(kept),
        "images_per_row": sum(len(t.images) for e in kept for t in e.turns) / sum(len(e.turns) for e in kept),
        "files": files,
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def read_manifest(demo_dir: str | Path) -> dict[str, Any]:
    """The ``demos.json`` of a demo folder written by :func:`write_demos`."""
    path = Path(demo_dir) / MANIFEST
    if not path.is_file():
        raise DemoError(f"{path} does not exist: give a folder written by `verlog demos`")
    manifest = json.loads(path.read_text())
    if manifest.get("format") != FORMAT:
        raise DemoError(f"{path} has format {manifest.get('format')!r}, expected {FORMAT!r}")
    return manifest


def used_seeds(demo_dir: str | Path) -> set[int]:
    """Every env seed the demos of ``demo_dir`` tried (kept or not): evaluation should use other seeds."""
    return {int(s) for s in read_manifest(demo_dir)["seeds_tried"]}
