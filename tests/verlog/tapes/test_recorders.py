"""Episode tapes: the reasoning/action token split, the training sample of episodes, per-turn values from the trainer's
tensors, evaluation tapes, frames, and the turn-record schema versions."""

from __future__ import annotations

import base64
import io
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from verlog.tapes.record import LOG_FORMAT, SCHEMA_VERSION, TurnLog, TurnLogError, TurnLogWriter, read_turn_logs
from verlog.tapes.recorders import (
    EvalTapeWriter,
    TapeConfigError,
    TapesConfig,
    TrainingTapes,
    action_offset,
    action_token_start,
    encode_frame,
    encode_png,
    frame_env_kwargs,
    shrink,
    split_response,
    token_split,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/verlog: the viewer tests' helper
from viewer_run import WordTokenizer


def test_action_marker_and_split():
    text = "THINK: the action: is unclear.\n**Action:** go forward"
    assert text[action_offset(text) :] == "Action:** go forward"
    assert split_response(text) == ("THINK: the action: is unclear.\n**", "Action:** go forward")
    assert split_response("go forward") == ("go forward", "")
    assert action_offset("transaction: x") is None  # "action" inside a word is no marker


def test_action_token_start_finds_the_marker_token():
    tok = WordTokenizer()
    text = "THINK: left is a wall. ACTION: turn right"
    ids = [*tok.encode(text), tok.eos_token_id]
    start = action_token_start(tok, ids)
    assert tok.decode(ids[start:]) == " ACTION: turn right"
    assert tok.decode(ids[:start]) == "THINK: left is a wall."
    assert action_token_start(tok, tok.encode("no marker here")) == 3
    assert action_token_start(tok, []) == 0


def test_token_split_sums_each_span():
    split = token_split(2, 5, logprobs=[-1, -2, -3, -4, -5], kl=[0.1, 0.1, 0.2, 0.2, 0.2], entropy=None)
    assert (split.action_start, split.reasoning.tokens, split.action.tokens) == (2, 2, 3)
    assert split.reasoning.logprob_sum == -3 and split.action.logprob_sum == -12
    assert split.action.kl_sum == pytest.approx(0.6) and split.action.entropy_sum is None
    assert token_split(9, 4).reasoning.tokens == 4 and token_split(9, 4).action.tokens == 0


def test_png_frames_decode_and_shrink():
    from PIL import Image

    rgb = np.zeros((112, 96, 3), dtype=np.uint8)
    rgb[:, :48, 0] = 255
    rgb[50:, :, 2] = 200
    back = np.asarray(Image.open(io.BytesIO(encode_png(rgb))).convert("RGB"))
    assert np.array_equal(back, rgb)
    small = shrink(rgb, 64)
    assert small.shape == (56, 48, 3)
    frame = encode_frame(rgb, 64)
    assert frame is not None
    assert Image.open(io.BytesIO(base64.b64decode(frame))).size == (48, 56)
    assert encode_frame(None) is None and encode_frame(np.zeros((3, 3, 7))) is None


def test_frame_kwargs_and_settings():
    assert frame_env_kwargs("babyai/goto", {"max_steps": 5}) == {"max_steps": 5, "render_image": True}
    assert frame_env_kwargs("babaisai/x", {}) == {"include_image": True}
    assert frame_env_kwargs("crafter/default", {"render_image": False}) == {"render_image": False}
    assert frame_env_kwargs("toy/delayed", {}) == {}
    from omegaconf import OmegaConf

    from verlog.config.checks import typed_config

    # the trainer hands over the typed section; a saved config without one gets the defaults
    assert typed_config(OmegaConf.create({}))[0].tapes == TapesConfig()
    cfg = OmegaConf.create({"tapes": {"episodes_per_iteration": 0, "eval_episodes": 2, "frames": True}})
    assert typed_config(cfg)[0].tapes == TapesConfig(0, 2, True, 128)
    with pytest.raises(TapeConfigError, match="episodes_per_iteration"):
        TapesConfig(episodes_per_iteration=-1).check()


def _row(eid: str, slot: int, turn: int, tok: WordTokenizer, *, ended: bool = False, reward: float = 0.0):
    text = f"THINK: turn {turn} of {eid}. ACTION: go forward"
    ids = [*tok.encode(text), tok.eos_token_id]
    return SimpleNamespace(
        slot=slot,
        episode_id=eid,
        turn_index=turn,
        prompt_ids=[1] * (10 + turn),
        response_ids=ids,
        response_logprobs=[-0.1] * len(ids),
        response_text=text,
        reward=reward,
        terminated=ended,
        truncated=False,
        action="go forward",
        action_valid=True,
        env_error=None,
        seed=100 + slot,
        observation=f"obs {eid} {turn}",
        memory_turns=min(turn, 1),
        success=True if ended else None,
        frame=np.full((8, 8, 3), 40 * slot, dtype=np.uint8),
    )


def _tensors(rows, width: int = 16) -> dict[str, torch.Tensor]:
    b = len(rows)
    mask = torch.zeros(b, width)
    for i, r in enumerate(rows):
        mask[i, : len(r.response_ids)] = 1
    ramp = torch.arange(width, dtype=torch.float32).expand(b, width)
    rowid = torch.arange(b, dtype=torch.float32).unsqueeze(1)
    return {
        "values": (rowid + 0.5) * mask,
        "advantages": (rowid - 1.0 + 0 * ramp) * mask,
        "advantages_raw": (rowid * 2) * mask,
        "returns": (rowid + 3.0) * mask,
        "response_mask": mask,
        "old_log_probs": -0.1 * mask,
        "ref_log_prob": -0.3 * mask,
        "entropys": (ramp + 1) * mask,
    }


def test_training_tapes_sample_follow_and_record_values(tmp_path: Path):
    tok = WordTokenizer()
    tapes = TrainingTapes(tmp_path, TapesConfig(episodes_per_iteration=2, frames=True), tok, env_id="toy/x", seed=3)
    # iteration 1: episodes a, b, c start; two are picked
    rows1 = [_row(e, s, 0, tok) for s, e in enumerate("abc")] + [_row(e, s, 1, tok) for s, e in enumerate("abc")]
    order = [3, 0, 5, 1, 4, 2]  # the trainer's rows come in any order (verl's balancing)
    rows1 = [rows1[i] for i in order]
    assert tapes.record(rows1, _tensors(rows1), 1) == 4
    first = {r.episode_id for r in read_turn_logs(tmp_path / "tapes" / "train.jsonl")}
    assert len(first) == 2
    # iteration 2: the picked ones go on (one ends), d starts (and is picked), c is never taped
    rows2 = [_row(e, s, 2, tok, ended=(e == sorted(first)[0]), reward=1.0) for s, e in enumerate("abc")]
    rows2 += [_row("d", 3, 0, tok)]
    tapes.record(rows2, _tensors(rows2), 2)
    records = read_turn_logs(tmp_path / "tapes" / "train.jsonl")
    assert {r.episode_id for r in records} == first | {"d"}
    ended = sorted(first)[0]
    assert ended not in tapes.taped and "d" in tapes.taped
    last = next(r for r in records if r.episode_id == ended and r.turn == 2)
    i = rows2.index(next(r for r in rows2 if r.episode_id == ended))
    n = len(rows2[i].response_ids)
    assert last.iteration == 2 and last.source == "train" and last.success is True and last.terminated
    assert last.value == pytest.approx(i + 0.5) and last.advantage == pytest.approx(i - 1.0)
    assert last.advantage_raw == pytest.approx(2 * i) and last.gae_return == pytest.approx(i + 3.0)
    assert last.kl_ref == pytest.approx(0.2 * n)
    split = last.token_split
    assert split is not None and split.reasoning.tokens + split.action.tokens == n
    assert tok.decode(rows2[i].response_ids[split.action_start :]) == " ACTION: go forward"
    assert split.action.entropy_sum == pytest.approx(sum(range(split.action_start + 1, n + 1)))
    assert split.reasoning.kl_sum == pytest.approx(0.2 * split.reasoning.tokens)
    assert last.parsed_action == "go forward" and last.observation == f"obs {ended} 2" and last.memory_turns == 1
    assert last.frame and last.logprobs is not None and last.logprobs.n == n
    assert [r.turn for r in records if r.episode_id == ended] == [0, 1, 2]


def test_training_tapes_off_and_without_optional_tensors(tmp_path: Path):
    tok = WordTokenizer()
    rows = [_row("a", 0, 0, tok)]
    off = TrainingTapes(tmp_path, TapesConfig(episodes_per_iteration=0), tok, env_id="x")
    assert off.record(rows, _tensors(rows), 1) == 0 and not (tmp_path / "tapes").exists()
    tapes = TrainingTapes(tmp_path, TapesConfig(episodes_per_iteration=1), tok, env_id="x")
    t = _tensors(rows)
    for key in ("old_log_probs", "ref_log_prob", "entropys", "advantages_raw"):
        t[key] = None
    assert tapes.record(rows, t, 1) == 1
    (rec,) = read_turn_logs(tmp_path / "tapes" / "train.jsonl")
    assert rec.kl_ref is None and rec.advantage_raw is None and rec.frame is None
    assert rec.token_split.reasoning.logprob_sum == pytest.approx(-0.1 * rec.token_split.reasoning.tokens)
    assert rec.token_split.action.kl_sum is None and rec.token_split.action.entropy_sum is None


def test_eval_tape_writer_keeps_its_episodes_renamed(tmp_path: Path):
    with EvalTapeWriter(tmp_path, 5, ["babyai/goto/run_00"]) as w:
        assert w.wants("babyai/goto/run_00") and not w.wants("babyai/goto/run_01")
        w.write(TurnLog(episode_id="babyai/goto/run_00", turn=0, prompt_messages=[{"role": "user", "content": "x"}]))
        w.write(TurnLog(episode_id="babyai/goto/run_01", turn=0))
    (rec,) = read_turn_logs(tmp_path / "tapes" / "eval.jsonl")
    assert rec.episode_id == "eval@5/babyai/goto/run_00" and rec.iteration == 5 and rec.source == "eval"
    assert rec.prompt_messages == []


def test_schema_versions_old_loads_newer_refused(tmp_path: Path):
    path = tmp_path / "t.jsonl"
    v1 = {"format": "verlog.turnlog/1", "episode_id": "e", "turn": 0, "response": "ACTION: go", "value": None}
    path.write_text(json.dumps(v1) + "\n")
    (rec,) = read_turn_logs(path)
    assert rec.response == "ACTION: go" and rec.iteration is None and rec.token_split is None
    assert LOG_FORMAT == f"verlog.turnlog/{SCHEMA_VERSION}"
    newer = {**v1, "format": f"verlog.turnlog/{SCHEMA_VERSION + 1}"}
    path.write_text(json.dumps(newer) + "\n")
    with pytest.raises(TurnLogError, match=r"t\.jsonl:1: written by a newer verlog .* upgrade verlog"):
        read_turn_logs(path)
    with TurnLogWriter(path) as w:  # a v2 record round-trips its nested token split
        w.write(TurnLog(episode_id="e", turn=0, token_split=token_split(1, 3, logprobs=[-1, -1, -1])))
    assert read_turn_logs(path)[0].token_split == token_split(1, 3, logprobs=[-1, -1, -1])


def test_train_config_has_and_checks_the_tapes_section():
    from verlog.config.compose import load_config
    from verlog.trainer.config import TrainConfigError, check_config

    cfg = load_config(["tapes.frames=true"])
    assert check_config(cfg).tapes == TapesConfig(4, 4, True, 128)
    with pytest.raises(TrainConfigError, match=r"tapes\.eval_episodes must be >= 0"):
        check_config(load_config(["tapes.eval_episodes=-2"]))
