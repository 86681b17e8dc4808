"""verlog.run.files: the one rule for reading JSON-lines files (a torn last line is skipped and reported, any other bad
line is an error naming file:line), appends of whole lines, and atomic writes, on real files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from verlog.run.files import (
    JsonLinesError,
    TornLine,
    append_jsonl,
    json_lines,
    nested_value,
    parse_lines,
    read_jsonl,
    write_atomically,
)


def test_a_torn_last_line_is_skipped_and_reported(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    append_jsonl(path, [{"step": 1}, {"step": 2}])
    with open(path, "ab") as f:
        f.write(b'{"step": 3, "eval/succ')  # a kill in the middle of this line's write
    warnings: list[str] = []
    assert read_jsonl(path, warn=warnings.append) == [{"step": 1}, {"step": 2}]
    assert warnings == [f"{path}: line 3 is torn (a writer was killed while writing it): skipped"]
    torn: list[TornLine] = []
    assert [number for number, _ in json_lines(path, on_torn=torn.append)] == [1, 2]
    assert torn == [TornLine(path, 3, 2)]


def test_a_torn_multibyte_character_is_a_torn_line_too(tmp_path: Path) -> None:
    path = tmp_path / "tapes.jsonl"
    whole = json.dumps({"response": "é"}, ensure_ascii=False).encode()
    path.write_bytes(b'{"a": 1}\n' + whole[: whole.index("é".encode()) + 1])  # cut inside the two bytes of é
    assert read_jsonl(path) == [{"a": 1}]


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ('{"step": 1}\nnot json\n{"step": 2}\n', ":2: not valid JSON"),
        ('{"step": 1}\n{"step": 2, "x\n', ":2: not valid JSON"),  # a whole last line (it has its newline)
        ('{"step": 1}\n\n\n{"st\n\n', ":4: not valid JSON"),  # blank lines count in the numbering
    ],
)
def test_any_other_bad_line_is_an_error_naming_file_and_line(tmp_path: Path, body: str, where: str) -> None:
    path = tmp_path / "rollout.jsonl"
    path.write_text(body)
    with pytest.raises(JsonLinesError, match=f"rollout.jsonl{where}"):
        read_jsonl(path)
    assert issubclass(JsonLinesError, ValueError)  # callers that caught the old ValueError still do


def test_a_missing_file_reads_as_no_records_and_blank_lines_are_skipped(tmp_path: Path) -> None:
    assert read_jsonl(tmp_path / "none.jsonl") == []
    path = tmp_path / "a.jsonl"
    path.write_text('\n{"a": 1}\n   \n{"a": 2}\n\n')
    assert read_jsonl(path) == [{"a": 1}, {"a": 2}]


def test_whole_lines_of_a_growing_file_are_never_torn(tmp_path: Path) -> None:
    assert parse_lines(b'{"a": 1}\n\n{"a": 2}', tmp_path / "m.jsonl", first_number=5) == [(5, {"a": 1}), (7, {"a": 2})]
    with pytest.raises(JsonLinesError, match=r"m\.jsonl:6: not valid JSON"):
        parse_lines(b'{"a": 1}\n{"a', tmp_path / "m.jsonl", first_number=5)


def test_an_append_after_a_torn_line_keeps_its_records_whole(tmp_path: Path) -> None:
    path = tmp_path / "episodes.jsonl"
    append_jsonl(path, [{"i": 0}])
    with open(path, "ab") as f:
        f.write(b'{"i": 1, "ret')
    append_jsonl(path, [{"i": 2}, {"i": 3}])
    assert path.read_bytes() == b'{"i": 0}\n{"i": 1, "ret\n{"i": 2}\n{"i": 3}\n'
    with pytest.raises(JsonLinesError, match=r"episodes\.jsonl:2"):  # the torn line stays, now a whole bad line
        read_jsonl(path)


def test_append_writes_each_record_as_one_line_with_unicode_and_a_default(tmp_path: Path) -> None:
    import numpy as np

    path = tmp_path / "sub" / "log.jsonl"
    append_jsonl(path, [{"text": "go → east"}, {"n": np.int64(3)}], default=int)
    assert path.read_text(encoding="utf-8") == '{"text": "go → east"}\n{"n": 3}\n'


def test_write_atomically_replaces_the_file_whole_and_leaves_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "run" / "latest_checkpointed_iteration.txt"
    write_atomically(path, "4")
    write_atomically(path, b"6")
    assert path.read_text() == "6" and os.listdir(path.parent) == [path.name]
    assert oct(path.stat().st_mode & 0o777) == oct(0o644)
    with pytest.raises(TypeError):
        write_atomically(path, 7)  # type: ignore[arg-type]
    assert path.read_text() == "6" and os.listdir(path.parent) == [path.name]  # a failed write changes nothing


def test_a_reader_never_sees_a_partial_file_while_it_is_rewritten(tmp_path: Path) -> None:
    """One process rewrites a file with write_atomically 300 times (alternating 1 MB payloads) while this one reads
    it: every read is one payload whole."""
    path = tmp_path / "state.json"
    write_atomically(path, "a" * 1_000_000)
    writer = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                f"""
                from verlog.run.files import write_atomically
                for i in range(300):
                    write_atomically({str(path)!r}, ("b" if i % 2 else "a") * 1_000_000)
                """
            ),
        ]
    )
    reads = 0
    while writer.poll() is None:
        data = path.read_bytes()
        assert data in (b"a" * 1_000_000, b"b" * 1_000_000)
        reads += 1
    assert writer.returncode == 0 and reads > 0
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]


def test_nested_value_reads_a_dotted_key_and_names_what_is_missing() -> None:
    config = {"algorithm": {"step_gamma": 0.99, "lam": None}, "iterations": 3, "env": "babyai"}
    assert nested_value(config, "algorithm.step_gamma") == 0.99 and nested_value(config, "iterations") == 3
    assert nested_value(config, "algorithm.lam", missing="absent") is None  # a null value is a value
    absent = object()
    for key in ("algorithm.step_lam", "model.path", "env.id"):  # an absent key, an absent parent, a parent not a dict
        assert nested_value(config, key) is None and nested_value(config, key, absent) is absent
