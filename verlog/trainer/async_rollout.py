"""Rollout ahead of training (``rollout.async_mode`` ``one_step_off`` and ``in_flight``; docs/async.md).

verl's ``fit`` asks for one iteration's rows (``generate_sequences``), trains on them, then syncs the new weights into
the vLLM servers (``checkpoint_manager.update_weights``). Two pieces let the rollout run while verl trains, without
changing that loop:

- :class:`RolloutAhead` collects the next iterations' rows in one driver thread (a single-worker executor, so the
  env pool and the slots' memories are only ever used by one thread, and collects run in order: a slot's rows are
  handed out in order, with no gap or duplicate, and an episode's bootstrap prompt in batch k is its first prompt in
  batch k+1). At most ``capacity`` collects are done or running at a time; :meth:`RolloutAhead.hand_off` gives the
  oldest to the trainer and starts the next.
- :class:`WeightSync` stands in for verl's ``checkpoint_manager`` during ``fit``: ``one_step_off`` defers a weight
  update that arrives while a collect runs to the next hand-off (between collects: no KV computed with the old
  weights is reused by later turns), so every row is exactly one version stale; ``in_flight`` applies it at once,
  between tokens: verl's ``abort_all_requests`` (running requests return what they wrote; the prefix cache is
  cleared), the weight update, ``resume_generation``; the generator resubmits each cut request as prompt + tokens
  so far (:class:`verlog.rollout.generator.VerlServerGenerator`), so a turn's tokens may come from two versions.

Checkpoints and evaluations first :meth:`RolloutAhead.settle`: no collect runs, the deferred update is applied, and
the rows collected ahead go into the checkpoint (:meth:`RolloutAhead.pending`), so a resumed run hands them out
first and neither loses nor repeats a turn.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from verl import DataProto

from verlog.config.async_modes import WeightSyncPolicy


class RolloutAhead:
    """Collects rollouts in a driver thread, at most ``capacity`` ahead of the trainer.

    Args:
        collect: one iteration's rollout (any object with a ``metrics`` dict; the agent-loop manager's record).
        capacity: collects done or running at a time (``one_step_off``: 1; ``in_flight``: ``rollout.max_lag``).
        before_start: called in the trainer's thread just before each new collect starts (the deferred weight
            update of ``one_step_off``).
    """

    def __init__(self, collect: Callable[[], Any], capacity: int, before_start: Callable[[], None] | None = None):
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self._collect = collect
        self.capacity = capacity
        self.before_start = before_start
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="verlog-rollout")
        self._queue: deque[concurrent.futures.Future[Any]] = deque()
        self._restored: deque[Any] = deque()
        self._lock = threading.Lock()
        self._busy_s = 0.0  # seconds collects ran since the last hand-off
        self._last_hand_off: float | None = None

    # ------------------------------------------------------------------------------------------ trainer side
    def hand_off(self, start_next: bool = True) -> tuple[Any, dict[str, float]]:
        """The oldest collected rollout (waiting for it if needed) and the overlap metrics of the wait; then (unless
        ``start_next`` is False: the run's last iteration) starts the next collects so that ``capacity`` are done
        or running again."""
        start = time.perf_counter()
        if self._restored:
            record = self._restored.popleft()
        else:
            if not self._queue:
                self._start()
            record = self._queue.popleft().result()
        waited = time.perf_counter() - start
        now = time.perf_counter()
        with self._lock:
            busy, self._busy_s = self._busy_s, 0.0
        period = now - self._last_hand_off if self._last_hand_off is not None else None
        self._last_hand_off = now
        if start_next:
            self._fill()
        metrics = {"async/wait_s": waited}
        if period:  # from the second hand-off on: shares of the time between two hand-offs
            train_s = max(period - waited, 0.0)
            metrics["async/trainer_idle_ratio"] = min(waited / period, 1.0)
            metrics["async/rollout_idle_ratio"] = max(1.0 - busy / period, 0.0)
            metrics["async/overlap_ratio"] = min(max(busy - waited, 0.0), train_s) / period
        return record, metrics

    def busy(self) -> bool:
        """Whether a collect is running or waiting to run."""
        return any(not f.done() for f in self._queue)

    def settle(self) -> None:
        """Wait until no collect runs (before a checkpoint or an evaluation); re-raises a collect's error."""
        for future in list(self._queue):
            future.result()

    def pending(self) -> list[Any]:
        """The rollouts collected and not handed out yet (after :meth:`settle`), oldest first."""
        self.settle()
        return [*self._restored, *(f.result() for f in self._queue)]

    def restore(self, records: list[Any]) -> None:
        """Hand ``records`` out first (a resumed run: the rows its checkpoint had collected ahead)."""
        if self._queue:
            raise RuntimeError("restore() before the first hand-off only")
        self._restored = deque(records)

    def close(self) -> None:
        """Stop after the running collect; the queued ones are dropped."""
        for future in self._queue:
            future.cancel()
        self._executor.shutdown(wait=True, cancel_futures=True)

    # ------------------------------------------------------------------------------------------ driver thread
    def _fill(self) -> None:
        while len(self._queue) + len(self._restored) < self.capacity:
            self._start()

    def _start(self) -> None:
        if self.before_start is not None and not self.busy():
            self.before_start()
        self._queue.append(self._executor.submit(self._timed_collect))

    def _timed_collect(self) -> Any:
        start = time.perf_counter()
        try:
            return self._collect()
        finally:
            with self._lock:
                self._busy_s += time.perf_counter() - start


class WeightSync:
    """verl's ``checkpoint_manager`` with weight updates timed for a rollout that runs ahead (module docstring).

    Every attribute but :meth:`update_weights` is the manager's.

    Args:
        manager: verl's ``CheckpointEngineManager``.
        policy: the async mode's (verlog/config/async_modes.py): ``DEFER`` an update while a collect runs
            (``one_step_off``) or ``INTERRUPT`` the collect: abort, update, resume (``in_flight``).
        busy: whether a collect is running now.
    """

    def __init__(self, manager: Any, policy: WeightSyncPolicy, busy: Callable[[], bool]) -> None:
        if policy is WeightSyncPolicy.EACH_ITERATION:
            raise ValueError("WeightSync times the syncs of a rollout that runs ahead; EACH_ITERATION is verl's own")
        self._manager = manager
        self._policy = policy
        self._busy = busy
        self._deferred: int | None = None
        self.version: int | None = None
        """The version (verl's ``global_steps``) of the weights the servers hold."""
        self.latest = 0
        """The version of the newest weights (the actor's; the servers' once a deferred update is applied)."""
        self.in_flight_updates = 0
        """Updates applied while a collect was running (``in_flight``)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._manager, name)

    def update_weights(self, global_steps: int | None = None) -> Any:
        """verl's call after each optimizer step (and in the critic warm-up)."""
        if global_steps is not None:
            self.latest = int(global_steps)
        if not self._busy():
            return self._update(global_steps)
        if self._policy is WeightSyncPolicy.DEFER:
            self._deferred = global_steps
            return {}
        self._manager.abort_replicas()  # running requests return their tokens so far; prefix cache cleared
        try:
            out = self._update(global_steps)
        finally:
            self._manager.resume_generation_replicas()
        self.in_flight_updates += 1
        return out

    def apply_deferred(self) -> None:
        """Apply an update deferred while a collect ran (``DEFER``; no collect may run now)."""
        if self._deferred is not None:
            version, self._deferred = self._deferred, None
            self._update(version)

    def metrics(self) -> dict[str, float]:
        """``async/in_flight_updates`` (updates applied while a collect ran) when the policy interrupts collects."""
        if self._policy is not WeightSyncPolicy.INTERRUPT:
            return {}
        return {"async/in_flight_updates": float(self.in_flight_updates)}

    def _update(self, global_steps: int | None) -> Any:
        # Every sync sends the actor's current weights, so an update still deferred is superseded by this one:
        # applying it later would only relabel the servers' (newest) weights with an older version.
        self._deferred = None
        out = self._manager.update_weights(global_steps)
        self.version = global_steps
        return out


def lag_step(data: DataProto, latest: int, max_lag: int) -> dict[str, float]:
    """The policy lag of the rows being trained, and ``max_lag`` applied (after the advantage step).

    A row's lag is ``latest`` (the version of the weights being trained) minus the oldest version among its tokens
    (``policy_version``; rows of unknown version, -1, are not counted). Rows with a lag above ``max_lag`` leave the
    loss: their response mask and advantages become 0 (their values and rewards already served the advantages of
    the turns before them). Returns ``async/lag_mean``, ``async/lag_max``, ``async/rows_over_lag``.
    """
    versions = np.asarray(data.non_tensor_batch["policy_version"], dtype=np.int64)
    known = versions >= 0
    if not known.any():
        return {"async/rows_over_lag": 0.0}
    lag = latest - versions
    over = known & (lag > max_lag)
    if over.any():
        rows = torch.as_tensor(over)
        data.batch["response_mask"][rows] = 0
        data.batch["advantages"][rows] = 0
    return {
        "async/lag_mean": float(lag[known].mean()),
        "async/lag_max": float(lag[known].max()),
        "async/rows_over_lag": float(over.sum()),
    }
