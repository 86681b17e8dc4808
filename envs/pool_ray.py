"""Env-pool workers as Ray actors (``EnvPool(backend="ray")``): a worker's slots on any node of the Ray cluster.

A :class:`RayWorker` is one Ray actor (:class:`EnvActor`) that holds some slots' envs in the same
:class:`envs.pool_worker.SlotRunner` as a subprocess worker, so the env step is one code for every backend. The actor
asks Ray for :class:`RayWorkerOptions` (CPUs, custom resources), so Ray places it on a node that has them.

A command is a streaming call: the actor first yields that it took the message (with its pid and node), then each
slot's result as soon as its env call is done. So the driver knows, as with the shared marker of a subprocess
worker, which slot's env call was running when the actor died (``RayActorError``: a crash, ``ray.kill``, a lost
node), and times every call: a slot whose result does not come within ``step_timeout`` of the previous one (of the
message, for the first; a replay gets ``step_timeout`` per replayed step) is a hang, and the actor is killed
(``ray.kill``). The pool then replaces the actor and replays its other slots, as for a subprocess worker.

Cluster: :func:`connect_ray` uses the Ray that this process already initialised (``verlog train``'s); else
``RAY_ADDRESS`` when set (checked to answer first: :class:`RayClusterError`); else it starts a local Ray instance.
:func:`check_resources` refuses, before any actor starts, resources that no node of the cluster has
(:class:`RayResourcesError`).
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import socket
import sys
import time
from collections.abc import Iterator, Mapping
from typing import Any

from envs.errors import EnvPoolError
from envs.pool_worker import Failure, import_recorded_note, reply_bytes, with_note

RAY_ADDRESS_VAR = "RAY_ADDRESS"
_PROBE_SECONDS = 5.0


class RayClusterError(EnvPoolError):
    """The Ray cluster named by ``RAY_ADDRESS`` does not answer, or Ray cannot be started."""


class RayResourcesError(EnvPoolError, ValueError):
    """Resource requests of Ray env workers that no node of the cluster can give, or malformed ones."""


@dataclasses.dataclass(frozen=True)
class RayWorkerOptions:
    """What each Ray env worker (one actor) asks the cluster for.

    Attributes:
        num_cpus: logical CPUs per worker (Ray's ``num_cpus``; may be fractional, 0 places it anywhere).
        resources: custom resources per worker, e.g. ``{"envnode": 1}`` to run only on nodes started with
            ``ray start --resources='{"envnode": 4}'`` (Ray's ``node:<ip>`` resource pins a node).
    """

    num_cpus: float = 1.0
    resources: Mapping[str, float] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.num_cpus, bool) or not isinstance(self.num_cpus, (int, float)) or self.num_cpus < 0:
            raise RayResourcesError(f"num_cpus per Ray env worker is {self.num_cpus!r}: give a number >= 0, e.g. 1")
        if not isinstance(self.resources, Mapping):
            raise RayResourcesError(
                f"resources of a Ray env worker must be a mapping name -> amount, got {type(self.resources).__name__}"
            )
        for name, amount in self.resources.items():
            if name in ("CPU", "GPU", "memory"):
                raise RayResourcesError(f"resources.{name}: ask for CPUs with num_cpus; {name} is not a custom one")
            if isinstance(amount, bool) or not isinstance(amount, (int, float)) or amount <= 0:
                raise RayResourcesError(f"resources.{name} is {amount!r}: give an amount > 0 per worker, e.g. 1")

    @classmethod
    def of(cls, given: RayWorkerOptions | Mapping[str, Any] | None) -> RayWorkerOptions:
        """``given`` as options: None gives the defaults, a mapping its keys ``num_cpus`` and ``resources``."""
        if given is None:
            return cls()
        if isinstance(given, cls):
            return given
        if isinstance(given, Mapping):
            unknown = sorted(set(given) - {"num_cpus", "resources"})
            if unknown:
                raise RayResourcesError(f"unknown Ray worker option(s) {unknown}: the options are num_cpus, resources")
            return cls(float(given.get("num_cpus", 1.0)), dict(given.get("resources") or {}))
        raise RayResourcesError(f"ray_options must be RayWorkerOptions or a dict, got {type(given).__name__}")

    def request(self) -> dict[str, float]:
        """The resources per worker as Ray names them (``CPU`` and the custom ones)."""
        return {"CPU": float(self.num_cpus), **{k: float(v) for k, v in self.resources.items()}}


def check_ray_address(address: str | None) -> None:
    """Refuse a ``host:port`` (or ``ray://host:port``) that does not accept a connection within a few seconds, with
    :class:`RayClusterError` naming the fix; ``auto``, ``local`` and None are not probed (Ray finds or starts one)."""
    if not address or address in ("auto", "local"):
        return
    target = address.split("://", 1)[-1]
    host, sep, port = target.rpartition(":")
    if not sep or not port.isdigit():
        raise RayClusterError(
            f"{RAY_ADDRESS_VAR}={address!r} is not host:port: give the head's address, e.g. 10.0.0.1:6379"
        )
    try:
        with socket.create_connection((host, int(port)), timeout=_PROBE_SECONDS):
            pass
    except OSError as exc:
        raise RayClusterError(
            f"the Ray cluster at {RAY_ADDRESS_VAR}={address} does not answer ({exc}): start it (`ray start --head` "
            f"on that node) or unset {RAY_ADDRESS_VAR} to start a local Ray"
        ) from None


def connect_ray() -> str:
    """Make sure this process is connected to a Ray cluster; returns which: ``"running"`` (already initialised, e.g.
    by ``verlog train``), ``"address"`` (``RAY_ADDRESS``, checked first) or ``"local"`` (a local instance started
    here, which stays until ``ray.shutdown()`` or the end of the process)."""
    import ray

    if ray.is_initialized():
        return "running"
    address = os.environ.get(RAY_ADDRESS_VAR) or None
    check_ray_address(address)
    try:
        ray.init(address=address, include_dashboard=False, log_to_driver=True)
    except ConnectionError as exc:
        raise RayClusterError(
            f"cannot connect to the Ray cluster ({RAY_ADDRESS_VAR}={address}): {exc}; start it or unset "
            f"{RAY_ADDRESS_VAR}"
        ) from None
    return "address" if address else "local"


def check_resources(options: RayWorkerOptions) -> None:
    """:class:`RayResourcesError` when no live node of the cluster has what one worker asks for (each worker is
    placed whole on one node), naming what the nodes have and the fix."""
    import ray

    wanted = options.request()
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    for node in nodes:
        have = node.get("Resources") or {}
        if all(have.get(name, 0.0) >= amount for name, amount in wanted.items() if amount > 0):
            return
    offers = "; ".join(_offer(n.get("Resources") or {}) for n in nodes) or "no live node"
    raise RayResourcesError(
        f"no node of the Ray cluster can give one env worker {_offer(wanted)} (the nodes have: {offers}): lower "
        "env.ray.num_cpus_per_worker or env.ray.resources, or start a node that has them (ray start "
        "--address=HEAD --resources='{\"NAME\": N}')"
    )


def _offer(resources: Mapping[str, float]) -> str:
    shown = {k: v for k, v in resources.items() if not k.startswith(("node:", "accelerator_type:"))}
    shown = {k: v for k, v in shown.items() if k not in ("memory", "object_store_memory")}
    return "{" + ", ".join(f"{k}: {v:g}" for k, v in sorted(shown.items())) + "}"


class EnvActor:
    """The Ray actor of one worker: a :class:`~envs.pool_worker.SlotRunner` over its slots' envs.

    Args:
        payload: the slots' ``{slot: (factory or id, kwargs)}``, pickled.
        keep_images: send observation images back.
        imports: the driver's ``envs.import_modules`` record (``$VERLOG_IMPORTS``), imported here too.
        paths: the driver's ``sys.path``; the entries this node also has are added (a user's folder).
    """

    def __init__(self, payload: bytes, keep_images: bool, imports: str, paths: list[str]) -> None:
        from envs.pool_spawn import load_envs_package
        from envs.registry import IMPORTS_ENV_VAR

        load_envs_package(os.path.dirname(os.path.abspath(__file__)))
        for path in paths:
            if path and path not in sys.path and os.path.isdir(path):
                sys.path.append(path)
        if imports:
            os.environ[IMPORTS_ENV_VAR] = imports
        from envs.pool_worker import SlotRunner

        self.runner = SlotRunner(pickle.loads(payload), keep_images)

    def run(self, cmd: str, payload: list[tuple]) -> Iterator[bytes]:
        """Stream a command: first ``("taken", pid, node id)``, then each item's result, each pickled."""
        import ray

        yield pickle.dumps(("taken", os.getpid(), ray.get_runtime_context().get_node_id()))
        note = import_recorded_note() if cmd == "build" else ""
        for result in self.runner.run_each(cmd, payload):
            yield reply_bytes([with_note(result, note)])

    def close(self) -> None:
        self.runner.close()


_ACTOR_CLASS: Any = None


def _actor_class() -> Any:
    """:class:`EnvActor` as a Ray actor class (made once per process)."""
    global _ACTOR_CLASS
    if _ACTOR_CLASS is None:
        import ray

        _ACTOR_CLASS = ray.remote(EnvActor)
    return _ACTOR_CLASS


def _calls(cmd: str, item: tuple) -> int:
    """Env calls one item may make, each allowed ``step_timeout``: a replay runs its actions after the reset."""
    return 1 + len(item[2]) if cmd == "restore" and item[1] is not None else 1


class RayWorker:
    """One pool worker as a Ray actor (see the module docstring); the driver side."""

    def __init__(
        self, specs: dict[int, tuple[Any, dict[str, Any]]], keep_images: bool, options: RayWorkerOptions
    ) -> None:
        from envs.registry import IMPORTS_ENV_VAR

        self.slots = list(specs)
        self.pid: int | None = None
        self.node_id: str | None = None
        self.actor = (
            _actor_class()
            .options(num_cpus=options.num_cpus, resources=dict(options.resources), max_restarts=0, max_task_retries=0)
            .remote(
                pickle.dumps(specs, protocol=pickle.HIGHEST_PROTOCOL),
                keep_images,
                os.environ.get(IMPORTS_ENV_VAR, ""),
                list(sys.path),
            )
        )
        self._stream: Any = None
        self.send("build", [(slot,) for slot in self.slots])

    def send(self, cmd: str, payload: list[tuple]) -> None:
        self._cmd, self._items = cmd, payload
        self._results: list[tuple] = []
        self._taken = False
        self._progress = time.monotonic()
        self._stream = self.actor.run.options(num_returns="streaming").remote(cmd, payload)

    def _running(self) -> int | None:
        """The slot whose env call is running: the first item without a result, once the actor took the message."""
        if not self._taken or len(self._results) >= len(self._items):
            return None
        return int(self._items[len(self._results)][0])

    def _deadline(self, call_timeout: float) -> float:
        pending = len(self._results)
        calls = _calls(self._cmd, self._items[pending]) if self._taken and pending < len(self._items) else 1
        return self._progress + call_timeout * calls

    def _take(self) -> Any:
        """Read the stream's next item; the reply when it ends, a :class:`Failure` when the actor died, else None."""
        import ray

        try:
            ref = next(self._stream)
            data = ray.get(ref)
        except StopIteration:
            return self._results
        except ray.exceptions.RayError as exc:  # RayActorError (ActorDiedError): a crash, ray.kill, a lost node
            reason = f"the worker's Ray actor died ({type(exc).__name__}: {_first_line(exc)})"
            return Failure(self._running(), reason)
        self._progress = time.monotonic()
        item = pickle.loads(data)
        if not self._taken:
            self._taken, self.pid, self.node_id = True, item[1], item[2]
        else:
            self._results.extend(item)
        return None

    @classmethod
    def gather(cls, workers: Mapping[int, RayWorker], call_timeout: float | None) -> dict[int, Any]:
        """The replies of ``workers`` (already sent to); an actor that died, or whose env call ran longer than
        ``call_timeout`` (then killed with ``ray.kill``), gives a :class:`Failure`."""
        import ray

        replies: dict[int, Any] = {}
        pending = dict(workers)
        while pending:
            wait = None
            if call_timeout:
                wait = max(0.0, min(w._deadline(call_timeout) for w in pending.values()) - time.monotonic())
            streams = [w._stream for w in pending.values()]
            ready, _ = ray.wait(streams, num_returns=1, timeout=wait, fetch_local=False)
            ready_ids = {id(s) for s in ready}
            now = time.monotonic()
            for w, worker in list(pending.items()):
                if id(worker._stream) in ready_ids:
                    reply = worker._take()
                    if reply is not None:
                        replies[w] = reply
                        del pending[w]
                elif call_timeout and worker._deadline(call_timeout) <= now:
                    culprit, taken = worker._running(), worker._taken
                    ray.kill(worker.actor, no_restart=True)
                    reason = f"an env call ran longer than step_timeout={call_timeout}s"
                    if not taken:
                        reason = (
                            f"its Ray actor did not start or answer within {call_timeout}s (is a node with its "
                            "resources free? `ray status` shows them)"
                        )
                    replies[w] = Failure(culprit, reason)
                    del pending[w]
        return replies

    def stop(self, grace: float = 1.0) -> None:
        """Close the envs (waiting at most ``grace`` seconds), then end the actor."""
        import ray

        try:
            ray.get(self.actor.close.remote(), timeout=grace)
        except Exception:  # dead, hung or slow: killed below either way
            pass
        ray.kill(self.actor, no_restart=True)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
