"""verlog's seams in the installed verl (verlog/trainer/seams.py), the one row-link function and the row columns the
trainer reads (no Ray: verl's DataProto and the seam check are plain Python)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from verlog.rollout.batch import TurnBatch, TurnRow, link_turns
from verlog.trainer.seams import SEAMS, Seam, VerlSeamError, check_seams, seam_problems


def test_every_seam_holds_in_the_installed_verl():
    assert seam_problems() == []
    check_seams()


def test_a_moved_seam_is_named_with_the_fix(monkeypatch):
    fit = "verl.trainer.ppo.ray_trainer:RayPPOTrainer.fit"
    moved = (
        Seam(fit, "self._no_such_call(", "an imagined seam"),
        Seam("verl.trainer.ppo.ray_trainer:no_such_function", None, "another"),
    )
    problems = seam_problems(moved)
    assert len(problems) == 2
    assert "no longer contains 'self._no_such_call('" in problems[0] and "an imagined seam" in problems[0]
    assert "no_such_function is missing" in problems[1]
    import verlog.trainer.seams as seams

    monkeypatch.setattr(seams, "SEAMS", SEAMS + moved)
    with pytest.raises(VerlSeamError, match=r"(?s)2 of its seams.*verlog/trainer/seams.py"):
        seams.check_seams()


def test_link_turns_in_any_order():
    # episode a: turns 0, 1, 2 (2 goes on past the batch); b: turn 0 terminated; c: turn 5 truncated
    episodes = ["a", "b", "a", "c", "a"]
    turns = [1, 0, 0, 5, 2]
    ended = [False, True, False, True, False]
    assert link_turns(episodes, turns, ended) == [4, -1, 0, -1, -1]
    assert link_turns(np.array(episodes, dtype=object), np.array(turns), np.array(ended)) == [4, -1, 0, -1, -1]


def test_turn_batch_links_through_link_turns():
    rows = [
        TurnRow(slot=0, episode_id="e", turn_index=t, prompt_ids=[1], response_ids=[2], response_logprobs=None)
        for t in (0, 1, 2)
    ]
    rows[1].truncated = True
    batch = TurnBatch(rows=rows)
    batch.link_rows()
    assert [r.next_row for r in rows] == [1, -1, -1]


def test_bootstrap_prompts_travel_as_a_row_column_through_verls_reordering():
    from verl import DataProto

    from verlog.trainer.agent_loop import _object_column

    prompts = [[1, 2, 3], None, [4, 5, 6], [7]]  # equal-length lists must stay lists, not a 2-D array
    column = _object_column(prompts)
    assert column.shape == (4,) and column.dtype == object
    data = DataProto.from_dict(
        tensors={"x": torch.arange(4)},
        non_tensors={"bootstrap_prompt_ids": column, "episode_id": np.array(list("abcd"), dtype=object)},
    )
    data.reorder(torch.tensor([2, 0, 3, 1]))
    got = dict(zip(data.non_tensor_batch["episode_id"], data.non_tensor_batch["bootstrap_prompt_ids"]))
    assert got == {"a": [1, 2, 3], "b": None, "c": [4, 5, 6], "d": [7]}
    assert data.batch["x"].tolist() == [2, 0, 3, 1]


def test_rollout_metrics_carry_the_prompt_budget_statistics():
    rows = [
        TurnRow(slot=0, episode_id="e", turn_index=0, prompt_ids=[1] * 10, response_ids=[2], response_logprobs=None),
        TurnRow(slot=1, episode_id="f", turn_index=3, prompt_ids=[1] * 30, response_ids=[2], response_logprobs=None),
    ]
    rows[0].memory_turns, rows[1].memory_turns = 0, 1
    rows[1].observation_truncated = True
    m = TurnBatch(rows=rows).metrics()
    assert m["rollout/prompt_tokens/mean"] == 20 and m["rollout/prompt_tokens/max"] == 30
    assert m["rollout/memory_turns_kept/mean"] == 0.5
    assert m["rollout/prompt_truncated_frac"] == 0.5
