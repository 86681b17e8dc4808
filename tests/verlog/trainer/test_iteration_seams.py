"""The trainer's seams run the library's iteration (verlog/rollout/iteration.py): the rollout seam collects with
``collect_iteration``, and the advantage step on verl's batch of those rows, reordered as verl's balancing may,
gives the advantages and metrics that ``estimate_advantages`` gives on the rollout's own rows; the log seam writes
the lines ``append_iteration_logs`` writes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

pytestmark = pytest.mark.slow  # imports verl

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "rollout"))
from test_iteration import made_up_values, make_rollout  # noqa: E402


def _agent_loop(rollout, turns):
    """verl's rollout seam without Ray: the trainer's agent-loop manager over ``rollout`` (no worker started)."""
    from verlog.trainer.agent_loop import VerlogAgentLoopManager

    manager = VerlogAgentLoopManager.__new__(VerlogAgentLoopManager)
    manager.config = OmegaConf.create({"actor_rollout_ref": {"rollout": {"prompt_length": 512, "response_length": 16}}})
    manager.rollout, manager.turns_per_slot = rollout, turns
    return manager


def _collected(tokenizer, slots: int, turns: int):
    """The agent-loop manager over a test rollout and the record of its one collect (the env pool closed after it)."""
    rollout = make_rollout(tokenizer, slots=slots)
    manager = _agent_loop(rollout, turns)
    try:
        return manager, manager.collect_record()
    finally:
        rollout.pool.close()


def test_the_trainers_advantage_step_is_the_librarys_on_verls_batch(tokenizer):
    from verlog.config.schema import AlgorithmConfig, EnvConfig, TrainConfig
    from verlog.rollout.iteration import estimate_advantages, rows_of_batch
    from verlog.trainer.advantage_step import BatchLayout, advantage_step

    manager, record = _collected(tokenizer, slots=4, turns=3)
    batch = record.batch
    assert record.metrics == {**batch.metrics(), **batch.timing} and record.log["rows"] == len(batch) == 12
    tensors = batch.to_tensors(tokenizer.pad_token_id, 512, 16)
    values, next_values = made_up_values(batch, tensors, 1)
    algorithm = AlgorithmConfig()
    library = estimate_advantages(rows_of_batch(batch, tensors, values, next_values), algorithm, "toy/delayed")

    data = manager.to_dataproto(batch)
    data.batch["token_level_rewards"] = data.batch["rm_scores"]
    data.batch["values"], data.batch["next_values"] = values, next_values
    order = torch.randperm(len(data), generator=torch.Generator().manual_seed(0))  # verl's balancing reorders
    data.reorder(order)
    settings = TrainConfig(env=EnvConfig(id="toy/delayed"), algorithm=algorithm)
    trained, metrics, raw = advantage_step(data, settings, BatchLayout(ranks=1, mini_batch_rows=len(data)))
    # the same numbers up to float summation order (whitening sums the rows in the batch's order)
    torch.testing.assert_close(trained.batch["advantages"], library.advantages[order], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(trained.batch["returns"], library.returns[order], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(raw, library.raw[order], rtol=1e-5, atol=1e-6)
    assert metrics.keys() == library.metrics.keys()
    assert metrics == pytest.approx(library.metrics, rel=1e-5, abs=1e-6)


def test_the_trainers_log_seam_writes_the_librarys_lines(tokenizer, tmp_path):
    from types import SimpleNamespace

    from verlog.rollout.iteration import append_iteration_logs
    from verlog.run.folder import RunFolder
    from verlog.trainer.ppo import VerlogPPOTrainer

    manager, record = _collected(tokenizer, slots=2, turns=2)
    record.step = 3
    manager.last_rollout = record
    trainer = VerlogPPOTrainer.__new__(VerlogPPOTrainer)
    trainer.async_rollout_manager = manager
    trainer.__dict__["_settings"] = SimpleNamespace(output_dir=str(tmp_path / "trainer"))
    metrics = {"adv/mean": torch.tensor(0.25), "training/global_step": 3, **record.metrics}
    trainer.log_jsonl(metrics, 3)
    append_iteration_logs(tmp_path / "library", 3, metrics, record.log)
    for name in ("metrics", "rollout_log"):
        lines = [getattr(RunFolder(tmp_path / side), name).read_text() for side in ("trainer", "library")]
        assert lines[0] == lines[1] and json.loads(lines[0])["step"] == 3
