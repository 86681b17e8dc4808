"""RolloutManager: N env slots advancing in lockstep, a memory per slot, fixed-turn batches of per-turn rows.

Each :meth:`RolloutManager.collect` call advances every slot ``T`` turns: build each slot's prompt from its memory,
generate all ``N`` responses in one batch, step all ``N`` envs with the model's text, record one row per slot. Episodes
persist across calls (the envs and memories keep their state), so long episodes span several PPO iterations; the
last row of an unfinished episode carries the prompt of the next state as its *bootstrap prompt*.

Failures never lose the batch: a request whose generation fails is retried ``generation_retries`` times, then the
slot's turn is recorded with a bare end-of-turn response (an invalid action: the env runs its default action; the
row counts in ``rollout/generation_failures``); an env that crashes ends its episode as truncated (the env pool
restarts it) and the row carries ``env_error``.

Envs: an ``envs.pool.EnvPool`` (batched ``reset``/``step`` with auto-reset and ``final_observation``/``final_info``,
``instruction(slot)``, ``slot_states()``/``restore_slots()``), in-process or with subprocess workers.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from verlog.errors import VerlogError
from verlog.memory import SlidingMemory
from verlog.rollout.batch import EpisodeStats, TurnBatch, TurnRow
from verlog.rollout.generator import Generation, GenerationRequest, Generator, SamplingConfig

STATE_FORMAT = "verlog.rollout/1"


class RolloutStateError(VerlogError, ValueError):
    """A rollout checkpoint does not fit this manager (other format or number of slots)."""


def resolve_env_factory(env_id: str) -> str | Callable[..., Any]:
    """A registered env id stays as is; ``"package.module:attr"`` becomes that callable (e.g. a test's env)."""
    if ":" not in env_id:
        return env_id
    module_name, _, attr = env_id.partition(":")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ValueError(
            f"env factory {env_id!r} cannot be loaded ({exc}); give a registered id or 'module:attr'"
        ) from exc


def make_env_pool(
    env_id: str,
    num_slots: int,
    *,
    env_kwargs: dict[str, Any] | None = None,
    in_process: bool = True,
    num_workers: int | None = None,
    seed: int = 0,
    step_timeout: float | None = 60.0,
) -> Any:
    """An ``envs.pool.EnvPool`` of ``num_slots`` envs of ``env_id`` (a registered id or ``"module:attr"``)."""
    from envs.pool import EnvPool

    return EnvPool(
        resolve_env_factory(env_id),
        num_envs=num_slots,
        env_kwargs=dict(env_kwargs or {}),
        in_process=in_process,
        num_workers=num_workers,
        seed=seed,
        step_timeout=None if in_process else step_timeout,
    )


@dataclass
class _SlotEpisode:
    """Book-keeping of the episode running in one slot."""

    episode_id: str = ""
    count: int = 0
    turn: int = 0
    ret: float = 0.0
    valid: int = 0
    prompt_tokens: int = 0
    response_tokens: int = 0
    last_progression: float = 0.0
    seed: int | None = None

    def state(self) -> dict[str, Any]:
        return dict(self.__dict__)


class RolloutManager:
    """Owns the env slots and their memories; turns them into :class:`TurnBatch` rows.

    Args:
        pool: the env pool (``num_envs`` slots).
        tokenizer: the policy's tokenizer (chat template, decode, ``eos_token_id``).
        generator: completes token prompts (see :mod:`verlog.rollout.generator`).
        sampling: sampling settings of training rollouts.
        max_prompt_tokens: the prompt budget (the memory drops old turns to fit).
        memory_factory: builds one memory per slot (default: ``SlidingMemory()``, Verlog's n = 1).
        seed: seed of the first episodes (slot i gets ``seed + i``; later episodes draw from the pool's streams).
        run_id: prefix of the episode ids.
        generation_retries: retries of a failed generation before the turn falls back to an empty response.
    """

    def __init__(
        self,
        pool: Any,
        tokenizer: Any,
        generator: Generator,
        sampling: SamplingConfig,
        *,
        max_prompt_tokens: int,
        memory_factory: Callable[[], SlidingMemory] | None = None,
        seed: int = 0,
        run_id: str = "run",
        generation_retries: int = 1,
    ) -> None:
        if max_prompt_tokens < 1:
            raise ValueError(f"max_prompt_tokens must be >= 1, got {max_prompt_tokens}")
        if generation_retries < 0:
            raise ValueError(f"generation_retries must be >= 0, got {generation_retries}")
        self.pool = pool
        self.tokenizer = tokenizer
        self.generator = generator
        self.sampling = sampling
        self.max_prompt_tokens = max_prompt_tokens
        self.seed = seed
        self.run_id = run_id
        self.generation_retries = generation_retries
        self.num_slots = int(pool.num_envs)
        factory = memory_factory or SlidingMemory
        self.memories = [factory() for _ in range(self.num_slots)]
        self._episodes = [_SlotEpisode() for _ in range(self.num_slots)]
        self._started = False
        self.last_timing: dict[str, float] = {}

    # ------------------------------------------------------------------------------------------ episodes
    def _begin_episode(self, slot: int, obs: Any) -> None:
        ep = self._episodes[slot]
        ep.count += 1
        ep.episode_id = f"{self.run_id}-s{slot}-e{ep.count}"
        ep.turn = ep.valid = ep.prompt_tokens = ep.response_tokens = 0
        ep.ret = ep.last_progression = 0.0
        ep.seed = self.pool.episode_seed(slot)
        memory = self.memories[slot]
        memory.reset(self.pool.instruction(slot))
        memory.observe(obs.long_term, obs.short_term)

    def start(self) -> None:
        """Reset every slot (slot i with seed ``seed + i``) and open its first episode."""
        for slot, (obs, _info) in enumerate(self.pool.reset(seeds=self.seed)):
            self._begin_episode(slot, obs)
        self._started = True

    def current_episodes(self) -> list[tuple[str, int]]:
        """``(episode id, turn index)`` of every slot's running episode."""
        return [(ep.episode_id, ep.turn) for ep in self._episodes]

    # ------------------------------------------------------------------------------------------ rollout
    def _prompt_ids(self, slot: int) -> list[int]:
        return list(self.memories[slot].build_prompt(self.tokenizer, self.max_prompt_tokens).token_ids)

    def _generate(self, requests: list[GenerationRequest], batch: TurnBatch) -> list[Generation | None]:
        """Generate with retries; None marks a request that failed every attempt."""
        results: list[Generation | None] = [None] * len(requests)
        todo = list(range(len(requests)))
        for attempt in range(self.generation_retries + 1):
            if not todo:
                break
            if attempt:
                batch.generation_retries += len(todo)
            outs = self.generator.generate([requests[i] for i in todo], self.sampling)
            if len(outs) != len(todo):
                raise VerlogError(f"the generator returned {len(outs)} results for {len(todo)} requests")
            failed = []
            for i, out in zip(todo, outs):
                if isinstance(out, Generation) and out.token_ids:
                    results[i] = out
                else:
                    failed.append(i)
            todo = failed
        return results

    def collect(self, turns_per_slot: int) -> TurnBatch:
        """Advance every slot ``turns_per_slot`` turns; returns ``num_slots * turns_per_slot`` rows (slot-major
        within each turn: row ``t * num_slots + slot``)."""
        if turns_per_slot < 1:
            raise ValueError(f"turns_per_slot must be >= 1, got {turns_per_slot}")
        if not self._started:
            self.start()
        batch = TurnBatch()
        t_gen = t_env = 0.0
        eos = self.tokenizer.eos_token_id
        for _ in range(turns_per_slot):
            prompts = [self._prompt_ids(s) for s in range(self.num_slots)]
            requests = [GenerationRequest(self._episodes[s].episode_id, prompts[s]) for s in range(self.num_slots)]
            start = time.perf_counter()
            generations = self._generate(requests, batch)
            t_gen += time.perf_counter() - start
            rows: list[TurnRow] = []
            texts: list[str] = []
            for s, gen in enumerate(generations):
                failed = gen is None
                if gen is None:
                    gen = Generation(token_ids=[eos], log_probs=None)
                text = "" if failed else self.tokenizer.decode(gen.token_ids, skip_special_tokens=True)
                ep = self._episodes[s]
                rows.append(
                    TurnRow(
                        slot=s,
                        episode_id=ep.episode_id,
                        turn_index=ep.turn,
                        prompt_ids=prompts[s],
                        response_ids=list(gen.token_ids),
                        response_logprobs=gen.log_probs,
                        generation_failed=failed,
                        seed=ep.seed,
                    )
                )
                texts.append(text)
            start = time.perf_counter()
            results = self.pool.step(texts)
            t_env += time.perf_counter() - start
            for s, (row, text, result) in enumerate(zip(rows, texts, results)):
                self._apply_step(s, row, text, result, batch)
                batch.rows.append(row)
        batch.link_rows()
        for s in range(self.num_slots):  # the slot's last row: bootstrap from the prompt its episode continues with
            last = batch.rows[len(batch.rows) - self.num_slots + s]
            if not (last.terminated or last.truncated):
                last.bootstrap_prompt_ids = self._prompt_ids(s)
        self.last_timing = {"timing_s/rollout_generate": t_gen, "timing_s/rollout_env": t_env}
        return batch

    def _apply_step(self, slot: int, row: TurnRow, text: str, result: Sequence[Any], batch: TurnBatch) -> None:
        obs, reward, terminated, truncated, info = result
        ep = self._episodes[slot]
        final_info = info.get("final_info", info) if (terminated or truncated) else info
        row.reward = float(reward)
        row.terminated = bool(terminated)
        row.truncated = bool(truncated) and not row.terminated
        row.action = str(final_info.get("action") or "")
        row.action_valid = bool(final_info.get("action_valid", False))
        row.env_error = info.get("env_error")
        ep.turn += 1
        ep.ret += row.reward
        ep.valid += int(row.action_valid)
        ep.prompt_tokens += len(row.prompt_ids)
        ep.response_tokens += len(row.response_ids)
        ep.last_progression = float(final_info.get("progression", ep.last_progression))
        memory = self.memories[slot]
        memory.record(text, row.action)
        if not (terminated or truncated):
            memory.observe(obs.long_term, obs.short_term)
            return
        if row.truncated:  # bootstrap V(s_{t+1}) from the state the episode was cut in
            final_obs = info.get("final_observation")
            if final_obs is not None:
                memory.observe(final_obs.long_term, final_obs.short_term)
                row.bootstrap_prompt_ids = self._prompt_ids(slot)
            else:
                row.bootstrap_prompt_ids = list(row.prompt_ids)
        batch.episodes.append(
            EpisodeStats(
                episode_id=ep.episode_id,
                slot=slot,
                ret=ep.ret,
                length=ep.turn,
                success=bool(final_info.get("success", False)),
                progression=ep.last_progression,
                valid_action_ratio=ep.valid / max(ep.turn, 1),
                prompt_tokens=ep.prompt_tokens / max(ep.turn, 1),
                response_tokens=ep.response_tokens / max(ep.turn, 1),
                truncated=row.truncated,
                env_error=row.env_error is not None,
                seed=ep.seed,
            )
        )
        self._begin_episode(slot, obs)

    # ------------------------------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """Every slot's env state, memory and episode book-keeping (picklable; goes into the checkpoint)."""
        return {
            "format": STATE_FORMAT,
            "num_slots": self.num_slots,
            "started": self._started,
            "env_states": self.pool.slot_states() if self._started else None,
            "memories": [m.state_dict() for m in self.memories],
            "episodes": [ep.state() for ep in self._episodes],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`: the slots continue the same episodes."""
        if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
            raise RolloutStateError(f"not a rollout state of format {STATE_FORMAT!r}")
        if state["num_slots"] != self.num_slots:
            raise RolloutStateError(
                f"the checkpoint has {state['num_slots']} env slots, this run {self.num_slots}: resume with the same "
                "rollout.num_slots"
            )
        if state["started"]:
            self.pool.restore_slots(state["env_states"])
        for memory, mstate in zip(self.memories, state["memories"]):
            memory.load_state_dict(mstate)
        self._episodes = [_SlotEpisode(**ep) for ep in state["episodes"]]
        self._started = bool(state["started"])
