"""``verlog sweep report`` and the summary table on a sweep folder written by hand: trials' metrics, results and
attempts as the runner leaves them, with one setting that clearly matters and one that does not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from verlog.cli import main
from verlog.sweep.folder import SweepFolder, create_folder, write_json
from verlog.sweep.report import build_report, render_markdown, write_report
from verlog.sweep.results import summary_table, trial_results, wall_time
from verlog.sweep.space import sample_trials
from verlog.sweep.space_file import parse_space

SPACE = {
    "name": "hand",
    "base": {"env": "toy_delayed", "evaluation.every": 4},
    "params": {
        "algorithm.critic_warmup": [0, 1],
        "algorithm.actor_lr": {"loguniform": [1.0e-4, 1.0e-3]},
    },
    "sampling": {"trials": 8, "seed": 2, "seeds": [0, 1]},
    "objective": {"metric": "eval/progression"},
}


def _sweep(tmp_path: Path, *, statuses: dict[str, str] | None = None) -> tuple[SweepFolder, list]:
    """A sweep folder whose trials ended as ``statuses`` says (default: finished), with critic_warmup=1 worth +0.4."""
    space = parse_space(SPACE, "space.yaml")
    trials = sample_trials(space)
    folder = SweepFolder(tmp_path / "sweep")
    create_folder(folder, space, trials, "text")
    for n, trial in enumerate(trials):
        status = (statuses or {}).get(trial.id, "finished")
        if status == "pending":
            continue
        run = folder.run_dir(trial.id)
        run.mkdir(parents=True)
        progression = 0.4 + 0.4 * trial.params["algorithm.critic_warmup"] + 0.02 * (n % 3)
        records = [
            {"step": 1, "training/global_step": 1, "rollout/valid_action_ratio": 0.8},
            {"step": 2, "training/global_step": 2, "rollout/valid_action_ratio": 0.9, "eval/progression": 0.3},
        ]
        if status != "stopped":
            records.append(
                {
                    "step": 3,
                    "training/global_step": 3,
                    "rollout/valid_action_ratio": 0.95,
                    "eval/progression": progression,
                    "eval/success": progression / 2,
                    "eval/valid_action_rate": 0.97,
                }
            )
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        write_json(folder.trial_dir(trial.id) / "trial.json", {"attempts": [{"started": 100.0, "ended": 190.0}]})
        if status != "unfinished":
            write_json(folder.result_file(trial.id), {"status": status, "exit_code": 0 if status != "failed" else 1})
    return folder, trials


def test_the_summary_table_has_one_row_per_trial(tmp_path: Path) -> None:
    folder, trials = _sweep(tmp_path, statuses={"000-s0": "stopped", "001-s1": "failed", "002-s0": "pending"})
    space = parse_space(SPACE)
    results = {r.trial.id: r for r in trial_results(folder, space, trials)}
    assert results["000-s0"].status == "stopped" and results["000-s0"].outcome == 0.3
    assert results["000-s0"].outcome_step == 2 and results["000-s0"].iterations == 2
    assert results["001-s1"].status == "failed" and results["002-s0"].status == "pending"
    assert results["002-s0"].outcome is None and results["002-s0"].wall_time_s is None
    finished = results["000-s1"]
    assert (finished.eval_success, finished.eval_valid, finished.rollout_valid) == (finished.outcome / 2, 0.97, 0.95)
    assert finished.wall_time_s == 90.0 and finished.iterations == 3
    table = summary_table(space, list(results.values())).splitlines()
    assert table[0] == (
        "| trial | algorithm.critic_warmup | algorithm.actor_lr | seed | status | eval/progression (objective) | "
        "eval/success | eval valid actions | rollout valid actions | iterations | wall time |"
    )
    assert len(table) == 2 + len(trials)
    row = next(line for line in table if line.startswith("| 000-s0 "))
    assert "| stopped | 0.300 (iteration 2) |" in row
    assert "| 1m30s |" in next(line for line in table if line.startswith("| 000-s1 "))


def test_wall_time_sums_the_attempts_and_counts_a_killed_one_to_when_it_was_last_seen() -> None:
    assert wall_time([{"started": 10.0, "seen": 25.0}, {"started": 100.0, "seen": 150.0, "ended": 160.0}]) == 75.0
    assert wall_time([]) is None and wall_time([{"started": 5.0}]) is None


def test_the_report_recommends_the_setting_that_matters(tmp_path: Path) -> None:
    folder, _ = _sweep(tmp_path, statuses={"003-s1": "failed", "004-s0": "unfinished"})
    report = build_report(folder.root, n_resamples=500, seed=0)
    assert len(report.results) == 16 and len(report.scored) == 14  # failed and unfinished trials are left out
    assert report.diagnosis is not None
    warmup = report.diagnosis.effect("algorithm.critic_warmup")
    assert warmup.recommended == "1" and warmup.level("1").p_best > 0.95
    assert warmup.spread == pytest.approx(0.4, abs=0.05) and warmup.p_value < 0.01
    assert report.diagnosis.effects[0].key == "algorithm.critic_warmup"
    assert report.recommended["algorithm.critic_warmup"] == 1
    assert 1e-4 <= report.recommended["algorithm.actor_lr"] <= 1e-3
    assert report.noise is not None and report.noise.configs == 6  # two configurations lost a seed
    text = render_markdown(report, {"effects": "effects.png", "trials": "trials.png"})
    assert text.startswith("# Sweep hand: diagnosis")
    assert "16 trials (14 finished, 1 failed, 1 unfinished); 14 with an outcome" in text
    assert "## Recommended configuration" in text and "## Which settings matter" in text
    assert "| algorithm.critic_warmup | 1 |" in text
    assert "As overrides: `algorithm.critic_warmup=1 algorithm.actor_lr=" in text
    assert (
        "### algorithm.actor_lr" in text and "## Seed noise" in text and "![level means per key](effects.png)" in text
    )
    assert str(tmp_path) not in text  # no machine paths in a report meant for docs/


def test_write_report_and_the_command(tmp_path: Path, capsys) -> None:
    folder, _ = _sweep(tmp_path)
    out = tmp_path / "docs_report"
    assert main(["sweep", "report", str(folder.root), "--out", str(out), "--resamples", "200"]) == 0
    printed = capsys.readouterr().out
    assert f"written to {out / 'report.md'}" in printed and "recommended: algorithm.critic_warmup=1" in printed
    for name in ("effects.png", "trials.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "16 trials (16 finished)" in (out / "report.md").read_text()
    default = write_report(build_report(folder.root, n_resamples=200), folder.root / "report")
    assert default == folder.root / "report" / "report.md" and default.is_file()


def test_a_report_with_too_few_outcomes_says_so(tmp_path: Path) -> None:
    statuses = {t.id: "pending" for t in sample_trials(parse_space(SPACE))}
    statuses.pop("000-s0")
    folder, _ = _sweep(tmp_path, statuses=statuses)
    report = build_report(folder.root, n_resamples=100)
    assert report.diagnosis is None and report.recommended == {}
    text = render_markdown(report)
    assert "Fewer than 2 trials have an outcome: nothing to diagnose yet." in text
    assert "16 trials (1 finished, 15 pending)" in text
