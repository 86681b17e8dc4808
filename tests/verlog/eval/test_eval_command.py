"""``verlog eval`` with the tiny model: transformers in-process (fast), vLLM in a subprocess (e2e)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from verlog.cli import main
from verlog.eval.engine import EvalModelError, resolve_model_path
from verlog.eval.report import read_episode_records
from verlog.tapes.record import read_turn_logs

GROUP_KEYS = {
    "episodes",
    "progression_percentage",
    "progression_sd",
    "standard_error",
    "progression_ci",
    "success_rate",
    "success_rate_ci",
    "mean_return",
    "return_ci",
    "average_steps",
    "valid_action_rate",
    "truncated_episodes",
    "generation_failures",
    "input_tokens",
    "output_tokens",
}


def _check_summary(out: Path, engine: str, steps: int) -> dict:
    summary = json.loads((out / "summary.json").read_text())
    assert summary["format"] == "verlog.eval/1"
    assert summary["episodes"] == 4
    assert 0.0 <= summary["average_progress"] <= 100.0 and summary["standard_error"] >= 0.0
    assert summary["protocol"]["tasks"] == ["babyai/goto", "babyai/pickup"]
    assert summary["protocol"]["seeds"] == [100, 101]
    assert summary["model"]["engine"] == engine and summary["model"]["dtype"] == "float32"
    assert summary["sampling"]["max_tokens"] == 6 and summary["memory_n"] == 1
    babyai = summary["environments"]["babyai"]
    assert GROUP_KEYS <= set(babyai)
    assert set(babyai["tasks"]) == {"goto", "pickup"}
    for block in babyai["tasks"].values():
        assert GROUP_KEYS <= set(block) and block["episodes"] == 2
        assert block["average_steps"] <= steps
        assert block["input_tokens"] > 0 and block["output_tokens"] > 0
    records = read_episode_records(out)
    assert sorted((r.env_id, r.seed) for r in records) == [
        ("babyai/goto", 100),
        ("babyai/goto", 101),
        ("babyai/pickup", 100),
        ("babyai/pickup", 101),
    ]
    for rec in records:
        assert 1 <= rec.num_steps <= steps and rec.env_stats["mission"]
        assert sum(rec.action_frequency.values()) == rec.num_steps
    return summary


def _args(model: Path, out: Path, engine: str) -> list[str]:
    return [
        "eval",
        "--model",
        str(model),
        "--tasks",
        "babyai/goto,babyai/pickup",
        "--episodes",
        "2",
        "--seed-start",
        "100",
        "--engine",
        engine,
        "--max-tokens",
        "6",
        "--max-steps",
        "3",
        "--out",
        str(out),
        "--log-turns",
        "--bootstrap-resamples",
        "200",
    ]


@pytest.fixture
def one_torch_thread():
    """A 148k-parameter model gains nothing from threads, and on a busy machine OpenMP waits cost seconds."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_eval_transformers_writes_summary(tiny_model: Path, tmp_path: Path, capsys, one_torch_thread) -> None:
    out = tmp_path / "eval"
    assert main(_args(tiny_model, out, "transformers")) == 0
    printed = capsys.readouterr().out
    assert "babyai/goto" in printed and "babyai (all tasks)" in printed and "overall (BALROG" in printed
    _check_summary(out, "transformers", steps=3)
    turns = read_turn_logs(out / "turns.jsonl")
    assert len(turns) == sum(r.num_steps for r in read_episode_records(out))
    assert all(t.response_tokens and t.response_tokens <= 6 and t.logprobs is not None for t in turns)


def test_eval_reports_bad_arguments(tiny_model: Path, tmp_path: Path, capsys) -> None:
    assert main(["eval", "--model", str(tiny_model), "--tasks", "babyai/gotoo", "--out", str(tmp_path)]) == 2
    assert "did you mean babyai/goto" in capsys.readouterr().err
    assert main(["eval", "--model", str(tmp_path / "none"), "--tasks", "babyai/goto", "--out", str(tmp_path)]) == 2
    assert "does not exist" in capsys.readouterr().err
    args = ["eval", "--model", str(tiny_model), "--tasks", "babyai/goto", "--out", str(tmp_path), "--env-kwargs", "[1]"]
    assert main(args) == 2
    assert "JSON object" in capsys.readouterr().err


