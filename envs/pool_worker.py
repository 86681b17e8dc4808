"""The worker side of :class:`envs.pool.EnvPool`: the processes that hold the envs, and the messages to them.

A worker holds the envs of some slots in a :class:`SlotRunner` and answers commands (build, reset, step, restore,
get_state, set_state, attr) with one reply per slot, so one message carries all of a worker's envs. Env exceptions
become per-slot results (with the traceback); only a dead or hung process is the parent's to detect, which it does
through the pipe, the process sentinel and a shared ``marker`` that names the slot being run and since when.
:class:`LocalWorker` runs the same commands in the calling process (``EnvPool(backend="in_process")``), and
:class:`envs.pool_ray.RayWorker` in a Ray actor (``backend="ray"``): every backend steps envs with this SlotRunner.

A worker kind gives the pool (:class:`PoolWorker`): ``slots``, ``send(cmd, payload)``, ``stop(grace)``, ``pid`` and
the class method ``gather(workers, timeout)``, which waits for the replies of the workers sent to, a
:class:`Failure` for each one that died or ran an env call longer than ``timeout`` (killed then).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import multiprocessing.connection
import os
import pickle
import runpy
import signal
import time
import traceback
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

from envs.core import TextObservation
from envs.errors import EnvOutputError, EnvStateError
from envs.registry import IMPORTS_ENV_VAR, import_recorded_modules, make

_SPAWN_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pool_spawn.py")

INFO_WARNING = "env_warning"
"""Info key a worker adds when it had to replace info values it could not send (not picklable)."""


def _short(value: Any, limit: int = 120) -> str:
    try:
        text = repr(value)
    except Exception:
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_output(obs: Any, info: Any, reward: Any = 0.0, call: str = "step") -> tuple[TextObservation, float]:
    """``obs`` as a TextObservation (a ``str`` is wrapped) and ``reward`` as a finite float, or EnvOutputError saying
    what the env returned instead (the pool then ends only that slot's episode)."""
    if isinstance(obs, str):
        obs = TextObservation.build(obs)
    elif not isinstance(obs, TextObservation) or not all(
        isinstance(part, str) for part in (obs.text, obs.long_term, obs.short_term)
    ):
        raise EnvOutputError(
            f"the env's {call}() returned an observation of type {type(obs).__name__} ({_short(obs)}); a text env "
            "returns an envs.TextObservation (or a str)"
        )
    try:
        if isinstance(reward, (str, bytes)):
            raise TypeError("a string")
        value = float(reward)
    except (TypeError, ValueError):
        raise EnvOutputError(
            f"the env's {call}() returned a reward of type {type(reward).__name__} ({_short(reward)}), not a number"
        ) from None
    if not math.isfinite(value):
        raise EnvOutputError(
            f"the env's {call}() returned a non-finite reward ({value}); rewards must be finite numbers"
        )
    if not isinstance(info, dict):
        raise EnvOutputError(f"the env's {call}() returned an info of type {type(info).__name__}, not a dict")
    return obs, value


def _error_text(exc: BaseException) -> str:
    """``env_error`` of a failed env call: a bad output names the error alone, anything else its traceback."""
    if isinstance(exc, EnvOutputError):
        return f"{type(exc).__name__}: {exc}"
    return traceback.format_exc()


def _strip_image(obs: Any, keep_images: bool) -> Any:
    if keep_images or not isinstance(obs, TextObservation) or obs.image is None:
        return obs
    return dataclasses.replace(obs, image=None)


class SlotRunner:
    """The envs of some slots and the commands run on them; used inside a worker process or in-process.

    ``marker`` (shared with the parent, float64 ``[slot, time]``) says which slot's env call is running and since
    when (``CLOCK_MONOTONIC``, the same clock in every process), so the parent can tell a hang from a slow batch
    and name the slot that hung or killed the worker.
    """

    def __init__(self, specs: dict[int, tuple[Any, dict[str, Any]]], keep_images: bool, marker: Any = None) -> None:
        self.specs = specs
        self.keep_images = keep_images
        self.marker = marker
        self.envs: dict[int, Any] = {}

    def _begin(self, slot: int) -> None:
        if self.marker is not None:
            self.marker[1] = time.monotonic()
            self.marker[0] = slot

    def _end(self) -> None:
        if self.marker is not None:
            self.marker[0] = -1
            self.marker[1] = time.monotonic()

    def handle(self, cmd: str, payload: list[tuple]) -> list[tuple]:
        """Run ``cmd`` on every item of ``payload`` (``(slot, *args)``); one result per item."""
        return list(self.run_each(cmd, payload))

    def run_each(self, cmd: str, payload: list[tuple]) -> Iterator[tuple]:
        """:meth:`handle`, one result at a time, each as soon as its env call is done."""
        method = getattr(self, f"_cmd_{cmd}")
        for item in payload:
            self._begin(item[0])
            try:
                result = method(*item)
            finally:
                self._end()
            yield result

    def _build(self, slot: int) -> Any:
        old = self.envs.pop(slot, None)
        if old is not None:
            with contextlib.suppress(Exception):  # a broken env may fail to close; it is dropped either way
                old.close()
        spec, kwargs = self.specs[slot]
        env = make(spec, **kwargs) if isinstance(spec, str) else spec(**kwargs)
        self.envs[slot] = env
        return env

    def _fresh(self, slot: int, seed: int | None, options: dict[str, Any] | None) -> tuple[Any, dict[str, Any]]:
        obs, info = self._build(slot).reset(seed=seed, options=options)
        obs, _ = check_output(obs, info, call="reset")
        return _strip_image(obs, self.keep_images), info

    def _cmd_build(self, slot: int) -> tuple:
        try:
            self._build(slot)
            return ("ok",)
        except Exception:  # reported to the parent with the traceback
            return ("error", traceback.format_exc())

    def _cmd_reset(self, slot: int, seed: int | None, options: dict[str, Any] | None) -> tuple:
        for attempt in range(2):
            try:
                env = self.envs[slot] if attempt == 0 and slot in self.envs else self._build(slot)
                obs, info = env.reset(seed=seed, options=options)
                obs, _ = check_output(obs, info, call="reset")
                return ("ok", _strip_image(obs, self.keep_images), info)
            except Exception as exc:
                error = _error_text(exc)
        return ("error", error)

    def _cmd_step(self, slot: int, action: str, next_seed: int, next_options: dict[str, Any] | None) -> tuple:
        """Step; an ended episode is followed at once by the next one, reset with ``next_seed`` and
        ``next_options`` (the options the parent chose for the slot's next episode, e.g. its task)."""
        try:
            obs, reward, terminated, truncated, info = self.envs[slot].step(action)
            obs, reward = check_output(obs, info, reward)
            if terminated or truncated:
                final_obs, final_info = obs, info
                obs, reset_info = self.envs[slot].reset(seed=next_seed, options=next_options)
                obs, _ = check_output(obs, reset_info, call="reset")
                info = {
                    **reset_info,
                    "final_observation": _strip_image(final_obs, self.keep_images),
                    "final_info": final_info,
                }
            return ("ok", _strip_image(obs, self.keep_images), reward, bool(terminated), bool(truncated), info)
        except Exception as exc:  # the env's episode ends with this traceback (or bad output) as env_error
            error = _error_text(exc)
        try:
            obs, info = self._fresh(slot, next_seed, next_options)
            return ("error", error, obs, info)
        except Exception:
            return ("fatal", error + "\nand rebuilding the env failed too:\n" + traceback.format_exc())

    def _cmd_restore(
        self,
        slot: int,
        checkpoint: tuple | None,
        actions: list[str],
        expected: str | None,
        fallback_seed: int,
        fallback_options: dict[str, Any] | None,
    ) -> tuple:
        reason = None
        if checkpoint is not None:
            try:
                env = self._build(slot)
                if checkpoint[0] == "seed":
                    obs, _ = env.reset(seed=checkpoint[1], options=checkpoint[2])
                else:
                    env.set_state(checkpoint[1])
                    obs = env.last_observation
                for action in actions:
                    self._begin(slot)  # restart the clock: each replayed step gets the full step_timeout
                    obs, _, terminated, truncated, _ = env.step(action)
                    if terminated or truncated:
                        raise EnvStateError("the replayed episode ended early")
                if expected is not None and getattr(obs, "text", None) != expected:
                    raise EnvStateError(
                        "replaying the episode gave a different observation than the one last returned (the env is "
                        "not deterministic given its seed or state)"
                    )
                return ("ok",)
            except Exception:
                reason = traceback.format_exc()
        try:
            obs, info = self._fresh(slot, fallback_seed, fallback_options)
            return ("lost", reason, obs, info)
        except Exception:
            return ("fatal", traceback.format_exc())

    def _cmd_get_state(self, slot: int) -> tuple:
        try:
            return ("ok", self.envs[slot].get_state())
        except Exception:
            return ("error", traceback.format_exc())

    def _cmd_set_state(self, slot: int, state: bytes) -> tuple:
        try:
            env = self.envs[slot]
            env.set_state(state)
            return ("ok", _strip_image(env.last_observation, self.keep_images))
        except Exception:
            return ("error", traceback.format_exc())

    def _cmd_attr(self, slot: int, name: str) -> tuple:
        try:
            return ("ok", getattr(self.envs[slot], name))
        except Exception:
            return ("error", traceback.format_exc())

    def close(self) -> None:
        for env in self.envs.values():
            with contextlib.suppress(Exception):
                env.close()
        self.envs.clear()


def _picklable_info(info: dict[str, Any], path: str = "") -> tuple[dict[str, Any], list[str]]:
    """``info`` with every value that cannot be pickled replaced by a note naming its type; the keys replaced."""
    out, replaced = {}, []
    for key, value in info.items():
        try:
            pickle.dumps(value)
            out[key] = value
        except Exception:
            if isinstance(value, dict):
                out[key], inner = _picklable_info(value, f"{path}{key}.")
                replaced += inner
            else:
                out[key] = f"<not picklable: {type(value).__name__}>"
                replaced.append(f"{path}{key}")
    return out, replaced


def reply_bytes(results: list[tuple]) -> bytes:
    """A command's results, pickled. Info values that cannot be pickled are replaced by a note (and the info says so
    under :data:`INFO_WARNING`); any other result that cannot be pickled becomes a "fatal" one that says so."""
    try:
        data = pickle.dumps(results, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        fixed = []
        for result in results:
            try:
                pickle.dumps(result)
                fixed.append(result)
                continue
            except Exception as exc:
                error = exc
            parts = list(result)
            for k, part in enumerate(parts):
                if isinstance(part, dict):
                    parts[k], replaced = _picklable_info(part)
                    if replaced:
                        parts[k][INFO_WARNING] = (
                            f"info values {replaced} could not be sent from the worker process (not picklable) and "
                            "were replaced by a note; keep info picklable (plain Python and numpy values)"
                        )
            try:
                pickle.dumps(parts)
                fixed.append(tuple(parts))
            except Exception:
                fixed.append(("fatal", f"the env returned something that cannot be pickled ({error!r}): {result!r}"))
        data = pickle.dumps(fixed, protocol=pickle.HIGHEST_PROTOCOL)
    return data


def import_recorded_note() -> str:
    """Import the modules the parent recorded (``envs.import_modules``); "" when that worked, else a note to add
    to each env that then fails to build (others may not need those modules)."""
    try:
        import_recorded_modules()
    except Exception:
        return f"\n(before building, importing the modules in ${IMPORTS_ENV_VAR} failed:\n{traceback.format_exc()})"
    return ""


def with_note(result: tuple, note: str) -> tuple:
    """A build result with ``note`` added to its error (unchanged when it is ok or there is no note)."""
    return result if result[0] == "ok" or not note else (result[0], result[1] + note)


def worker_main(conn: Any, specs: dict[int, tuple[Any, dict[str, Any]]], keep_images: bool, marker: Any) -> None:
    """A worker process: build the slots' envs, then answer commands until "close" or the parent goes away."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it closes the workers
    runner = SlotRunner(specs, keep_images, marker)
    try:
        note = import_recorded_note()
        conn.send([with_note(r, note) for r in runner.handle("build", [(slot,) for slot in specs])])
        while True:
            try:
                cmd, payload = conn.recv()
            except (EOFError, OSError):
                break
            if cmd == "close":
                break
            conn.send_bytes(reply_bytes(runner.handle(cmd, payload)))
    except (BrokenPipeError, EOFError, OSError):
        pass
    finally:
        runner.close()


@dataclasses.dataclass
class Failure:
    """A worker that died or hung while running a command; ``culprit`` is the slot whose env call was running."""

    culprit: int | None
    reason: str


class PoolWorker(Protocol):
    """What :class:`envs.pool.EnvPool` needs of a worker kind (process, in-process, Ray actor)."""

    slots: list[int]

    def send(self, cmd: str, payload: list[tuple]) -> None: ...

    def stop(self, grace: float = 1.0) -> None: ...

    @property
    def pid(self) -> int | None: ...

    @classmethod
    def gather(cls, workers: Mapping[int, Any], call_timeout: float | None) -> dict[int, Any]: ...


class ProcessWorker:
    """A spawned process that holds some slots' envs (``worker_main``), talked to through a pipe."""

    def __init__(self, ctx: Any, specs: dict[int, tuple[Any, dict[str, Any]]], keep_images: bool) -> None:
        self.slots = list(specs)
        self.marker = ctx.RawArray("d", [-1.0, time.monotonic()])
        self.conn, child_conn = ctx.Pipe(duplex=True)
        # The child runs envs/pool_spawn.py, which loads verlog's envs before it unpickles the specs (a user's own
        # envs/ folder on the path must not stand in for the package there).
        args = (child_conn, pickle.dumps(specs, protocol=pickle.HIGHEST_PROTOCOL), keep_images, self.marker)
        self.process = ctx.Process(
            target=runpy.run_path,
            args=(_SPAWN_FILE,),
            kwargs={"init_globals": {"WORKER_ARGS": args}, "run_name": "__envs_pool_worker__"},
            daemon=True,
            name="EnvPoolWorker",
        )
        self.process.start()
        child_conn.close()
        self.sent_at = time.monotonic()
        self._reply: Any = None

    @property
    def pid(self) -> int | None:
        return self.process.pid

    def send(self, cmd: str, payload: list[tuple]) -> None:
        self.sent_at = time.monotonic()
        self.marker[1] = self.sent_at
        self._reply = None
        try:
            self.conn.send((cmd, payload))
        except (BrokenPipeError, OSError) as exc:
            self._reply = Failure(None, f"the worker process was gone before the request was sent ({exc})")

    def last_progress(self) -> float:
        return max(self.sent_at, self.marker[1])

    def failure(self, reason: str) -> Failure:
        """A :class:`Failure` naming the slot whose env call the marker says was running."""
        slot = int(self.marker[0])
        return Failure(slot if slot >= 0 else None, reason)

    @classmethod
    def gather(cls, workers: Mapping[int, ProcessWorker], call_timeout: float | None) -> dict[int, Any]:
        """The replies of ``workers`` (already sent to); a dead worker, or one whose env call ran longer than
        ``call_timeout`` (then killed), gives a :class:`Failure`."""
        replies: dict[int, Any] = {}
        pending = []
        for w, worker in workers.items():
            if isinstance(worker._reply, Failure):
                replies[w], worker._reply = worker._reply, None
            else:
                pending.append(w)
        while pending:
            now = time.monotonic()
            deadlines = {w: workers[w].last_progress() + call_timeout for w in pending} if call_timeout else {}
            timeout = max(0.0, min(deadlines.values()) - now) if deadlines else None
            waitables = [workers[w].conn for w in pending] + [workers[w].process.sentinel for w in pending]
            ready = set(multiprocessing.connection.wait(waitables, timeout=timeout))
            now = time.monotonic()
            for w in list(pending):
                worker = workers[w]
                if worker.conn in ready or worker.process.sentinel in ready:
                    try:
                        replies[w] = worker.conn.recv()
                    except (EOFError, OSError):
                        worker.process.join(0.5)
                        replies[w] = worker.failure(f"the worker process died (exit code {worker.process.exitcode})")
                    pending.remove(w)
                elif call_timeout and worker.last_progress() + call_timeout <= now:
                    worker.process.kill()
                    worker.process.join(1.0)
                    replies[w] = worker.failure(f"an env call ran longer than step_timeout={call_timeout}s")
                    pending.remove(w)
        return replies

    def stop(self, grace: float = 1.0) -> None:
        stop_process(self.process, self.conn, grace)


class LocalWorker:
    """In-process stand-in for a worker: the same commands, run at once in the calling process."""

    pid = None

    def __init__(self, specs: dict[int, tuple[Any, dict[str, Any]]], keep_images: bool) -> None:
        self.slots = list(specs)
        self.runner = SlotRunner(specs, keep_images)
        self._reply: Any = self.runner.handle("build", [(slot,) for slot in specs])

    def send(self, cmd: str, payload: list[tuple]) -> None:
        self._reply = self.runner.handle(cmd, payload)

    @classmethod
    def gather(cls, workers: Mapping[int, LocalWorker], call_timeout: float | None) -> dict[int, Any]:
        """The replies, already made by :meth:`send` (no hang or crash can be caught in-process)."""
        replies = {}
        for w, worker in workers.items():
            replies[w], worker._reply = worker._reply, None
        return replies

    def stop(self, grace: float = 1.0) -> None:
        self.runner.close()


def stop_process(process: Any, conn: Any, grace: float) -> None:
    try:
        if process.is_alive():
            try:
                conn.send(("close", None))
            except (BrokenPipeError, OSError):
                pass
            process.join(grace)
        if process.is_alive():
            process.terminate()
            process.join(grace)
        if process.is_alive():
            process.kill()
            process.join(grace)
    finally:
        try:
            conn.close()
        except OSError:
            pass
        try:
            process.close()
        except ValueError:  # still running after kill (cannot happen on Linux short of a D-state)
            pass


def shutdown(workers: list[Any]) -> None:
    for worker in workers:
        with contextlib.suppress(Exception):  # shutting down must reach every worker
            worker.stop(grace=1.0)
    workers.clear()
