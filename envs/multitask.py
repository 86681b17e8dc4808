"""MultiTaskEnv: one text env that plays a different task (env id) from one episode to the next.

It holds one sub-env per task family, built lazily from ``envs.make(env_id, **kwargs)``, and
``reset(seed=..., options={"task": family})`` switches to that family's env: observations, instruction, actions and
info are the active sub-env's, and every ``info`` carries ``info["task"] = family``. Without a ``task`` option a
reset keeps the current family (the first one listed before any). Other options go to the sub-env's reset.

Registered as :data:`MULTITASK_ENV_ID` (``"multitask"``), so an :class:`envs.pool.EnvPool` slot can be one::

    EnvPool("multitask", num_envs=8, env_kwargs={"tasks": {"goto": "babyai/goto", "pickup": "babyai/pickup"},
                                                 "env_kwargs": {"parse_mode": "lenient"}})

and the pool's ``set_next_options(slot, {"task": "pickup"})`` chooses the task of the slot's next episode, which
the worker's auto-reset uses (the curriculum lives in the main process, ``verlog.algorithms.curriculum``).

States (``get_state``/``set_state``) are checksummed (``envs.sealed``) and hold the task list (name -> env id), the
active family and the active sub-env's own state (which carries its env id and kind); ``set_state`` refuses a state
of another task list, a corrupted one or one the sub-env refuses, and then leaves the env unchanged. Only the active
sub-env's state is kept: the others are idle between episodes and every episode the pool starts is seeded.
"""

from __future__ import annotations

import contextlib
import difflib
import pickle
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym

from envs.core import RecordsEnvId, TextActionSpace, TextObservation, TextObservationSpace
from envs.errors import EnvError, EnvStateError
from envs.registry import make, register, registered_factory
from envs.sealed import ChecksumMismatch, seal, unseal

MULTITASK_ENV_ID = "multitask"
"""The registered id of :class:`MultiTaskEnv`."""

TASK_OPTION = "task"
"""The reset option (and info key) that names the family of an episode."""

STATE_HEADER = b"verlog.multitask.state/1\n"
"""First bytes of a :meth:`MultiTaskEnv.get_state` state; a SHA-256 digest of the pickled payload follows."""

TaskSpec = str | Callable[..., Any] | Mapping[str, Any]
"""A task: an env id, a factory (a module-level callable returning a TextEnv, as for :class:`envs.pool.EnvPool`), or
``{"env_id": id or factory, "kwargs": {...}}`` (its kwargs override the shared ``env_kwargs``)."""

__all__ = ["MULTITASK_ENV_ID", "TASK_OPTION", "MultiTaskEnv", "UnknownTaskError", "task_env_ids"]