def test_model_path_resolves_verl_checkpoint_layouts(tiny_model: Path, tmp_path: Path) -> None:
    assert resolve_model_path(tiny_model) == tiny_model
    run = tmp_path / "run"
    hf = run / "global_step_3" / "actor" / "huggingface"
    shutil.copytree(tiny_model, hf)
    (run / "latest_checkpointed_iteration.txt").write_text("3\n")
    assert resolve_model_path(run) == hf
    assert resolve_model_path(run / "global_step_3") == hf
    assert resolve_model_path(run / "global_step_3" / "actor") == hf
    config_only = tmp_path / "ckpt" / "huggingface"
    config_only.mkdir(parents=True)
    shutil.copy(tiny_model / "config.json", config_only)
    with pytest.raises(EvalModelError, match="hf_model"):
        resolve_model_path(tmp_path / "ckpt")
    with pytest.raises(EvalModelError, match="no Hugging Face model"):
        resolve_model_path(tmp_path)
    # the run folder of verlog train: its checkpoints/' latest step, or a named error before its first checkpoint
    train_run = tmp_path / "train_run"
    (train_run / "checkpoints").mkdir(parents=True)
    with pytest.raises(EvalModelError, match=r"saved no checkpoint yet: train with checkpoint\.save_freq"):
        resolve_model_path(train_run)
    shutil.copytree(run, train_run / "checkpoints", dirs_exist_ok=True)
    assert resolve_model_path(train_run) == train_run / "checkpoints" / "global_step_3" / "actor" / "huggingface"


@pytest.mark.e2e
@pytest.mark.slow
def test_eval_vllm_writes_summary(vllm_eval_of_tiny_model) -> None:
    """vllm_eval_run.py's evaluation (shared with test_endpoint_e2e.py): the tiny model in a verl-checkpoint layout,
    as `verlog train` writes it, and this module's protocol (_args) at temperature 0."""
    out, proc = vllm_eval_of_tiny_model
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    assert "overall (BALROG" in proc.stdout
    summary = _check_summary(out, "vllm", steps=3)
    assert summary["model"]["path"].endswith("global_step_1/actor/huggingface")
    turns = read_turn_logs(out / "turns.jsonl")
    assert all(t.logprobs is not None and t.logprobs.n == t.response_tokens for t in turns)


@pytest.mark.e2e
@pytest.mark.slow
def test_eval_says_in_one_line_that_vllm_did_not_start(tiny_model: Path, tmp_path: Path) -> None:
    """A KV cache larger than the machine's memory: vLLM refuses to start, and verlog says so in one line, exit 1."""
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "100000"}
    proc = subprocess.run(
        [sys.executable, "-m", "verlog", *_args(tiny_model, tmp_path / "eval", "vllm")],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    ours = [line for line in proc.stderr.splitlines() if line.startswith("verlog eval: error:")]
    assert len(ours) == 1 and "vLLM did not start on " in ours[0] and "VLLM_CPU_KVCACHE_SPACE" in ours[0], ours
    # vLLM's engine process logs its own traceback (the cause); verlog's process ends in the line above, not in a
    # traceback of its own, whose last line would be vLLM's RuntimeError
    assert not any(
        line.startswith("RuntimeError: Engine core initialization failed") for line in proc.stderr.splitlines()
    )
    assert not (tmp_path / "eval" / "summary.json").exists()


# ------------------------------------------------------------------------------------------------ bad inputs (issue 15)
@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--seeds", "-1,2"], "argument --seeds: seed -1 in '-1,2' is negative: seeds are integers in [0, 4294967295]"),
        (["--seeds", "1,x"], "argument --seeds: 'x' in '1,x' is not a seed: write comma-separated integers"),
        (["--seeds", "3,3"], "seed 3 appears twice in '3,3'"),
        (["--memory-n", "-1"], "argument --memory-n: '-1' is not an integer >= 0"),
        (["--episodes", "0"], "argument --episodes: '0' is not an integer >= 1"),
        (["--top-p", "0"], "argument --top-p: '0' is not a number in (0.0, 1.0]"),
    ],
    ids=["negative-seed", "not-a-seed", "repeated-seed", "memory-n", "episodes", "top-p"],
)
def test_bad_numbers_are_refused_by_the_parser(extra, message, tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["eval", "--model", "m", "--tasks", "babyai/goto", "--out", str(tmp_path / "o"), *extra])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_bad_inputs_are_refused_before_the_engine_starts(tiny_model: Path, tmp_path: Path, capsys, monkeypatch):
    import verlog.eval

    def refuse(*args, **kwargs):
        raise AssertionError("the engine started before the arguments were checked")

    monkeypatch.setattr(verlog.eval, "load_model", refuse)
    out = tmp_path / "out"
    base = ["eval", "--model", str(tiny_model), "--tasks", "babyai/goto"]
    (tmp_path / "file").write_text("x")
    assert main([*base, "--out", str(tmp_path / "file")]) == 2
    assert "--out" in (err := capsys.readouterr().err) and "is a file, not a folder" in err
    out.mkdir()
    (out / "episodes.jsonl").write_text("{}\n")
    assert main([*base, "--out", str(out)]) == 2
    assert "episodes.jsonl exists from an earlier evaluation: pass --resume" in capsys.readouterr().err
    assert main([*base, "--out", str(tmp_path / "o"), "--env-kwargs", '{"max_step": 3}']) == 2
    assert "env 'babyai/goto' takes no keyword argument 'max_step'" in capsys.readouterr().err
    assert main([*base, "--out", str(tmp_path / "o"), "--import", "no_such_mod"]) == 2
    assert "--import: no module named 'no_such_mod'" in capsys.readouterr().err
    assert main(["eval", "--model", str(tiny_model), "--tasks", "lake/4x4", "--out", str(tmp_path / "o")]) == 2
    assert "unknown task 'lake/4x4'" in (err := capsys.readouterr().err) and "--import MODULE" in err
    assert not (tmp_path / "o").exists()


