"""``verlog export`` without a training run: bad inputs on checkpoint-like folders (refused before anything loads),
a checkpoint whose ``actor/huggingface/`` holds weights (exported as it is, no merge), and a cut export leaving
nothing that looks complete. The exports of real checkpoints (FSDP shards merged, LoRA) are checked in
tests/verlog/trainer/test_train_e2e.py and through tests/verlog/export_checks.py."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from verlog.cli import main

SHARD = "model_world_size_1_rank_0.pt"


def _checkpoint(run: Path, step: int, model: Path | None = None, lora: bool = False) -> Path:
    """A checkpoint-like ``run/checkpoints/global_step_<step>/actor``: a shard file (never read here), verl's
    ``huggingface/`` folder (the model's files when ``model`` is given, else its config only), the tracker."""
    actor = run / "checkpoints" / f"global_step_{step}" / "actor"
    actor.mkdir(parents=True)
    (actor / SHARD).write_bytes(b"not read: the checks come first")
    if model is not None:
        shutil.copytree(model, actor / "huggingface")
    else:
        (actor / "huggingface").mkdir()
        (actor / "huggingface" / "config.json").write_text('{"model_type": "qwen2"}')
    if lora:
        (actor / "lora_train_meta.json").write_text('{"r": 8, "lora_alpha": 16, "task_type": "CAUSAL_LM"}')
    (run / "checkpoints" / "latest_checkpointed_iteration.txt").write_text(str(step))
    return actor


@pytest.fixture
def world(tmp_path: Path, tiny_model: Path) -> Path:
    (tmp_path / "full").mkdir()
    _checkpoint(tmp_path / "full", 2)
    _checkpoint(tmp_path / "full", 3)
    (tmp_path / "never_saved" / "checkpoints" / "global_step_1").mkdir(parents=True)  # no tracker: not complete
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "keep.txt").write_text("mine")
    (tmp_path / "a_file").write_text("a file")
    (tmp_path / "plain").mkdir()
    shutil.copytree(tiny_model, tmp_path / "hf")
    return tmp_path


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["full", "--out", "taken"], "--out 'taken' exists and is not empty (an export never overwrites): give a new"),
        (["full", "--out", "a_file"], "--out 'a_file' is a file: give a new folder"),
        (["full", "--out", "a_file/x"], "--out 'a_file/x' cannot be created: "),
        (["missing", "--out", "new"], "missing does not exist: give the output_dir of a verlog train run"),
        (["plain", "--out", "new"], "plain is neither a run folder nor a checkpoint"),
        (["hf", "--out", "new"], "hf is a Hugging Face model folder already, not a run or a checkpoint"),
        (["never_saved", "--out", "new"], "holds no complete checkpoint (no latest_checkpointed_iteration.txt)"),
        (["full", "--adapter-only", "--out", "new"], "is a full fine-tuning checkpoint (no LoRA adapter): drop"),
        (["full", "--step", "5", "--out", "new"], "holds no checkpoint of iteration 5 (iterations saved: 2, 3)"),
        (["full/checkpoints/global_step_2", "--step", "3", "--out", "new"], "is the checkpoint of iteration 2, not 3"),
        (["full", "--step", "-1", "--out", "new"], "argument --step: '-1' is not an integer >= 0"),
    ],
    ids=[
        "out-not-empty",
        "out-file",
        "out-under-file",
        "missing",
        "not-a-run",
        "hf-folder",
        "no-checkpoint",
        "adapter-only-full",
        "step-missing",
        "step-other",
        "step-negative",
    ],
)
def test_export_refuses_bad_inputs(world: Path, args: list[str], message: str, capsys, monkeypatch) -> None:
    monkeypatch.chdir(world)
    before = sorted(p.relative_to(world) for p in world.rglob("*"))
    code = _exit_code(["export", *args])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("verlog export: error: ") and err.count("\n") == 1, err
    assert message in err, err
    assert sorted(p.relative_to(world) for p in world.rglob("*")) == before  # nothing written


def _exit_code(argv: list[str]) -> int:
    """``verlog ARGV``'s exit code, argparse's refusals (SystemExit) included."""
    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code)


def _log_probs(folder: Path) -> list[float]:
    sys.path.insert(0, str(Path(__file__).parent))
    from export_checks import answer_log_probs
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return answer_log_probs(AutoModelForCausalLM.from_pretrained(folder).eval(), AutoTokenizer.from_pretrained(folder))


def test_export_copies_a_checkpoint_with_hugging_face_weights(world: Path, tiny_model: Path, capsys) -> None:
    """verl saved full weights in ``actor/huggingface`` (``hf_model``): they are exported as they are, into an
    existing empty folder too, with the metadata; the folder loads and gives the model's log-probs."""
    run = world / "with_hf"
    _checkpoint(run, 4, model=tiny_model)
    (run / "config.yaml").write_text("model:\n  path: Qwen/Qwen2.5-0.5B-Instruct\n")
    out = world / "exports" / "policy"
    out.mkdir(parents=True)  # empty: accepted
    assert main(["export", str(run), "--out", str(out)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert (
        printed[0].startswith("verlog export: the model of checkpoint ")
        and "(iteration 4, full fine-tuning)" in printed[0]
    )
    assert printed[-1].startswith(f"verlog export: done: {out}") and len(printed) == 3, printed
    names = {p.name for p in out.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer_config.json", "chat_template.jinja"} <= names
    meta = json.loads((out / "verlog_export.json").read_text())
    assert (meta["step"], meta["contents"], meta["lora"], meta["base_model"]) == (4, "model", None, None)
    assert meta["source"] == str((run / "checkpoints" / "global_step_4").resolve())
    assert sorted(meta["files"] + ["verlog_export.json"]) == sorted(names)
    assert json.loads((out / "config.json").read_text())["dtype"] == "float32"
    assert _log_probs(out) == _log_probs(tiny_model)
    assert [p.name for p in out.parent.iterdir()] == ["policy"]  # no temporary folder left beside it


def test_a_killed_export_leaves_nothing_that_looks_complete(world: Path, tiny_model: Path) -> None:
    """A SIGKILL just before the rename (the last step): no folder at --out, the hidden partial one beside it (its
    name says so); a new export to the same --out then works."""
    run = world / "with_hf"
    _checkpoint(run, 1, model=tiny_model)
    out = world / "exports" / "policy"
    script = (
        "import os, signal, sys\n"
        "from pathlib import Path\n"
        "from verlog.trainer.export import export_checkpoint, find_source\n"
        "def say(line):\n"
        "    if line.startswith('wrote '):\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n"
        "export_checkpoint(find_source(sys.argv[1]), Path(sys.argv[2]), say=say)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script, str(run), str(out)], capture_output=True, text=True)
    assert proc.returncode == -9, proc.stderr[-2000:]
    assert not out.exists()
    (partial,) = out.parent.iterdir()
    assert partial.name.startswith(".policy.export-") and (partial / "model.safetensors").is_file()
    assert main(["export", str(run), "--out", str(out)]) == 0
    assert (out / "verlog_export.json").is_file()
