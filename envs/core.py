"""The API every verlog text environment follows.

A text environment is a ``gymnasium.Env`` whose observations are :class:`TextObservation` objects and whose actions
are strings (what the language model wrote). :class:`TextEnv` does the parts every game shares, so that a game only
describes its own state and dynamics:

- parsing the model's text into one of the game's action strings (``envs.actions``), executing the default action on
  invalid output, with an optional format penalty and an optional feedback line in the next observation;
- the ``info`` keys every env sets (:data:`INFO_KEYS`): ``action``, ``raw_action``, ``action_valid``,
  ``episode_step``, ``progression`` and, once the episode ends, ``success``;
- gymnasium's time-limit semantics: reaching ``max_steps`` gives ``truncated=True, terminated=False`` (or, with
  ``time_limit="terminate"``, ``terminated=True``: the task failed at the limit, as BALROG scores it);
- images (``images=True``, for envs that draw them: :attr:`TextEnv.provides_images`): the observation's ``image``
  is an RGB array ``[H, W, 3]`` uint8, checked when the observation is built (``envs.images``);
- ``get_state()/set_state()`` as bytes (pickled, with a SHA-256 checksum and the env's kind and id), so an episode
  can continue in another process; ``set_state`` refuses a corrupted state or one of another env, and leaves the env
  unchanged when it refuses.

A game subclasses :class:`TextEnv` and implements the ``_game_*`` hooks.
"""

from __future__ import annotations

import pickle
import string
from dataclasses import dataclass, field
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np

from envs import actions as action_parsing
from envs.actions import PARSE_MODES, ParseMode
from envs.errors import EnvImageError, EnvStateError
from envs.images import check_image
from envs.sealed import ChecksumMismatch, seal, unseal

TIME_LIMITS = ("truncate", "terminate")
"""What reaching ``max_steps`` means: ``truncate`` (gymnasium's; training bootstraps with ``V(s_T)``) or
``terminate`` (the episode failed there; no bootstrap, the value after it is 0)."""

INFO_KEYS = ("action", "raw_action", "action_valid", "episode_step", "progression")
"""Keys present in every ``info`` dict a TextEnv returns (``success`` is added when the episode ends)."""

STATE_HEADER = b"verlog.textenv.state/2\n"
"""First bytes of a state from :meth:`TextEnv.get_state`; a SHA-256 digest of the pickled payload follows."""
_STATE_KEYS = ("game", "episode_step", "episode_over", "max_steps", "last_obs", "np_random")

INVALID_ACTION_FEEDBACK = (
    "\n\nYour previous output did not contain a valid action. Defaulted to action: {default}\n\nObservation:\n"
)
"""BALROG's prefix on the next observation after an invalid answer (docs/text-envs.md, "Answers")."""

__all__ = [
    "INFO_KEYS",
    "INVALID_ACTION_FEEDBACK",
    "TIME_LIMITS",
    "ParseMode",
    "TextActionSpace",
    "TextEnv",
    "TextObservation",
    "TextObservationSpace",
]


@dataclass(frozen=True)
class TextObservation:
    """One observation of a text env.

    Attributes:
        text: exactly what the agent is shown as the current observation (short-term context, a newline, then the
            long-term context; only the long-term context when the short-term one is empty).
        long_term: the part of the observation that goes into the history of later prompts.
        short_term: the part shown only with the current observation (e.g. Crafter's status and inventory).
        image: an RGB array ``[H, W, 3]`` uint8 (the env's picture of this state), or None (text only, the
            default). Checked when built: anything else raises :class:`envs.errors.EnvImageError`.
    """

    text: str
    long_term: str
    short_term: str = ""
    image: np.ndarray | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.image is not None:
            check_image(self.image)

    @classmethod
    def build(cls, long_term: str, short_term: str = "", image: np.ndarray | None = None) -> TextObservation:
        """Compose ``text`` from the two contexts as BALROG does for the current observation."""
        text = f"{short_term}\n{long_term}" if short_term else long_term
        return cls(text=text, long_term=long_term, short_term=short_term, image=image)

    def with_prefix(self, prefix: str) -> TextObservation:
        """The same observation with ``prefix`` put in front of the long-term context (and so of ``text``)."""
        return TextObservation.build(prefix + self.long_term, self.short_term, self.image)


class TextActionSpace(gym.spaces.Text):
    """Any string is a member (a model may write anything; the env's parser decides what it means).

    ``sample()`` draws printable ASCII strings of up to ``max_length`` characters.
    """

    def __init__(self, max_length: int = 256) -> None:
        super().__init__(max_length=max_length, min_length=0, charset=string.printable)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str)


