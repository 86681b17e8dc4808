"""``verlog sweep``'s checks before anything starts (one line, exit 2, nothing written), its dry run (trials and
commands, no model loaded, no Ray), the sweep folder's identity, and a trial's process handling (verlog/sweep/trial.py:
a trial with a final result never runs again; a run's metrics reported as they are written; a failure recorded).

The trials' process handling is exercised here with small stand-in commands (``python -c ...``) in place of ``verlog
train``; tests/verlog/sweep/test_sweep_e2e.py runs real ``verlog train`` trials through Ray Tune.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from verlog.cli import main
from verlog.sweep.checks import HF_MODEL_CONTENTS, trial_overrides
from verlog.sweep.folder import SweepFolder, check_folder, create_folder, read_sweep, starts_fresh
from verlog.sweep.space import SweepSpaceError, sample_trials
from verlog.sweep.space_file import parse_space
from verlog.sweep.trial import MetricsTail, TrialFailedError, TrialJob, reported, run_trial, train_command

REPO = Path(__file__).resolve().parents[3]
SPACE = {
    "name": "tiny",
    "base": {"env": "toy_delayed", "iterations": 2, "evaluation.every": 2, "evaluation.episodes": 4},
    "params": {
        "algorithm.actor_lr": {"loguniform": [1.0e-4, 1.0e-3]},
        "algorithm.critic_warmup": [0, 1],
    },
    "sampling": {"trials": 3, "seed": 1},
    "objective": {"metric": "eval/progression"},
}


def _write(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _error_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("verlog sweep: error: ")
    return lines[0]


def test_the_dry_run_prints_the_checked_trials_and_writes_nothing(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    _write(tmp_path / "space.yaml", SPACE)
    assert main(["sweep", "space.yaml", "--out", "out", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# verlog sweep --dry-run: nothing was started")
    assert "random sampling, 3 trials" in out and "objective: eval/progression (max)" in out
    assert "# folder: out (new); 1 trial(s) at once" in out
    rows = [line.split("\t") for line in out.splitlines() if line[:3].isdigit()]
    assert [r[0] for r in rows] == ["000", "001", "002"]
    trials = sample_trials(parse_space(SPACE))
    for row, trial in zip(rows, trials):
        assert row[1:] == [repr(trial.params["algorithm.actor_lr"]), str(trial.params["algorithm.critic_warmup"])]
    command = next(line for line in out.splitlines() if line.startswith("# 001: "))
    assert command.startswith("# 001: python -m verlog.train env=toy_delayed iterations=2")
    assert "output_dir=out/trials/001/run checkpoint.resume=auto" in command
    assert sorted(p.name for p in tmp_path.iterdir()) == ["space.yaml"]  # no folder, no model, no Ray session


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda s: s["params"].update({"algorithm.critic_warmpu": s["params"].pop("algorithm.critic_warmup")}),
            "params.algorithm.critic_warmpu: unknown config key 'algorithm.critic_warmpu' in override "
            "'algorithm.critic_warmpu=0'. Did you mean 'algorithm.critic_warmup'? Write algorithm.critic_warmup=0; "
            "rename it in the search space",
        ),
        (
            lambda s: s["base"].update({"rollout.num_slot": 4}),
            "base: unknown config key 'rollout.num_slot' in override 'rollout.num_slot=4'. Did you mean "
            "'rollout.num_slots'?",
        ),
        (lambda s: s["base"].update({"env": "toy_delayd"}), "Did you mean env=toy_delayed?"),
        (
            lambda s: s["params"].update({"algorithm.actor_lr": {"loguniform": [1.0e-3, 1.0e-3]}}),
            "params.algorithm.actor_lr.loguniform [0.001, 0.001] is an empty range (low must be below high); widen "
            "it, or put the one value in base",
        ),
        (
            lambda s: s["params"].update({"algorithm.critic_warmup": [0, -1]}),
            "fails verlog train's checks: algorithm.critic_warmup: -1 must be an integer >= 0",
        ),
        (
            lambda s: s["base"].update({"evaluation.every": 0}),
            "objective.metric eval/progression is the in-training evaluation, which is off (evaluation.every=0)",
        ),
        (lambda s: s.update({"paralel": 2}), "unknown key 'paralel' in the search space. Did you mean parallel?"),
        (
            lambda s: s["objective"].update({"metric": "eval/progresion"}),
            "objective.metric 'eval/progresion' is not a metric verlog train logs. Did you mean eval/progression",
        ),
        (
            lambda s: s["objective"].update({"metric": "sucess/rate"}),
            "objective.metric 'sucess/rate' is not a metric verlog train logs: no metric is logged under sucess/. "
            "Did you mean env/success_rate? Metrics are logged under actor/, adv/",
        ),
        (
            lambda s: s["objective"].update({"metric": "adv/anchor_groups"}),
            "objective.metric adv/anchor_groups is never logged in this trial: it is gigpo's and "
            "algorithm.estimator=dual_gae (docs/metrics.md, column logged)",
        ),
        (
            lambda s: s.update(
                params={f"algorithm.{k}": {"int": [1, 10]} for k in ("critic_warmup", "ppo_epochs", "mini_batches")}
                | {"seed": {"int": [0, 99]}},
                sampling={"method": "grid"},
            ),
            "the grid holds 100,000 trials: 10 (algorithm.critic_warmup) x 10 (algorithm.ppo_epochs) x 10 "
            "(algorithm.mini_batches) x 100 (seed), more than a sweep runs (at most 2000: each trial is a verlog train "
            "run, checked before anything starts); give the keys fewer values (fewer choices, fewer points), or sample "
            "the space at random: sampling: {method: random, trials: 100}",
        ),
    ],
    ids=[
        "misspelt-param",
        "misspelt-base-key",
        "misspelt-env",
        "empty-range",
        "bad-value",
        "no-eval",
        "top-level",
        "misspelt-objective",
        "unknown-namespace",
        "never-logged",
        "grid-past-the-bound",
    ],
)
def test_bad_spaces_are_refused_before_anything_starts(tmp_path: Path, capsys, monkeypatch, change, message) -> None:
    monkeypatch.chdir(tmp_path)
    data = json.loads(json.dumps(SPACE))
    change(data)
    _write(tmp_path / "space.yaml", data)
    for extra in (["--dry-run"], []):  # a real launch refuses it just as early
        assert main(["sweep", "space.yaml", "--out", "out", *extra]) == 2
        line = _error_line(capsys)
        assert line.startswith("verlog sweep: error: space.yaml: ")
        assert message in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["space.yaml"]


def test_a_long_trial_check_shows_its_progress(tmp_path: Path, capsys, monkeypatch) -> None:
    """Checking the trials (about 0.15 s each) prints how far it got once it runs past PROGRESS_AFTER_S seconds
    (made 0 here), on stderr, the dry run's trial table on stdout as before."""
    from verlog.sweep import checks

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(checks, "PROGRESS_AFTER_S", 0.0)
    monkeypatch.setattr(checks, "PROGRESS_EVERY_S", 0.0)
    _write(tmp_path / "space.yaml", SPACE)
    assert main(["sweep", "space.yaml", "--out", "out", "--dry-run"]) == 0
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert [line.split(": ")[1].split(" (")[0] for line in lines] == ["1 of 3", "2 of 3"], captured.err
    assert lines[0].startswith("[sweep] checking the trials as verlog train --dry-run does: 1 of 3 (")
    assert lines[0].endswith(" s left)")
    assert captured.out.startswith("# verlog sweep --dry-run: nothing was started")


