"""Turn logs: write, read back, group by episode, refuse what is not a turn log."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from verlog.tapes.record import (
    LOG_FORMAT,
    LogProbStats,
    TurnLog,
    TurnLogError,
    TurnLogWriter,
    group_episodes,
    read_turn_logs,
)


def _turn(episode: str, turn: int, **kw) -> TurnLog:
    return TurnLog(
        episode_id=episode,
        turn=turn,
        env_id="babyai/goto",
        seed=7,
        prompt_messages=[{"role": "system", "content": "play"}, {"role": "user", "content": "Current Observation:\nä"}],
        response="THINK: x\nACTION: go forward",
        parsed_action="go forward",
        action="go forward",
        reward=0.25,
        value=0.1,
        advantage=-0.3,
        logprobs=LogProbStats.of([-0.1, -2.0, -0.3]),
        prompt_tokens=120,
        response_tokens=3,
        timings={"generate_s": 0.5},
        **kw,
    )


def test_round_trip(tmp_path: Path) -> None:
    records = [_turn("e1", 0), _turn("e2", 0, truncated=True), _turn("e1", 1, terminated=True, extra={"k": [1]})]
    path = tmp_path / "logs" / "turns.jsonl"
    with TurnLogWriter(path) as log:
        log.write_all(records[:2])
    with TurnLogWriter(path, append=True) as log:
        log.write(records[2])
        assert log.count == 1
    back = read_turn_logs(path)
    assert back == records
    stats = back[0].logprobs
    assert stats is not None and (stats.n, stats.min) == (3, -2.0)
    assert (stats.sum, stats.mean) == pytest.approx((-2.4, -0.8))
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 3 and json.loads(lines[0])["format"] == LOG_FORMAT
    grouped = group_episodes(reversed(back))
    assert list(grouped) == ["e1", "e2"]
    assert [t.turn for t in grouped["e1"]] == [0, 1]


def test_unknown_fields_are_kept_in_extra(tmp_path: Path) -> None:
    data = _turn("e", 0).to_dict()
    data["entropy"] = 1.5
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(data) + "\n\n")
    (record,) = read_turn_logs(path)
    assert record.extra == {"entropy": 1.5}
    assert LogProbStats.of([]) is None and LogProbStats.of(None) is None


def test_closed_writer_and_bad_files_give_clear_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    writer = TurnLogWriter(tmp_path / "a.jsonl")
    writer.close()
    with pytest.raises(TurnLogError, match="closed"):
        writer.write(_turn("e", 0))
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(_turn("e", 0).to_dict()) + '\n{"format": "verlog.turnlog/1", "episo\n')
    with pytest.raises(TurnLogError, match=r"bad.jsonl:2: not valid JSON"):
        read_turn_logs(bad)
    # a torn LAST line (no newline: a writer killed in the middle of it) is skipped with a warning, never fatal
    bad.write_text(json.dumps(_turn("e", 0).to_dict()) + '\n{"format": "verlog.turnlog/1", "episo')
    assert [r.turn for r in read_turn_logs(bad)] == [0]
    assert "line 2 is torn" in capsys.readouterr().err
    bad.write_text(json.dumps({"format": "other/2", "episode_id": "e", "turn": 0}) + "\n")
    with pytest.raises(TurnLogError, match=r"bad\.jsonl:1: not a verlog turn record"):
        read_turn_logs(bad)
    bad.write_text(json.dumps({"format": LOG_FORMAT, "turn": 0}) + "\n")
    with pytest.raises(TurnLogError, match="episode_id"):
        read_turn_logs(bad)
