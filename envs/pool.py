"""EnvPool: many text envs stepped together in subprocess workers, surviving crashes, kills and hangs.

Layout: N env *slots* live in W worker processes (multiprocessing "spawn" context), several slots per worker, so one
pipe message carries the steps of all the worker's envs. ``step(actions)`` sends one message to every worker, the
workers step their envs in parallel, and the pool gathers the replies. ``step_slots({slot: action})`` steps only
some slots (only their workers get a message; the other slots' envs stay where they are), e.g. one slot group of a
pipelined rollout while another group generates.

Episodes auto-reset in the worker, gymnasium's SAME_STEP style: when a slot's episode ends, ``step`` returns that
step's reward and terminated/truncated flags, the *next* episode's first observation, and an info dict that holds
the reset info plus ``final_observation`` and ``final_info`` (the ended episode's last observation and info).

Every episode is seeded, so that the pool is reproducible and an env can be rebuilt after a failure: ``reset(seeds)``
seeds each slot's first episode; later episodes of a slot draw their seeds from a generator seeded with it.

The main process chooses what a slot's next episode is, although the worker starts it: ``set_next_options(slot,
options)`` sets the reset options of the slot's next episodes (e.g. ``{"task": "pickup"}`` for an
:class:`envs.multitask.MultiTaskEnv`, whose task the main process's curriculum draws); ``episode_task(slot)`` is the
task of the slot's current episode (its reset info's ``"task"``), also in ``final_info["task"]`` when it ends.

Faults. An env that raises, a worker that dies (killed, ``os._exit``) and an env call that runs longer than
``step_timeout`` never make ``step`` raise. The failing slot's episode ends as ``truncated=True`` with
``info["env_error"]`` (the traceback, or what happened) and a fresh episode starts in that slot. A dead or hung
worker is replaced by a new process; its other slots are rebuilt from their last checkpoint (the episode's seed, or
a state from ``restore_slots``) by replaying the actions since, checked against the last observation, so their
episodes go on unchanged. Only when a slot cannot be rebuilt that way (its replay fails or differs) does its episode
end too, with ``env_error`` saying why. An env that returns a bad result (an observation that is not text, a reward
that is not a finite number, an info that is not a dict) is a fault of that slot too: ``env_error`` starts with
``EnvOutputError:``. Info values a worker cannot pickle are replaced by a note (``info["env_warning"]``, a warning
once per slot) and the episode goes on. A call that does not finish (Ctrl-C, or an :class:`EnvPoolError` such as an
env returning an unpicklable observation) is undone: the next call rebuilds the workers from the records kept
before it. States (``slot_states``) carry a checksum and the slot's env id; ``restore_slots`` refuses a corrupted or
mismatched one with :class:`EnvStateError` and restores all of its slots or none. ``stats`` counts worker
restarts, env errors and unpicklable infos. ``close()``, ``with EnvPool(...)``, garbage collection and
interpreter exit all stop every worker. The worker side (processes, messages) lives in ``envs/pool_worker.py``.

Backends (``backend=``): ``"subprocess"`` (the default) runs the workers as spawned processes of this one;
``"ray"`` runs each worker as a Ray actor, placed on any node of the Ray cluster that has its resources
(``envs/pool_ray.py``, docs/ray-envs.md), with the same recovery, replay and states; ``"in_process"`` runs the same
slots in the calling process (for debugging with pdb and plain tracebacks): env exceptions are still turned into
``env_error``, but a hang or ``os._exit`` cannot be caught there (``in_process=True`` is its old spelling). Every
backend steps the envs with the same :class:`envs.pool_worker.SlotRunner`.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import difflib
import multiprocessing
import os
import pickle
import warnings
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from envs.core import TextObservation
from envs.errors import EnvPoolError, EnvStateError
from envs.pool_worker import INFO_WARNING, Failure, LocalWorker, PoolWorker, ProcessWorker, shutdown
from envs.registry import registered_factory
from envs.sealed import ChecksumMismatch, seal, unseal

Factory = Callable[..., Any]
StepResult = tuple[TextObservation, float, bool, bool, dict[str, Any]]
"""``(obs, reward, terminated, truncated, info)`` of one slot."""

DRAWN_SEED_END = 2**31 - 1
"""Seeds a slot draws for its later episodes lie in ``[0, DRAWN_SEED_END)``; seeds from ``2**31`` up are never drawn
(evaluation can reserve them: :func:`drawn_seeds`)."""
_STATE_FORMAT = "verlog.envpool.slot/1"
_STATE_HEADER = b"verlog.envpool.slot/2\n"  # then a SHA-256 digest of the pickled record, then the record
_MAX_ATTEMPTS = 3

BACKENDS: tuple[str, ...] = ("subprocess", "ray", "in_process")
"""Where a pool's workers run (``EnvPool(backend=...)``, ``env.backend``)."""


class EnvBackendError(EnvPoolError, ValueError):
    """An unknown pool backend, or ``backend`` and the old ``in_process`` flag saying different things."""


