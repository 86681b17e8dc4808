"""Evaluation episodes end to end on a small corridor game, with generators that answer by script."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

import envs
from envs.core import TextEnv, TextObservation
from verlog.eval import EvalProtocol, evaluate, read_episode_records, run_episodes
from verlog.eval.engine import LoadedModel
from verlog.eval.protocol import EvalProtocolError
from verlog.rollout.generator import Generation, GenerationRequest, SamplingConfig
from verlog.tapes.record import TurnLog, TurnLogWriter, group_episodes, read_turn_logs

GOAL = 4


class EvalCorridor(TextEnv):
    """Cells 0..4; the seed picks the start cell (seed % 3); "right" moves towards the goal at 4."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("max_steps", 6)
        super().__init__(**kwargs)
        self.actions = ["left", "right"]
        self.default_action = "left"
        self.max_steps = kwargs["max_steps"]
        self.pos = 0

    def _obs(self) -> TextObservation:
        return TextObservation.build(f"cell {self.pos}")

    def _game_reset(self, seed: int | None, options: Any) -> tuple[TextObservation, dict]:
        self.pos = int(seed or 0) % 3
        return self._obs(), {"mission": f"reach cell {GOAL}"}

    def _game_step(self, action: str) -> tuple[TextObservation, float, bool, dict]:
        self.pos = max(0, self.pos - 1) if action == "left" else self.pos + 1
        return self._obs(), float(self.pos == GOAL), self.pos == GOAL, {"mission": f"reach cell {GOAL}"}

    def _game_instruction(self) -> str:
        return "Walk right to cell 4. Actions: left, right."

    def _game_progression(self) -> float:
        return float(self.pos == GOAL)

    def _game_success(self) -> bool:
        return self.pos == GOAL

    def _game_get_state(self) -> Any:
        return self.pos

    def _game_set_state(self, state: Any) -> None:
        self.pos = state


envs.register("evaltest/corridor", EvalCorridor, overwrite=True)
envs.register("evaltest/corridor2", EvalCorridor, overwrite=True)


class ScriptedGenerator:
    """Answers "THINK: ... ACTION: <word>"; ``word_for`` picks the word from the request id; records batch sizes."""

    def __init__(self, tokenizer: Any, word_for=lambda request_id: "right", fail_for=()) -> None:
        self.tokenizer = tokenizer
        self.word_for = word_for
        self.fail_for = set(fail_for)
        self.batch_sizes: list[int] = []
        self.prompts: list[list[int]] = []

    def generate(self, requests: Sequence[GenerationRequest], sampling: SamplingConfig) -> list:
        self.batch_sizes.append(len(requests))
        out: list = []
        for r in requests:
            self.prompts.append(list(r.prompt_ids))
            if r.request_id in self.fail_for:
                out.append(RuntimeError("engine died"))
                continue
            text = f"THINK: go on. ACTION: {self.word_for(r.request_id)}"
            ids = [*self.tokenizer.encode(text, add_special_tokens=False), self.tokenizer.eos_token_id]
            out.append(Generation(token_ids=ids, log_probs=[-0.5] * len(ids)))
        return out


SAMPLING = SamplingConfig(temperature=1.0, max_tokens=16)


