"""The self-improvement recipe (recipes/cpu/self_improve_babyai.sh: its --dry-run stages, seeds and settings) and its
results page (verlog.reports.self_improve, `verlog report self-improve`) on a small synthetic run folder."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from verlog.cli import main as verlog_main
from verlog.eval import EpisodeRecord
from verlog.reports import self_improve

REPO = Path(__file__).resolve().parents[3]
RECIPE = REPO / "recipes" / "cpu" / "self_improve_babyai.sh"


def _recipe(*args: str, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in ("SMOKE", "OUTPUT_DIR", "ROUNDS", "TASK")}
    environ.update(PYTHON=sys.executable, **env)
    return subprocess.run(["bash", str(RECIPE), *args], capture_output=True, text=True, env=environ, cwd=REPO)


def _stages(stdout: str) -> dict[str, list[str]]:
    lines = stdout.splitlines()
    found = ((i, re.match(r"# stage (\w+)", line)) for i, line in enumerate(lines))
    return {m.group(1): shlex.split(lines[i + 1]) for i, m in found if m}


def _opt(argv: list[str], name: str) -> str:
    if name.startswith("--"):
        return argv[argv.index(name) + 1]
    return next(a.split("=", 1)[1] for a in argv if a.startswith(name + "="))


def _seeds(argv: list[str]) -> set[int]:
    start = int(_opt(argv, "--seed-start"))
    return set(range(start, start + int(_opt(argv, "--episodes"))))


def test_recipe_is_valid_bash():
    assert subprocess.run(["bash", "-n", str(RECIPE)], capture_output=True).returncode == 0


@pytest.mark.parametrize("smoke", ["0", "1"])
def test_dry_run_chains_rounds_on_disjoint_seeds_with_the_evaluations_prompts(tmp_path, smoke):
    run = tmp_path / "run"
    proc = _recipe("--dry-run", SMOKE=smoke, OUTPUT_DIR=str(run), ROUNDS="2")
    assert proc.returncode == 0, proc.stderr
    stages = _stages(proc.stdout)
    assert list(stages) == ["demos", "sft", "eval_sft", "collect_1", "self_sft_1", "eval_self_1", "collect_2",
                            "self_sft_2", "eval_self_2", "results"]  # fmt: skip
    assert not run.exists()  # a dry run writes nothing
    evals = [stages[k] for k in ("eval_sft", "eval_self_1", "eval_self_2")]
    collects = [stages["collect_1"], stages["collect_2"]]
    demo = stages["demos"]
    demo_seeds = _seeds(demo)
    eval_seeds = _seeds(evals[0])
    assert all(_seeds(e) == eval_seeds for e in evals)  # every model plays the same evaluation episodes
    c1, c2 = _seeds(collects[0]), _seeds(collects[1])
    assert c1 and c2 and not (c1 & c2) and not ((c1 | c2) & (eval_seeds | demo_seeds)) and not (eval_seeds & demo_seeds)
    assert all("--log-turns" in c for c in collects) and not any("--log-turns" in e for e in evals)
    # each round starts from the model before it and trains on its own round's tapes
    assert _opt(collects[0], "--model") == _opt(stages["self_sft_1"], "model.path") == str(run / "sft" / "model")
    assert _opt(stages["self_sft_1"], "data.train") == str(run / "collect_1")
    assert _opt(collects[1], "--model") == _opt(stages["self_sft_2"], "model.path") == str(run / "self_sft_1" / "model")
    assert _opt(stages["eval_self_2"], "--model") == str(run / "self_sft_2" / "model")
    # the rows are built with the prompts the evaluation (and the next collection) builds
    sft, ev = stages["self_sft_1"], evals[0]
    assert _opt(sft, "data.tapes.memory.n") == _opt(ev, "--memory-n")
    assert _opt(sft, "data.tapes.memory.answer_format") == _opt(ev, "--answer-format")
    assert _opt(sft, "data.tapes.max_prompt_tokens") == _opt(ev, "--max-prompt-tokens")
    assert _opt(sft, "data.tapes.success_only") == ("true" if smoke == "0" else "false")
    for key in ("--env-kwargs", "--max-steps", "--temperature", "--max-tokens"):
        assert _opt(collects[0], key) == _opt(ev, key)
    results = REPO / "docs" / "results" / "self-improve.md" if smoke == "0" else run / "results.md"
    assert _opt(stages["results"], "--out") == str(results)


def test_dry_run_refuses_overlapping_seeds_and_bad_rounds(tmp_path):
    bad = _recipe("--dry-run", OUTPUT_DIR=str(tmp_path), COLLECT_SEED_START="1000100")
    assert bad.returncode == 2 and "seed ranges overlap: collection [1000100, 1000900)" in bad.stderr
    assert _recipe("--dry-run", OUTPUT_DIR=str(tmp_path), ROUNDS="0").returncode == 2
    assert _recipe("--bogus").returncode == 2


def _episodes(folder: Path, successes: list[bool], seed_start: int = 100) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    lines = [
        json.dumps(EpisodeRecord("babyai/goto", i, seed_start + i, float(ok), 3, ok, valid_actions=3).to_dict())
        for i, ok in enumerate(successes)
    ]
    (folder / "episodes.jsonl").write_text("\n".join(lines) + "\n")


def test_results_report_each_round_against_the_start_paired_by_seed(tmp_path):
    run = tmp_path / "run"
    start = [True, False, False, False] * 5  # 25% on 20 seeds
    round1 = [True, True, False, False] * 5  # 50%: every start success kept, one more per four seeds
    _episodes(run / "eval_sft", start)
    _episodes(run / "collect_1", [True, False] * 10, seed_start=5000)
    _episodes(run / "eval_self_1", round1)
    (run / "self_sft_1" / "data").mkdir(parents=True)
    manifest = {"counts": {"episodes": 20, "kept": 10}, "rows_train": 31, "rows_val": 0}
    (run / "self_sft_1" / "data" / "tapes.json").write_text(json.dumps(manifest))
    (run / "collect_2").mkdir()  # round 2 started, not evaluated yet
    (run / "settings.env").write_text("ENV_ID=babyai/goto\nROUNDS=2\nSMOKE=0\n")
    results = self_improve.collect(run, n_resamples=2000)
    assert [r.number for r in results.rounds] == [1, 2] and results.paired
    gain = results.rounds[0].vs_start[0]
    assert gain.estimate == pytest.approx(0.25) and 0 < gain.low <= gain.estimate <= gain.high
    text = self_improve.render_markdown(results)
    assert "| SFT (start) | 20 | 25.0% [" in text and "| round 1 | 20 | 50.0% [" in text
    assert "| 1 | 20 | 50.0% | 10 (31) | +25.0 points [" in text and "| 2 | 0 | - | - | - | - |" in text
    assert "after 1 round(s), success +25.0 points" in text and "is above zero" in text
    out = tmp_path / "results.md"
    assert verlog_main(["report", "self-improve", str(run), "--out", str(out), "--bootstrap-resamples", "500"]) == 0
    data = json.loads(out.with_suffix(".json").read_text())
    assert data["rounds"][0]["kept"] == 10 and data["rounds"][0]["vs_start"]["success"]["estimate"] == pytest.approx(
        0.25
    )
    assert verlog_main(["report", "self-improve", str(tmp_path / "missing"), "--out", str(out)]) == 2