class UnknownTaskError(EnvError, KeyError):
    """A task family that the MultiTaskEnv does not hold (a reset option, or a bad task list)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


def _name(spec: str | Callable[..., Any]) -> str:
    """An env id, or ``module:qualname`` of a factory (what saved states compare)."""
    if isinstance(spec, str):
        return spec
    return f"{getattr(spec, '__module__', '?')}:{getattr(spec, '__qualname__', repr(spec))}"


def _parse_tasks(tasks: Any) -> dict[str, tuple[str | Callable[..., Any], dict[str, Any]]]:
    """``{family: (env id or factory, own_kwargs)}`` from a mapping (family -> TaskSpec) or a list of env ids."""
    if tasks is None:
        raise UnknownTaskError(
            "a MultiTaskEnv needs tasks: MultiTaskEnv(tasks={'goto': 'babyai/goto', ...}) or, in a config, "
            "env.kwargs.tasks"
        )
    if isinstance(tasks, str) or not isinstance(tasks, (Mapping, Sequence)):
        raise UnknownTaskError(
            f"tasks must be a mapping family -> env id (or {{'env_id': ..., 'kwargs': {{...}}}}) or a list of env "
            f"ids, got {tasks!r}"
        )
    items = list(tasks.items()) if isinstance(tasks, Mapping) else [(_name(t), t) for t in tasks]
    if not items:
        raise UnknownTaskError("a MultiTaskEnv needs at least one task; list them in tasks")
    out: dict[str, tuple[str | Callable[..., Any], dict[str, Any]]] = {}
    for name, spec in items:
        if not isinstance(name, str) or not name:
            raise UnknownTaskError(f"task names must be non-empty strings, got {name!r}")
        if name in out:
            raise UnknownTaskError(f"task {name!r} is listed twice; give each task a distinct name")
        if isinstance(spec, str) or callable(spec):
            out[name] = (spec, {})
        elif isinstance(spec, Mapping) and (isinstance(spec.get("env_id"), str) or callable(spec.get("env_id"))):
            unknown = set(spec) - {"env_id", "kwargs"}
            if unknown:
                raise UnknownTaskError(f"task {name!r} has unknown keys {sorted(unknown)}: use env_id and kwargs")
            out[name] = (spec["env_id"], dict(spec.get("kwargs") or {}))
        else:
            raise UnknownTaskError(
                f"task {name!r} is {spec!r}: give an env id, a factory or {{'env_id': ..., 'kwargs': {{...}}}}"
            )
    return out


def task_env_ids(tasks: Any) -> dict[str, str]:
    """``{family: env id}`` of a ``tasks`` argument of :class:`MultiTaskEnv` (checked like the constructor; a
    factory appears as ``module:qualname``)."""
    return {name: _name(spec) for name, (spec, _) in _parse_tasks(tasks).items()}


class MultiTaskEnv(gym.Env, RecordsEnvId):
    """A text env that switches between task families (each its own registered env id) at reset.

    Args:
        tasks: ``{family: env id or factory}``, ``{family: {"env_id": id or factory, "kwargs": {...}}}`` or a list
            of env ids (each its own family name). A factory must pickle by reference (a module-level callable) for a
            subprocess pool. Ids are checked here (unknown ids raise ``UnknownEnvError`` with close matches); the
            sub-envs are built on the first episode of their family.
        env_kwargs: keyword arguments for every sub-env (``parse_mode``, ``format_penalty``, ...); a task's own
            kwargs override them.
        task: the family of the first episode when ``reset`` names none (default: the first listed).

    Attributes other than the ones below (``actions``, ``default_action``, ``max_steps``, ``parse``, ...) are read
    from the active sub-env.
    """

    metadata: dict[str, Any] = {"render_modes": ["rgb_array"], "render_fps": 10}  # noqa: RUF012
    env_id: str | None = None
    """The registered id this env was built from (``"multitask"`` through ``envs.make``)."""

    def __init__(
        self, tasks: Any = None, *, env_kwargs: Mapping[str, Any] | None = None, task: str | None = None
    ) -> None:
        self._specs = _parse_tasks(tasks)
        for spec, _ in self._specs.values():
            if isinstance(spec, str):
                registered_factory(spec)  # unknown ids fail now, with close matches
        self.env_kwargs = dict(env_kwargs or {})
        self.task_names: tuple[str, ...] = tuple(self._specs)
        self.task_ids: dict[str, str] = {name: _name(spec) for name, (spec, _) in self._specs.items()}
        """``{family: env id}`` (``module:qualname`` for a factory); saved states carry it."""
        self._envs: dict[str, Any] = {}
        self._task = self._check_task(task) if task is not None else self.task_names[0]
        self._started = False
        self.observation_space = TextObservationSpace()
        self.action_space = TextActionSpace()

    # ------------------------------------------------------------------------------------------- tasks
    def _check_task(self, task: Any) -> str:
        if task not in self._specs:
            close = difflib.get_close_matches(str(task), self.task_names, n=3, cutoff=0.5)
            hint = f" Did you mean: {', '.join(close)}?" if close else ""
            raise UnknownTaskError(
                f"unknown task {task!r}.{hint} This MultiTaskEnv holds {list(self.task_names)}; add it to tasks"
            )
        return task

    def task_env(self, task: str) -> Any:
        """The sub-env of family ``task`` (built on first use)."""
        task = self._check_task(task)
        if task not in self._envs:
            spec, own = self._specs[task]
            kwargs = {**self.env_kwargs, **own}
            self._envs[task] = make(spec, **kwargs) if isinstance(spec, str) else spec(**kwargs)
        return self._envs[task]

    @property
    def task(self) -> str:
        """The family of the current episode (the next one's when no episode was started yet)."""
        return self._task

    @property
    def active_env(self) -> Any:
        """The sub-env of the current family."""
        return self.task_env(self._task)

    # ------------------------------------------------------------------------------------------- gymnasium API
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[TextObservation, dict[str, Any]]:
        """Start an episode of ``options["task"]`` (default: the current family) with ``seed``; the other options
        go to the sub-env's reset."""
        super().reset(seed=seed)  # gymnasium's contract (this env's own generator is not used for the episode)
        options = dict(options or {})
        task = self._check_task(options.pop(TASK_OPTION, self._task))
        obs, info = self.task_env(task).reset(seed=seed, options=options or None)
        self._task = task
        self._started = True
        return obs, {**info, TASK_OPTION: task}

    def step(self, action: str) -> tuple[TextObservation, float, bool, bool, dict[str, Any]]:
        if not self._started:
            raise EnvStateError("MultiTaskEnv.step() called before reset(); call reset() first")
        obs, reward, terminated, truncated, info = self.active_env.step(action)
        return obs, reward, terminated, truncated, {**info, TASK_OPTION: self._task}

    def render(self) -> Any:
        return self.active_env.render()

    def close(self) -> None:
        for env in self._envs.values():
            with contextlib.suppress(Exception):  # closing must reach every sub-env
                env.close()
        self._envs.clear()
        self._started = False

    # ------------------------------------------------------------------------------------------- TextEnv API
    @property
    def instruction(self) -> str:
        """The current episode's instruction (the active sub-env's)."""
        return self.active_env.instruction

    @property
    def last_observation(self) -> TextObservation | None:
        """The most recent observation of the current episode, or None before the first reset."""
        return self.active_env.last_observation if self._started else None

    def __getattr__(self, name: str) -> Any:
        """Anything else a TextEnv has (``actions``, ``max_steps``, ``parse``, ...) comes from the active sub-env."""
        if name.startswith("_") or "_specs" not in self.__dict__:
            raise AttributeError(name)
        return getattr(self.active_env, name)

    def get_state(self) -> bytes:
        """The current episode as bytes: the task list, the active family and the active sub-env's own state."""
        if not self._started:
            raise EnvStateError("MultiTaskEnv.get_state() called before reset(): there is no episode to save")
        payload = {
            "kind": type(self).__name__,
            "env_id": self.env_id,
            "tasks": dict(self.task_ids),
            "task": self._task,
            "state": self.active_env.get_state(),
        }
        return seal(STATE_HEADER, pickle.dumps(payload))

    def set_state(self, state: bytes) -> None:
        """Restore what :meth:`get_state` returned (in any process).

        Raises:
            EnvStateError: not a MultiTaskEnv state, corrupted (checksum), saved with another task list, or refused by
                the sub-env; the env is then unchanged.
        """
        if not isinstance(state, (bytes, bytearray, memoryview)):
            raise EnvStateError(
                f"cannot restore MultiTaskEnv: a state is the bytes get_state() returned, got {type(state).__name__}"
            )
        try:
            body = unseal(STATE_HEADER, bytes(state))
        except ChecksumMismatch as exc:
            raise EnvStateError(
                f"cannot restore MultiTaskEnv: the state is corrupted ({exc}); restore from another copy"
            ) from exc
        if body is None:
            raise EnvStateError(
                "cannot restore MultiTaskEnv: the bytes are not a MultiTaskEnv state (of another kind of env?); "
                "restore it into an env built like the one that saved it"
            )
        payload = pickle.loads(body)
        if payload.get("tasks") != self.task_ids:
            raise EnvStateError(
                f"cannot restore MultiTaskEnv: the state was saved with tasks {payload.get('tasks')}, this env holds "
                f"{self.task_ids}; restore it into a MultiTaskEnv with the same tasks"
            )
        saved_id = payload.get("env_id")
        if saved_id is not None and self.env_id is not None and saved_id != self.env_id:
            raise EnvStateError(
                f"cannot restore MultiTaskEnv: the state was saved by env {saved_id!r}, this env is {self.env_id!r}"
            )
        task = payload["task"]
        self.task_env(task).set_state(payload["state"])  # checks and refuses on its own, leaving itself unchanged
        self._task = task
        self._started = True


register(MULTITASK_ENV_ID, MultiTaskEnv)
