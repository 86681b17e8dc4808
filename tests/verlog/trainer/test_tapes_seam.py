"""The tape hook without Ray: after the advantage step on a DataProto in verl's row order, ``record_tapes`` writes the
sampled episodes' turns with the values, advantages, returns, KL and entropies of *their* rows (each row matched to
its TurnRow of the iteration's rollout by episode id and turn, whatever order verl's balancing left)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from verl_rows import verl_rows  # beside this file

pytestmark = pytest.mark.slow  # imports verl


class Chars:  # one token per character
    eos_token_id = 0

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(i) for i in ids if i)


TEXT = "THINK: hm. ACTION: go"


def _rollout_rows():
    ids = [ord(c) for c in TEXT] + [0]
    n = len(ids)
    rows = [
        SimpleNamespace(
            slot=s, episode_id=f"e{s}", turn_index=t, prompt_ids=[1] * 5, response_ids=ids,
            response_logprobs=[-0.5] * n, response_text=TEXT, reward=0.0, terminated=False, truncated=False,
            action="go", action_valid=True, env_error=None, seed=s, observation=f"obs {s} {t}", memory_turns=t,
            success=None, frame=None,
        )
        for t in range(2)
        for s in range(2)
    ]  # fmt: skip
    return rows, n


def test_record_tapes_writes_the_tapes_of_its_rows(tmp_path):

    from verlog.config.schema import AlgorithmConfig, EnvConfig, TrainConfig
    from verlog.tapes.record import read_turn_logs
    from verlog.tapes.recorders import TapeRowsError, TapesConfig, TrainingTapes
    from verlog.trainer.advantage_step import BatchLayout, advantage_step, record_tapes

    rows, n = _rollout_rows()
    width = n + 3
    settings = TrainConfig(
        env=EnvConfig(id="toy/x"),
        algorithm=AlgorithmConfig(
            token_gamma=1.0, token_lam=1.0, step_gamma=0.9, step_lam=0.8, whiten_advantages=False
        ),
    )
    tapes = TrainingTapes(tmp_path, TapesConfig(episodes_per_iteration=2), Chars(), env_id="toy/x")
    order = [3, 1, 0, 2]  # verl's balancing reorders rows
    mask = torch.zeros(4, width)
    mask[:, :n] = 1
    values = torch.tensor([[0.1], [0.2], [0.3], [0.4]]).expand(4, width) * mask
    old = torch.full((4, width), -0.5) * mask
    ref = torch.full((4, width), -0.7) * mask
    entropys = (torch.arange(4, dtype=torch.float32).unsqueeze(1) + 1).expand(4, width)[order] * mask
    rewards = torch.zeros(4, width)
    data = verl_rows(
        {
            "token_level_rewards": rewards[order],
            "values": values[order],
            "response_mask": mask[order],
            "old_log_probs": old[order],
            "ref_log_prob": ref[order],
        },
        [rows[i].episode_id for i in order],
        [rows[i].turn_index for i in order],
        [False] * 4,
        [False] * 4,
    )
    out, _, raw = advantage_step(data, settings, BatchLayout(ranks=1, mini_batch_rows=4))
    shuffled = [rows[i] for i in (2, 0, 3, 1)]  # the rollout's rows in any order: matched by key
    assert record_tapes(tapes, out, shuffled, raw, entropys, step=4) == 4
    records = read_turn_logs(tmp_path / "tapes" / "train.jsonl")
    assert len(records) == 4 and {r.iteration for r in records} == {4}
    for rec in records:
        i = next(k for k, r in enumerate(rows) if (r.episode_id, r.turn_index) == (rec.episode_id, rec.turn))
        j = order.index(i)
        assert rec.value == pytest.approx(float(values[i, 0]))
        assert rec.advantage == pytest.approx(float(out.batch["advantages"][j, 0]))
        assert rec.advantage_raw == pytest.approx(float(raw[j, 0]))
        assert rec.gae_return == pytest.approx(float(out.batch["returns"][j, 0]))
        assert rec.kl_ref == pytest.approx(0.2 * n)
        split = rec.token_split
        assert TEXT[split.action_start :] == "ACTION: go"
        assert split.action.entropy_sum == pytest.approx((i + 1) * split.action.tokens)
        assert rec.observation == f"obs {rec.episode_id[1]} {rec.turn}"
    # the critic warm-up's advantage (step 0) or no tapes: nothing is written
    assert record_tapes(tapes, out, rows, raw, entropys, step=0) == 0
    assert record_tapes(None, out, rows, raw, entropys, step=5) == 0
    # a batch whose rows are not all in the rollout: an error naming the first missing row, never a silent 0
    with pytest.raises(TapeRowsError, match=r"iteration 5: 1 of the trained batch's 4 rows .* first missing: episode"):
        record_tapes(tapes, out, rows[:3], raw, entropys, step=5)
    assert len(read_turn_logs(tmp_path / "tapes" / "train.jsonl")) == 4
