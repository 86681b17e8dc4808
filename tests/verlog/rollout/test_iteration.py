"""One training iteration without verl (verlog/rollout/iteration.py): ``run_iteration`` collects, estimates the
advantages, writes the tapes and the two log lines the trainer writes, from the same functions the trainer's seams
call; and the trainer's advantage step on verl's batch of the same rows gives the same advantages
(tests/verlog/trainer/test_iteration_seams.py)."""

from __future__ import annotations

import json

import pytest
import torch
from hash_generator import HashGenerator  # beside this file

from verlog.config.schema import AlgorithmConfig
from verlog.errors import VerlogError
from verlog.rollout import RolloutManager, SamplingConfig, make_env_pool
from verlog.rollout.iteration import estimate_advantages, rows_of_batch, run_iteration
from verlog.run.folder import RunFolder
from verlog.tapes.recorders import TapesConfig, TrainingTapes


def made_up_values(batch, tensors, step):
    mask = tensors["response_mask"]
    values = torch.rand(mask.shape, generator=torch.Generator().manual_seed(step)) * mask
    next_values = torch.tensor([0.5 if r.bootstrap_prompt_ids is not None else 0.0 for r in batch.rows])
    return values, next_values


def make_rollout(tokenizer, slots=3):
    pool = make_env_pool("toy/delayed", slots, env_kwargs={"length": 3, "max_steps": 4}, seed=1)
    return RolloutManager(
        pool, tokenizer, HashGenerator(tokenizer), SamplingConfig(max_tokens=16), max_prompt_tokens=512, seed=2
    )


def collect_once(tokenizer, slots: int, turns: int):
    """One collect of :func:`make_rollout`'s rollout (its env pool closed after it)."""
    rollout = make_rollout(tokenizer, slots=slots)
    try:
        return rollout.collect(turns)
    finally:
        rollout.pool.close()


def test_run_iteration_writes_the_trainers_logs_and_tapes(tokenizer, tmp_path):
    rollout = make_rollout(tokenizer)
    tapes = TrainingTapes(tmp_path, TapesConfig(episodes_per_iteration=2), tokenizer, env_id="toy/delayed")
    try:
        done = [
            run_iteration(
                rollout,
                2,
                step,
                algorithm=AlgorithmConfig(),
                env_id="toy/delayed",
                max_prompt_tokens=512,
                max_response_tokens=16,
                output_dir=tmp_path,
                critic=made_up_values,
                tapes=tapes,
            )
            for step in (1, 2)
        ]
    finally:
        rollout.pool.close()
    folder = RunFolder(tmp_path)
    metrics = [json.loads(line) for line in folder.metrics.read_text().splitlines()]
    logs = [json.loads(line) for line in folder.rollout_log.read_text().splitlines()]
    assert [m["step"] for m in metrics] == [log["step"] for log in logs] == [1, 2]
    for iteration, line, log in zip(done, metrics, logs):
        assert len(iteration.record.batch) == log["rows"] == 6
        assert line["timing_s/rollout_env"] == iteration.record.metrics["timing_s/rollout_env"]
        assert line["adv/mean"] == pytest.approx(iteration.estimate.metrics["adv/mean"])
        assert log["taped_turns"] == iteration.taped_turns
        assert torch.isfinite(iteration.estimate.advantages).all()
    assert sum(i.taped_turns for i in done) == tapes.turns_written > 0
    assert len(tapes.path.read_text().splitlines()) == tapes.turns_written
    # the second iteration goes on from the first: its start episodes are where the first left the slots
    assert logs[1]["start_episodes"] != logs[0]["start_episodes"]


def test_estimate_advantages_stops_on_a_non_finite_reward_naming_the_row(tokenizer):
    batch = collect_once(tokenizer, slots=2, turns=2)
    tensors = batch.to_tensors(tokenizer.pad_token_id, 512, 16)
    tensors["rm_scores"][1, 0] = float("nan")
    row = batch.rows[1]
    rows = rows_of_batch(batch, tensors, *made_up_values(batch, tensors, 0))
    where = f"episode {row.episode_id} turn {row.turn_index}"
    with pytest.raises(VerlogError, match=f"non-finite reward in 1 row.*{where}"):
        estimate_advantages(rows, AlgorithmConfig(), "toy/delayed")


def test_group_estimators_need_group_rows(tokenizer):
    batch = collect_once(tokenizer, slots=2, turns=1)
    rows = rows_of_batch(batch, batch.to_tensors(tokenizer.pad_token_id, 512, 16))
    with pytest.raises(VerlogError, match="needs group rollouts"):
        estimate_advantages(rows, AlgorithmConfig(estimator="grpo"), "toy/delayed")


def test_a_group_estimators_iteration_is_taped_without_values(tokenizer, tmp_path):
    """GRPO's rows are taped as dual GAE's are (a run of a group estimator used to write no tapes): every turn of
    the sampled episodes, its advantage set and no value (no critic)."""
    pool = make_env_pool("toy/delayed", 4, env_kwargs={"length": 2, "max_steps": 2}, seed=1)
    rollout = RolloutManager(
        pool, tokenizer, HashGenerator(tokenizer), SamplingConfig(max_tokens=16), max_prompt_tokens=512, seed=2,
        group_size=2,
    )  # fmt: skip
    tapes = TrainingTapes(tmp_path, TapesConfig(episodes_per_iteration=2), tokenizer, env_id="toy/delayed")
    try:
        done = run_iteration(
            rollout,
            2,
            1,
            algorithm=AlgorithmConfig(estimator="grpo"),
            env_id="toy/delayed",
            max_prompt_tokens=512,
            max_response_tokens=16,
            output_dir=tmp_path,
            tapes=tapes,
        )
    finally:
        pool.close()
    turns = [json.loads(line) for line in tapes.path.read_text().splitlines()]
    assert done.taped_turns == len(turns) == tapes.turns_written > 0
    assert all(t["value"] is None and t["advantage"] is not None for t in turns)
