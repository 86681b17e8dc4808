"""algorithm.estimator = grpo | gigpo in the trainer, without Ray: config checks, verl keys (no critic), the advantage
step over DataProto rows (verlog.trainer.advantage_step)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from verl_rows import verl_rows  # beside this file

from verlog.config.compose import load_config
from verlog.trainer.config import TrainConfigError, check_config, verl_overrides

GROUP = ["algorithm.estimator=grpo", "rollout.group_size=2", "rollout.num_slots=4", "rollout.turns_per_slot=4"]


def test_group_estimator_turns_the_critic_off():
    overrides = verl_overrides(check_config(load_config(GROUP)))
    assert "critic.enable=False" in overrides and "algorithm.adv_estimator=grpo" in overrides
    assert "trainer.critic_warmup=0" in overrides  # else verl would hold the actor back for critic-only iterations
    dual = verl_overrides(check_config(load_config([])))
    assert "algorithm.adv_estimator=gae" in dual and not any(o.startswith("critic.enable") for o in dual)


@pytest.mark.slow
def test_verl_builds_no_critic_for_group_estimators():
    from verl.trainer.ppo.utils import need_critic

    from verlog.trainer.config import build_verl_config

    assert not need_critic(build_verl_config(check_config(load_config([*GROUP[1:], "algorithm.estimator=gigpo"]))))
    assert need_critic(build_verl_config(check_config(load_config([]))))


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        (["algorithm.estimator=ppo"], "is not one of dual_gae, grpo, gigpo"),
        (["rollout.group_size=4"], "algorithm.estimator=dual_gae"),
        ([*GROUP, "rollout.group_size=1"], "must be >= 2"),
        ([*GROUP, "rollout.group_size=3"], "divide rollout.num_slots"),
        ([*GROUP, "algorithm.group_norm=std"], "group_norm"),
        ([*GROUP, "algorithm.gigpo_step_gamma=1.5"], "gigpo_step_gamma"),
        ([*GROUP, "algorithm.warmup_rollout_multiplier=4"], "warmup_rollout_multiplier"),
        ([*GROUP, "env.kwargs.max_steps=12"], r"rollout\.turns_per_slot=12"),
        ([*GROUP, "rollout.num_slots=2", "algorithm.mini_batches=4"], "mini-batches"),
    ],
)
def test_config_rejects_group_settings_that_cannot_work(overrides, match):
    with pytest.raises(TrainConfigError, match=match):
        check_config(load_config(overrides))


def test_group_config_passes():
    check_config(load_config(GROUP))
    check_config(load_config([*GROUP, "algorithm.estimator=gigpo", "env.kwargs.max_steps=4"]))


def _settings(estimator: str):
    from verlog.config.schema import AlgorithmConfig, EnvConfig, TrainConfig

    algorithm = AlgorithmConfig(estimator=estimator, group_norm="mean", gigpo_step_gamma=0.5, gigpo_omega=1.0)
    return TrainConfig(env=EnvConfig(id="toy/delayed"), algorithm=algorithm)


def _step(estimator: str, data, ranks: int = 2, mini_batch_rows: int = 4, shuffle: bool = False):
    """The advantage step of ``estimator`` on ``data`` (2 ranks x 2 mini-batches of 2 rows per rank by default)."""
    from verlog.trainer.advantage_step import BatchLayout, advantage_step

    return advantage_step(data, _settings(estimator), BatchLayout(ranks, mini_batch_rows, shuffle))


def _rows():
    """Group g: episode a (2 turns, reward 1 at the end), b (1 turn, reward 0) and an idle row of b's slot; group h:
    episode c (1 turn, reward 1) whose group mate d was cut by the batch end (2 unfinished rows), an idle row."""
    rows = [  # episode, turn, group, anchor, reward, ended, trained
        ("a", 0, "g", "room", 0.0, False, True),
        ("b", 0, "g", "room", 0.0, True, True),
        ("a", 1, "g", "door", 1.0, True, True),
        ("b-idle", 1, "g", "", 0.0, False, False),
        ("c", 0, "h", "room", 1.0, True, True),
        ("d", 0, "h", "room", 0.0, False, False),
        ("c-idle", 1, "h", "", 0.0, False, False),
        ("d", 1, "h", "hall", 0.0, False, False),
    ]

    b = len(rows)
    mask = torch.tensor([[1, 1, 0] if r[6] else [0, 0, 0] for r in rows])
    rewards = torch.zeros(b, 3)
    rewards[:, 1] = torch.tensor([r[4] for r in rows])
    data = verl_rows(
        {"token_level_rewards": rewards, "response_mask": mask},
        [r[0] for r in rows],
        [r[1] for r in rows],
        [r[5] for r in rows],
        [False] * b,
        group_id=np.array([r[2] for r in rows], dtype=object),
        anchor=np.array([r[3] for r in rows], dtype=object),
        trained=np.array([r[6] for r in rows]),
    )
    return rows, data


@pytest.mark.slow
@pytest.mark.parametrize("estimator", ["grpo", "gigpo"])
def test_the_advantage_step_computes_the_group_estimator(estimator):
    rows, data = _rows()
    out, metrics, raw = _step(estimator, data)
    got = {
        (e, int(t)): float(a[0])
        for e, t, a in zip(
            out.non_tensor_batch["episode_id"], out.non_tensor_batch["turn_index"], out.batch["advantages"]
        )
    }
    # group g ("mean"): returns a = 1, b = 0 -> +0.5 / -0.5; group h: c alone (d unfinished) -> 0
    want = {("a", 0): 0.5, ("a", 1): 0.5, ("b", 0): -0.5, ("c", 0): 0.0}
    if estimator == "gigpo":
        # anchor "room" in g: a's turn 0 returns 0.5 * 1 = 0.5, b's 0 -> +-0.25; "door" and c's "room" alone
        want[("a", 0)] += 0.25
        want[("b", 0)] -= 0.25
    for key, value in want.items():
        assert got[key] == pytest.approx(value, abs=1e-6)
    untrained = [(r[0], r[1]) for r in rows if not r[6]]
    assert all(got[k] == 0.0 for k in untrained)
    assert torch.equal(out.batch["returns"], out.batch["advantages"])
    assert (out.batch["advantages"] * (1 - out.batch["response_mask"])).abs().sum() == 0
    # 2 ranks x 2 mini-batches of 2 rows per rank: every mini-batch holds a trained row, rows stay on their rank
    trained = out.non_tensor_batch["trained"].tolist()
    assert all(any(trained[p : p + 2]) or any(trained[p + 4 : p + 6]) for p in (0, 2))
    keys = list(zip(out.non_tensor_batch["episode_id"], out.non_tensor_batch["turn_index"]))
    first_rank = {(r[0], r[1]) for r in rows[:4]}
    assert {(e, int(t)) for e, t in keys[:4]} == first_rank
    assert torch.equal(raw, out.batch["advantages"])  # nothing whitens them; reordered with the rows
    assert metrics["adv/trained_rows"] == 4 and metrics["adv/singleton_groups"] == 1


@pytest.mark.slow
def test_rows_keep_their_order_when_verl_shuffles():
    rows, data = _rows()
    out, _, _ = _step("grpo", data, shuffle=True)
    assert [(e, int(t)) for e, t in zip(out.non_tensor_batch["episode_id"], out.non_tensor_batch["turn_index"])] == [
        (r[0], r[1]) for r in rows
    ]


@pytest.mark.slow
def test_group_estimator_refuses_rows_without_groups():

    from verlog.errors import VerlogError

    data = verl_rows(
        {"token_level_rewards": torch.zeros(2, 2), "response_mask": torch.ones(2, 2)},
        ["a", "b"],
        [0, 0],
        [True, True],
        [False, False],
    )
    with pytest.raises(VerlogError, match=r"algorithm\.estimator=grpo needs group rollouts .*rollout\.group_size"):
        _step("grpo", data)
