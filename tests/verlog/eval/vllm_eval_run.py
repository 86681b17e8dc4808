"""One ``verlog eval`` on vLLM shared by two end-to-end modules of this folder (conftest.py's
``vllm_eval_of_tiny_model`` starts it once per session: one vLLM engine start-up for both).

The tiny model laid out as ``verlog train`` writes a verl checkpoint, evaluated on babyai/goto and babyai/pickup
(2 episodes each from seed 100, 3 steps, 6 tokens a turn) at temperature 0 with its turns logged.
test_eval_command.py checks its summary and turns; test_endpoint_e2e.py plays the same protocol against vLLM's
OpenAI-compatible server with the same weights and compares the episodes.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

PROTOCOL = ["--tasks", "babyai/goto,babyai/pickup", "--episodes", "2", "--seed-start", "100", "--temperature", "0"]
PROTOCOL += ["--max-tokens", "6", "--max-steps", "3", "--log-turns", "--bootstrap-resamples", "200"]


def checkpoint_layout(model: Path, run: Path) -> Path:
    """A copy of ``model`` in a verl-checkpoint layout (``run/global_step_1/actor/huggingface``), as ``verlog train``
    writes it; returns ``run``."""
    shutil.copytree(model, run / "global_step_1" / "actor" / "huggingface")
    (run / "latest_checkpointed_iteration.txt").write_text("1")
    return run


def run_vllm_eval(model: Path, folder: Path) -> tuple[Path, subprocess.CompletedProcess]:
    """``verlog eval --engine vllm`` of ``model``'s checkpoint layout (in ``folder/run``) into ``folder/eval``, in a
    subprocess (vLLM spawns its workers); returns the output folder and the finished process (exit code unchecked)."""
    run, out = checkpoint_layout(model, folder / "run"), folder / "eval"
    args = [sys.executable, "-m", "verlog", "eval", "--model", str(run), "--engine", "vllm", "--out", str(out)]
    return out, subprocess.run([*args, *PROTOCOL], capture_output=True, text=True, timeout=900)