def test_a_folder_of_another_space_or_of_something_else_is_refused(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    _write(tmp_path / "space.yaml", SPACE)
    space = parse_space(SPACE, "space.yaml")
    create_folder(SweepFolder(Path("out")), space, sample_trials(space), "x")
    before = (tmp_path / "out" / "sweep.json").read_text()
    other = json.loads(json.dumps(SPACE))
    other["params"]["algorithm.critic_warmup"] = [0, 2]
    _write(tmp_path / "other.yaml", other)
    assert main(["sweep", "other.yaml", "--out", "out"]) == 2
    line = _error_line(capsys)
    assert (
        "--out 'out' holds a sweep of another search space (params.algorithm.critic_warmup.choice: [0, 1] there, "
        in line
    )
    assert (
        "[0, 2] here); give a new --out folder, or resume that sweep with its own space: verlog sweep out/space.yaml"
        in line
    )
    assert (tmp_path / "out" / "sweep.json").read_text() == before
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "notes.txt").write_text("x")
    assert main(["sweep", "space.yaml", "--out", "junk", "--dry-run"]) == 2
    assert "--out 'junk' holds something other than a sweep (notes.txt) and no sweep.json" in _error_line(capsys)
    (tmp_path / "afile").write_text("x")
    assert main(["sweep", "space.yaml", "--out", "afile"]) == 2
    assert "--out 'afile' is a file, not a folder" in _error_line(capsys)
    assert main(["sweep", "space.yaml"]) == 2
    assert "--out is missing" in _error_line(capsys)
    assert main(["sweep", "report", "junk"]) == 2
    assert "'junk' holds no sweep.json: give the --out folder of a `verlog sweep SPACE.yaml --out DIR` run" in (
        _error_line(capsys)
    )
    assert main(["sweep", "nope.yaml", "--out", "new"]) == 2
    assert "search space 'nope.yaml': no such file" in _error_line(capsys)
    assert not (tmp_path / "new").exists()


