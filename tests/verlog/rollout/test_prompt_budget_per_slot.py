"""An observation over the prompt budget ends only its own slot's episode (issue 15): the row is truncated with a
PromptTooLongError in env_error, the slot starts its next episode, the other slots and the batch go on."""

from __future__ import annotations

from typing import Any

import pytest

from envs.core import TextObservation
from envs.pool import EnvPool
from envs.toy import DelayedRewardEnv
from verlog.rollout import RolloutManager, SamplingConfig


class HugeSecondObservation(DelayedRewardEnv):
    """toy/delayed whose observation after the first step is far over any prompt budget in episodes of even seeds."""

    def _game_reset(self, seed: int | None, options: dict[str, Any] | None) -> tuple[TextObservation, dict[str, Any]]:
        self._huge, self._steps = seed is not None and seed % 2 == 0, 0
        return super()._game_reset(seed, options)

    def _game_step(self, action: str) -> tuple[TextObservation, float, bool, dict[str, Any]]:
        self._steps += 1
        return super()._game_step(action)

    def _observe(self) -> TextObservation:
        if getattr(self, "_huge", False) and getattr(self, "_steps", 0) == 1:
            return TextObservation.build("a wall " * 4000)
        return super()._observe()


@pytest.mark.slow
def test_a_too_long_observation_cuts_only_its_slot(tokenizer, generator):
    pool = EnvPool(HugeSecondObservation, num_envs=2, env_kwargs={"length": 4}, in_process=True, seed=0)
    m = RolloutManager(pool, tokenizer, generator, SamplingConfig(max_tokens=4), max_prompt_tokens=512, seed=0)
    batch = m.collect(4)  # slot 0 resets with seed 0 (even: huge at its second turn), slot 1 with seed 1
    assert len(batch) == 8
    slot0 = [r for r in batch.rows if r.slot == 0]
    slot1 = [r for r in batch.rows if r.slot == 1]
    cut = slot0[0]
    assert cut.truncated and cut.env_error and cut.env_error.startswith("PromptTooLongError")
    assert cut.bootstrap_prompt_ids == cut.prompt_ids  # no prompt of s_{t+1} exists: V(s_t) stands in
    assert slot0[1].episode_id != cut.episode_id and slot0[1].turn_index == 0  # the slot's next episode
    assert all(r.env_error is None for r in slot1) and [r.turn_index for r in slot1] == [0, 1, 2, 3]
    assert batch.metrics()["rollout/env_errors"] >= 1
    assert any(e.env_error and e.episode_id == cut.episode_id for e in batch.episodes)
    assert all(len(r.prompt_ids) <= 512 for r in batch.rows)
