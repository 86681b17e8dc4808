"""Every recipe's --dry-run resolves (no GPU, Ray or weights) and matches Verlog's settings (docs/reproducing.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]

# Verlog's settings per env (docs/reproducing.md's recipe table): model, GPUs, prompt / response tokens, turns per
# batch / mini-batch, slots x turns per slot, critic warm-up steps (and the x40 / x20 first rollout), binary reward
VERLOG_SETTINGS = {
    "recipes/babyai/qwen2.5-3b_4xa40.sh": dict(
        model="Qwen/Qwen2.5-3B-Instruct", gpus=4, prompt=1024, response=512, batch=256, mini=128, slots=32,
        turns=8, warmup=5, warmup_rollout=40, binary=True, env="babyai/goto", iterations=300,
    ),
    "recipes/babaisai/qwen2.5-3b_4xa40.sh": dict(
        model="Qwen/Qwen2.5-3B-Instruct", gpus=4, prompt=1024, response=384, batch=256, mini=128, slots=32,
        turns=8, warmup=10, warmup_rollout=40, binary=True, env="babaisai/two_room-maybe_break_stop-goto_win",
        iterations=300,
    ),
    "recipes/crafter/qwen2.5-7b_8xh100.sh": dict(
        model="Qwen/Qwen2.5-7B-Instruct", gpus=8, prompt=4096, response=512, batch=2048, mini=1024, slots=128,
        turns=16, warmup=20, warmup_rollout=20, binary=False, env="crafter/default", iterations=170,
    ),
}  # fmt: skip


def run_recipe(script: str, *args: str, _timeout: float = 120, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "NNODES", "TASK", "MODEL_PATH")}
    environ.update(PYTHON=sys.executable, **env)
    return subprocess.run(
        ["bash", str(REPO / script), *args], capture_output=True, text=True, env=environ, timeout=_timeout, cwd=REPO
    )


def dry_run(script: str, *args: str, **env: str) -> tuple[dict, str]:
    """The resolved config printed by ``script --dry-run`` and the whole stdout."""
    proc = run_recipe(script, "--dry-run", *args, **env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("# verlog train --dry-run"))
    body = []
    for line in lines[start:]:
        if line.startswith("["):  # a script's own progress line after the config
            break
        body.append(line)
    return yaml.safe_load("\n".join(body)), proc.stdout


@pytest.mark.parametrize("script", sorted(VERLOG_SETTINGS))
def test_recipe_dry_run_matches_verlog(script):
    want = VERLOG_SETTINGS[script]
    cfg, out = dry_run(script)
    ro, alg, hw = cfg["rollout"], cfg["algorithm"], cfg["hardware"]
    assert cfg["model"]["path"] == want["model"] and not cfg["model"]["build_tiny"]
    assert hw["n_gpus_per_node"] * hw["nnodes"] == want["gpus"] and hw["cpu"] is False
    assert (ro["max_prompt_tokens"], ro["max_response_tokens"]) == (want["prompt"], want["response"])
    assert (ro["num_slots"], ro["turns_per_slot"]) == (want["slots"], want["turns"])
    batch = ro["num_slots"] * ro["turns_per_slot"]
    assert (batch, batch // alg["mini_batches"]) == (want["batch"], want["mini"])
    # Verlog's warm-up: a larger first rollout, then critic-only updates on it; the actor moves from iteration 1
    assert alg["warmup_critic_updates"] == want["warmup"]
    assert alg["warmup_rollout_multiplier"] == want["warmup_rollout"]
    assert alg["critic_warmup"] == 0
    assert cfg["env"]["kwargs"]["binary_reward"] is want["binary"]
    assert cfg["env"]["id"] == want["env"] and cfg["iterations"] == want["iterations"]
    # Verlog's algorithm settings (docs/reproducing.md, below the recipe table)
    assert (alg["step_gamma"], alg["step_lam"], alg["token_gamma"], alg["token_lam"]) == (0.99, 0.95, 1.0, 1.0)
    assert (alg["kl_coef"], alg["entropy_coeff"], alg["clip_ratio"], alg["cliprange_value"]) == (0.001, 0.001, 0.2, 0.5)
    assert (alg["actor_lr"], alg["critic_lr"], alg["kl_in_reward"]) == (1e-6, 1e-5, True)
    assert cfg["env"]["kwargs"]["format_penalty"] == 0.1 and cfg["memory"]["n"] == 1
    assert cfg["sampling"]["temperature"] == 1.0 and alg["ppo_epochs"] == 1 and alg["first_position_weight"] > 1
    # checkpoints hold a Hugging Face export, so `verlog eval --model <output_dir>/checkpoints` reads them
    assert "hf_model" in cfg["verl"]["actor_rollout_ref"]["actor"]["checkpoint"]["save_contents"]
    # the command is printed, and verl's batch keys are derived from the same numbers
    assert "# command: " in out and " -m verlog.train " in out
    assert f"#   data.train_batch_size={want['batch']}" in out
    assert f"#   actor_rollout_ref.actor.ppo_mini_batch_size={want['mini']}" in out
    assert not Path(cfg["output_dir"]).exists() or Path(cfg["output_dir"]).is_dir()


def test_recipe_takes_settings_from_environment_and_arguments(tmp_path, tiny_model):
    out_dir = tmp_path / "run"
    model = tiny_model  # a model folder must exist and load (the dry run checks its config, weights and tokenizer)
    cfg, out = dry_run(
        "recipes/babyai/qwen2.5-3b_4xa40.sh",
        "iterations=7",
        "logger=[console,tensorboard]",
        TASK="pickup",
        MODEL_PATH=str(model),
        GPUS_PER_NODE="8",
        NNODES="2",
        OUTPUT_DIR=str(out_dir),
        RAY_ADDRESS="10.0.0.1:6379",
    )
    assert cfg["env"]["id"] == "babyai/pickup" and cfg["run_name"] == "babyai-pickup-qwen2.5-3b"
    assert cfg["model"]["path"] == str(model)
    assert (cfg["hardware"]["n_gpus_per_node"], cfg["hardware"]["nnodes"]) == (8, 2)
    assert cfg["output_dir"] == str(out_dir) and not out_dir.exists()  # a dry run writes nothing
    assert cfg["iterations"] == 7 and cfg["logger"] == ["console", "tensorboard"]
    assert "# ray: attach to the cluster at 10.0.0.1:6379\n" in out and "16 ranks (2 node(s) x 8)" in out


def test_multi_node_without_ray_cluster_is_refused_before_launch():
    proc = run_recipe("recipes/crafter/qwen2.5-7b_8xh100.sh", NNODES="2")
    assert proc.returncode == 1
    assert "ray start --head" in proc.stderr and "RAY_ADDRESS" in proc.stderr
    assert "verlog.train" not in proc.stdout


def test_recipe_dry_run_rejects_a_misspelt_override():
    proc = run_recipe("recipes/babaisai/qwen2.5-3b_4xa40.sh", "--dry-run", "rollout.turns_per_slt=4")
    assert proc.returncode == 2
    assert "Did you mean 'rollout.turns_per_slot'?" in proc.stderr


def test_recipe_dry_run_rejects_batch_sizes_that_do_not_split_over_gpus():
    proc = run_recipe("recipes/babyai/qwen2.5-3b_4xa40.sh", "--dry-run", GPUS_PER_NODE="3")
    assert proc.returncode == 2 and "divide by the 3 training ranks" in proc.stderr


def test_recipe_help_prints_its_header():
    proc = run_recipe("recipes/crafter/qwen2.5-7b_8xh100.sh", "--help")
    assert proc.returncode == 0 and "Full command" in proc.stdout and "8 x H100" in proc.stdout


def test_cpu_quickstart_dry_run_resolves():
    cfg, _ = dry_run("recipes/cpu/quickstart.sh", OUTPUT_DIR="/tmp/verlog-quickstart-dry-run")
    assert cfg["hardware"]["cpu"] is True and cfg["model"]["path"] == "/tmp/verlog-quickstart-dry-run/model"
    assert cfg["env"]["id"] == "toy/delayed" and cfg["rollout"]["num_slots"] == 16 and cfg["iterations"] == 20
    assert not Path("/tmp/verlog-quickstart-dry-run").exists()  # a dry run builds no model


def test_recipes_have_no_hard_coded_paths_or_conda():
    for script in [*VERLOG_SETTINGS, "recipes/common.sh"]:
        text = (REPO / script).read_text()
        for banned in ("conda ", "/home/", "/scratch", "#SBATCH", "srun "):
            assert banned not in text, f"{script} contains {banned!r}"


# The quick start's end-to-end run (warm start, PPO that learns) is tests/verlog/trainer/test_learnability_e2e.py.


def test_json_object_builds_the_recipes_env_kwargs() -> None:
    """cpu_common.sh's json_object (the learning recipes' ENV_KWARGS_JSON): JSON numbers and literals stay as they
    are, anything else becomes a string with its quotes and backslashes escaped."""
    pairs = ["parse_mode=strict", "format_penalty=0.2", "binary_reward=true", "max_steps=12", "lr=1e-3", "n=-3",
             "seed=007", "none=null", 'text=say "go"\\now', "empty="]  # fmt: skip
    script = f'source "{REPO}/recipes/cpu/cpu_common.sh"; json_object "$@"'
    out = subprocess.run(["bash", "-c", script, "json_object", *pairs], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == {
        "parse_mode": "strict", "format_penalty": 0.2, "binary_reward": True, "max_steps": 12, "lr": 1e-3, "n": -3,
        "seed": "007", "none": None, "text": 'say "go"\\now', "empty": "",
    }  # fmt: skip