def pool_backend(backend: str | None, in_process: bool = False) -> str:
    """The backend that ``backend`` and the old ``in_process`` flag choose (None: ``in_process`` decides, so
    ``in_process=True`` alone means ``"in_process"``); :class:`EnvBackendError` for an unknown one or a conflict."""
    if backend is None:
        return "in_process" if in_process else "subprocess"
    if backend not in BACKENDS:
        close = difflib.get_close_matches(str(backend), BACKENDS, n=1, cutoff=0.5)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise EnvBackendError(f"unknown env pool backend {backend!r}: use one of {', '.join(BACKENDS)}.{hint}")
    if in_process and backend != "in_process":
        raise EnvBackendError(
            f"in_process=True and backend={backend!r} contradict each other: drop in_process (it means "
            "backend='in_process')"
        )
    return backend


def drawn_seeds(first_seed: int, count: int) -> np.ndarray:
    """The seeds of episodes 2 .. ``count + 1`` of a slot that ``reset(seeds=...)`` started with ``first_seed``.

    A slot reseeded with ``s`` draws each next episode's seed from ``numpy.random.default_rng(s)``, one draw per
    episode, in order (auto-reset, env failures and worker restarts included); a checkpoint restore continues the same
    stream. An episode lasts at least one step, so ``count`` = the steps a slot takes bounds every seed it can reach.
    """
    return np.random.default_rng(int(first_seed)).integers(0, DRAWN_SEED_END, size=int(count))


def _check_seed(seed: Any, where: str) -> int:
    """``seed`` as an int >= 0, or ValueError naming ``where`` it came from."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"{where} is {seed!r}: seeds are integers >= 0 (or None: the slot draws its own)")
    return int(seed)


def _spec_name(spec: Any) -> str:
    """A slot's env as text: the id, or ``module:qualname`` of a factory."""
    if isinstance(spec, str):
        return spec
    module, name = getattr(spec, "__module__", None), getattr(spec, "__qualname__", None)
    return f"{module}:{name}" if module and name else repr(spec)


@dataclasses.dataclass
class _Slot:
    spec: Any
    kwargs: dict[str, Any]
    worker: int
    seed_rng: np.random.Generator
    next_seed: int = 0
    checkpoint: tuple | None = None  # ("seed", seed, options) or ("state", env_bytes): where replay starts
    actions: list[str] = dataclasses.field(default_factory=list)  # actions since the checkpoint
    last_obs: Any = None
    last_info: dict[str, Any] = dataclasses.field(default_factory=dict)
    next_options: dict[str, Any] | None = None  # reset options of the slot's next episode (set by the main process)
    task: str | None = None  # the current episode's task (its reset info's or options' "task")

    def snapshot(self) -> tuple:
        """The records, cheaply (no copies): ``actions`` only grows until an episode starts (which makes a new
        list), and ``seed_rng`` is never changed in place (a draw replaces it by an advanced copy)."""
        records = (self.checkpoint, self.actions, self.last_obs, self.last_info, self.seed_rng, self.next_seed)
        return (*records, len(self.actions), self.task)

    def restore(self, snapshot: tuple) -> None:
        self.checkpoint, self.actions, self.last_obs, self.last_info, self.seed_rng, self.next_seed = snapshot[:6]
        length, self.task = snapshot[6:]
        del self.actions[length:]

    def draw_seed(self) -> None:
        rng = copy.deepcopy(self.seed_rng)  # copy-on-write, so that snapshots stay valid
        self.next_seed = int(rng.integers(0, DRAWN_SEED_END))
        self.seed_rng = rng

    def reseed(self, seed: int) -> None:
        self.seed_rng = np.random.default_rng(seed)
        self.draw_seed()

    def start_episode(self, seed: int | None, options: dict[str, Any] | None, obs: Any, info: dict) -> None:
        """Record that an episode started from ``seed`` and ``options`` (its replay checkpoint) with this first
        observation."""
        self.checkpoint = ("seed", seed, options)
        self.actions = []
        self.last_obs, self.last_info = obs, info
        task = info.get("task", (options or {}).get("task")) if isinstance(info, dict) else None
        self.task = None if task is None else str(task)

    def start_next_episode(self, obs: Any, info: dict) -> None:
        """Record that the slot's next episode started (``next_seed``, ``next_options``), and draw the seed after."""
        self.start_episode(self.next_seed, self.next_options, obs, info)
        self.draw_seed()


