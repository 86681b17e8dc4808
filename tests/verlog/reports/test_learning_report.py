"""The learning recipes' results page (verlog.reports.learning, `verlog report learning`) and recipes/cpu/learn_*.sh.

The writer runs on small synthetic run folders (evaluation records, PPO metrics, timings, settings) and its numbers
are checked against a bootstrap written out here with numpy; the recipe is checked through bash -n and --dry-run
(no Ray, vLLM or training).
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from verlog.cli import main as verlog_main
from verlog.reports import learning
from verlog.reports.learning import stages
from verlog.reports.run_files import ReportError, read_log

REPO = Path(__file__).resolve().parents[3]


EVAL_DUAL, EVAL_SFT, EVAL_SINGLE = stages.EVAL_DUAL, stages.EVAL_SFT, stages.EVAL_SINGLE
PPO_DUAL, PPO_SINGLE = stages.PPO_DUAL, stages.PPO_SINGLE
LearningResultsError = ReportError
collect, read_curve, render_markdown = learning.collect, learning.read_curve, learning.render_markdown
smooth, write_results = learning.smooth, learning.write_results
RECIPE = REPO / "recipes" / "cpu" / "learn_babyai.sh"
B = 400  # bootstrap resamples in these tests
EVAL_SEEDS = list(range(1000, 1040))


def _record(seed: int, index: int, success: bool, ret: float) -> dict:
    return {"env": "babyai", "task": "goto", "env_id": "babyai/goto", "episode_index": index, "seed": seed,
            "episode_return": ret, "num_steps": 5, "success": success, "progression": float(success),
            "terminated": success, "truncated": not success, "valid_actions": 4}  # fmt: skip


def _write_eval(folder: Path, successes: np.ndarray, returns: np.ndarray, seeds=EVAL_SEEDS) -> None:
    folder.mkdir(parents=True)
    with (folder / "episodes.jsonl").open("w") as f:
        # written out of seed order: the writer must pair by seed, not by line
        for i in reversed(range(len(seeds))):
            f.write(json.dumps(_record(seeds[i], i, bool(successes[i]), float(returns[i]))) + "\n")


def _write_metrics(path: Path, success: list[float], episodes: list[int]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for step, (s, n) in enumerate(zip(success, episodes), start=1):
            item = {"step": step, "timing_s/step": 10.0 + step, "env/episodes": float(n), "actor/pg_loss": 0.1}
            if n:
                item.update({"env/success_rate": s, "env/return_mean": s - 0.1})
            f.write(json.dumps(item) + "\n")


@pytest.fixture
def run_dir(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    """A complete synthetic run: SFT succeeds on ~30% of seeds, dual PPO ~80%, single PPO ~55%."""
    rng = np.random.default_rng(7)
    n = len(EVAL_SEEDS)
    data = {}
    for name, p in (("sft", 0.3), ("dual", 0.8), ("single", 0.55)):
        s = (rng.random(n) < p).astype(float)
        data[name] = (s, s - 0.1 * rng.integers(0, 3, n))
    run = tmp_path / "run"
    _write_eval(run / EVAL_SFT, *data["sft"])
    _write_eval(run / EVAL_DUAL, *data["dual"])
    _write_eval(run / EVAL_SINGLE, *data["single"])
    _write_metrics(run / PPO_DUAL / "metrics.jsonl", [0.2, 0.0, 0.4, 0.5, 0.7], [5, 0, 4, 6, 3])
    _write_metrics(run / PPO_SINGLE / "metrics.jsonl", [0.2, 0.3, 0.3, 0.4, 0.5], [5, 2, 4, 6, 3])
    (run / "demos").mkdir()
    (run / "demos" / "demos.json").write_text(
        json.dumps({"format": "verlog.demos/1", "seeds_tried": list(range(0, 50))})
    )
    (run / "timings.jsonl").write_text(
        '{"stage": "demos", "seconds": 12.5}\n{"stage": "sft", "seconds": 400}\n{"stage": "sft", "seconds": 420.0}\n'
    )
    (run / "settings.env").write_text("SMOKE=0\nPPO_SEED=500000\nPPO_SLOTS=8\nEPISODES=40\nCRITIC_WARMUP=1\n")
    return run, data


def _bootstrap_mean(values: np.ndarray, seed: int = 0) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, values.size, size=(B, values.size))
    means = [values[row].mean() for row in idx]
    return tuple(np.quantile(means, [0.025, 0.975]))


def test_numbers_match_a_direct_computation(run_dir):
    run, data = run_dir
    res = collect(run, n_resamples=B)
    for name, key in (("SFT", "sft"), ("PPO, dual GAE", "dual"), ("PPO, single GAE", "single")):
        succ, ret = data[key]
        e = res.evals[name]
        assert len(e.records) == len(EVAL_SEEDS)
        assert e.success.estimate == pytest.approx(succ.mean())
        assert (e.success.low, e.success.high) == pytest.approx(_bootstrap_mean(succ))
        assert e.ret.estimate == pytest.approx(ret.mean())
        assert (e.ret.low, e.ret.high) == pytest.approx(_bootstrap_mean(ret))
    # paired difference PPO(dual) - SFT: the records were written in reverse order; pairing is by seed
    diff = data["dual"][0] - data["sft"][0]
    comp = next(c for c in res.comparisons if c.treatment == "PPO, dual GAE" and c.baseline == "SFT")
    assert comp.paired
    assert comp.success.estimate == pytest.approx(diff.mean())
    assert (comp.success.low, comp.success.high) == pytest.approx(_bootstrap_mean(diff))
    dual_single = next(c for c in res.comparisons if c.baseline == "PPO, single GAE")
    assert dual_single.success.estimate == pytest.approx(data["dual"][0].mean() - data["single"][0].mean())
    assert res.timings == {"demos": 12.5, "sft": 420.0}  # the last run of a stage wins
    assert not res.seed_overlaps


def test_markdown_reports_the_numbers_and_the_verdict(run_dir):
    run, data = run_dir
    res = collect(run, n_resamples=B)
    md = render_markdown(res, "results_curve.png")
    sft = res.evals["SFT"].success
    assert f"| SFT | 40 | {100 * sft.estimate:.1f}% [{100 * sft.low:.1f}, {100 * sft.high:.1f}]" in md
    comp = res.comparisons[0]
    gain = 100 * (data["dual"][0].mean() - data["sft"][0].mean())
    assert f"{gain:+.1f} points [{100 * comp.success.low:+.1f}, {100 * comp.success.high:+.1f}]" in md
    checks = res.target_checks()
    assert checks == {
        "success gain >= +40 points": gain >= 40,
        "paired 95% interval above zero": comp.success.low > 0,
        "valid actions after PPO >= 90%": False,  # 4 valid actions in 5 steps
        "PPO wall time <= 20 min": False,  # the fixture has no ppo_dual timing
    }
    assert res.target_met() is False and "**Target not met**" in md
    assert "| valid actions after PPO >= 90% | **no** |" in md
    (run / "timings.jsonl").write_text('{"stage": "ppo_dual", "seconds": 900}\n')
    for name in ("eval_ppo_dual",):
        lines = (run / name / "episodes.jsonl").read_text().replace('"valid_actions": 4', '"valid_actions": 5')
        (run / name / "episodes.jsonl").write_text(lines)
    again = collect(run, n_resamples=B)
    assert again.target_met() is (gain >= 40 and comp.success.low > 0)
    assert ("Target met" in render_markdown(again)) is again.target_met()
    assert "![success and return against PPO iteration](results_curve.png)" in md
    assert "| sft | 7.0 min (420 s) |" in md and "| ppo_dual | not run |" in md
    assert "No evaluation seed was used by the demonstrations" in md


def test_target_not_met_is_said(tmp_path):
    run = tmp_path / "run"
    same = np.array([1.0, 0.0] * 10)
    _write_eval(run / EVAL_SFT, same, same, seeds=EVAL_SEEDS[:20])
    _write_eval(run / EVAL_DUAL, same, same, seeds=EVAL_SEEDS[:20])
    md = render_markdown(collect(run, n_resamples=B))
    assert "**Target not met**" in md and "+0.0 points" in md
    assert "| PPO, single GAE | not evaluated yet |" in md
    # a comparison the recipe was told to skip says so, rather than "not evaluated yet"
    (run / "settings.env").write_text("BOUNDARY_CUT=0\nSINGLE_GAE=0\n")
    md = render_markdown(collect(run, n_resamples=B))
    assert "| PPO, boundary cut | not run (`BOUNDARY_CUT=0`) |" in md
    assert "| PPO, single GAE | not run (`SINGLE_GAE=0`) |" in md
    assert 'See "What to try if the target is not met" below.' in md and "## What to try if the target" in md


def test_write_results_writes_png_and_json(run_dir, tmp_path):
    run, _ = run_dir
    md, png = write_results(run, tmp_path / "out" / "results.md", n_resamples=B)
    assert png == tmp_path / "out" / "results_curve.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    numbers = json.loads((tmp_path / "out" / "results.json").read_text())
    assert numbers["models"]["SFT"]["episodes"] == 40
    assert numbers["curves"]["dual GAE"]["steps"] == [1, 3, 4, 5]  # iteration 2 ended no episode
    assert md.read_text().startswith("# Does verlog learn?")


def test_partial_run_has_no_curve_and_says_what_is_missing(tmp_path):
    run = tmp_path / "run"
    _write_eval(run / EVAL_SFT, np.ones(5), np.ones(5), seeds=EVAL_SEEDS[:5])
    md, png = write_results(run, tmp_path / "r.md", n_resamples=B)
    assert png is None and not (tmp_path / "r_curve.png").exists()
    text = md.read_text()
    assert "Not measured yet" in text and "No PPO metrics yet." in text


def test_seed_overlap_is_reported(run_dir):
    run, _ = run_dir
    (run / "demos" / "demos.json").write_text(json.dumps({"format": "verlog.demos/1", "seeds_tried": [3, 1005]}))
    res = collect(run, n_resamples=B)
    assert res.seed_overlaps == {name: [1005] for name in res.evals}
    assert "**Overlap**" in render_markdown(res)


def test_curve_and_smoothing():
    assert smooth([0.0, 1.0, 1.0], [1, 3, 0], window=2) == [0.0, 0.75, 1.0]


def test_bad_files_name_the_file(tmp_path, capsys):
    with pytest.raises(LearningResultsError, match="does not exist"):
        collect(tmp_path / "missing")
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\n{"step": 2, "env/ep\n{"step": 3}\n')
    with pytest.raises(LearningResultsError, match=r"metrics.jsonl:2: not valid JSON"):
        read_curve(path)
    # a torn LAST line (a run killed while writing it, docs/reliability.md) is skipped with a warning
    path.write_text('{"step": 1}\n{"step": 2, "env/ep')
    assert [r["step"] for r in read_log(path, "learning")] == [1]
    assert "line 2 is torn" in capsys.readouterr().err


def report_learning(args: list[str]) -> int:
    """``verlog report learning ARGS...``'s exit code."""
    return verlog_main(["report", "learning", *args])