class TextObservationSpace(gym.spaces.Space):
    """A gymnasium space whose members are :class:`TextObservation` objects."""

    def __init__(self) -> None:
        super().__init__(shape=None, dtype=None)

    def contains(self, x: Any) -> bool:
        return isinstance(x, TextObservation)

    def sample(self, mask: Any = None, probability: Any = None) -> TextObservation:
        return TextObservation.build("")

    @property
    def is_np_flattenable(self) -> bool:
        return False


def check_either(name: str, value: Any, options: tuple[str, str]) -> None:
    """Raise ValueError naming the argument ``name`` unless ``value`` is one of its two ``options``."""
    if value not in options:
        raise ValueError(f"{name} must be {options[0]!r} or {options[1]!r}, got {value!r}")


class RecordsEnvId:
    """Marks an env whose saved states carry the registered id it was built from: :func:`envs.registry.make` sets
    its ``env_id`` (:class:`TextEnv`, :class:`envs.multitask.MultiTaskEnv`)."""

    env_id: str | None = None


class TextEnv(gym.Env, RecordsEnvId):
    """Base class of verlog's text environments.

    Subclasses set ``actions`` (the valid action strings), ``default_action``, ``max_steps``, ``provides_images``
    (True when they attach an image to their observations once ``images=True``) and implement:

    - ``_game_reset(seed, options) -> (TextObservation, info)``: start a new episode.
    - ``_game_step(action: str) -> (TextObservation, reward, terminated, info)``: execute one valid action string.
    - ``_game_instruction() -> str``: this episode's task prompt, including the valid actions.
    - ``_game_progression() -> float``: BALROG's progression in [0, 1] so far in this episode.
    - ``_game_success() -> bool``: whether the episode counts as solved.
    - ``_game_get_state() -> Any`` / ``_game_set_state(state)``: picklable state that restores the episode exactly,
      RNG included.

    Args:
        parse_mode: ``"strict"`` (BALROG's chain-of-thought parsing), ``"naive"`` (BALROG's naive agent) or
            ``"lenient"`` (see ``envs.actions``).
        format_penalty: on an invalid answer ``format_penalty`` is subtracted from the step reward (the env's own
            reward is kept, so a goal reached by the default action is still rewarded); 0 turns it off. Verlog and
            BALROG's training code replace the reward instead, which makes a success after an invalid answer worth
            ``-format_penalty`` (docs/design.md, "Format penalty").
        invalid_action_feedback: put BALROG's "did not contain a valid action" line before the next observation.
        binary_reward: turn any positive step reward into 1.0 (Verlog's BabyAI setting); applied before the format
            penalty.
        max_steps: override the game's step limit.
        images: attach the game's RGB picture of each state to its observations (``TextObservation.image``); off
            by default, so that text-only runs draw nothing. An env whose ``provides_images`` is False refuses it
            (:class:`envs.errors.EnvImageError`).
        time_limit: ``"truncate"`` (default): reaching the step limit gives ``truncated=True`` and training
            bootstraps the value of the state it stopped in; ``"terminate"``: it gives ``terminated=True`` (the task
            failed at the limit; BALROG scores it so), and the value after it is 0. ``info["time_limit_reached"]``
            is True on that step either way.
    """

    metadata: ClassVar[dict[str, Any]] = {
        "render_modes": ["rgb_array"],
        "render_fps": 10,
    }
    actions: list[str]
    default_action: str
    max_steps: int
    provides_images: ClassVar[bool] = False
    """Whether observations carry an image when built with ``images=True`` (the game draws one)."""
    env_id: str | None = None
    """The registered id this env was built from (set by ``envs.make``); saved states carry it."""

    def __init__(
        self,
        *,
        parse_mode: ParseMode = "strict",
        format_penalty: float = 0.0,
        invalid_action_feedback: bool = False,
        max_steps: int | None = None,
        render_mode: str | None = "rgb_array",
        binary_reward: bool = False,
        time_limit: str = "truncate",
        images: bool = False,
    ) -> None:
        if images and not self.provides_images:
            raise EnvImageError(
                f"{type(self).__name__} draws no images, so images=True cannot be met: drop it (text only), or use "
                "an env that draws them (babyai/*, crafter/default, babaisai/*, toy/visual, a GymTextAdapter with "
                "images=...)"
            )
        self.images = bool(images)
        if parse_mode not in PARSE_MODES:
            raise ValueError(f"parse_mode must be one of {PARSE_MODES}, got {parse_mode!r}")
        if format_penalty < 0:
            raise ValueError(f"format_penalty must be >= 0 (it is subtracted), got {format_penalty}")
        if max_steps is not None and max_steps <= 0:
            raise ValueError(f"max_steps must be a positive number of steps, got {max_steps}")
        if time_limit not in TIME_LIMITS:
            raise ValueError(f"time_limit must be one of {TIME_LIMITS}, got {time_limit!r}")
        self.time_limit = time_limit
        self.parse_mode: ParseMode = parse_mode
        self.format_penalty = float(format_penalty)
        self.binary_reward = bool(binary_reward)
        self.invalid_action_feedback = invalid_action_feedback
        self._max_steps_override = max_steps
        self.render_mode = render_mode
        self.observation_space = TextObservationSpace()
        self.action_space = TextActionSpace()
        self.episode_step = 0
        self._episode_over = True
        self._last_obs: TextObservation | None = None

    # ----------------------------------------------------------------- public API
    @property
    def instruction(self) -> str:
        """This episode's task prompt, including the valid actions."""
        return self._game_instruction()

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[TextObservation, dict[str, Any]]:
        super().reset(seed=seed)
        obs, game_info = self._game_reset(seed, options)
        if self._max_steps_override is not None:
            self.max_steps = self._max_steps_override
        self.episode_step = 0
        self._episode_over = False
        self._last_obs = obs
        info = {
            **game_info,
            "action": None,
            "raw_action": None,
            "action_valid": True,
            "episode_step": 0,
            "progression": float(self._game_progression()),
        }
        return obs, info

    def step(self, action: str) -> tuple[TextObservation, float, bool, bool, dict[str, Any]]:
        if self._episode_over:
            raise EnvStateError(
                f"{type(self).__name__}.step() called after the episode ended (or before reset()); call reset() first"
            )
        if not isinstance(action, str):
            raise TypeError(f"a text env takes the model's text as its action, got {type(action).__name__}")
        executed, valid = self.parse(action)
        obs, reward, terminated, game_info = self._game_step(executed)
        self.episode_step += 1
        if self.binary_reward and reward > 0:
            reward = 1.0
        if not valid:
            reward -= self.format_penalty
            if self.invalid_action_feedback:
                obs = obs.with_prefix(INVALID_ACTION_FEEDBACK.format(default=self.default_action))
        limit_reached = (not terminated) and self.episode_step >= self.max_steps
        truncated = limit_reached and self.time_limit == "truncate"
        terminated = bool(terminated) or (limit_reached and self.time_limit == "terminate")
        info = {
            **game_info,
            "action": executed,
            "raw_action": action,
            "action_valid": valid,
            "episode_step": self.episode_step,
            "progression": float(self._game_progression()),
        }
        if limit_reached:
            info["time_limit_reached"] = True
        if terminated or truncated:
            self._episode_over = True
            info["success"] = bool(self._game_success())
        self._last_obs = obs
        return obs, float(reward), bool(terminated), bool(truncated), info

    def parse(self, text: str) -> tuple[str, bool]:
        """The action string to execute for the model's ``text`` and whether ``text`` was a valid answer."""
        parsed = action_parsing.parse_action(text, self.actions, mode=self.parse_mode, synonyms=self.synonyms())
        if parsed is None:
            return self.default_action, False
        return parsed, True

    def parsed_output(self, text: str) -> str:
        """The answer string this env's parse mode reads out of ``text``, valid or not.

        BALROG puts this string (not the executed action) into the history as the assistant's turn.
        """
        return action_parsing.extract(text, self.parse_mode)

    def synonyms(self) -> dict[str, str]:
        """Extra exact rewrites used by the lenient parser (lower-case key -> action string). Games may override."""
        return {}

    def get_state(self) -> bytes:
        """The whole episode as bytes: ``set_state`` on a fresh env of the same id (any process) continues it.

        The bytes are :data:`STATE_HEADER`, a SHA-256 digest, then the pickled payload (the game's state, step
        count, step limit, last observation, RNG, and the env's kind and id, which ``set_state`` checks).
        """
        payload = {
            "game": self._game_get_state(),
            "episode_step": self.episode_step,
            "episode_over": self._episode_over,
            "max_steps": self.max_steps,
            "last_obs": self._last_obs,
            "np_random": self.np_random.bit_generator.state if self._np_random is not None else None,
            "kind": self._state_kind(),
            "env_id": self.env_id,
        }
        body = pickle.dumps(payload)
        return seal(STATE_HEADER, body)

    def set_state(self, state: bytes) -> None:
        """Restore what :meth:`get_state` returned.

        Raises:
            EnvStateError: the bytes are not a state, are corrupted (checksum), come from another kind of env or
                another env id, or the game cannot take them; the env is then unchanged.
        """
        payload = self._read_state(state)
        try:
            backup = self._read_state(self.get_state())
        except Exception:  # nothing to go back to (e.g. never reset): a failed restore leaves no episode running
            backup = None
        try:
            self._apply_state(payload)
        except Exception as exc:
            if backup is not None:
                self._apply_state(backup)
            else:
                self._episode_over = True
            raise EnvStateError(
                f"cannot restore {type(self).__name__} from this state ({type(exc).__name__}: {exc}); the env is "
                "unchanged"
            ) from exc

    def _state_kind(self) -> str:
        """What kind of env a state belongs to (the class); ``set_state`` refuses a state of another kind."""
        return f"{type(self).__module__}.{type(self).__qualname__}"

    def _read_state(self, state: Any) -> dict[str, Any]:
        """The checked payload of ``state`` (see :meth:`get_state`), or EnvStateError naming what is wrong."""
        name = type(self).__name__
        if not isinstance(state, (bytes, bytearray, memoryview)):
            raise EnvStateError(
                f"cannot restore {name}: a state is the bytes get_state() returned, got {type(state).__name__}"
            )
        data = bytes(state)
        try:
            body = unseal(STATE_HEADER, data)
        except ChecksumMismatch as exc:
            raise EnvStateError(
                f"cannot restore {name}: the state is corrupted ({exc}); restore from another copy or checkpoint"
            ) from exc
        if body is None:  # a state saved before states carried a checksum (payload only)
            body = data
        try:
            payload = pickle.loads(body)
        except Exception as exc:
            raise EnvStateError(f"cannot restore {name} from the given bytes: not a TextEnv state ({exc})") from exc
        missing = [k for k in _STATE_KEYS if not isinstance(payload, dict) or k not in payload]
        if missing:
            raise EnvStateError(f"cannot restore {name} from the given bytes: not a TextEnv state (no {missing})")
        saved_id = payload.get("env_id")
        if saved_id is not None and self.env_id is not None and saved_id != self.env_id:
            raise EnvStateError(
                f"cannot restore {name}: the state was saved by env {saved_id!r}, this env is {self.env_id!r}; "
                f"restore it into a {saved_id!r} env"
            )
        kind, mine = payload.get("kind"), self._state_kind()
        if kind is not None and kind != mine:
            raise EnvStateError(
                f"cannot restore {name}: the state is of a {kind} env (id {payload.get('env_id')!r}), this env is a "
                f"{mine} (id {self.env_id!r}); restore it into an env built like the one that saved it"
            )
        if not isinstance(payload["episode_step"], int) or not isinstance(payload["max_steps"], int):
            raise EnvStateError(f"cannot restore {name}: episode_step and max_steps of the state are not integers")
        if payload["last_obs"] is not None and not isinstance(payload["last_obs"], TextObservation):
            raise EnvStateError(f"cannot restore {name}: the state's last observation is not a TextObservation")
        return payload

    def _apply_state(self, payload: dict[str, Any]) -> None:
        self._game_set_state(payload["game"])
        if payload["np_random"] is not None:
            self.np_random.bit_generator.state = payload["np_random"]
        self.episode_step = payload["episode_step"]
        self._episode_over = bool(payload["episode_over"])
        self.max_steps = payload["max_steps"]
        self._last_obs = payload["last_obs"]

    @property
    def last_observation(self) -> TextObservation | None:
        """The most recent observation (after reset or step), or None before the first reset."""
        return self._last_obs

    # ----------------------------------------------------------------- hooks for games
    def _game_reset(self, seed: int | None, options: dict[str, Any] | None) -> tuple[TextObservation, dict[str, Any]]:
        raise NotImplementedError

    def _game_step(self, action: str) -> tuple[TextObservation, float, bool, dict[str, Any]]:
        raise NotImplementedError

    def _game_instruction(self) -> str:
        raise NotImplementedError

    def _game_progression(self) -> float:
        raise NotImplementedError

    def _game_success(self) -> bool:
        raise NotImplementedError

    def _game_get_state(self) -> Any:
        raise NotImplementedError

    def _game_set_state(self, state: Any) -> None:
        raise NotImplementedError
