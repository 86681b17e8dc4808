"""A table of bad inputs for every command, through the console entry point (``python -m verlog``): each is refused
with exit code 2, exactly one line on stderr, ``verlog COMMAND: error: <what>; <the fix>``, no traceback, and
nothing written (issue 24; docs/errors.md names this test for its rows).

The rows run in one subprocess (tests/verlog/console_rows.py runs ``verlog`` as ``__main__``, as ``python -m
verlog`` does, once per row), in a folder of their own holding what they point at: a tiny model and broken copies of
it, a file where a folder is expected, another run's folder, another evaluation's folder, a broken YAML config and a
module of envs. No model loads: every check happens before one would.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

DRIVER = Path(__file__).with_name("console_rows.py")
MODEL = ["model.build_tiny=false", "model.path=models/{}"]
EVAL = ["eval", "--model", "models/ok", "--tasks", "babyai/goto", "--out", "evals/new"]
DEMOS = ["demos", "babyai/goto", "--episodes", "1", "--out", "demos"]
BAD_ENVS = """
import envs


def broken(**kwargs):
    raise RuntimeError("the factory's own bug")


envs.register("badin/broken", broken)
"""
TAKES_GOTO = """
import envs

envs.register("babyai/goto", dict)
"""

# (id, arguments, a text the error line must hold)
TABLE: list[tuple[str, list[str], str]] = [
    ("envs-prefix", ["envs", "--prefix", "nope"], "no env id starts with 'nope'"),
    ("envs-import", ["envs", "--import", "no_such_mod"], "--import: no module named 'no_such_mod'"),
    ("envs-taken-id", ["envs", "--import", "takes_goto"], "env id 'babyai/goto' is already registered to"),
    ("envs-argparse", ["envs", "--prefx", "x"], "unrecognized arguments: --prefx x; `verlog envs --help`"),
    ("play-unknown", ["play", "babyai/gotoo"], "env id 'babyai/gotoo' is not a registered env"),
    ("play-seed", ["play", "babyai/goto", "--seed", "-1"], "argument --seed: -1 is not a seed"),
    ("play-bool", ["play", "babyai/goto", "--env-arg", "binary_reward=maybe"], "takes binary_reward: bool, but"),
    ("play-own-error", ["play", "badin/broken", "--import", "bad_envs"], "this is the env's own error"),
    ("play-record-under-file", ["play", "babyai/goto", "--record", "a_file/rec"],
     "--record 'a_file/rec' cannot be written: "),
    ("play-timeout", ["play", "babyai/goto", "--step-timeout", "0"], "argument --step-timeout: '0' is not a number"),
    ("demos-under-file", [*DEMOS[:-1], "a_file/demos"], "--out 'a_file/demos' cannot be created: "),
    ("demos-budget", [*DEMOS, "--tokenizer", "models/ok", "--max-prompt-tokens", "10"], "do not hold the first"),
    ("demos-no-template", [*DEMOS, "--tokenizer", "models/base"], "has no chat template"),
    ("demos-bool", [*DEMOS, "--env-kwargs", '{"binary_reward": "maybe"}'], "takes binary_reward: bool"),
    ("eval-under-file", [*EVAL[:-1], "a_file/eval"], "--out 'a_file/eval' cannot be created: "),
    ("eval-no-template", [*EVAL[:2], "models/base", *EVAL[3:]], "has no chat template"),
    ("eval-truncated", [*EVAL[:2], "models/truncated", *EVAL[3:]], "config.json does not parse"),
    ("eval-no-weights", [*EVAL[:2], "models/no_weights", *EVAL[3:]], "has a config but no weights"),
    ("eval-context", [*EVAL[:2], "models/short", *EVAL[3:]], "exceed the model's context of 512 tokens"),
    ("eval-budget", [*EVAL, "--max-prompt-tokens", "10"], "--max-prompt-tokens: 10 tokens do not hold the first"),
    ("eval-seeds", [*EVAL, "--seeds", "1,2", "--episodes", "5"], "--episodes does not go with --seeds"),
    ("eval-resume-other", [*EVAL[:-1], "evals/other", "--resume"], "holds another evaluation (--model "),
    ("eval-bool", [*EVAL, "--env-kwargs", '{"binary_reward": "maybe"}'], "takes binary_reward: bool"),
    ("eval-into-run", [*EVAL[:-1], "old_run"],
     "--out 'old_run' is a training run's folder (it holds metrics.jsonl, checkpoints)"),
    ("eval-run-no-checkpoint", [*EVAL[:2], "old_run", *EVAL[3:]], "holds no complete checkpoint"),
    ("eval-endpoint-and-model", [*EVAL, "--endpoint", "http://127.0.0.1:9/v1", "--served-model", "m"],
     "--model does not go with --endpoint"),
    ("eval-endpoint-budget", [*EVAL[:1], *EVAL[3:], "--endpoint", "http://127.0.0.1:9", "--served-model", "m",
                              "--max-prompt-tokens", "99"], "--max-prompt-tokens with --endpoint needs --tokenizer"),
    ("eval-endpoint-down", [*EVAL[:1], *EVAL[3:], "--endpoint", "http://127.0.0.1:9", "--served-model", "m"],
     "--endpoint http://127.0.0.1:9/v1 does not answer ("),
    ("eval-run-no-config", ["eval", "--run", "evals", "--out", "evals/new"], "--run: evals has no config.yaml"),
    ("eval-no-tasks", ["eval", "--model", "models/ok", "--out", "evals/new"], "give the tasks to evaluate"),
    ("eval-images-text-model", [*EVAL, "--max-image-history", "1"], "models/ok is a text-only model"),
    ("eval-images-no-env", [*EVAL[:2], "models/vlm", "--tasks", "toy/delayed", *EVAL[5:], "--max-image-history", "1"],
     "--max-image-history: toy/delayed: the env draws no images"),
    ("eval-images-engine", [*EVAL[:2], "models/vlm", *EVAL[3:], "--max-image-history", "1", "--engine",
                            "transformers"], "--max-image-history with --engine transformers"),
    ("eval-images-processor", [*EVAL[:2], "models/vlm_noproc", *EVAL[3:], "--max-image-history", "1"],
     "the image processor of"),
    ("export-out-taken", ["export", "old_run", "--out", "evals/other"], "--out 'evals/other' exists and is not empty"),
    ("export-not-a-run", ["export", "models/ok", "--out", "exports/new"], "is a Hugging Face model folder already"),
    ("export-no-checkpoint", ["export", "old_run", "--out", "exports/new"], "holds no complete checkpoint"),
    ("export-adapter-only", ["export", "full_ckpt", "--adapter-only", "--out", "exports/new"],
     "full_ckpt is a full fine-tuning checkpoint (no LoRA adapter): drop --adapter-only"),
    ("tiny-under-file", ["tiny-model", "a_file/model"], "OUT 'a_file/model' cannot be created: "),
    ("tiny-budget", ["tiny-model", "new_model", "--warm-start", "toy/delayed", "--max-prompt-tokens", "10"],
     "do not hold the first prompt of toy/delayed"),
    ("tiny-sizes", ["tiny-model", "new_model", "--hidden-size", "40"], "head_dim = hidden_size / num_heads = 20"),
    ("report-no-run", ["report", "learning", "nope", "--out", "x.md"], "run folder 'nope' does not exist: give the"),
    ("report-no-out", ["report", "self-improve", "old_run"], "--out is missing: give the markdown page to write"),
    ("report-out-under-file", ["report", "curriculum", "old_run", "--out", "a_file/c.md"],
     "--out 'a_file/c.md' cannot be written: "),
    ("train-no-template", ["train", "--dry-run", MODEL[0], MODEL[1].format("base")], "has no chat template"),
    ("train-truncated", ["train", "--dry-run", MODEL[0], MODEL[1].format("truncated")], "does not parse"),
    ("train-no-weights", ["train", "--dry-run", MODEL[0], MODEL[1].format("no_weights")], "but no weights"),
    ("train-context", ["train", "--dry-run", MODEL[0], MODEL[1].format("short")], "exceed the model's context"),
    ("train-workers", ["train", "--dry-run", "env.num_workers=0"], "env.num_workers: 0 must be null"),
    ("train-step-limit", ["train", "--dry-run", "algorithm.estimator=grpo", "rollout.group_size=2"],
     "babyai/goto's own step limit (max_steps)=64 lets an episode run past rollout.turns_per_slot=4"),
    ("train-async-mode", ["train", "--dry-run", "rollout.async_mode=overlap"],
     "rollout.async_mode: 'overlap' is not one of off, pipeline, one_step_off, in_flight"),
    ("train-pipeline-groups", ["train", "--dry-run", "rollout.async_mode=pipeline", "rollout.pipeline_groups=5"],
     "rollout.pipeline_groups: 5 slot groups for 4 slots (rollout.num_slots)"),
    ("train-sleep-mode", ["train", "--dry-run", "rollout.async_mode=one_step_off",
                          "verl.actor_rollout_ref.rollout.enable_sleep_mode=true"],
     "set verl.actor_rollout_ref.rollout.enable_sleep_mode=false, or rollout.async_mode=off"),
    ("train-rejection", ["train", "--dry-run", "rollout.async_mode=in_flight",
                         "verl.algorithm.rollout_correction.rollout_rs=seq_sum_k1"],
     "can strand a row's reward token outside it: drop verl.algorithm.rollout_correction.rollout_rs"),
    ("train-grpo-pipeline", ["train", "--dry-run", "algorithm.estimator=grpo", "rollout.group_size=2",
                             "env.kwargs.max_steps=4", "rollout.async_mode=pipeline"],
     "algorithm.estimator=grpo needs group rollouts (whole episodes of a group in each iteration): set "
     "rollout.async_mode=off"),
    ("train-prefix-sharing-value", ["train", "--dry-run", "hardware.prefix_sharing=1"],
     "hardware.prefix_sharing: 1 is not true or false: write hardware.prefix_sharing=true or"),
    ("train-prefix-sharing-dynamic", ["train", "--dry-run", "verl.actor_rollout_ref.actor.use_dynamic_bsz=true"],
     "set verl.actor_rollout_ref.actor.use_dynamic_bsz=false or hardware.prefix_sharing=false"),
    ("train-prefix-sharing-sp", ["train", "--dry-run", "verl.critic.ulysses_sequence_parallel_size=2"],
     "a prefix and its rows must sit on one rank): set verl.critic.ulysses_sequence_parallel_size=1"),
    ("train-verl-key", ["train", "--dry-run", "verl.actor_rollout_ref.actor.ppo_mini_bach_size=4"],
     "verl.actor_rollout_ref.actor.ppo_mini_bach_size: verl's PPO config has no key 'ppo_mini_bach_size' under "
     "verl.actor_rollout_ref.actor. Did you mean verl.actor_rollout_ref.actor.ppo_mini_batch_size"),
    ("train-empty-output", ["train", "--dry-run", "output_dir="], "output_dir is empty"),
    ("train-lora-rank", ["train", "--dry-run", "model.lora.rank=-4"], "model.lora.rank: -4 is not a LoRA rank"),
    ("train-lora-targets", ["train", "--dry-run", "model.lora.rank=8", "model.lora.target_modules=[q_proj,qkv]"],
     "model.lora.target_modules names qkv, which the model (qwen2) has no linear layer of: its linear layers are"),
    ("train-lora-critic", ["train", "--dry-run", "model.lora.critic=true"],
     "model.lora.critic=true needs model.lora.rank > 0"),
    ("train-lora-critic-verl", ["train", "--dry-run", "model.lora.rank=8", "model.lora.critic=true"],
     "model.lora.critic=true: verl 0.9.1 cannot train a LoRA critic"),
    ("train-tracker-package", ["train", "--dry-run", "logger=[console,mlflow]"],
     "logger mlflow: its package is not installed: pip install mlflow, or drop mlflow from logger"),
    ("train-max-lag", ["train", "--dry-run", "rollout.async_mode=in_flight", "rollout.max_lag=100000"],
     "rollout.max_lag: 100000 iterations ahead"),
    ("train-vtrace-pipeline", ["train", "--dry-run", "rollout.async_mode=pipeline", "algorithm.turn_trace=vtrace"],
     "with rollout.async_mode=pipeline every turn is sampled by the policy being trained"),
    ("train-vtrace-lockstep", ["train", "--dry-run", "algorithm.turn_trace=vtrace"], "(nothing is off-policy)"),
    ("train-other-run", ["train", "--dry-run", "output_dir=old_run"], "output_dir=old_run holds another run"),
    ("train-under-file", ["train", "--dry-run", "output_dir=a_file/run", "model.path=m"], "a_file is a file"),
    ("train-yaml", ["train", "--dry-run", "--config-dir", "conf", "env=broken"], "is not valid YAML"),
    ("train-lexer", ["train", "--dry-run", "run_name=café"], "quote the value, with quotes that reach Hydra"),
    ("train-bool", ["train", "--dry-run", "env.kwargs.binary_reward=maybe"], "takes binary_reward: bool"),
    ("train-own-error", ["train", "--dry-run", "env=custom", "env.id=badin/broken", "--import", "bad_envs"],
     "this is the env's own error"),
    ("train-images-negative", ["train", "--dry-run", "memory.max_image_history=-1"],
     "memory.max_image_history: -1 must be an integer >= 0"),
    ("train-images-text-model", ["train", "--dry-run", MODEL[0], MODEL[1].format("ok"), "memory.max_image_history=1"],
     "is a text-only model (its config.json has no vision_config): use a vision-language model"),
    ("train-images-env", ["train", "--dry-run", MODEL[0], MODEL[1].format("vlm"), "memory.max_image_history=1",
                          "env=custom", "env.id=toy/delayed"],
     "env 'toy/delayed' draws no images (its provides_images is False): use an env with images"),
    ("train-images-processor", ["train", "--dry-run", MODEL[0], MODEL[1].format("vlm_noproc"),
                                "memory.max_image_history=1"],
     "the image processor of models/vlm_noproc cannot be loaded"),
    ("train-images-budget", ["train", "--dry-run", MODEL[0], MODEL[1].format("vlm"), "memory.max_image_history=1",
                             "rollout.max_prompt_tokens=20"], "tokens, of which 16 for its image"),
    ("tiny-vision-warm", ["tiny-model", "vlm_out", "--vision", "--warm-start", "toy/delayed"],
     "--warm-start toy/delayed: the env draws no images (its provides_images is False)"),
    ("tiny-images-text", ["tiny-model", "vlm_out", "--max-image-history", "1"],
     "--max-image-history needs --vision"),
    ("sft-no-config", ["sft"], "no SFT config and no settings given: verlog sft needs an SFT YAML"),
    ("sft-dry-run-bad-data", ["sft", "--dry-run", "data.train=no_answer.parquet", "model.build_tiny=true",
                              "model.path=sft/base-model", "output_dir=sft"],
     "no_answer.parquet row 0: roles ['user'] do not end with an assistant message"),
    ("view-missing", ["view", "no_such_run"], "no_such_run: no such folder"),
    ("view-under-file", ["view", "evals/other", "--out", "a_file/view.html"], "a_file is a file, not a folder"),
]  # fmt: skip


@pytest.fixture(scope="module")
def world(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder the rows run in, with what they point at."""
    root = tmp_path_factory.mktemp("bad_inputs")
    models = root / "models"
    for name in ("ok", "base", "truncated", "no_weights", "short"):
        shutil.copytree(tiny_model, models / name)
    (models / "base" / "chat_template.jinja").unlink()
    from verlog.models.tiny_vlm import build_tiny_vlm

    build_tiny_vlm(models / "vlm")
    shutil.copytree(models / "vlm", models / "vlm_noproc")
    (models / "vlm_noproc" / "preprocessor_config.json").unlink()
    config = (tiny_model / "config.json").read_text()
    (models / "truncated" / "config.json").write_text(config[: len(config) // 2])
    (models / "no_weights" / "model.safetensors").unlink()
    (models / "short" / "config.json").write_text(json.dumps({**json.loads(config), "max_position_embeddings": 512}))
    (root / "a_file").write_text("a file where a folder is expected")
    (root / "full_ckpt" / "actor" / "huggingface").mkdir(parents=True)  # a checkpoint's layout, no LoRA file
    (root / "full_ckpt" / "actor" / "model_world_size_1_rank_0.pt").write_text("never read: the checks come first")
    shutil.copy(models / "ok" / "config.json", root / "full_ckpt" / "actor" / "huggingface")
    (root / "old_run").mkdir()
    (root / "old_run" / "metrics.jsonl").write_text('{"step": 1}\n')
    (root / "old_run" / "checkpoints" / "global_step_1").mkdir(parents=True)  # never committed (no tracker)
    other = root / "evals" / "other"
    other.mkdir(parents=True)
    (other / "episodes.jsonl").write_text("")
    (other / "summary.json").write_text(json.dumps({"model": {"path": str(models / "base"), "engine": "vllm"}}))
    (root / "conf" / "env").mkdir(parents=True)
    (root / "conf" / "env" / "broken.yaml").write_text("name: broken\nid: toy/delayed\nkwargs: [a\n")
    rows = {"messages": [[{"role": "user", "content": "no answer"}]] * 20}
    pd.DataFrame(rows).to_parquet(root / "no_answer.parquet")  # `verlog sft` data without an answer to learn
    (root / "bad_envs.py").write_text(textwrap.dedent(BAD_ENVS))
    (root / "takes_goto.py").write_text(textwrap.dedent(TAKES_GOTO))
    return root


def test_bad_inputs_of_every_command(world: Path, tmp_path: Path) -> None:
    rows, results = tmp_path / "rows.json", tmp_path / "results.json"
    rows.write_text(json.dumps([args for _, args, _ in TABLE]))
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": ""}
    proc = subprocess.run(
        [sys.executable, str(DRIVER), str(rows), str(results)],
        cwd=world,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    failures = []
    for (name, args, text), got in zip(TABLE, json.loads(results.read_text()), strict=True):
        command = args[0]
        lines = got["stderr"].splitlines()
        problems = [
            f"exit code {got['code']}" if got["code"] != 2 else "",
            "a traceback" if "Traceback" in got["stderr"] else "",
            f"{len(lines)} lines on stderr" if len(lines) != 1 else "",
            "not 'verlog COMMAND: error: '" if not got["stderr"].startswith(f"verlog {command}: error: ") else "",
            f"no {text!r}" if text not in got["stderr"] else "",
            f"wrote {got['changed']}" if got["changed"] else "",
        ]
        if any(problems):
            failures.append(f"{name}: {', '.join(p for p in problems if p)}\n    stderr: {got['stderr'][-800:]}")
    assert not failures, "\n".join(failures)
    assert not (world / "new_model").exists() and not (world / "evals" / "new").exists()


def test_a_row_runs_as_the_installed_command_does(world: Path) -> None:
    """The driver's rows are ``python -m verlog`` itself: one row through a real ``python -m verlog`` process."""
    proc = subprocess.run(
        [sys.executable, "-m", "verlog", "eval", *EVAL[1:], "--seeds", "1,2", "--episodes", "5"],
        cwd=world,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2 and proc.stderr.startswith("verlog eval: error: --episodes does not go with --seeds")
    assert proc.stderr.count("\n") == 1
