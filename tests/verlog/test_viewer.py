"""``verlog view``: the page built from a run the test makes (real writers, no verl), what it embeds, its size bound
with thousands of episodes, evaluation folders, and the named errors (exit code 2, no traceback)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
from viewer_run import make_training_run

from verlog.cli import main
from verlog.tapes.record import TurnLog, TurnLogWriter
from verlog.tapes.recorders import token_split
from verlog.viewer import build_payload, build_view, load_run


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_training_run(tmp_path_factory.mktemp("viewer") / "run")


def _payload(html: str) -> dict:
    match = re.search(r'<script id="verlog-data" type="application/json">(.*?)</script>', html, re.S)
    assert match, "no data element"
    return json.loads(match.group(1))


def test_page_is_self_contained_and_holds_the_run(run_dir: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "page.html"
    assert main(["view", str(run_dir), "--out", str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    html = out.read_text(encoding="utf-8")
    # opens from disk: nothing fetched (no external src/href, stylesheet links, imports or requests), and the
    # page's CSP forbids any fetch anyway
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", html, re.I)
    assert "<link" not in html and "@import" not in html and "url(" not in html
    assert "fetch(" not in html and "XMLHttpRequest" not in html
    assert "default-src 'none'" in html
    data = _payload(html)
    episodes = {e["id"]: e for e in data["episodes"]}
    train = [e for e in data["episodes"] if e["src"] == "train"]
    evals = [e for e in data["episodes"] if e["src"] == "eval"]
    assert len(train) >= 2 and len(evals) == 4  # 2 taped per evaluation, evaluations at steps 0 and 3
    assert {e["id"] for e in evals} == {f"eval@{i}/babyai/goto/run_0{k}" for i in (0, 3) for k in (0, 1)}
    assert all(e["d"] for e in data["episodes"])
    eid = train[0]["id"]
    turns = data["turns"][eid]
    assert [t["t"] for t in turns] == list(range(episodes[eid]["t0"], episodes[eid]["t0"] + len(turns)))
    first = turns[0]
    assert first["obs"] and first["th"].startswith("THINK") and first["at"].startswith("ACTION")
    assert all(first[k] is not None for k in ("v", "adv", "advr", "g", "kl", "sr", "sa", "f", "it"))
    assert first["sr"][0] + first["sa"][0] == first["rt"]
    assert any(t["f"] for t in data["turns"][evals[0]["id"]])  # BabyAI frames on the evaluation tape too
    assert data["turns"][evals[0]["id"]][0]["v"] is None  # an evaluation has no critic
    metrics = data["metrics"]
    assert metrics["steps"] == [0, 1, 2, 3]
    assert "eval/success" in metrics["defaults"] and "eval/success_se" in metrics["series"]
    assert metrics["series"]["critic/vf_loss"][1:] == pytest.approx([1.0, 0.5, 1 / 3], rel=1e-4)
    summary = dict(data["summary"])
    assert summary["env"] == "babyai/goto" and summary["run"] == "synthetic-goto"


def test_default_output_and_no_frames(run_dir: Path, tmp_path: Path) -> None:
    with_frames = build_view(run_dir)
    assert with_frames.path == run_dir / "view.html" and with_frames.path.is_file()
    without = build_view(run_dir, tmp_path / "small.html", frames=False)
    assert without.bytes < with_frames.bytes
    assert all(t["f"] is None for turns in _payload(without.path.read_text())["turns"].values() for t in turns)


def test_thousands_of_episodes_stay_bounded(tmp_path: Path) -> None:
    run = tmp_path / "big"
    (run / "tapes").mkdir(parents=True)
    (run / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": s, "env/return_mean": s / 100}) + "\n" for s in range(1, 201))
    )
    obs = "a wall 3 steps forward\na red ball 1 step left and 2 steps forward\n" * 2
    response = "THINK: " + "the ball is left of me, so I turn towards it first. " * 4 + "\nACTION: turn left"
    with TurnLogWriter(run / "tapes" / "train.jsonl") as w:
        for e in range(3000):
            for t in range(10):
                w.write(
                    TurnLog(
                        episode_id=f"run-s{e % 16}-e{e}", turn=t, env_id="babyai/goto", seed=e, response=response,
                        parsed_action="turn left", action="turn left", reward=float(t == 9), terminated=t == 9,
                        value=0.1 * t, advantage=0.01 * t, source="train", iteration=1 + e // 16, observation=obs,
                        success=True if t == 9 else None, gae_return=0.5, kl_ref=0.01,
                        token_split=token_split(40, 45, logprobs=[-0.1] * 45, kl=[0.001] * 45, entropy=[1.0] * 45),
                        memory_turns=1, prompt_tokens=300, response_tokens=45,
                    )
                )  # fmt: skip
    start = time.perf_counter()
    result = build_view(run, max_episodes=200)
    elapsed = time.perf_counter() - start
    assert result.episodes == 3000 and result.embedded == 200 and result.turns == 30000
    assert result.bytes < 3_500_000, result.bytes
    assert elapsed < 60
    data = _payload(result.path.read_text())
    assert data["episodes"][0]["d"] and data["episodes"][-1]["d"]  # the sample spans the run
    assert any("evenly spaced" in n for n in data["notes"])


def test_evaluation_folder_with_schema_1_turns(tmp_path: Path) -> None:
    out = tmp_path / "eval"
    out.mkdir()
    (out / "summary.json").write_text(
        json.dumps(
            {
                "format": "verlog.eval/1",
                "episodes": 2,
                "average_progress": 50.0,
                "model": {"path": "m"},
                "environments": {"toy": {"tasks": {"x": {"success_rate": 0.5, "mean_return": 0.5, "episodes": 2}}}},
            }
        )
    )
    rows = [
        {"env_id": "toy/x", "episode_index": 0, "seed": 0, "success": True, "episode_return": 1.0, "num_steps": 2},
        {"env_id": "toy/x", "episode_index": 1, "seed": 1, "success": False, "episode_return": 0.0, "num_steps": 3},
    ]
    (out / "episodes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    v1 = [
        {
            "format": "verlog.turnlog/1", "episode_id": "toy/x/run_00", "turn": t, "env_id": "toy/x", "seed": 0,
            "prompt_messages": [{"role": "user", "content": f"Current Observation:\ncell {t}"}],
            "response": "THINK: go.\nACTION: right", "action": "right", "reward": float(t == 1), "terminated": t == 1,
            "logprobs": {"n": 3, "sum": -1.0, "mean": -0.33, "min": -0.5},
        }
        for t in range(2)
    ]  # fmt: skip
    (out / "turns.jsonl").write_text("".join(json.dumps(r) + "\n" for r in v1))
    run = load_run(out)
    assert run.kind == "eval" and run.schema_versions == {1: 2}
    assert any("schema version 1" in n for n in run.notes)
    data = build_payload(run)
    eps = {e["id"]: e for e in data["episodes"]}
    assert eps["toy/x/run_00"]["ok"] is True and eps["toy/x/run_00"]["d"]  # success from episodes.jsonl
    assert eps["toy/x/run_01"]["d"] is False and eps["toy/x/run_01"]["n"] == 3  # listed without turns
    assert data["turns"]["toy/x/run_00"][1]["obs"].endswith("cell 1")  # schema 1: from the prompt
    assert ["toy/x", "success 0.5, return 0.5, 2 episodes"] in data["summary"]


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        ("missing", "no such folder"),
        ("empty", "is empty"),
        ("file", "is a file"),
        ("other", "is not a verlog run folder: it holds events.out.tfevents.1, results.csv"),
        ("foreign_metrics", "without an integer 'step'"),
        ("newer", "written by a newer verlog"),
        ("corrupt", "not valid JSON"),
    ],
)
def test_named_errors(tmp_path: Path, capsys, setup: str, message: str) -> None:
    target = tmp_path / "run"
    if setup != "missing":
        target.mkdir()
    if setup == "file":
        target = tmp_path / "run" / "x.txt"
        target.write_text("x")
    elif setup == "other":
        (target / "events.out.tfevents.1").write_text("")
        (target / "results.csv").write_text("a,b\n")
    elif setup == "foreign_metrics":
        (target / "metrics.jsonl").write_text('{"epoch": 1, "loss": 0.3}\n')
    elif setup in ("newer", "corrupt"):
        (target / "tapes").mkdir()
        line = json.dumps({"format": "verlog.turnlog/99", "episode_id": "e", "turn": 0})
        body = line + "\n" if setup == "newer" else "{bad json\n" + json.dumps(TurnLog("e", 0).to_dict()) + "\n"
        (target / "tapes" / "train.jsonl").write_text(body)
    assert main(["view", str(target)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("verlog view: error: ") and message in err and "Traceback" not in err


def test_a_cut_last_line_is_skipped(run_dir: Path, tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    with (copy / "tapes" / "train.jsonl").open("a") as f:
        f.write('{"format": "verlog.turnlog/2", "episode_id": "x", "tu')
    run = load_run(copy)
    assert any("cut short" in n for n in run.notes)


def test_a_torn_metrics_file_is_named_on_the_console(run_dir: Path, tmp_path: Path, capsys) -> None:
    """issue 37: a metrics.jsonl whose last line is torn (a kill mid-write) was skipped with a note on the page only;
    the console now says which file and line, and the page still shows every whole record."""
    import shutil

    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    records = [line for line in (copy / "metrics.jsonl").read_text().splitlines() if line.strip()]
    with (copy / "metrics.jsonl").open("a") as f:
        f.write('{"step": 99, "env/return_me')
    assert main(["view", str(copy)]) == 0
    captured = capsys.readouterr()
    assert captured.err == (
        f"verlog view: warning: {copy / 'metrics.jsonl'}: line {len(records) + 1} is torn (cut short: its writer is "
        f"running or was interrupted), so it was skipped; the {len(records)} record(s) before it are shown\n"
    )
    assert captured.out.startswith(f"wrote {copy / 'view.html'}")
    payload = _payload((copy / "view.html").read_text())
    assert len(load_run(copy).metrics) == len(records)
    assert any("cut short" in note for note in payload["notes"])
    assert main(["view", str(run_dir), "--out", str(tmp_path / "whole.html")]) == 0
    assert capsys.readouterr().err == ""  # a whole file: no warning


def test_view_of_a_real_evaluation_with_frames(tiny_model: Path, tmp_path: Path) -> None:
    """`verlog eval --log-turns` (transformers engine, the tiny model, BabyAI frames) then `verlog view` of its
    folder: the real tokenizer's token split and the frames reach the page."""
    import torch

    from verlog.tapes.record import read_turn_logs

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        out = tmp_path / "eval"
        args = ["eval", "--model", str(tiny_model), "--tasks", "babyai/goto", "--episodes", "2", "--out", str(out)]
        args += ["--engine", "transformers", "--max-tokens", "8", "--max-steps", "3", "--log-turns", "--quiet"]
        args += ["--env-kwargs", '{"render_image": true}', "--bootstrap-resamples", "100"]
        assert main(args) == 0
    finally:
        torch.set_num_threads(threads)
    turns = read_turn_logs(out / "turns.jsonl")
    assert all(t.frame and t.observation and t.memory_turns is not None for t in turns)
    assert all(t.token_split.reasoning.tokens + t.token_split.action.tokens == t.response_tokens for t in turns)
    assert turns[-1].success is not None
    assert main(["view", str(out)]) == 0
    data = _payload((out / "view.html").read_text())
    assert len(data["episodes"]) == 2 and all(e["d"] and e["ok"] is not None for e in data["episodes"])
    first = data["turns"]["babyai/goto/run_00"][0]
    assert first["f"] and first["sr"] is not None and first["lp"] is not None