def _model_copy(tiny_model: Path, folder: Path, config: dict | None = None, chat_template: bool = True) -> Path:
    shutil.copytree(tiny_model, folder)
    if config is not None:
        (folder / "config.json").write_text(
            json.dumps({**json.loads((tiny_model / "config.json").read_text()), **config})
        )
    if not chat_template:
        (folder / "chat_template.jinja").unlink()
    return folder


def test_model_budget_and_seed_inputs_are_refused_before_the_engine_starts(
    tiny_model: Path, tmp_path: Path, capsys, monkeypatch
) -> None:
    """Each was a traceback, or an engine start that failed, or (--episodes with --seeds) silently ignored."""
    import verlog.eval

    monkeypatch.setattr(verlog.eval, "load_model", lambda *a, **k: pytest.fail("the engine started"))
    out = tmp_path / "o"

    def refused(*extra: str, model: Path = tiny_model) -> str:
        assert main(["eval", "--model", str(model), "--tasks", "babyai/goto", "--out", str(out), *extra]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("verlog eval: error: ") and "Traceback" not in err
        return err

    assert "--episodes does not go with --seeds: --seeds 1,2 plays 2 episode(s) of each task on those seeds" in (
        refused("--seeds", "1,2", "--episodes", "5")
    )
    assert "--seed-start does not go with --seeds" in refused("--seeds", "1,2", "--seed-start", "7")
    assert "--max-prompt-tokens: 10 tokens do not hold the first prompt of babyai/goto (" in refused(
        "--max-prompt-tokens", "10"
    )
    assert f"counted with the tokenizer of {tiny_model}): raise --max-prompt-tokens to at least" in refused(
        "--max-prompt-tokens", "10"
    )
    short = _model_copy(tiny_model, tmp_path / "short", {"max_position_embeddings": 512})
    assert "--max-prompt-tokens=1024 + --max-tokens=512 = 1536 tokens exceed the model's context of 512 tokens" in (
        refused(model=short)
    )
    base = _model_copy(tiny_model, tmp_path / "base", chat_template=False)
    assert f"--model: the tokenizer in {base} has no chat template" in refused(model=base)
    truncated = _model_copy(tiny_model, tmp_path / "truncated")
    (truncated / "config.json").write_text((tiny_model / "config.json").read_text()[:40])
    assert "config.json does not parse" in refused(model=truncated)
    (tmp_path / "file").write_text("x")
    assert main(["eval", "--model", str(tiny_model), "--tasks", "babyai/goto", "--out", str(tmp_path / "file" / "o")])
    assert f"cannot be created: {tmp_path / 'file'} is a file, not a folder" in capsys.readouterr().err
    assert not out.exists()


def test_resume_into_another_evaluation_is_refused(tiny_model: Path, tmp_path: Path, capsys, one_torch_thread):
    """--resume into the folder of another model or other settings mixed both into one episodes.jsonl and one
    summary; the same evaluation with more episodes is still resumed."""
    out = tmp_path / "eval"
    model = ["--model", str(tiny_model), "--tasks", "babyai/goto", "--engine", "transformers", "--out", str(out)]
    args = ["eval", *model, "--episodes", "1", "--max-steps", "2", "--max-tokens", "4", "--bootstrap-resamples", "20"]
    assert main(args) == 0
    capsys.readouterr()
    before = (out / "episodes.jsonl").read_text()
    other = _model_copy(tiny_model, tmp_path / "other")
    changed = [*args, "--resume", "--temperature", "0.5", "--env-kwargs", '{"num_dists": 1}']
    changed[changed.index(str(tiny_model))] = str(other)
    assert main(changed) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"verlog eval: error: --out '{out}' holds another evaluation (--model {tiny_model} there, ")
    assert '--temperature 1.0 there, 0.5 now; --env-kwargs {} there, {"num_dists": 1} now)' in err
    assert (out / "episodes.jsonl").read_text() == before
    assert main(["eval", *model, "--episodes", "2", *args[11:], "--resume"]) == 0  # more episodes: the same evaluation
    assert json.loads((out / "summary.json").read_text())["episodes_resumed"] == 1