def test_episodes_batched_across_tasks_with_records_and_turn_logs(tokenizer: Any, tmp_path: Path) -> None:
    protocol = EvalProtocol(("evaltest/corridor", "evaltest/corridor2"), episodes_per_task=3, seed_start=0)
    # the second task always walks left: never reaches the goal, cut at max_steps 6
    gen = ScriptedGenerator(tokenizer, word_for=lambda rid: "left" if "corridor2" in rid else "right")
    with TurnLogWriter(tmp_path / "turns.jsonl") as log:
        records = run_episodes(protocol.episodes(), gen, tokenizer, SAMPLING, turn_log=log)
    assert [(r.env_id, r.seed) for r in records] == [(e.env_id, e.seed) for e in protocol.episodes()]
    right, left = records[:3], records[3:]
    for rec in right:  # seeds 0, 1, 2 start in cells 0, 1, 2
        assert rec.success and rec.terminated and not rec.truncated
        assert rec.num_steps == GOAL - rec.seed
        assert rec.episode_return == 1.0 and rec.progression == 1.0
        assert rec.action_frequency == {"right": rec.num_steps}
        assert rec.valid_action_rate == 1.0
        assert rec.env_stats == {"mission": "reach cell 4"}
    for rec in left:
        assert not rec.success and rec.truncated and rec.num_steps == 6 and rec.progression == 0.0
    # all 6 episodes shared the first generation call; later calls held only the episodes still open
    assert gen.batch_sizes[0] == 6
    assert gen.batch_sizes == sorted(gen.batch_sizes, reverse=True)
    assert sum(gen.batch_sizes) == sum(r.num_steps for r in records)
    assert sum(r.input_tokens for r in records) == sum(len(p) for p in gen.prompts)

    turns = read_turn_logs(tmp_path / "turns.jsonl")
    assert len(turns) == sum(r.num_steps for r in records)
    by_episode = group_episodes(turns)
    first = by_episode["evaltest/corridor/run_00"]
    assert [t.turn for t in first] == [0, 1, 2, 3]
    assert first[-1].terminated and first[-1].reward == 1.0 and first[-1].progression == 1.0
    assert first[0].parsed_action == "right" and first[0].action == "right" and first[0].action_valid
    assert first[0].logprobs is not None and first[0].logprobs.mean == pytest.approx(-0.5)
    # the prompt layout is the training memory's: the previous turn's plan and the current observation
    assert first[0].prompt_messages[-1]["content"].startswith("Current Observation:\ncell 0")
    contents = [m["content"] for m in first[1].prompt_messages]
    assert contents[1] == "Observation:\ncell 0"
    assert contents[2] == "Previous plan:\nTHINK: go on. ACTION: right"
    assert contents[3].startswith("Current Observation:\ncell 1")
    assert set(first[1].timings) == {"generate_s", "env_s"}


def test_concurrency_limits_the_batch(tokenizer: Any) -> None:
    protocol = EvalProtocol(("evaltest/corridor",), episodes_per_task=3, seed_start=0)
    gen = ScriptedGenerator(tokenizer)
    records = run_episodes(protocol.episodes(), gen, tokenizer, SAMPLING, concurrency=2)
    assert max(gen.batch_sizes) == 2
    assert [r.num_steps for r in records] == [4, 3, 2]


def test_failed_generation_counts_as_invalid_answer(tokenizer: Any) -> None:
    protocol = EvalProtocol(("evaltest/corridor",), episodes_per_task=2, seed_start=1)
    gen = ScriptedGenerator(tokenizer, fail_for={"evaltest/corridor/run_01"})
    records = run_episodes(protocol.episodes(), gen, tokenizer, SAMPLING, max_steps=3)
    ok, broken = records
    assert ok.success and ok.generation_failures == 0
    assert broken.generation_failures == broken.num_steps == 3  # cut by the max_steps override
    assert broken.valid_actions == 0 and broken.action_frequency == {"left": 3}
    assert broken.truncated and not broken.success


def test_evaluate_writes_files_and_resumes(tokenizer: Any, tmp_path: Path) -> None:
    model = LoadedModel(ScriptedGenerator(tokenizer), tokenizer, tmp_path, "scripted", "float32", "cpu")
    protocol = EvalProtocol(("evaltest/corridor",), episodes_per_task=2, seed_start=0)
    out = tmp_path / "eval"
    summary = evaluate(protocol, model, SAMPLING, out, n_resamples=200, log_turns=True)
    assert summary["protocol"]["seeds"] == [0, 1]
    assert len(read_turn_logs(out / "turns.jsonl")) == 4 + 3
    assert summary["environments"]["evaltest"]["tasks"]["corridor"]["success_rate"] == 1.0
    assert len(read_episode_records(out)) == 2
    with pytest.raises(EvalProtocolError, match="--resume"):
        evaluate(protocol, model, SAMPLING, out)
    # resume with two more episodes: only the new ones are played
    bigger = EvalProtocol(("evaltest/corridor",), episodes_per_task=4, seed_start=0)
    model.generator = gen = ScriptedGenerator(tokenizer)
    with TurnLogWriter(out / "turns.jsonl", append=True) as log:  # an episode an interruption cut short
        log.write(TurnLog(episode_id="evaltest/corridor/run_02", turn=0, response="half-played"))
    summary = evaluate(bigger, model, SAMPLING, out, resume=True, n_resamples=200, log_turns=True)
    assert summary["episodes"] == 4 and summary["episodes_resumed"] == 2
    turns = group_episodes(read_turn_logs(out / "turns.jsonl"))
    assert {k: len(v) for k, v in turns.items()} == {f"evaltest/corridor/run_0{i}": 4 - i % 3 for i in range(4)}
    assert gen.batch_sizes[0] == 2
    assert sorted(r.seed for r in read_episode_records(out / "episodes.jsonl")) == [0, 1, 2, 3]  # finishing order
