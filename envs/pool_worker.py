"""The worker side of :class:`envs.pool.EnvPool`: the processes that hold the envs, and the messages to them.

A worker holds the envs of some slots in a :class:`SlotRunner` and answers commands (build, reset, step, restore,
get_state, set_state, attr) with one reply per slot, so one message carries all of a worker's envs. Env exceptions
become per-slot results (with the traceback); only a dead or hung process is the parent's to detect, which it does
through the pipe, the process sentinel and a shared ``marker`` that names the slot being run and since when.
:class:`LocalWorker` runs the same commands in the calling process (``EnvPool(in_process=True)``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import pickle
import signal
import time
import traceback
from typing import Any

from envs.core import TextObservation
from envs.errors import EnvStateError
from envs.registry import make


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
        method = getattr(self, f"_cmd_{cmd}")
        results = []
        for item in payload:
            self._begin(item[0])
            try:
                results.append(method(*item))
            finally:
                self._end()
        return results

    def _build(self, slot: int) -> Any:
        old = self.envs.pop(slot, None)
        if old is not None:
            with contextlib.suppress(Exception):  # a broken env may fail to close; it is dropped either way
                old.close()
        spec, kwargs = self.specs[slot]
        env = make(spec, **kwargs) if isinstance(spec, str) else spec(**kwargs)
        self.envs[slot] = env
        return env

    def _fresh(self, slot: int, seed: int | None) -> tuple[Any, dict[str, Any]]:
        obs, info = self._build(slot).reset(seed=seed)
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
                return ("ok", _strip_image(obs, self.keep_images), info)
            except Exception:
                error = traceback.format_exc()
        return ("error", error)

    def _cmd_step(self, slot: int, action: str, next_seed: int) -> tuple:
        try:
            obs, reward, terminated, truncated, info = self.envs[slot].step(action)
            if terminated or truncated:
                final_obs, final_info = obs, info
                obs, reset_info = self.envs[slot].reset(seed=next_seed)
                info = {
                    **reset_info,
                    "final_observation": _strip_image(final_obs, self.keep_images),
                    "final_info": final_info,
                }
            return ("ok", _strip_image(obs, self.keep_images), float(reward), bool(terminated), bool(truncated), info)
        except Exception:  # the env's episode ends with this traceback as env_error
            error = traceback.format_exc()
        try:
            obs, info = self._fresh(slot, next_seed)
            return ("error", error, obs, info)
        except Exception:
            return ("fatal", error + "\nand rebuilding the env failed too:\n" + traceback.format_exc())

    def _cmd_restore(
        self, slot: int, checkpoint: tuple | None, actions: list[str], expected: str | None, fallback_seed: int
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
            obs, info = self._fresh(slot, fallback_seed)
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


def _send_reply(conn: Any, results: list[tuple]) -> None:
    """Send a command's results; a result that cannot be pickled becomes a "fatal" one that says so."""
    try:
        data = pickle.dumps(results, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        fixed = []
        for result in results:
            try:
                pickle.dumps(result)
                fixed.append(result)
            except Exception as exc:
                fixed.append(("fatal", f"the env returned something that cannot be pickled ({exc!r}): {result!r}"))
        data = pickle.dumps(fixed, protocol=pickle.HIGHEST_PROTOCOL)
    conn.send_bytes(data)


def worker_main(conn: Any, specs: dict[int, tuple[Any, dict[str, Any]]], keep_images: bool, marker: Any) -> None:
    """A worker process: build the slots' envs, then answer commands until "close" or the parent goes away."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it closes the workers
    runner = SlotRunner(specs, keep_images, marker)
    try:
        conn.send(runner.handle("build", [(slot,) for slot in specs]))
        while True:
            try:
                cmd, payload = conn.recv()
            except (EOFError, OSError):
                break
            if cmd == "close":
                break
            _send_reply(conn, runner.handle(cmd, payload))
    except (BrokenPipeError, EOFError, OSError):
        pass
    finally:
        runner.close()


@dataclasses.dataclass
class Failure:
    """A worker that died or hung while running a command; ``culprit`` is the slot whose env call was running."""

    culprit: int | None
    reason: str


class ProcessWorker:
    def __init__(self, ctx: Any, specs: dict[int, tuple[Any, dict[str, Any]]], keep_images: bool) -> None:
        self.slots = list(specs)
        self.marker = ctx.RawArray("d", [-1.0, time.monotonic()])
        self.conn, child_conn = ctx.Pipe(duplex=True)
        self.process = ctx.Process(
            target=worker_main, args=(child_conn, specs, keep_images, self.marker), daemon=True, name="EnvPoolWorker"
        )
        self.process.start()
        child_conn.close()
        self.sent_at = time.monotonic()
        self._reply: Any = None

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

    def stop(self, grace: float = 1.0) -> None:
        stop_process(self.process, self.conn, grace)


class LocalWorker:
    """In-process stand-in for a worker: the same commands, run at once in the calling process."""

    def __init__(self, specs: dict[int, tuple[Any, dict[str, Any]]], keep_images: bool) -> None:
        self.slots = list(specs)
        self.runner = SlotRunner(specs, keep_images)
        self._reply: Any = self.runner.handle("build", [(slot,) for slot in specs])

    def send(self, cmd: str, payload: list[tuple]) -> None:
        self._reply = self.runner.handle(cmd, payload)

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