def test_report_command_runs(run_dir, tmp_path):
    run, _ = run_dir
    out = tmp_path / "results.md"
    command = [sys.executable, "-m", "verlog", "report", "learning"]
    proc = subprocess.run([*command, str(run), "--out", str(out), "--bootstrap-resamples", "200"],
                          capture_output=True, text=True, timeout=120, cwd=REPO)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert out.is_file() and (tmp_path / "results_curve.png").is_file() and out.with_suffix(".json").is_file()
    assert proc.stdout.startswith(out.read_text()) and f"[learning] wrote {out} and " in proc.stdout
    bad = subprocess.run([*command, str(tmp_path / "nope"), "--out", str(out)],
                         capture_output=True, text=True, timeout=120, cwd=REPO)  # fmt: skip
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "does not exist" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_report_command_refuses_a_bad_file_in_one_line(run_dir, tmp_path, capsys):
    run, _ = run_dir
    (run / PPO_DUAL / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2, "env/ep\n{"step": 3}\n')
    out = tmp_path / "page.md"
    assert report_learning([str(run), "--out", str(out), "--bootstrap-resamples", "50"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("verlog report: error: ") and "metrics.jsonl:2: not valid JSON" in err
    assert err.count("\n") == 1 and not out.exists()


def test_library_and_command_write_the_same_page(run_dir, tmp_path):
    """The page, its JSON and its plot are the same bytes whichever way they are written, and on a second run."""
    run, _ = run_dir
    first, png = learning.write_results(run, tmp_path / "lib" / "page.md", n_resamples=200)
    assert report_learning([str(run), "--out", str(tmp_path / "cli" / "page.md"), "--bootstrap-resamples", "200"]) == 0
    learning.write_results(run, tmp_path / "again" / "page.md", n_resamples=200)
    for name in ("page.md", "page.json", "page_curve.png"):
        data = (tmp_path / "lib" / name).read_bytes()
        assert data == (tmp_path / "cli" / name).read_bytes() == (tmp_path / "again" / name).read_bytes(), name
    assert png is not None and "Written by `verlog report learning` from the run folder" in first.read_text()


# ------------------------------------------------------------------------------------------------ the recipe
def _recipe(*args: str, _script: Path = RECIPE, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in ("SMOKE", "OUTPUT_DIR", "EPISODES", "RESULTS")}
    environ.update(PYTHON=sys.executable, **env)
    return subprocess.run(["bash", str(_script), *args], capture_output=True, text=True, env=environ, timeout=60)


def _stages(stdout: str) -> dict[str, list[str]]:
    """Stage name -> its command's argv, from the dry run's output."""
    lines = stdout.splitlines()
    out = {}
    for i, line in enumerate(lines):
        m = re.match(r"# stage (\w+) \(", line)
        if m:
            out[m.group(1)] = shlex.split(lines[i + 1])
    return out


def _opt(argv: list[str], name: str) -> str:
    if name.startswith("--"):
        return argv[argv.index(name) + 1]
    return next(a.split("=", 1)[1] for a in argv if a.startswith(name + "="))


def test_recipe_is_valid_bash():
    assert subprocess.run(["bash", "-n", str(RECIPE)], capture_output=True).returncode == 0


@pytest.mark.parametrize("smoke", ["0", "1"])
def test_recipe_dry_run_lists_stages_with_disjoint_seeds(tmp_path, smoke):
    proc = _recipe("--dry-run", SMOKE=smoke, OUTPUT_DIR=str(tmp_path / "run"))
    assert proc.returncode == 0, proc.stderr
    stages = _stages(proc.stdout)
    assert list(stages) == ["demos", "sft", "eval_sft", "ppo_dual", "eval_ppo_dual", "ppo_single", "eval_ppo_single",
                            "results"]  # fmt: skip
    assert not (tmp_path / "run").exists()  # a dry run writes nothing
    demos, evals = stages["demos"], [stages[k] for k in ("eval_sft", "eval_ppo_dual", "eval_ppo_single")]
    demo_seeds = set(range(int(_opt(demos, "--seed-start")), int(_opt(demos, "--seed-start")) + int(
        _opt(demos, "--episodes"))))  # fmt: skip
    ppo = stages["ppo_dual"]
    ppo_seeds = set(range(int(_opt(ppo, "seed")), int(_opt(ppo, "seed")) + int(_opt(ppo, "rollout.num_slots"))))
    eval_seeds = {int(_opt(e, "--seed-start")) + i for e in evals for i in range(int(_opt(e, "--episodes")))}
    assert demo_seeds and ppo_seeds and eval_seeds
    assert not (demo_seeds & eval_seeds) and not (ppo_seeds & eval_seeds) and not (demo_seeds & ppo_seeds)
    # every model is evaluated on the same episodes, with the training step limit and env settings
    assert len({tuple(e[e.index("--tasks") :]) for e in (x[:-1] for x in evals)}) == 1
    assert _opt(evals[0], "--max-steps") == _opt(ppo, "env.kwargs.max_steps")
    assert json.loads(_opt(demos, "--env-kwargs")) == json.loads(_opt(evals[0], "--env-kwargs"))
    assert int(_opt(evals[0], "--episodes")) == (200 if smoke == "0" else 4)
    # both PPO runs start from the SFT model with the same budget and seeds; only the token discounts differ
    single = stages["ppo_single"]
    assert _opt(ppo, "model.path") == _opt(single, "model.path") == str(tmp_path / "run" / "sft" / "model")
    assert (_opt(ppo, "algorithm.token_gamma"), _opt(ppo, "algorithm.token_lam")) == ("1.0", "1.0")
    assert _opt(single, "algorithm.token_gamma") == _opt(single, "algorithm.step_gamma") == "0.99"
    assert _opt(single, "algorithm.token_lam") == _opt(single, "algorithm.step_lam") == "0.95"
    differ = {a.split("=")[0] for a in set(ppo) ^ set(single)}
    assert differ == {"output_dir", "run_name", "algorithm.token_gamma", "algorithm.token_lam"}
    assert _opt(stages["eval_ppo_dual"], "--model") == str(tmp_path / "run" / "ppo_dual" / "checkpoints")
    assert _opt(ppo, "iterations") == ("40" if smoke == "0" else "2")
    # the answer format and the step limit's meaning are the same in demos, PPO and every evaluation
    assert _opt(demos, "--answer-format") == _opt(ppo, "memory.answer_format") == _opt(evals[0], "--answer-format")
    assert json.loads(_opt(demos, "--env-kwargs"))["time_limit"] == _opt(ppo, "env.kwargs.time_limit")


def test_recipe_skips_finished_stages_and_refuses_overlapping_seeds(tmp_path):
    run = tmp_path / "run"
    (run / "demos").mkdir(parents=True)
    (run / "demos" / "demos.json").write_text("{}")
    (run / "ppo_dual" / "checkpoints").mkdir(parents=True)
    (run / "ppo_dual" / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("10")  # of 40: not done
    out = _recipe("--dry-run", OUTPUT_DIR=str(run)).stdout
    assert "# stage demos (output exists: would be skipped)" in out
    assert "# stage sft (would run)" in out and "# stage ppo_dual (would run)" in out
    (run / "ppo_dual" / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("40\n")
    assert "# stage ppo_dual (output exists: would be skipped)" in _recipe("--dry-run", OUTPUT_DIR=str(run)).stdout
    bad = _recipe("--dry-run", OUTPUT_DIR=str(run), EVAL_SEED_START="100")
    assert bad.returncode == 2 and "seed ranges overlap" in bad.stderr
    assert _recipe("--bogus").returncode == 2


def test_logged_ppo_training_seeds_are_checked_against_evaluation(run_dir):
    run, _ = run_dir
    rollout = [
        {"step": 1, "episode_seeds": {"r-s0-e1": 500000, "r-s1-e1": 500001}},
        {"step": 2, "episode_seeds": {"r-s0-e2": 1234567, "r-s1-e1": 500001, "r-s1-e2": None}},
    ]
    (run / PPO_DUAL / "rollout.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rollout))
    res = collect(run, n_resamples=B)
    assert res.ppo_seeds == {"dual GAE": {500000, 500001, 1234567}} and not res.seed_overlaps
    assert "trained on 3 episodes' seeds" in render_markdown(res)
    clash = EVAL_SEEDS[4]
    rollout.append({"step": 3, "episode_seeds": {"r-s0-e3": clash}})
    (run / PPO_DUAL / "rollout.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rollout))
    res = collect(run, n_resamples=B)
    assert res.seed_overlaps == {name: [clash] for name in res.evals}


def test_the_run_folders_notes_are_included(run_dir):
    run, _ = run_dir
    assert "## Notes on this run" not in render_markdown(collect(run, n_resamples=B))
    (run / "notes.md").write_text("- attempt 1: bf16, 122 s per iteration\n")
    md = render_markdown(collect(run, n_resamples=B))
    assert md.index("## Notes on this run") > md.index("## How the settings were chosen")
    assert "- attempt 1: bf16, 122 s per iteration\n" in md


# ------------------------------------------------------------------------------------------------ long horizon
BABAISAI = REPO / "recipes" / "cpu" / "learn_babaisai.sh"


def test_spans_count_episodes_with_rows_in_several_iterations(tmp_path):
    rollout = [
        {"step": 1, "episode_seeds": {"a": 1, "b": 2}},
        {"step": 2, "episode_seeds": {"a": 1, "c": 3}},
        {"step": 3, "episode_seeds": {"a": 1, "d": 4}},
        {"step": 3, "episode_seeds": {"a": 1, "d": 4}},  # a resumed run repeats step 3: counted once
    ]
    path = tmp_path / "rollout.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rollout))
    spans = learning.read_spans(path)
    assert (spans.episodes, spans.spanning, spans.max_iterations) == (4, 1, 3)
    assert spans.mean_iterations == pytest.approx(6 / 4) and spans.share == pytest.approx(0.25)


def test_report_shows_spans_and_repository_relative_paths(run_dir):
    run, _ = run_dir
    rollout = [{"step": 1, "episode_seeds": {"a": 1}}, {"step": 2, "episode_seeds": {"a": 1, "b": 2}}]
    (run / PPO_DUAL / "rollout.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rollout))
    settings = (run / "settings.env").read_text() + f"RESULTS={REPO / 'docs' / 'x.md'}\nENV_ID=babaisai/goto_win\n"
    (run / "settings.env").write_text(settings)
    res = collect(run, n_resamples=B)
    md = render_markdown(res)
    assert "| dual GAE | 2 | 1 (50.0%) | 1.50 / 2 |" in md
    assert "| `RESULTS` | docs/x.md |" in md and str(REPO) not in md
    assert res.title == "BabaIsAI goto_win" and "learn_babaisai.sh" in md
    assert learning.as_dict(res)["settings"]["RESULTS"] == "docs/x.md"


def test_check_start_refuses_a_start_above_the_bound(run_dir, capsys):
    run, _ = run_dir
    rate = collect(run, n_resamples=B).evals["SFT"].success.estimate
    assert report_learning([str(run), "--check-start", "sft", "--start-bound", str(rate + 0.01)]) == 0
    assert report_learning([str(run), "--check-start", "sft", "--start-bound", str(rate - 0.01)]) == 2
    err = capsys.readouterr().err
    assert "above the start bound" in err and "fewer SFT_STEPS" in err and err.count("\n") == 1
    assert report_learning([str(run), "--check-start", "nothing"]) == 1


def test_babaisai_recipe_runs_episodes_across_iterations_and_the_ablations(tmp_path):
    proc = _recipe("--dry-run", _script=BABAISAI, OUTPUT_DIR=str(tmp_path / "run"))
    assert proc.returncode == 0, proc.stderr
    stages = _stages(proc.stdout)
    assert list(stages) == ["demos", "sft", "eval_sft", "ppo_dual", "eval_ppo_dual", "ppo_cut", "eval_ppo_cut",
                            "ppo_single", "eval_ppo_single", "results"]  # fmt: skip
    assert "--check-start sft --start-bound 0.5" in proc.stdout
    dual, cut = stages["ppo_dual"], stages["ppo_cut"]
    assert int(_opt(dual, "rollout.turns_per_slot")) < int(_opt(dual, "env.kwargs.max_steps"))
    assert _opt(dual, "env.id") == "babaisai/two_room-goto_win"
    differ = {a.split("=")[0] for a in set(dual) ^ set(cut)}
    assert differ == {"output_dir", "run_name", "algorithm.boundary"} and _opt(cut, "algorithm.boundary") == "cut"
    assert not (tmp_path / "run").exists()


def test_kl_coef_zero_turns_the_kl_penalty_and_its_reference_model_off(tmp_path):
    default = _stages(_recipe("--dry-run", OUTPUT_DIR=str(tmp_path / "run")).stdout)["ppo_dual"]  # BabyAI's
    assert (_opt(default, "algorithm.kl_in_reward"), _opt(default, "algorithm.kl_coef")) == ("true", "0.001")
    proc = _recipe("--dry-run", _script=BABAISAI, OUTPUT_DIR=str(tmp_path / "run"))  # BabaIsAI's default: none
    assert proc.returncode == 0, proc.stderr
    for name in ("ppo_dual", "ppo_cut", "ppo_single"):
        assert _opt(_stages(proc.stdout)[name], "algorithm.kl_in_reward") == "false"


def test_the_critic_warm_up_rollout_reaches_every_ppo_run(tmp_path):
    default = _stages(_recipe("--dry-run", OUTPUT_DIR=str(tmp_path / "run")).stdout)["ppo_dual"]
    assert _opt(default, "algorithm.warmup_rollout_multiplier") == "1"  # BabyAI's: none
    babaisai = _stages(_recipe("--dry-run", _script=BABAISAI, OUTPUT_DIR=str(tmp_path / "run")).stdout)["ppo_dual"]
    assert (
        _opt(babaisai, "algorithm.warmup_rollout_multiplier"),
        _opt(babaisai, "algorithm.warmup_critic_updates"),
    ) == (
        "4",
        "8",
    )  # attempt 7's
    env = {"WARMUP_ROLLOUT_MULTIPLIER": "8", "WARMUP_CRITIC_UPDATES": "10"}
    proc = _recipe("--dry-run", _script=BABAISAI, OUTPUT_DIR=str(tmp_path / "run"), **env)
    assert proc.returncode == 0, proc.stderr
    for name in ("ppo_dual", "ppo_cut", "ppo_single"):
        ppo = _stages(proc.stdout)[name]
        assert (_opt(ppo, "algorithm.warmup_rollout_multiplier"), _opt(ppo, "algorithm.warmup_critic_updates")) == (
            "8",
            "10",
        )


def test_babaisai_recipe_refuses_turns_not_below_the_step_limit(tmp_path):
    bad = _recipe("--dry-run", _script=BABAISAI, OUTPUT_DIR=str(tmp_path / "run"), PPO_TURNS="20", MAX_STEPS="20")
    assert bad.returncode == 2 and "PPO_TURNS=20 is not below the step limit" in bad.stderr
    assert bad.stderr.count("\n") == 1 and not (tmp_path / "run").exists()
    overlap = _recipe("--dry-run", _script=BABAISAI, OUTPUT_DIR=str(tmp_path / "run"), EVAL_SEED_START="10")
    assert overlap.returncode == 2 and "seed ranges overlap" in overlap.stderr


# ------------------------------------------------------------------------------------------------ SFT-length scan
def _scan_run(tmp_path: Path, rates: dict[int, float], n: int = 200) -> Path:
    """A run folder after the scan's stages: each length's checkpoint and its validation evaluation (``n`` episodes,
    a share ``rates[steps]`` of them won)."""
    run = tmp_path / "run"
    for steps, rate in rates.items():
        wins = np.arange(n) < round(rate * n)
        seeds = list(range(2_000_000, 2_000_000 + n))
        _write_eval(run / "scan" / f"step_{steps}", wins, wins.astype(float), seeds=seeds)
        model = run / "sft" / "checkpoints" / f"global_step_{steps}" / "huggingface"
        model.mkdir(parents=True)
        (model / "config.json").write_text(json.dumps({"steps": steps}))
    (run / "settings.env").write_text("SFT_SCAN=100 200 300 400\nSCAN_SEED_START=2000000\n")
    return run


def test_scan_picks_the_longest_sft_below_the_bound_with_confidence(tmp_path, capsys):
    # 46% is below 50% but its interval reaches above it (about +-7 points on 200 episodes): 200 steps is chosen
    run = _scan_run(tmp_path, {100: 0.30, 200: 0.40, 300: 0.46, 400: 0.56})
    assert learning.pick_start(run, 0.5) == 0
    assert json.loads((run / "scan" / "model" / "config.json").read_text()) == {"steps": 200}
    choice = json.loads((run / "scan" / "choice.json").read_text())
    assert choice["steps"] == 200 and choice["success"]["high"] <= 0.5 and choice["start_bound"] == 0.5
    assert "200 steps" in capsys.readouterr().out
    # chosen again (a resumed recipe): the copy is replaced, not nested
    assert learning.pick_start(run, 0.45) == 0
    assert json.loads((run / "scan" / "model" / "config.json").read_text()) == {"steps": 100}
    assert not (run / "scan" / "model" / "huggingface").exists() and not (run / "scan" / "model.partial").exists()
    results = collect(run, n_resamples=B)
    assert [p.steps for p in results.scan] == [100, 200, 300, 400] and results.scan_choice == 100
    md = render_markdown(results)
    assert "## SFT-length scan (validation seeds)" in md and "| 100 | 200 | 30.0% [" in md
    assert re.search(r"\| 100 \| 200 \| [^|]+ \| \*\*chosen\*\* \|", md) and md.count("**chosen**") == 1
    assert learning.as_dict(results)["scan_choice"] == 100


def test_scan_stops_in_one_line_when_every_length_is_above_the_bound(tmp_path, capsys):
    run = _scan_run(tmp_path, {100: 0.55, 200: 0.70})
    assert report_learning([str(run), "--pick-start", "--start-bound", "0.5"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the shortest, 100 steps, wins 55.0%" in err and "SFT_SCAN" in err
    assert not (run / "scan" / "model").exists() and not (run / "scan" / "choice.json").exists()
    (tmp_path / "empty").mkdir()
    assert report_learning([str(tmp_path / "empty"), "--pick-start"]) == 1  # no scan evaluation at all


def test_recipe_scans_sft_lengths_on_validation_seeds(tmp_path):
    proc = _recipe("--dry-run", _script=BABAISAI, OUTPUT_DIR=str(tmp_path / "run"), SFT_SCAN="100 150 300")
    assert proc.returncode == 0, proc.stderr
    stages = _stages(proc.stdout)
    assert list(stages)[:7] == ["demos", "sft", "scan_100", "scan_150", "scan_300", "scan_pick", "eval_sft"]
    sft = stages["sft"]
    assert (_opt(sft, "train.steps"), _opt(sft, "train.save_freq")) == ("300", "50")  # to the longest; the gcd
    for steps in (100, 150, 300):
        scan = stages[f"scan_{steps}"]
        checkpoint = tmp_path / "run" / "sft" / "checkpoints" / f"global_step_{steps}" / "huggingface"
        assert _opt(scan, "--model") == str(checkpoint)
        assert (_opt(scan, "--seed-start"), _opt(scan, "--episodes")) == ("2000000", "200")
        # the same episodes' settings as the evaluation, on other seeds
        same = [a for a in scan if not a.startswith(("/", "2000000"))]
        assert same == [a for a in stages["eval_sft"] if not a.startswith(("/", "1000000"))]
    assert _opt(stages["scan_pick"], "--start-bound") == "0.5"
    start = str(tmp_path / "run" / "scan" / "model")
    assert _opt(stages["eval_sft"], "--model") == start and _opt(stages["ppo_dual"], "model.path") == start
    # without a scan: SFT_STEPS, no checkpoints in between, the SFT model is the start
    plain = _stages(_recipe("--dry-run", _script=BABAISAI, OUTPUT_DIR=str(tmp_path / "run")).stdout)
    assert "scan_pick" not in plain and not any(a.startswith("train.save_freq=") for a in plain["sft"])


def test_recipe_refuses_a_scan_of_an_sft_that_kept_no_checkpoints(tmp_path):
    # the SFT stage finished earlier without SFT_SCAN: it is skipped, and it has no checkpoint to scan
    run = tmp_path / "run"
    (run / "demos").mkdir(parents=True)
    (run / "demos" / "demos.json").write_text("{}")
    (run / "sft" / "model").mkdir(parents=True)
    (run / "sft" / "model" / "config.json").write_text("{}")
    proc = _recipe(_script=BABAISAI, OUTPUT_DIR=str(run), SFT_SCAN="100 200")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().endswith("has no checkpoint at 100 steps (it ran with other SFT_SCAN lengths, or "
                                        "without SFT_SCAN): use a new OUTPUT_DIR")  # fmt: skip
    assert not (run / "scan").exists()


def test_recipe_stops_with_exit_2_when_every_scanned_length_is_above_the_bound(tmp_path):
    run = _scan_run(tmp_path, {100: 0.8, 200: 0.9})  # the scan's evaluations are done: only the choice runs
    (run / "demos").mkdir()
    (run / "demos" / "demos.json").write_text("{}")
    (run / "sft" / "model").mkdir()
    (run / "sft" / "model" / "config.json").write_text("{}")
    for steps in (100, 200):
        (run / "scan" / f"step_{steps}" / "summary.json").write_text("{}")
    proc = _recipe(_script=BABAISAI, OUTPUT_DIR=str(run), SFT_SCAN="100 200")
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr
    assert "every scanned SFT length is above the start bound of 50%" in proc.stdout + proc.stderr
    assert "stage eval_sft" not in proc.stdout and not (run / "scan" / "model").exists()
    assert not (run / "scan" / "choice.json").exists() and (run / "logs" / "scan_pick.log").is_file()


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"SFT_SCAN": "200 100"}, "is not increasing positive step counts"),
        ({"SFT_SCAN": "100 abc"}, "is not increasing positive step counts"),
        ({"SFT_SCAN": "100", "START_BOUND": ""}, "set START_BOUND"),
        ({"SFT_SCAN": "100", "SCAN_SEED_START": "1000100"}, "validation [1000100, 1000300) and the evaluation"),
        ({"SFT_SCAN": "100", "SCAN_SEED_START": "10"}, "and the demos"),
    ],
)
def test_recipe_refuses_a_bad_scan(tmp_path, env, message):
    proc = _recipe("--dry-run", _script=BABAISAI, OUTPUT_DIR=str(tmp_path / "run"), **env)
    assert proc.returncode == 2 and message in proc.stderr
    assert proc.stderr.count("\n") == 1 and not (tmp_path / "run").exists()


# ------------------------------------------------------------------------------------------------ Crafter
def _crafter_eval(folder: Path, achievements: list[dict], returns: list[float]) -> None:
    folder.mkdir(parents=True)
    with (folder / "episodes.jsonl").open("w") as f:
        for i, (got, ret) in enumerate(zip(achievements, returns)):
            rec = {**_record(2000 + i, i, False, ret), "env": "crafter", "task": "default", "env_id": "crafter/default",
                   "env_stats": {"achievements": got}}  # fmt: skip
            f.write(json.dumps(rec) + "\n")


def test_crafter_measures_by_hand(tmp_path):
    run = tmp_path / "run"
    none = {"collect_wood": 0, "place_table": 0}
    start = [none, none, none, none]
    ppo = [{"collect_wood": 2, "place_table": 1}, {"collect_wood": 1, "place_table": 0}, none, none]
    _crafter_eval(run / stages.EVAL_WARM, start, [0.0, 0.0, 0.0, 0.0])
    _crafter_eval(run / EVAL_DUAL, ppo, [3.0, 1.0, 0.0, 0.0])
    (run / "settings.env").write_text("START=warm_start\nENV_ID=crafter/default\n")
    res = collect(run, n_resamples=B)
    assert res.start_label == "warm start" and set(res.evals) == {"warm start", "PPO, dual GAE"}
    names = learning.achievement_names(list(res.evals.values()))
    assert names == ["collect_wood", "place_table"]
    m = learning.crafter_measures(res.evals["PPO, dual GAE"], names, n_resamples=B)
    assert m.unlock["collect_wood"].estimate == 0.5 and m.unlock["place_table"].estimate == 0.25
    assert m.score.estimate == pytest.approx(math.sqrt(51 * 26) - 1)  # exp(mean ln(1 + s)) - 1, s in percent
    assert m.score.low <= m.score.estimate <= m.score.high
    assert learning.crafter_measures(res.evals["warm start"], names, n_resamples=B).score.estimate == 0.0
    diff = learning.crafter_score_diff(res.evals["PPO, dual GAE"], res.evals["warm start"], names, n_resamples=B)
    assert diff.estimate == pytest.approx(math.sqrt(51 * 26) - 1)
    # Crafter's target is the mean return (+1.0 over the start, paired interval above zero)
    checks = res.target_checks()
    assert res.target.measure == "return" and checks["mean return gain >= +1.0"] is True
    md = render_markdown(res)
    assert "## Crafter's measures" in md and "| collect_wood | 0.0% [0.0, 0.0] | 50.0%" in md
    assert "Crafter score, PPO, dual GAE − warm start (paired by seed): +35.414" in md
    assert learning.as_dict(res)["crafter"]["PPO, dual GAE"]["unlock"]["place_table"]["estimate"] == 0.25
    # Crafter has no success: the tables and the verdict speak of the return only
    assert "| model | episodes | mean return | valid actions | mean steps |" in md
    assert "| comparison | mean return | paired by seed |" in md and "success rate" not in md
    assert "changes mean return by +1.000" in md and "changes success" not in md
    # its curve: the return alone, with the in-training evaluations' mean returns
    _write_metrics(run / PPO_DUAL / "metrics.jsonl", [0.0, 0.0, 0.0], [2, 1, 3])
    with (run / PPO_DUAL / "metrics.jsonl").open("a") as f:
        f.write(json.dumps({"step": 4, "eval/success": 0.0, "eval/return": 2.5, "eval/return_se": 0.3}) + "\n")
    res = collect(run, n_resamples=B)
    assert res.curves["dual GAE"].eval_return == [2.5]
    assert "mean return ± s.e. at iteration: 2.50 ± 0.30 at 4" in render_markdown(res)
    png = learning.plot_curves(res, tmp_path / "curve.png")
    assert png is not None and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_crafter_recipe_refuses_a_scan_without_demonstrations(tmp_path):
    crafter = REPO / "recipes" / "cpu" / "learn_crafter.sh"
    proc = _recipe("--dry-run", _script=crafter, OUTPUT_DIR=str(tmp_path / "run"), SFT_SCAN="100")
    assert proc.returncode == 2 and "SFT_SCAN needs START=demos" in proc.stderr


def test_crafter_recipe_warm_starts_and_spans_ten_iterations(tmp_path):
    proc = _recipe("--dry-run", _script=REPO / "recipes" / "cpu" / "learn_crafter.sh", OUTPUT_DIR=str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stderr
    stages = _stages(proc.stdout)
    assert list(stages) == ["warm_start", "eval_warm_start", "ppo_dual", "eval_ppo_dual", "results"]
    ppo, evaluation = stages["ppo_dual"], stages["eval_warm_start"]
    assert int(_opt(ppo, "env.kwargs.max_steps")) // int(_opt(ppo, "rollout.turns_per_slot")) >= 5
    assert "--tokenizer-env" in stages["warm_start"] and _opt(ppo, "env.kwargs.time_limit") == "truncate"
    # the evaluation scores Crafter's own reward: no format penalty (PPO trains with one)
    assert json.loads(_opt(evaluation, "--env-kwargs"))["format_penalty"] == 0.0
    assert float(_opt(ppo, "env.kwargs.format_penalty")) > 0
    assert _opt(ppo, "model.path") == str(tmp_path / "r" / "warm_start" / "model")


@pytest.mark.parametrize("script", ["learn_babyai.sh", "learn_babaisai.sh", "learn_crafter.sh"])
def test_smoke_budgets_split_into_mini_batches(tmp_path, script):
    """SMOKE=1 runs 2 tiny iterations whose rows split over the mini-batches and ranks (verl refuses them otherwise)."""
    proc = _recipe("--dry-run", _script=REPO / "recipes" / "cpu" / script, SMOKE="1", OUTPUT_DIR=str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stderr
    ppo = _stages(proc.stdout)["ppo_dual"]
    rows = int(_opt(ppo, "rollout.num_slots")) * int(_opt(ppo, "rollout.turns_per_slot"))
    split = int(_opt(ppo, "algorithm.mini_batches")) * int(_opt(ppo, "hardware.n_gpus_per_node"))
    assert _opt(ppo, "iterations") == "2" and rows % split == 0
