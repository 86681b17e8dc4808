"""One model, one prompt: for the same training config, env and seeds, training's rollout, ``verlog eval`` and the
in-training evaluation build token-identical prompts turn by turn.

vLLM is replaced by a scripted generator (the k-th answer of an episode is fixed), so the three paths see the same
answers and their prompts can be compared exactly. The memory settings are not the defaults (``memory.n=3``,
``memory.keep_reasoning_turns=2``): ``verlog eval`` gets them as ``--memory-n`` and ``--keep-reasoning-turns``.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from verlog.cli import main
from verlog.config.checks import typed_config
from verlog.config.compose import load_config
from verlog.eval.engine import LoadedModel
from verlog.prompting.memory import SlidingMemory
from verlog.rollout import Generation, GenerationRequest, RolloutManager, SamplingConfig, make_env_pool
from verlog.trainer.evaluation import TrainingEvaluator

SEED, SLOTS = 70, 2
SCRIPT = ["go forward", "turn left", "fly away", "go forward", "turn right", "go forward"]
ENVS = {  # env config, overrides, turns that end every slot's first episode
    "babyai/goto": (["env=babyai_goto", "env.kwargs.max_steps=5"], 5),
    "toy/delayed": (["env=toy_delayed"], 4),
}


class ScriptedGenerator:
    """The k-th request of each request id gets ``SCRIPT[k]`` (with a THINK line); records every prompt by id."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.prompts: dict[str, list[list[int]]] = defaultdict(list)

    def generate(self, requests: Sequence[GenerationRequest], sampling: SamplingConfig) -> list[Generation]:
        out = []
        for r in requests:
            turn = len(self.prompts[r.request_id])
            self.prompts[r.request_id].append(list(r.prompt_ids))
            text = f"THINK: step {turn}, a plan long enough to show.\nACTION: {SCRIPT[turn % len(SCRIPT)]}"
            ids = [*self.tokenizer.encode(text, add_special_tokens=False), self.tokenizer.eos_token_id]
            out.append(Generation(token_ids=ids, log_probs=[-0.5] * len(ids)))
        return out


def _by_seed(prompts: dict[str, list[list[int]]], seeds: dict[str, int]) -> dict[int, list[list[int]]]:
    return {seeds[episode_id]: turns for episode_id, turns in prompts.items() if episode_id in seeds}


@pytest.mark.parametrize("env_id", sorted(ENVS))
def test_training_verlog_eval_and_in_training_eval_build_the_same_prompts(
    env_id: str, tokenizer: Any, tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    overrides, turns = ENVS[env_id]
    cfg = load_config(
        [
            *overrides,
            f"seed={SEED}",
            f"rollout.num_slots={SLOTS}",
            "rollout.max_prompt_tokens=600",
            "rollout.max_response_tokens=32",
            "memory.n=3",
            "memory.keep_reasoning_turns=2",
            "evaluation.every=1",
            f"evaluation.episodes={SLOTS}",
            f"evaluation.seed_start={SEED}",  # the training slots' seeds, on purpose: the same layouts
            f"output_dir={tmp_path / 'train'}",
        ]
    )
    typed, problems = typed_config(cfg)
    assert not problems and typed.env.id == env_id

    # (a) training's rollout, built as the trainer builds it (verlog/trainer/ppo.py, _build_rollout)
    train_gen = ScriptedGenerator(tokenizer)
    pool = make_env_pool(
        env_id, typed.rollout.num_slots, env_kwargs=dict(typed.env.kwargs), in_process=True, seed=typed.seed
    )
    manager = RolloutManager(
        pool,
        tokenizer,
        train_gen,
        typed.rollout_sampling,
        max_prompt_tokens=typed.rollout.max_prompt_tokens,
        memory_factory=lambda: SlidingMemory.from_config(typed.memory),
        seed=typed.seed,
    )
    try:
        batch = manager.collect(turns)
    finally:
        pool.close()
    firsts = {e.episode_id: e.seed for e in batch.episodes if e.episode_id.endswith("-e1")}
    assert sorted(firsts.values()) == [SEED + i for i in range(SLOTS)]
    training = _by_seed(train_gen.prompts, firsts)

    # (b) `verlog eval` with training's settings as flags; the engine is the scripted generator
    cli_gen = ScriptedGenerator(tokenizer)
    fake = LoadedModel(cli_gen, tokenizer, tiny_model, "scripted", "auto", "cpu")
    monkeypatch.setattr("verlog.eval.load_model", lambda *args, **kwargs: fake)
    args = [
        "eval",
        "--model",
        str(tiny_model),
        "--tasks",
        env_id,
        "--episodes",
        str(SLOTS),
        "--seed-start",
        str(SEED),
        "--out",
        str(tmp_path / "eval"),
        "--max-tokens",
        str(typed.rollout.max_response_tokens),
        "--max-prompt-tokens",
        str(typed.rollout.max_prompt_tokens),
        "--memory-n",
        str(typed.memory.n),
        "--keep-reasoning-turns",
        str(typed.memory.keep_reasoning_turns),
        "--answer-format",
        typed.memory.answer_format,
        "--env-kwargs",
        json.dumps(dict(typed.env.kwargs)),
        "--quiet",
    ]
    assert main(args) == 0
    summary = json.loads((tmp_path / "eval" / "summary.json").read_text())
    assert (summary["memory_n"], summary["keep_reasoning_turns"]) == (3, 2)
    spec_seeds = {f"{env_id}/run_{i:02d}": SEED + i for i in range(SLOTS)}
    verlog_eval = _by_seed(cli_gen.prompts, spec_seeds)

    # (c) the in-training evaluation, built from the same config as the trainer builds it
    eval_gen = ScriptedGenerator(tokenizer)
    metrics = TrainingEvaluator.from_config(cfg, typed).run(eval_gen, tokenizer, iteration=1)
    assert "eval/failed" not in metrics and metrics["eval/episodes"] == SLOTS
    in_training = _by_seed(eval_gen.prompts, spec_seeds)

    assert set(training) == set(verlog_eval) == set(in_training) == set(spec_seeds.values())
    for seed in training:
        a, b, c = training[seed], verlog_eval[seed], in_training[seed]
        assert len(a) == len(b) == len(c) >= 3, seed  # long enough for the memory's history to show
        for turn, (x, y, z) in enumerate(zip(a, b, c)):
            assert x == y == z, f"seed {seed} turn {turn}:\n{tokenizer.decode(x)}\n---\n{tokenizer.decode(y)}"
    # the history holds two full plans (keep_reasoning_turns=2), so a wrong setting would have shown
    last = tokenizer.decode(training[SEED][-1])
    assert last.count("Previous plan:") == 2