class EnvPool:
    """N text envs stepped together, in subprocess workers, Ray actors or in-process.

    Args:
        env_ids_or_factories: one entry per slot: a registered env id (``"babyai/goto"``) or a factory callable that
            returns a TextEnv. A single id or factory with ``num_envs`` makes that many slots of it. In subprocess
            and Ray mode a factory must be importable by module path (a module-level function or class, not a
            lambda); ids are resolved here (unknown ids fail at once) and their factory is sent to the workers.
        num_envs: number of slots when ``env_ids_or_factories`` is a single id or factory.
        num_workers: worker processes (or Ray actors); default ``min(num_envs, os.cpu_count())`` (1 in-process).
            Slots are split into contiguous blocks, one block per worker.
        env_kwargs: keyword arguments for every env (a dict), or one dict per slot.
        step_timeout: seconds one env call (a step, a reset, one replayed step) may run before its worker is
            declared hung and replaced; None waits forever. A Ray worker is timed from the driver: each slot of a
            message gets ``step_timeout`` from the previous slot's result (docs/ray-envs.md).
        start_timeout: seconds a worker may take to start and build its envs.
        seed: seeds the per-slot seed streams used when ``reset`` is called without seeds.
        keep_images: send ``TextObservation.image`` back from the workers (dropped by default: it costs pickling).
        backend: ``"subprocess"`` (default), ``"ray"`` or ``"in_process"`` (:data:`BACKENDS`).
        in_process: the old spelling of ``backend="in_process"`` (debugging; hangs and hard exits are not caught).
        ray_options: the Ray workers' resource requests (:class:`envs.pool_ray.RayWorkerOptions`; default one CPU
            per worker); only with ``backend="ray"``.

    Not thread-safe: use a pool from one thread.
    """

    def __init__(
        self,
        env_ids_or_factories: str | Factory | Sequence[str | Factory],
        *,
        num_envs: int | None = None,
        num_workers: int | None = None,
        env_kwargs: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
        step_timeout: float | None = 60.0,
        start_timeout: float = 120.0,
        seed: int | None = None,
        keep_images: bool = False,
        in_process: bool = False,
        backend: str | None = None,
        ray_options: Any = None,
    ) -> None:
        self.backend = pool_backend(backend, in_process)
        in_process = self.backend == "in_process"
        if ray_options is not None and self.backend != "ray":
            raise EnvBackendError(f"ray_options are for backend='ray', not {self.backend!r}: drop them")
        specs = self._slot_specs(env_ids_or_factories, num_envs)
        n = len(specs)
        kwargs_list = self._slot_kwargs(env_kwargs, n)
        if num_workers is None:
            num_workers = 1 if in_process else min(n, os.cpu_count() or 1)
        if not 1 <= num_workers <= n:
            raise ValueError(f"num_workers must be between 1 and the number of envs ({n}), got {num_workers}")
        if step_timeout is not None and step_timeout <= 0:
            raise ValueError(f"step_timeout must be a positive number of seconds or None, got {step_timeout}")
        if seed is not None:
            _check_seed(seed, "EnvPool(seed=...)")
        self.num_envs = n
        self.num_workers = num_workers
        self.step_timeout = step_timeout
        self.start_timeout = start_timeout
        self.in_process = in_process
        self.keep_images = keep_images
        self.env_ids = [_spec_name(s) for s in specs]
        """Each slot's env: its id, or ``module:qualname`` of its factory (saved states carry it)."""
        sent_specs = [s if in_process else self._picklable_spec(s) for s in specs]
        seed_rngs = [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(n)]
        self._slots = [
            _Slot(sent_specs[i], kwargs_list[i], worker=i * num_workers // n, seed_rng=seed_rngs[i]) for i in range(n)
        ]
        for slot in self._slots:
            slot.draw_seed()
        self._ctx = multiprocessing.get_context("spawn")
        self._ray_options: Any = None
        if self.backend == "ray":
            from envs.pool_ray import RayWorkerOptions, check_resources, connect_ray

            self._ray_options = RayWorkerOptions.of(ray_options)
            connect_ray()
            check_resources(self._ray_options)
        self._workers: list[PoolWorker] = []
        self._finalizer = weakref.finalize(self, shutdown, self._workers)
        self._closed = False
        self._needs_reset = True
        self._stale: set[int] = set()  # workers whose envs may be ahead of the parent's records (interrupted call)
        self._cut: dict[int, StepResult] = {}  # slots not stepped whose episode a worker restart lost (step_slots)
        self.stats = {"worker_restarts": 0, "env_errors": 0}
        """Counters since construction: worker processes replaced, episodes cut by an env fault (an exception, a
        dead or hung worker, or a bad output: an observation that is not text, a non-finite reward); once it
        happens, ``info_not_picklable``: results whose info held values a worker could not send (warned once per
        slot)."""
        self._warned: set[int] = set()
        try:
            for w in range(num_workers):
                self._workers.append(self._new_worker(w))
            for w, reply in self._gather(list(range(num_workers)), self.start_timeout).items():
                self._check_build(w, reply)
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------------------------------- construction
    @staticmethod
    def _slot_specs(given: Any, num_envs: int | None) -> list[Any]:
        if isinstance(given, str) or callable(given):
            count = 1 if num_envs is None else num_envs
            specs = [given] * count
        else:
            specs = list(given)
            if num_envs is not None and num_envs != len(specs):
                raise ValueError(f"num_envs={num_envs} but {len(specs)} env ids/factories were given; drop num_envs")
        if not specs:
            raise ValueError("EnvPool needs at least one env (got an empty list or num_envs=0)")
        for i, spec in enumerate(specs):
            if not (isinstance(spec, str) or callable(spec)):
                raise TypeError(f"slot {i}: expected an env id or a factory callable, got {type(spec).__name__}")
        return specs

    @staticmethod
    def _slot_kwargs(env_kwargs: Any, n: int) -> list[dict[str, Any]]:
        if env_kwargs is None:
            return [{} for _ in range(n)]
        if isinstance(env_kwargs, Mapping):
            return [dict(env_kwargs) for _ in range(n)]
        kwargs_list = [dict(k) for k in env_kwargs]
        if len(kwargs_list) != n:
            raise ValueError(f"env_kwargs has {len(kwargs_list)} dicts for {n} envs; give one per env, or one dict")
        return kwargs_list

    @staticmethod
    def _picklable_spec(spec: Any) -> Any:
        """What to send to a spawned worker: the resolved factory when it pickles by reference, else the id."""
        if isinstance(spec, str):
            factory = registered_factory(spec)  # unknown ids fail here, with close matches
            try:
                pickle.dumps(factory)
                return factory
            except Exception:  # the worker will look the id up in its own registry
                return spec
        try:
            pickle.dumps(spec)
        except Exception as exc:
            raise ValueError(
                f"env factory {spec!r} cannot be sent to a spawned worker ({exc}); use a module-level function or "
                "class, register an entry point 'package.module:attr', or pass backend='in_process'"
            ) from exc
        return spec

    def _new_worker(self, w: int) -> PoolWorker:
        specs = {i: (s.spec, s.kwargs) for i, s in enumerate(self._slots) if s.worker == w}
        if self.backend == "in_process":
            return LocalWorker(specs, self.keep_images)
        if self.backend == "ray":
            from envs.pool_ray import RayWorker

            return RayWorker(specs, self.keep_images, self._ray_options)
        return ProcessWorker(self._ctx, specs, self.keep_images)

    def _check_build(self, w: int, reply: Any) -> None:
        if isinstance(reply, Failure):
            raise EnvPoolError(f"worker {w} failed while building its envs: {reply.reason}")
        for slot, result in zip(self._workers[w].slots, reply):
            if result[0] != "ok":
                spec = self._slots[slot].spec
                hint = ""
                if isinstance(spec, str):
                    hint = (
                        f"\n(The worker looked up {spec!r} in its own registry: register it with an importable "
                        "factory or an entry point 'package.module:attr' so that spawned workers can build it.)"
                    )
                raise EnvPoolError(f"building the env of slot {slot} failed in worker {w}:\n{result[1]}{hint}")

    # ------------------------------------------------------------------------------------------- messaging
    def _gather(self, ws: list[int], call_timeout: float | None) -> dict[int, Any]:
        """Collect the replies of workers ``ws`` (already sent); a dead or hung worker gives a :class:`Failure`."""
        if not ws:
            return {}
        kind = type(self._workers[ws[0]])  # every worker of a pool is of one kind
        return kind.gather({w: self._workers[w] for w in ws}, call_timeout)

    def _exchange(self, ws: Sequence[int], cmd: str, payloads: Mapping[int, list[tuple]]) -> dict[int, Any]:
        for w in ws:
            self._workers[w].send(cmd, payloads[w])
        return self._gather(list(ws), self.step_timeout)

    def _restart(self, w: int, skip: dict[int, str]) -> dict[int, tuple[str, Any, dict]]:
        """Replace worker ``w`` by a new process and rebuild its slots.

        Slots in ``skip`` (slot -> reason) start a fresh episode; the others are replayed from their checkpoint.
        Returns the slots whose episode was lost: slot -> (reason, first obs of the new episode, its info); those
        new episodes were reset with the slot's ``next_seed`` and the caller records them.
        """
        lost: dict[int, tuple[str, Any, dict]] = {}
        skip = dict(skip)
        self.stats["worker_restarts"] += 1
        for _ in range(len(self._workers[w].slots) + _MAX_ATTEMPTS):
            self._workers[w].stop(grace=0.2)
            self._workers[w] = self._new_worker(w)
            self._check_build(w, self._gather([w], self.start_timeout)[w])
            payload = []
            for i in self._workers[w].slots:
                slot = self._slots[i]
                if i in skip or slot.checkpoint is None:
                    payload.append((i, None, [], None, slot.next_seed, slot.next_options))
                else:
                    expected = getattr(slot.last_obs, "text", None)
                    replay = (slot.checkpoint, list(slot.actions), expected)
                    payload.append((i, *replay, slot.next_seed, slot.next_options))
            reply = self._exchange([w], "restore", {w: payload})[w]
            if isinstance(reply, Failure):
                # Replaying some slot killed or hung the new worker: fresh start for it (or for all, if unknown).
                culprits = [reply.culprit] if reply.culprit is not None else self._workers[w].slots
                for i in culprits:
                    skip.setdefault(i, f"rebuilding the env after a worker restart failed: {reply.reason}")
                continue
            for (i, *_), result in zip(payload, reply):
                if result[0] == "fatal":
                    raise EnvPoolError(f"the env of slot {i} cannot be rebuilt after a worker failure:\n{result[1]}")
                if result[0] == "lost":
                    reason = skip.get(i) or f"the env could not be rebuilt after its worker was restarted:\n{result[1]}"
                    lost[i] = (reason, result[2], result[3])
            return lost
        raise EnvPoolError(f"worker {w} keeps failing while its envs are rebuilt; last reasons: {skip}")

    # ------------------------------------------------------------------------------------------- public API
    def _check_open(self) -> None:
        if self._closed:
            raise EnvStateError("this EnvPool is closed; create a new one")
        while self._stale:  # a call was interrupted (e.g. Ctrl-C): rebuild those workers from the records
            w = min(self._stale)
            for i, (_, obs, info) in self._restart(w, {}).items():
                self._slots[i].start_next_episode(obs, info)
            self._stale.discard(w)

    @contextlib.contextmanager
    def _undo_on_interrupt(self) -> Iterator[None]:
        """If the block does not finish (Ctrl-C, a fatal error), undo it: the slots' records go back to what they
        were before it, and the next call rebuilds every worker from them by replay."""
        saved = [slot.snapshot() for slot in self._slots]
        try:
            yield
        except BaseException:
            for slot, snapshot in zip(self._slots, saved):
                slot.restore(snapshot)
            self._stale.update(range(len(self._workers)))
            raise

    def reset(
        self,
        seeds: int | Sequence[int | None] | None = None,
        options: dict[str, Any] | Sequence[dict[str, Any] | None] | None = None,
    ) -> list[tuple[TextObservation, dict[str, Any]]]:
        """Start a new episode in every slot; returns ``[(obs, info)]`` per slot.

        Args:
            seeds: None (each slot draws from its seed stream), an int ``s`` (slot i gets ``s + i``) or one seed
                (or None) per slot. Later episodes of slot i draw seeds from a generator seeded with its seed.
            options: passed to every env's reset, or one dict per slot.
        """
        self._check_open()
        n = self.num_envs
        if seeds is None:
            seed_list: list[int | None] = [None] * n
        elif isinstance(seeds, (int, np.integer)):
            _check_seed(seeds, "reset(seeds=...)")
            seed_list = [int(seeds) + i for i in range(n)]
        else:
            seed_list = list(seeds)
            if len(seed_list) != n:
                raise ValueError(f"reset() got {len(seed_list)} seeds for {n} envs; give one per env, an int or None")
            for i, seed in enumerate(seed_list):
                if seed is not None:
                    _check_seed(seed, f"reset(): the seed of slot {i} ({self.env_ids[i]})")
        given = list(options) if isinstance(options, Sequence) else [options] * n
        option_list = [copy.deepcopy(o) for o in given]  # the records must not change when the caller's dicts do
        if len(option_list) != n:
            raise ValueError(f"reset() got {len(option_list)} options for {n} envs; give one per env or one dict")
        results: dict[int, tuple[TextObservation, dict[str, Any]]] = {}
        with self._undo_on_interrupt():
            for i, seed in enumerate(seed_list):
                if seed is None:
                    seed_list[i] = self._slots[i].next_seed
                    self._slots[i].draw_seed()
                else:
                    seed_list[i] = int(seed)
                    self._slots[i].reseed(int(seed))
            payloads = {
                w: [(i, seed_list[i], option_list[i]) for i in self._workers[w].slots] for w in range(self.num_workers)
            }
            for w, reply in self._exchange(range(self.num_workers), "reset", payloads).items():
                if isinstance(reply, Failure):  # the worker died or hung: replace it and try once more
                    self._restart(w, {i: reply.reason for i in self._workers[w].slots})
                    reply = self._exchange([w], "reset", payloads)[w]
                    if isinstance(reply, Failure):
                        raise EnvPoolError(f"reset failed twice in worker {w}: {reply.reason} (slot {reply.culprit})")
                for i, result in zip(self._workers[w].slots, reply):
                    if result[0] != "ok":
                        raise EnvPoolError(f"reset of slot {i} failed (also after rebuilding its env):\n{result[1]}")
                    self._slots[i].start_episode(seed_list[i], option_list[i], result[1], result[2])
                    self._report_info_warning(i, result[2])
                    results[i] = (result[1], result[2])
        self._needs_reset = False
        self._cut.clear()
        return [results[i] for i in range(n)]

    def step(self, actions: Sequence[str]) -> list[StepResult]:
        """Step every slot with its action text; returns ``[(obs, reward, terminated, truncated, info)]`` per slot.

        Ended episodes are reset at once (``info["final_observation"]``, ``info["final_info"]``); a failing env or
        worker gives ``truncated=True`` and ``info["env_error"]`` for the affected slot only. Never raises for env
        faults (only :class:`EnvPoolError` when an env cannot even be rebuilt).
        """
        self._check_steppable("step")
        if isinstance(actions, str) or len(actions) != self.num_envs:
            got = "a single string" if isinstance(actions, str) else f"{len(actions)} actions"
            raise ValueError(f"EnvPool.step() needs one action string per env ({self.num_envs}), got {got}")
        results = self._step_slots(dict(enumerate(actions)))
        return [results[i] for i in range(self.num_envs)]

    def step_slots(self, actions: Mapping[int, str]) -> dict[int, StepResult]:
        """Step only the named slots (``slot -> action text``); returns their results, by slot in ascending order.

        Only the workers that hold those slots get a message; every other slot's env stays where it is. Per slot
        the same as :meth:`step` (auto-reset, ``final_observation``/``final_info``, faults as ``env_error``). When a
        worker is replaced while it steps, its slots that were not named are rebuilt by replay; one that cannot be
        rebuilt (its episode is lost) gets its ``truncated`` result with ``env_error`` at its own next step, which
        then does not run its action.
        """
        self._check_steppable("step_slots")
        if not isinstance(actions, Mapping):
            raise TypeError(f"EnvPool.step_slots() takes a mapping slot -> action text, got {type(actions).__name__}")
        for i in actions:
            self._check_slot(i)
        return self._step_slots(actions)

    def _check_steppable(self, call: str) -> None:
        self._check_open()
        if self._needs_reset:
            raise EnvStateError(f"EnvPool.{call}() called before reset(); call reset() first")

    def _step_slots(self, actions: Mapping[int, str]) -> dict[int, StepResult]:
        """Step the named slots (checked by the caller but for the actions' type); see :meth:`step_slots`."""
        named = sorted(int(i) for i in actions)
        for i in named:
            if not isinstance(actions[i], str):
                raise TypeError(f"action {i} must be a str (the model's text), got {type(actions[i]).__name__}")
        payloads: dict[int, list[tuple]] = {}
        for i in named:
            if i not in self._cut:  # a slot whose episode a worker restart lost only gets that result now
                payloads.setdefault(self._slots[i].worker, []).append(self._step_item(i, actions[i]))
        results: dict[int, StepResult] = {}
        with self._undo_on_interrupt():
            for w, reply in self._exchange(list(payloads), "step", payloads).items():
                self._finish_step(w, payloads[w], reply, results)
        for i in named:
            if i in self._cut:
                results[i] = self._cut.pop(i)
                results[i][4]["final_info"]["raw_action"] = actions[i]
        for i in [i for i in results if i not in actions]:  # lost by a restart while other slots stepped
            self._cut[i] = results.pop(i)
        return {i: results[i] for i in named}

    def _finish_step(self, w: int, items: list[tuple], reply: Any, results: dict[int, StepResult]) -> None:
        """Apply worker ``w``'s step reply; on a dead or hung worker, restart it and redo the unaffected slots."""
        blind_failures = 0  # failures that named no slot; after _MAX_ATTEMPTS of them every slot starts afresh
        while isinstance(reply, Failure):
            if reply.culprit is not None:
                skip = {reply.culprit: f"{reply.reason} (while stepping this env); the worker was restarted"}
            else:
                blind_failures += 1
                skip = {}
                if blind_failures >= _MAX_ATTEMPTS:
                    skip = {item[0]: f"{reply.reason}; the worker was restarted" for item in items}
            lost = self._restart(w, skip)
            for i in lost:
                slot = self._slots[i]
                reason, obs, info = lost[i]
                action = next((item[1] for item in items if item[0] == i), "")
                results[i] = self._error_result(i, action, reason, obs, info)
                slot.start_next_episode(obs, info)
            items = [item for item in items if item[0] not in lost]
            if not items:
                return
            items = [self._step_item(item[0], item[1]) for item in items]
            reply = self._exchange([w], "step", {w: items})[w]
        for (i, action, *_), result in zip(items, reply):
            results[i] = self._apply_step(i, action, result)

    def _step_item(self, i: int, action: str) -> tuple:
        """What a worker needs to step slot ``i``: the action, and the seed and options of the slot's next episode."""
        slot = self._slots[i]
        return (i, action, slot.next_seed, slot.next_options)

    def _apply_step(self, i: int, action: str, result: tuple) -> StepResult:
        slot = self._slots[i]
        if result[0] == "fatal":
            raise EnvPoolError(f"the env of slot {i} failed and cannot be rebuilt:\n{result[1]}")
        if result[0] == "error":
            _, error, obs, info = result
            out = self._error_result(i, action, error, obs, info)
            slot.start_next_episode(obs, info)
            return out
        _, obs, reward, terminated, truncated, info = result
        self._report_info_warning(i, info)
        if terminated or truncated:
            slot.start_next_episode(obs, info)
        else:
            slot.actions.append(action)
            slot.last_obs, slot.last_info = obs, info
        return obs, reward, terminated, truncated, info

    def _report_info_warning(self, i: int, info: dict[str, Any]) -> None:
        """Count a result whose info a worker could not send whole; warn once per slot."""
        note = info.get(INFO_WARNING) or (info.get("final_info") or {}).get(INFO_WARNING)
        if note is None:
            return
        self.stats["info_not_picklable"] = self.stats.get("info_not_picklable", 0) + 1
        if i not in self._warned:
            self._warned.add(i)
            warnings.warn(
                f"EnvPool slot {i} ({self.env_ids[i]}): {note} (reported once per slot; the episode goes on)",
                RuntimeWarning,
                stacklevel=4,
            )

    def _error_result(self, i: int, action: str, error: str, obs: Any, info: dict[str, Any]) -> StepResult:
        """The step result of a slot whose episode was cut by a fault; ``obs``/``info`` start its next episode."""
        slot = self._slots[i]
        self.stats["env_errors"] += 1
        final_info = {
            "env_error": error,
            "action": None,
            "raw_action": action,
            "action_valid": False,
            "episode_step": int(slot.last_info.get("episode_step", 0)) + 1,
            "progression": float(slot.last_info.get("progression", 0.0)),
            "success": False,
        }
        if slot.task is not None:
            final_info["task"] = slot.task
        final_obs = slot.last_obs
        info = {**info, "env_error": error, "final_observation": final_obs, "final_info": final_info}
        return obs, 0.0, False, True, info

    def _per_slot(self, cmd: str, items: Mapping[int, tuple], error: type[Exception] = EnvPoolError) -> dict[int, Any]:
        """Run a query command on the given slots (slot -> args); raise ``error`` (EnvPoolError) when a slot's env
        fails it, EnvPoolError when a worker does."""
        self._check_open()
        by_worker: dict[int, list[tuple]] = {}
        for i, args in items.items():
            if not 0 <= i < self.num_envs:
                raise IndexError(f"slot {i} is out of range for a pool of {self.num_envs} envs")
            by_worker.setdefault(self._slots[i].worker, []).append((i, *args))
        out: dict[int, Any] = {}
        with self._undo_on_interrupt():
            replies = self._exchange(list(by_worker), cmd, by_worker)
        for w, reply in replies.items():
            if isinstance(reply, Failure):
                self._stale.add(w)  # rebuilt from the records on the next call
                raise EnvPoolError(f"worker {w} failed during {cmd}: {reply.reason}; it will be restarted, try again")
        for w, reply in replies.items():
            for (i, *_), result in zip(by_worker[w], reply):
                if result[0] != "ok":
                    raise error(f"{cmd} failed for slot {i} ({self.env_ids[i]}):\n{result[1]}")
                out[i] = result[1:]
        return out

    def restart_episode(self, slot: int) -> tuple[TextObservation, dict[str, Any]]:
        """End ``slot``'s running episode from the main process and start its next one (its next seed and next
        options, as after an env fault); returns the new episode's ``(obs, info)``. For what only the caller can
        see, e.g. an observation that does not fit the prompt budget."""
        self._check_open()
        self._check_slot(slot)
        record = self._slots[slot]
        w = record.worker
        with self._undo_on_interrupt():
            reply = self._exchange([w], "reset", {w: [(slot, record.next_seed, record.next_options)]})[w]
        if isinstance(reply, Failure):
            self._stale.add(w)  # rebuilt from the records on the next call
            raise EnvPoolError(f"worker {w} failed while restarting slot {slot}: {reply.reason}")
        result = reply[0]
        if result[0] != "ok":
            raise EnvPoolError(f"restarting the episode of slot {slot} ({self.env_ids[slot]}) failed:\n{result[1]}")
        record.start_next_episode(result[1], result[2])
        self._report_info_warning(slot, result[2])
        self._cut.pop(slot, None)
        return result[1], result[2]

    def episode_seed(self, slot: int) -> int | None:
        """The seed ``slot``'s current episode was reset with; None when it was reset unseeded or restored from a
        saved state (its seed is then whatever the saving run recorded)."""
        checkpoint = self._slots[slot].checkpoint
        if checkpoint is None or checkpoint[0] != "seed":
            return None
        return None if checkpoint[1] is None else int(checkpoint[1])

    def episode_task(self, slot: int) -> str | None:
        """The task of ``slot``'s current episode: its reset info's ``"task"`` (a :class:`envs.multitask.MultiTaskEnv`
        sets it), else its reset options' ``"task"``; None when neither names one. Kept in :meth:`slot_states`."""
        self._check_slot(slot)
        return self._slots[slot].task

    def set_next_options(self, slot: int, options: Mapping[str, Any] | None) -> None:
        """Choose the reset options of ``slot``'s next episode, e.g. ``{"task": "pickup"}`` for a MultiTaskEnv.

        Episodes auto-reset inside :meth:`step` (in the worker), so the main process chooses a slot's next episode
        ahead: the options set here are used by the next reset of that slot that the pool makes itself (an episode
        that ended, an env fault, a rebuild that lost the episode), and by the replay of that episode after a worker
        restart. They stay until set again (None: reset without options, the default); :meth:`reset` takes its
        own options. Kept in :meth:`slot_states`, so a resumed pool starts the same next episodes.
        """
        self._check_slot(slot)
        if options is not None and not isinstance(options, Mapping):
            raise TypeError(f"set_next_options(): options must be a dict or None, got {type(options).__name__}")
        value = None if options is None else copy.deepcopy(dict(options))
        if value is not None and not self.in_process:
            try:
                pickle.dumps(value)
            except Exception as exc:
                raise ValueError(
                    f"set_next_options(): the options of slot {slot} cannot be sent to a worker ({exc}); use plain "
                    "Python values"
                ) from exc
        self._slots[slot].next_options = value

    def next_options(self, slot: int) -> dict[str, Any] | None:
        """The reset options ``slot``'s next episode will get (see :meth:`set_next_options`)."""
        self._check_slot(slot)
        options = self._slots[slot].next_options
        return None if options is None else copy.deepcopy(options)

    def _check_slot(self, slot: int) -> None:
        if isinstance(slot, bool) or not isinstance(slot, (int, np.integer)) or not 0 <= slot < self.num_envs:
            raise IndexError(f"slot {slot!r} is out of range for a pool of {self.num_envs} envs")

    def instruction(self, slot: int) -> str:
        """The current episode's instruction (task prompt with the valid actions) of ``slot``."""
        return self.get_attr(slot, "instruction")

    def get_attr(self, slot: int, name: str) -> Any:
        """An attribute of the env in ``slot`` (e.g. ``"actions"``), fetched from its worker."""
        return self._per_slot("attr", {slot: (name,)})[slot][0]

    def get_state(self, slot: int) -> bytes:
        """The state of one slot (see :meth:`slot_states`)."""
        return self.slot_states([slot])[0]

    def set_state(self, slot: int, state: bytes) -> TextObservation:
        """Restore one slot from :meth:`get_state`'s bytes; returns its current observation."""
        return self.restore_slots([state], slots=[slot])[0]

    def slot_states(self, slots: Sequence[int] | None = None) -> list[bytes]:
        """Each slot's env state plus the pool's seed stream for it, as bytes (for checkpoints)."""
        slots = list(range(self.num_envs)) if slots is None else list(slots)
        env_states = self._per_slot("get_state", {i: () for i in slots})
        out = []
        for i in slots:
            slot = self._slots[i]
            record = {
                "format": _STATE_FORMAT,
                "env": env_states[i][0],
                "env_id": self.env_ids[i],
                "seed_rng": slot.seed_rng.bit_generator.state,
                "next_seed": slot.next_seed,
                "next_options": slot.next_options,
                "task": slot.task,
            }
            body = pickle.dumps(record)
            out.append(seal(_STATE_HEADER, body))
        return out

    def _read_slot_state(self, i: int, blob: Any) -> dict[str, Any]:
        """The record of a :meth:`slot_states` state for slot ``i`` (checksum and env id checked), or
        ``{"env": blob}`` for a TextEnv's own state."""
        if not isinstance(blob, (bytes, bytearray, memoryview)):
            raise EnvStateError(f"the state for slot {i} is a {type(blob).__name__}, not the bytes slot_states() gave")
        data = bytes(blob)
        try:
            body = unseal(_STATE_HEADER, data)
        except ChecksumMismatch as exc:
            raise EnvStateError(f"the state for slot {i} is corrupted ({exc}); restore from another copy") from exc
        if body is None:
            body = data
        try:
            record = pickle.loads(body)
        except Exception:
            record = None  # a TextEnv state (which set_state checks), or garbage (which it refuses)
        if not (isinstance(record, dict) and record.get("format") == _STATE_FORMAT):
            return {"env": data}
        saved = record.get("env_id")
        if saved is not None and saved != self.env_ids[i]:
            raise EnvStateError(
                f"the state for slot {i} was saved from env {saved!r}, but slot {i} holds {self.env_ids[i]!r}: "
                "restore it into a pool of the same envs"
            )
        if "env" not in record:
            raise EnvStateError(f"the state for slot {i} holds no env state")
        return record

    def restore_slots(self, states: Sequence[bytes], slots: Sequence[int] | None = None) -> list[TextObservation]:
        """Restore slots from :meth:`slot_states` (or a TextEnv's ``get_state``); returns their current observations.

        The episodes continue from there: the next :meth:`step` acts on the restored states (no reset needed).
        """
        slots = list(range(self.num_envs)) if slots is None else list(slots)
        if len(states) != len(slots):
            raise ValueError(f"restore_slots() got {len(states)} states for {len(slots)} slots")
        for i in slots:
            if not 0 <= i < self.num_envs:
                raise IndexError(f"slot {i} is out of range for a pool of {self.num_envs} envs")
        records = [self._read_slot_state(i, blob) for i, blob in zip(slots, states)]
        try:
            restored = self._per_slot("set_state", {i: (r["env"],) for i, r in zip(slots, records)}, EnvStateError)
        except BaseException:
            # all or nothing: slots already restored by this call are rebuilt from the pool's records (the episodes
            # they had) on the next call; the env that refused was left unchanged by its set_state
            self._stale.update({self._slots[i].worker for i in slots})
            raise
        for i, record in zip(slots, records):
            slot = self._slots[i]
            if "seed_rng" in record:
                rng = np.random.default_rng()
                rng.bit_generator.state = record["seed_rng"]
                slot.seed_rng = rng
                slot.next_seed = record["next_seed"]
            if "next_options" in record:  # states saved before next options existed keep the slot's
                slot.next_options = record["next_options"]
            slot.task = record.get("task")
            slot.checkpoint = ("state", record["env"])
            slot.actions = []
            slot.last_obs = restored[i][0]
            slot.last_info = {}
            self._cut.pop(i, None)
        self._needs_reset = False
        return [restored[i][0] for i in slots]

    def worker_of(self, slot: int) -> int:
        """The worker (``0 .. num_workers - 1``) that holds ``slot``'s env; workers hold contiguous blocks of slots."""
        self._check_slot(slot)
        return self._slots[slot].worker

    def worker_pids(self) -> list[int | None]:
        """The worker processes' ids (a Ray actor's process id, on its node; None in in-process mode)."""
        return [w.pid for w in self._workers]

    def worker_nodes(self) -> list[str | None]:
        """The Ray node id each worker runs on (None but with ``backend="ray"``, and before a worker answered)."""
        return [getattr(w, "node_id", None) for w in self._workers]

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Stop every worker (idempotent)."""
        self._closed = True
        self._finalizer()

    def __enter__(self) -> EnvPool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __len__(self) -> int:
        return self.num_envs

    def __repr__(self) -> str:
        mode = "in-process" if self.in_process else f"{self.num_workers} {self.backend} workers"
        return f"EnvPool({self.num_envs} envs, {mode}, closed={self._closed})"
