"""A rollout checkpoint records each slot's env id; resuming it with other envs is refused (issue 15)."""

from __future__ import annotations

import pytest

from verlog.rollout import RolloutManager, SamplingConfig, make_env_pool
from verlog.rollout.manager import RolloutStateError


def _manager(env_id: str, slots: int = 2) -> RolloutManager:
    pool = make_env_pool(env_id, slots, env_kwargs={"max_steps": 5}, in_process=True)
    return RolloutManager(pool, None, None, SamplingConfig(max_tokens=4), max_prompt_tokens=64)


def test_checkpoint_records_env_ids_and_refuses_another_env() -> None:
    saved = _manager("babyai/goto")
    state = saved.state_dict()
    assert state["env_ids"] == ["babyai/goto", "babyai/goto"]
    with pytest.raises(RolloutStateError, match=r"hold 'babyai/goto' \(slot 0\), this run's 'babyai/pickup'.*env\.id="):
        _manager("babyai/pickup").load_state_dict(state)
    _manager("babyai/goto").load_state_dict(state)  # the same envs resume
    legacy = {k: v for k, v in state.items() if k != "env_ids"}  # checkpoints from before env ids were recorded
    _manager("babyai/pickup").load_state_dict(legacy)
    saved.pool.close()