def test_the_same_space_resumes_its_folder(tmp_path: Path) -> None:
    space = parse_space(SPACE, "space.yaml")
    folder, resumed = check_folder(tmp_path / "out", space)
    assert not resumed
    create_folder(folder, space, sample_trials(space), "text")
    again, resumed = check_folder(tmp_path / "out", parse_space({**SPACE, "parallel": 2}, "elsewhere.yaml"))
    assert resumed and again.root == folder.root
    _, saved, trials = read_sweep(tmp_path / "out")  # what `verlog sweep report` reads back
    assert saved.fingerprint() == space.fingerprint() and trials == sample_trials(space)
    assert [p.key for p in saved.params] == [p.key for p in space.params] and saved.source == "space.yaml"
    with pytest.raises(SweepSpaceError, match="--out is empty"):
        check_folder("", space)


def test_the_console_script_prints_one_line_without_a_traceback(tmp_path: Path) -> None:
    data = json.loads(json.dumps(SPACE))
    data["params"]["algorithm.actor_lr"] = {"uniform": [0.5, 0.5]}
    _write(tmp_path / "space.yaml", data)
    proc = subprocess.run(
        [sys.executable, "-m", "verlog", "sweep", "space.yaml", "--out", "out"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "verlog sweep: error: space.yaml: params.algorithm.actor_lr.uniform [0.5, 0.5] is an empty range (low must "
        "be below high); widen it, or put the one value in base"
    ]
    assert "Traceback" not in proc.stderr


@pytest.mark.slow  # 24 trials checked (about 20 s on a busy 2-core machine)
def test_the_showcase_space_passes_the_dry_run(tmp_path: Path, tiny_model: Path, capsys, monkeypatch) -> None:
    """recipes/cpu/sweep_toy.yaml, with its start model (built by recipes/cpu/sweep_toy.sh) replaced by a tiny one."""
    data = yaml.safe_load((REPO / "recipes/cpu/sweep_toy.yaml").read_text())
    assert data["base"]["model.path"] == "outputs/sweep-toy/model"
    data["base"]["model.path"] = str(tiny_model)
    monkeypatch.chdir(tmp_path)
    _write(tmp_path / "sweep_toy.yaml", data)
    assert main(["sweep", "sweep_toy.yaml", "--out", "out", "--dry-run"]) == 0
    out = capsys.readouterr().out
    rows = [line.split("\t") for line in out.splitlines() if line[:3].isdigit()]
    assert len(rows) == 24 and rows[0][0] == "000-s0" and rows[1][0] == "000-s1"
    header = next(line.split("\t") for line in out.splitlines() if line.startswith("trial\t"))
    assert header == [
        "trial",
        "algorithm.actor_lr",
        "algorithm.critic_warmup",
        "env.kwargs.format_penalty",
        "algorithm.advantage_level",
        "algorithm.token_gamma",
        "algorithm.token_lam",
        "seed",
    ]
    assert "objective: eval/progression (max)" in out
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------------------------------------ one trial
def _job(tmp_path: Path, code: str, **changes) -> TrialJob:
    folder = tmp_path / "trials" / "000"
    folder.mkdir(parents=True, exist_ok=True)
    fields = dict(
        id="000",
        folder=str(folder),
        train_args=(f"output_dir={folder / 'run'}",),
        eval_args=None,
        objective="eval/success",
        scheduler_metric=None,
        cwd=str(tmp_path),
        env=dict(os.environ),
        trainer=("-c", code),
    )
    fields.update(changes)
    return TrialJob(**fields)


WRITE_METRICS = """
import json, sys, time
from pathlib import Path
out = Path(sys.argv[1].split("=", 1)[1]); out.mkdir(parents=True, exist_ok=True)
for step, success in ((1, None), (2, 0.25), (3, 0.75)):
    record = {"step": step, "training/global_step": step, "rollout/valid_action_ratio": 0.9}
    if success is not None:
        record["eval/success"] = success
    with open(out / "metrics.jsonl", "a") as f:
        f.write(json.dumps(record) + "\\n")
    time.sleep(0.3)
print("trained with", sys.argv[1:])
"""


def test_a_trial_reports_each_record_and_records_its_result(tmp_path: Path) -> None:
    job = _job(tmp_path, WRITE_METRICS)
    seen: list[dict] = []
    result = run_trial(job, seen.append)
    assert result == {"status": "finished", "exit_code": 0, "note": ""}
    assert [r["iteration"] for r in seen] == [1, 2, 3]
    assert [r.get("eval/success") for r in seen] == [None, 0.25, 0.75]
    assert json.loads((Path(job.folder) / "result.json").read_text())["status"] == "finished"
    attempts = json.loads((Path(job.folder) / "trial.json").read_text())["attempts"]
    assert len(attempts) == 1 and attempts[0]["exit_code"] == 0 and attempts[0]["ended"] >= attempts[0]["started"]
    log = (Path(job.folder) / "train.log").read_text()
    assert "trained with" in log and "--overwrite" in log  # no checkpoint: a fresh start


def test_a_finished_trial_never_runs_again(tmp_path: Path) -> None:
    job = _job(tmp_path, WRITE_METRICS)
    run_trial(job, lambda r: None)
    metrics = Path(job.folder) / "run" / "metrics.jsonl"
    before = (metrics.read_text(), metrics.stat().st_mtime_ns, (Path(job.folder) / "train.log").read_text())
    failing = _job(tmp_path, "raise SystemExit(3)")  # would fail, and overwrite the run, if it ran
    assert run_trial(failing, lambda r: None)["status"] == "finished"
    assert (metrics.read_text(), metrics.stat().st_mtime_ns, (Path(job.folder) / "train.log").read_text()) == before
    assert len(json.loads((Path(job.folder) / "trial.json").read_text())["attempts"]) == 1
    (Path(job.folder) / "result.json").write_text(json.dumps({"status": "stopped", "note": "stopped early"}))
    assert run_trial(failing, lambda r: None)["status"] == "stopped"  # stopped by the scheduler: final too


def test_a_failed_trial_is_recorded_and_raises(tmp_path: Path) -> None:
    job = _job(tmp_path, "import sys; print('boom'); sys.exit(3)")
    with pytest.raises(TrialFailedError, match=r"trial 000: exit code 3: see .*train.log"):
        run_trial(job, lambda r: None)
    result = json.loads((Path(job.folder) / "result.json").read_text())
    assert result["status"] == "failed" and result["exit_code"] == 3
    assert "boom" in (Path(job.folder) / "train.log").read_text()
    again = _job(tmp_path, WRITE_METRICS)  # a failed trial runs again when the sweep resumes
    assert run_trial(again, lambda r: None)["status"] == "finished"
    assert len(json.loads((Path(job.folder) / "trial.json").read_text())["attempts"]) == 2


def test_a_trial_resumes_from_its_checkpoint_and_starts_afresh_without_one(tmp_path: Path) -> None:
    job = _job(tmp_path, "pass")
    assert starts_fresh(job.run_dir) and train_command(job)[-1] == "--overwrite"
    latest = job.run_dir / "checkpoints" / "latest_checkpointed_iteration.txt"
    latest.parent.mkdir(parents=True)
    latest.write_text("2")
    assert not starts_fresh(job.run_dir) and "--overwrite" not in train_command(job)
    assert train_command(job)[:3] == [sys.executable, "-c", "pass"]


def test_with_a_scheduler_only_records_with_its_metric_are_reported(tmp_path: Path) -> None:
    job = _job(tmp_path, "pass", scheduler_metric="eval/success", objective="eval/progression")
    assert reported({"step": 1, "env/return_mean": 0.5}, job) is None
    got = reported({"step": 2, "eval/success": 0.5, "eval/progression": 0.7, "actor/pg_loss": 1.0, "x": "y"}, job)
    assert got == {"iteration": 2, "eval/success": 0.5, "eval/progression": 0.7}
    free = _job(tmp_path, "pass")
    assert reported({"step": 1, "env/return_mean": 0.5}, free) == {"iteration": 1, "env/return_mean": 0.5}


def test_the_metrics_tail_waits_for_a_whole_line(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    tail = MetricsTail(path)
    assert tail.read() == []
    path.write_text('{"step": 1}\n{"step": 2, "eval/suc')
    assert tail.read() == [{"step": 1}]
    with open(path, "a") as f:
        f.write('cess": 0.5}\n')
    assert tail.read() == [{"step": 2, "eval/success": 0.5}]
    assert tail.read() == []


def test_with_an_eval_section_the_trial_saves_its_model_for_verlog_eval(tmp_path: Path) -> None:
    space = parse_space({**SPACE, "eval": {"episodes": 4}})
    trial = sample_trials(space)[0]
    overrides = trial_overrides(space, trial, tmp_path / "run")
    assert overrides[-4:] == [
        f"output_dir={tmp_path / 'run'}",
        "checkpoint.resume=auto",
        "checkpoint.save_freq=${iterations}",
        HF_MODEL_CONTENTS,
    ]
    own = parse_space({**SPACE, "base": {**SPACE["base"], "checkpoint.save_freq": 1}, "eval": {"episodes": 4}})
    assert "checkpoint.save_freq=${iterations}" not in trial_overrides(own, sample_trials(own)[0], tmp_path / "run")
    plain = trial_overrides(parse_space(SPACE), trial, tmp_path / "run")
    assert plain[-2:] == [f"output_dir={tmp_path / 'run'}", "checkpoint.resume=auto"]


@pytest.mark.slow  # 48 trials checked
def test_the_documented_space_passes_the_dry_run(tmp_path: Path, capsys, monkeypatch) -> None:
    """docs/sweeps.md's example space (its first yaml block), as a user would copy it."""
    import re

    block = re.findall(r"```yaml\n(.*?)```", (REPO / "docs" / "sweeps.md").read_text(), re.S)[0]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "space.yaml").write_text(block)
    assert main(["sweep", "space.yaml", "--out", "out", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "random sampling, 48 trials" in out and "early stopping: asha on eval/success, grace period 4" in out
    assert "each then runs verlog eval" in out
    rows = [line.split("\t") for line in out.splitlines() if line[:3].isdigit()]
    assert {r[6] for r in rows} == {"dual_gae", "gigpo"}
    assert all((r[7] == "-") == (r[6] == "dual_gae") for r in rows)  # group_size only with gigpo


def test_the_eval_options_follow_the_trial_and_verlog_eval_takes_them(tmp_path: Path) -> None:
    """A trial is evaluated with ``verlog eval --run``: the env, memory, budgets and temperature come from the
    config its run saved (as verlog train saves it), the episodes and seeds from the eval: section."""
    from omegaconf import OmegaConf

    from verlog.cli import build_parser
    from verlog.commands.eval import _fill_settings
    from verlog.run.folder import RunFolder
    from verlog.sweep.checks import check_trials
    from verlog.sweep.runner import eval_arguments

    base = {**SPACE["base"], "evaluation.temperature": 0.5, "memory.max_image_history": 0}
    space = parse_space({**SPACE, "base": base, "eval": {"episodes": 6, "seed_start": 500, "args": ["--quiet"]}})
    trial = sample_trials(space)[0]
    run = tmp_path / "run"
    (checked,) = check_trials(space, [trial], {trial.id: run})
    run.mkdir()
    OmegaConf.save(OmegaConf.structured(checked.config), RunFolder(run).config)  # what verlog train saves
    args = eval_arguments(str(run), space.eval, str(tmp_path / "eval"), ["my_envs"])
    parsed = build_parser().parse_args(["eval", *args])
    _fill_settings(parsed)
    assert (parsed.model, parsed.tasks, parsed.episodes, parsed.seed_start, parsed.out) == (
        str(run),
        "toy/delayed",
        6,
        500,
        str(tmp_path / "eval"),
    )
    cfg = checked.config
    assert json.loads(parsed.env_kwargs) == dict(cfg.env.kwargs)
    assert (parsed.max_tokens, parsed.max_prompt_tokens) == (
        cfg.rollout.max_response_tokens,
        cfg.rollout.max_prompt_tokens,
    )
    assert (parsed.memory_n, parsed.answer_format, parsed.temperature) == (cfg.memory.n, cfg.memory.answer_format, 0.5)
    assert parsed.max_image_history == cfg.memory.max_image_history
    assert parsed.resume and parsed.quiet and parsed.imports == ["my_envs"]
    # an option given on the command line wins over the run's
    again = build_parser().parse_args(["eval", *args, "--temperature", "0.0", "--memory-n", "3"])
    _fill_settings(again)
    assert (again.temperature, again.memory_n, again.answer_format) == (0.0, 3, cfg.memory.answer_format)


def test_a_trial_is_composed_as_verlog_train_composes_its_arguments(tmp_path: Path) -> None:
    """The typed config the sweep checks is the one verlog train's own parser and composition give for the arguments
    the trial's process gets; the job runs those arguments, and the printed command shows them."""
    import argparse
    import shlex

    from verlog.commands.train import add_arguments
    from verlog.config.compose import load_config
    from verlog.config.preflight import preflight
    from verlog.sweep.checks import check_trials
    from verlog.sweep.runner import build_jobs

    (tmp_path / "conf" / "env").mkdir(parents=True)  # a config folder of one's own: --config-dir
    space = parse_space({**SPACE, "config_dir": str(tmp_path / "conf"), "sampling": {"trials": 2, "seeds": [4]}})
    trial = sample_trials(space)[1]
    (checked,) = check_trials(space, [trial], {trial.id: tmp_path / "run"})
    assert checked.train_args[:2] == ("--config-dir", str(tmp_path / "conf")) and checked.train_args[-3] == "seed=4"
    args, extra = add_arguments(argparse.ArgumentParser()).parse_known_args(list(checked.train_args))
    composed = load_config([*args.overrides, *extra], args.config_dir, args.config_name)
    assert preflight(composed, args.imports, overwrite=True) == checked.config
    assert checked.config.algorithm.actor_lr == trial.params["algorithm.actor_lr"] and checked.config.seed == 4
    assert checked.command == shlex.join(["python", "-m", "verlog.train", *checked.train_args])
    job = build_jobs(space, [checked], SweepFolder(tmp_path / "sweep"), str(tmp_path), {})[trial.id]
    assert train_command(job)[1:] == ["-m", "verlog.train", *checked.train_args, "--overwrite"]


def test_a_resumed_sweep_runs_the_trials_its_folder_lists(tmp_path: Path, capsys, monkeypatch) -> None:
    """A folder's trials are the ones it was created with (say, drawn by an older sampler): resuming, even its dry
    run, takes them from sweep.json rather than drawing again, and counts the finished ones."""
    import dataclasses

    monkeypatch.chdir(tmp_path)
    _write(tmp_path / "space.yaml", SPACE)
    space = parse_space(SPACE, "space.yaml")
    drawn = sample_trials(space)
    earlier = [dataclasses.replace(t, params={**t.params, "algorithm.actor_lr": 1.23e-4 + i * 1e-5}) for i, t in
               enumerate(drawn)]  # fmt: skip
    create_folder(SweepFolder(Path("out")), space, earlier, "text")
    finished = tmp_path / "out" / "trials" / "000" / "result.json"
    finished.parent.mkdir(parents=True)
    finished.write_text(json.dumps({"status": "finished", "exit_code": 0, "note": ""}))
    assert main(["sweep", "space.yaml", "--out", "out", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "# folder: out (resumes it: 1 finished, 2 pending)" in out
    rows = [line.split("\t") for line in out.splitlines() if line[:3].isdigit()]
    assert [float(r[1]) for r in rows] == [t.params["algorithm.actor_lr"] for t in earlier]
    assert [float(r[1]) for r in rows] != [t.params["algorithm.actor_lr"] for t in drawn]
