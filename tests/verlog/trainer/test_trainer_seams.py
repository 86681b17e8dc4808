"""verlog's seams in verl's trainer, without Ray: the config mapping, the tick data set, the advantage over rows."""

from __future__ import annotations

import pytest
import torch
from verl_rows import verl_rows  # beside this file

from verlog.algorithms.dual_gae import dual_discount_gae, masked_whiten
from verlog.config.compose import load_config
from verlog.trainer.config import TrainConfigError, check_config, verl_overrides


def test_config_maps_onto_verl_keys():
    cfg = load_config(["rollout.num_slots=4", "rollout.turns_per_slot=4", "hardware.n_gpus_per_node=2"])
    overrides = verl_overrides(check_config(cfg))
    assert "data.train_batch_size=16" in overrides
    assert "actor_rollout_ref.actor.ppo_mini_batch_size=8" in overrides
    assert (
        "+actor_rollout_ref.rollout.agent.agent_loop_manager_class="
        + ("verlog.trainer.agent_loop.VerlogAgentLoopManager")
        in overrides
    )
    assert "actor_rollout_ref.actor.strategy=fsdp2" in overrides  # the CPU hardware profile
    assert "trainer.critic_warmup=6" in overrides  # 5 critic-only iterations (verl counts from 1)


def test_config_rejects_rows_that_do_not_split_over_ranks():
    cfg = load_config(["rollout.num_slots=3", "rollout.turns_per_slot=1", "algorithm.mini_batches=1"])
    with pytest.raises(TrainConfigError, match="divide by the 2 training ranks"):
        check_config(cfg)


def test_misspelt_key_is_an_error():
    with pytest.raises(Exception, match=r"rollout\.num_slot"):
        load_config(["rollout.num_slot=4"])


@pytest.mark.slow
def test_the_advantage_step_links_rows_in_any_order():

    from verlog.config.schema import AlgorithmConfig, TrainConfig
    from verlog.trainer.advantage_step import BatchLayout, advantage_step

    settings = TrainConfig(
        algorithm=AlgorithmConfig(token_gamma=1.0, token_lam=1.0, step_gamma=0.9, step_lam=0.8, whiten_advantages=True)
    )
    # episode a: turns 0, 1 (continues, bootstrap); episode b: turn 0 terminated; episode c: turns 3, 4 truncated
    eids = ["a", "a", "b", "c", "c"]
    turns = [0, 1, 0, 3, 4]
    terminated = [False, False, True, False, False]
    truncated = [False, False, False, False, True]
    gen = torch.Generator().manual_seed(0)
    rewards = torch.zeros(5, 3)
    rewards[2, 1] = 1.0
    values = torch.randn(5, 3, generator=gen)
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 1]])
    next_values = torch.tensor([0.0, 0.5, 0.0, 0.0, -0.3])
    expect_adv, expect_ret = dual_discount_gae(
        rewards,
        values,
        mask,
        [1, -1, -1, 4, -1],
        next_values,
        terminated,
        token_gamma=1.0,
        token_lam=1.0,
        step_gamma=0.9,
        step_lam=0.8,
    )
    order = [4, 2, 0, 3, 1]  # what verl's balancing might leave
    data = verl_rows(
        {
            "token_level_rewards": rewards[order],
            "values": values[order],
            "response_mask": mask[order],
            "next_values": next_values[order],
        },
        [eids[i] for i in order],
        [turns[i] for i in order],
        [terminated[i] for i in order],
        [truncated[i] for i in order],
    )
    out, metrics, raw = advantage_step(data, settings, BatchLayout(ranks=1, mini_batch_rows=5))
    assert out is data  # the batch itself, with advantages and returns
    assert out.batch["advantages"].shape == (5, 3) and out.batch["returns"].shape == (5, 3)
    assert torch.allclose(out.batch["returns"], expect_ret[order], atol=1e-6)
    assert torch.allclose(out.batch["advantages"], masked_whiten(expect_adv, mask)[order], atol=1e-5)
    assert torch.allclose(raw, expect_adv[order], atol=1e-6)  # before whitening: what the tapes record
    assert metrics["adv/linked_rows"] == 2
    assert metrics["adv/bootstrap_rows"] == 2
    assert metrics["adv/next_value_mean"] == pytest.approx(float(next_values.mean()))


@pytest.mark.slow
def test_the_advantage_step_stops_on_a_non_finite_reward_naming_the_row():

    from verlog.config.schema import EnvConfig, TrainConfig
    from verlog.errors import VerlogError
    from verlog.trainer.advantage_step import BatchLayout, advantage_step

    rewards = torch.zeros(2, 2)
    rewards[1, 0] = float("nan")
    data = verl_rows(
        {"token_level_rewards": rewards, "values": torch.zeros(2, 2), "response_mask": torch.ones(2, 2)},
        ["a", "b"],
        [0, 3],
        [True, True],
        [False, False],
    )
    with pytest.raises(VerlogError, match=r"non-finite reward in 1 row\(s\) of env 'toy/x': episode b turn 3"):
        advantage_step(data, TrainConfig(env=EnvConfig(id="toy/x")), BatchLayout(ranks=1, mini_batch_rows=2))


def test_verlog_train_print_config(capsys):
    from verlog.cli import main

    assert main(["train", "--print-config", "iterations=7", "rollout.num_slots=8"]) == 0
    out = capsys.readouterr().out
    assert "iterations: 7" in out and "num_slots: 8" in out and "id: babyai/goto" in out
