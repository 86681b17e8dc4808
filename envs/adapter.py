"""Wrap any gymnasium env with a discrete action space as a verlog text env.

:class:`GymTextAdapter` is the documented way to add a game (docs/adding-an-env.md): give it the gymnasium env, a
``describe(obs, info) -> str`` function that writes what the agent is shown, the names of the actions (in the env's
action order) and the task instruction. Everything a :class:`~envs.core.TextEnv` does (action parsing, the info keys,
time-limit truncation, ``get_state``/``set_state``) then works for that env.

``get_state``/``set_state`` pickle the wrapped env object. That works for pure-Python envs whose state lives in
attributes (gymnasium's toy-text envs, minigrid, most grid worlds, and the wrapped env's ``np_random``) and fails with
:class:`~envs.errors.EnvStateError` for envs that hold windows, sockets, simulator handles or other unpicklable
objects; such envs need their own TextEnv subclass with ``_game_get_state``/``_game_set_state``.

Images (``images=``): the wrapped env's ``rgb_array`` render, its observation when the observation space is an
image (``Box`` of shape ``[H, W, 3]``, dtype uint8), or what a function of ``(obs, info)`` returns, go into each
observation's ``image`` (docs/adding-an-env.md, "Images").
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from envs.core import ParseMode, TextEnv, TextObservation
from envs.errors import EnvImageError, EnvStateError

ACTIONS_HEADER = "The following are the possible actions you can take in the game"
"""First words of the action list the adapter appends to the instruction (BALROG's wording)."""


@dataclass
class EpisodeView:
    """What ``progression`` and ``success`` callbacks see about the current episode of the wrapped env.

    Attributes:
        obs: the wrapped env's latest raw observation.
        info: the wrapped env's latest raw info dict.
        reward: the latest step's reward (0.0 right after reset).
        total_reward: the sum of rewards so far in this episode.
        steps: steps taken in this episode.
        terminated: whether the wrapped env reported a terminal state.
        truncated: whether the wrapped env truncated the episode itself (e.g. its own TimeLimit).
    """

    obs: Any
    info: dict[str, Any]
    reward: float = 0.0
    total_reward: float = 0.0
    steps: int = 0
    terminated: bool = False
    truncated: bool = False


def default_success(view: EpisodeView) -> bool:
    """The default success test: the episode reached a terminal state with a positive final reward."""
    return view.terminated and view.reward > 0


def default_progression(view: EpisodeView) -> float:
    """The default progression (BALROG's for goal-reaching games): 1.0 once solved, else 0.0."""
    return 1.0 if default_success(view) else 0.0


Describe = Callable[[Any, dict[str, Any]], "str | TextObservation"]
ImageSource = Callable[[Any, dict[str, Any]], np.ndarray]
IMAGE_MODES = ("render", "observation")
"""The named sources of the adapter's images: the wrapped env's ``rgb_array`` render, or its image observation."""


def is_image_space(space: Any) -> bool:
    """Whether ``space`` is an RGB image space: ``Box`` of shape ``[H, W, 3]`` and dtype uint8."""
    return (
        isinstance(space, gym.spaces.Box)
        and len(space.shape) == 3
        and space.shape[2] == 3
        and np.dtype(space.dtype) == np.uint8
    )


def image_source(env: gym.Env, images: bool | str | ImageSource) -> str | ImageSource | None:
    """Where each observation's image comes from for ``images`` (see :class:`GymTextAdapter`): ``"render"``,
    ``"observation"``, a function ``(obs, info) -> image``, or None (no image); EnvImageError when ``env`` cannot
    give that image, with the fix."""
    if images is False or images is None:
        return None
    if callable(images):
        return images
    if images is True:
        images = "observation" if is_image_space(env.observation_space) else "render"
    if images == "observation":
        if not is_image_space(env.observation_space):
            raise EnvImageError(
                f"images='observation' needs an image observation space (Box [H, W, 3] uint8), the env has "
                f"{env.observation_space!r}: use images='render', or a function (obs, info) -> image"
            )
        return images
    if images == "render":
        if getattr(env, "render_mode", None) != "rgb_array":
            raise EnvImageError(
                f"images='render' needs the env built with render_mode='rgb_array' (it has "
                f"{getattr(env, 'render_mode', None)!r}): gymnasium.make(..., render_mode='rgb_array')"
            )
        return images
    raise EnvImageError(
        f"images must be True, False, one of {IMAGE_MODES} or a function (obs, info) -> image, got {images!r}"
    )


class GymTextAdapter(TextEnv):
    """A :class:`~envs.core.TextEnv` around a gymnasium env with a ``Discrete`` action space.

    Args:
        env: the gymnasium env (built by the caller, e.g. ``gymnasium.make("FrozenLake-v1")``). Its action space must
            be ``gymnasium.spaces.Discrete`` with ``n == len(action_names)``.
        describe: ``describe(obs, info) -> str`` turns the wrapped env's observation into the text the agent is shown;
            it may return a :class:`~envs.core.TextObservation` instead to set the long-term/short-term split.
        action_names: the action strings in the env's action order (index ``i`` executes ``action_space.start + i``),
            or a mapping ``name -> short description`` in that order (descriptions go into the instruction).
        instruction: the task, e.g. ``"Your goal is to reach the gift."``; a callable ``(obs, info) -> str`` is
            called at each reset (for per-episode missions). The list of actions is appended to it, unless it
            contains ``{actions}``, which is replaced by that list.
        default_action: executed when the model's answer names no action; the first action by default.
        max_steps: the episode's step limit (truncation); by default the wrapped env's ``spec.max_episode_steps``,
            else 100. A truncation reported by the wrapped env itself is kept too.
        progression: ``progression(view: EpisodeView) -> float`` in [0, 1]; by default 1.0 once solved.
        success: ``success(view: EpisodeView) -> bool``; by default "terminated with a positive last reward".
        images: attach an image to each observation (``TextObservation.image``, ``[H, W, 3]`` uint8): ``"render"``
            (the env's ``render()``; build it with ``render_mode="rgb_array"``), ``"observation"`` (the raw
            observation itself, for an image observation space), a function ``(obs, info) -> image`` (e.g. one
            entry of a Dict observation), or True (``"observation"`` for an image observation space, else
            ``"render"``). False (default): text only.
        render_images: the old spelling of ``images="render"``.
        parse_mode, format_penalty, invalid_action_feedback, time_limit: as in :class:`~envs.core.TextEnv`.
    """

    provides_images = True  # when asked (images=...): the wrapped env's render or image observation

    def __init__(
        self,
        env: gym.Env,
        describe: Describe,
        action_names: Sequence[str] | Mapping[str, str],
        instruction: str | Callable[[Any, dict[str, Any]], str],
        *,
        default_action: str | None = None,
        max_steps: int | None = None,
        progression: Callable[[EpisodeView], float] = default_progression,
        success: Callable[[EpisodeView], bool] = default_success,
        images: bool | str | ImageSource = False,
        render_images: bool = False,
        parse_mode: ParseMode = "strict",
        format_penalty: float = 0.0,
        invalid_action_feedback: bool = False,
        time_limit: str = "truncate",
    ) -> None:
        space = env.action_space
        if not isinstance(space, gym.spaces.Discrete):
            raise TypeError(
                f"GymTextAdapter needs a Discrete action space, got {space!r}; wrap the env so that its actions are "
                "numbered (e.g. a DiscreteActions wrapper) before adapting it"
            )
        descriptions = dict(action_names) if isinstance(action_names, Mapping) else None
        names = list(action_names)
        if len(names) != int(space.n):
            raise ValueError(
                f"action_names has {len(names)} names but the env's action space has {int(space.n)} actions; give "
                "one name per action, in the env's action order"
            )
        if len(set(names)) != len(names) or not all(isinstance(n, str) and n.strip() == n and n for n in names):
            raise ValueError(f"action_names must be distinct non-empty strings without surrounding spaces: {names}")
        if default_action is None:
            default_action = names[0]
        if default_action not in names:
            raise ValueError(f"default_action {default_action!r} is not one of the action names {names}")
        if render_images and images is False:
            images = "render"
        source = image_source(env, images)
        if max_steps is None:
            spec_limit = env.spec.max_episode_steps if env.spec is not None else None
            max_steps = spec_limit or 100
        super().__init__(
            parse_mode=parse_mode,
            format_penalty=format_penalty,
            invalid_action_feedback=invalid_action_feedback,
            max_steps=max_steps,
            render_mode="rgb_array" if source is not None else None,
            time_limit=time_limit,
            images=source is not None,
        )
        self.env = env
        self.describe = describe
        self.actions = names
        self.action_descriptions = descriptions
        self.default_action = default_action
        self.max_steps = max_steps
        self._instruction_source = instruction
        self._progression_fn = progression
        self._success_fn = success
        self._image_source = source
        self._action_index = {name: int(space.start) + i for i, name in enumerate(names)}
        self._view = EpisodeView(obs=None, info={})
        self._instruction_text = ""

    # ----------------------------------------------------------------- helpers
    def actions_text(self) -> str:
        """The action list as it appears in the instruction (``name: description`` lines when descriptions exist)."""
        if self.action_descriptions:
            lines = [f"{name}: {self.action_descriptions[name]}" for name in self.actions]
            header = f"{ACTIONS_HEADER}, followed by a short description of each action:"
        else:
            lines = list(self.actions)
            header = f"{ACTIONS_HEADER}:"
        return header + "\n\n" + ",\n".join(lines) + "."

    def _observe(self) -> TextObservation:
        described = self.describe(self._view.obs, self._view.info)
        source, view = self._image_source, self._view
        if source is None:
            image = None
        elif source == "render":
            image = self.env.render()
        else:
            image = view.obs if source == "observation" else source(view.obs, view.info)
        if isinstance(described, TextObservation):
            return TextObservation.build(described.long_term, described.short_term, image)
        if not isinstance(described, str):
            raise TypeError(f"describe() must return a str or a TextObservation, got {type(described).__name__}")
        return TextObservation.build(described, image=image)

    def step(self, action: str) -> tuple[TextObservation, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = super().step(action)
        if self._view.truncated and not (terminated or truncated):
            # The wrapped env cut the episode itself (its own time limit): a time limit like ours, so it truncates
            # or terminates as ``time_limit`` says.
            truncated = self.time_limit == "truncate"
            terminated = not truncated
            info["time_limit_reached"] = True
            self._episode_over = True
            info["success"] = bool(self._game_success())
        return obs, reward, terminated, truncated, info

    # ----------------------------------------------------------------- TextEnv hooks
    def _game_reset(self, seed: int | None, options: dict[str, Any] | None) -> tuple[TextObservation, dict[str, Any]]:
        raw_obs, raw_info = self.env.reset(seed=seed, options=options)
        self._view = EpisodeView(obs=raw_obs, info=dict(raw_info))
        source = self._instruction_source
        task = source(raw_obs, raw_info) if callable(source) else source
        actions = self.actions_text()
        self._instruction_text = task.replace("{actions}", actions) if "{actions}" in task else f"{task}\n\n{actions}"
        return self._observe(), {"raw_info": dict(raw_info)}

    def _game_step(self, action: str) -> tuple[TextObservation, float, bool, dict[str, Any]]:
        raw_obs, reward, terminated, truncated, raw_info = self.env.step(self._action_index[action])
        view = self._view
        view.obs, view.info, view.reward = raw_obs, dict(raw_info), float(reward)
        view.total_reward += float(reward)
        view.steps += 1
        view.terminated, view.truncated = bool(terminated), bool(truncated)
        return self._observe(), float(reward), bool(terminated), {"raw_info": dict(raw_info)}

    def _game_instruction(self) -> str:
        return self._instruction_text

    def _game_progression(self) -> float:
        value = float(self._progression_fn(self._view))
        return min(1.0, max(0.0, value))

    def _game_success(self) -> bool:
        return bool(self._success_fn(self._view))

    def _state_kind(self) -> str:
        inner = type(self.env.unwrapped)
        return f"{super()._state_kind()}[{inner.__module__}.{inner.__qualname__}]"

    def _game_get_state(self) -> Any:
        try:
            env_bytes = pickle.dumps(self.env)
        except Exception as exc:
            raise EnvStateError(
                f"get_state() pickles the wrapped env and {type(self.env.unwrapped).__name__} cannot be pickled "
                f"({type(exc).__name__}: {exc}); write a TextEnv subclass with _game_get_state/_game_set_state for it"
            ) from exc
        return {"env": env_bytes, "view": self._view, "instruction": self._instruction_text}

    def _game_set_state(self, state: Any) -> None:
        try:
            env = pickle.loads(state["env"])
        except Exception as exc:
            raise EnvStateError(f"cannot unpickle the wrapped env: {type(exc).__name__}: {exc}") from exc
        self.env = env
        self._view = state["view"]
        self._instruction_text = state["instruction"]

    def render(self) -> Any:
        return self.env.render()

    def close(self) -> None:
        self.env.close()
        super().close()
