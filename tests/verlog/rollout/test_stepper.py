"""The one episode stepper: training's rollout and evaluation play the same turns; the shared rules hold in both."""

from __future__ import annotations

import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

import envs
from envs.core import TextEnv, TextObservation
from envs.pool import EnvPool
from verlog.eval import EvalProtocol, run_episodes
from verlog.prompting.memory import MemoryConfig, PromptTemplate, SlidingMemory
from verlog.rollout import Generation, GenerationRequest, RolloutManager, SamplingConfig, make_env_pool
from verlog.rollout.stepper import (
    Answer,
    CallbackPolicy,
    EpisodeStepper,
    GeneratorPolicy,
    PolicyInput,
    RandomValidPolicy,
    StepperError,
)
from verlog.tapes.record import TurnLog

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "envs"))
import faulty_envs  # the test envs live beside the env tests

faulty_envs.register_test_envs()

SAMPLING = SamplingConfig(temperature=1.0, max_tokens=32)
# a fixed answer per turn of an episode: valid actions, an answer no parser reads (default action + format penalty)
SCRIPT = ["go forward", "turn left", "fly away", "go forward", "turn right", "go forward"]


class ScriptedGenerator:
    """A deterministic stand-in for vLLM: the answer of an episode's k-th request is ``SCRIPT[k]``, whatever the
    request id looks like; records every prompt by request id, and fails the requests named in ``fail``."""

    def __init__(
        self,
        tokenizer: Any,
        script: Sequence[str] = SCRIPT,
        fail: Sequence[str] = (),
        scripts: dict[str, list[str]] | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.script = list(script)
        self.scripts = scripts or {}  # request id -> its own script
        self.fail = set(fail)
        self.prompts: dict[str, list[list[int]]] = defaultdict(list)

    def generate(self, requests: Sequence[GenerationRequest], sampling: SamplingConfig) -> list:
        out: list = []
        for r in requests:
            if r.request_id in self.fail:
                out.append(RuntimeError("server went away"))
                continue
            turn = len(self.prompts[r.request_id])
            self.prompts[r.request_id].append(list(r.prompt_ids))
            script = self.scripts.get(r.request_id, self.script)
            text = f"THINK: step {turn}.\nACTION: {script[turn % len(script)]}"
            ids = [*self.tokenizer.encode(text, add_special_tokens=False), self.tokenizer.eos_token_id]
            out.append(Generation(token_ids=ids, log_probs=[-0.25] * len(ids)))
        return out


class TurnCollector:
    """A turn log in memory (what ``run_episodes`` writes to ``turns.jsonl``)."""

    def __init__(self) -> None:
        self.turns: dict[str, list[TurnLog]] = defaultdict(list)

    def wants(self, episode_id: str) -> bool:
        return True

    def write(self, turn: TurnLog) -> None:
        self.turns[turn.episode_id].append(turn)


def _memory() -> SlidingMemory:
    return SlidingMemory(n=2, keep_reasoning_turns=1, template=PromptTemplate.for_answer_format("cot"))


@pytest.mark.parametrize("env_id, max_steps", [("babyai/goto", 5), ("test/corridor", 4)])
def test_training_rollout_and_evaluation_play_identical_turns_on_the_same_seeds(tokenizer, env_id, max_steps):
    seed, slots, budget = 70, 3, 400
    # training: fixed-turn batches through RolloutManager (vLLM replaced by the scripted generator only)
    train_gen = ScriptedGenerator(tokenizer)
    pool = make_env_pool(env_id, slots, env_kwargs={"max_steps": max_steps}, in_process=True, seed=seed)
    manager = RolloutManager(
        pool, tokenizer, train_gen, SAMPLING, max_prompt_tokens=budget, memory_factory=_memory, seed=seed
    )
    batch = manager.collect(max_steps)  # every slot's first episode ends within max_steps turns
    # evaluation: the same seeds, memory, budget and step limit through run_episodes
    eval_gen, log = ScriptedGenerator(tokenizer), TurnCollector()
    specs = EvalProtocol((env_id,), episodes_per_task=slots, seed_start=seed).episodes()
    records = run_episodes(
        specs,
        eval_gen,
        tokenizer,
        SAMPLING,
        memory=MemoryConfig(n=2),
        max_prompt_tokens=budget,
        max_steps=max_steps,
        turn_log=log,
    )
    firsts = [e for e in batch.episodes if e.episode_id.endswith("-e1")]
    assert [e.seed for e in firsts] == [s.seed for s in specs] == [70, 71, 72]
    for spec, episode, record in zip(specs, firsts, records):
        rows = [r for r in batch.rows if r.episode_id == episode.episode_id]
        turns = log.turns[spec.episode_id]
        assert len(rows) == len(turns) == record.num_steps == episode.length
        assert (
            [r.prompt_ids for r in rows] == train_gen.prompts[episode.episode_id] == eval_gen.prompts[spec.episode_id]
        )
        assert [r.response_text for r in rows] == [t.response for t in turns]
        assert [r.action for r in rows] == [t.action for t in turns]
        assert [r.action_valid for r in rows] == [t.action_valid for t in turns]
        assert [r.reward for r in rows] == [t.reward for t in turns]
        assert [(r.terminated, r.truncated) for r in rows] == [(t.terminated, t.truncated) for t in turns]
        assert [r.memory_turns for r in rows] == [t.memory_turns for t in turns]
        assert episode.ret == pytest.approx(record.episode_return)
        assert episode.success == record.success
    # the script's unreadable answer ran the default action in both
    assert any(not r.action_valid for r in batch.rows)


class ChangingInstruction(TextEnv):
    """The instruction names the step count (like Crafter's remaining achievements, it changes during an episode)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("max_steps", 4)
        super().__init__(**kwargs)
        self.actions = ["wait", "go"]
        self.default_action = "wait"
        self.count = 0

    def _game_reset(self, seed: int | None, options: Any) -> tuple[TextObservation, dict]:
        self.count = 0
        return TextObservation.build("a room"), {}

    def _game_step(self, action: str) -> tuple[TextObservation, float, bool, dict]:
        self.count += 1
        return TextObservation.build("a room"), 0.0, False, {}

    def _game_instruction(self) -> str:
        return f"Steps taken so far: {self.count}. Actions: wait, go."

    def _game_progression(self) -> float:
        return 0.0

    def _game_success(self) -> bool:
        return False

    def _game_get_state(self) -> Any:
        return self.count

    def _game_set_state(self, state: Any) -> None:
        self.count = state


envs.register("steppertest/changing", ChangingInstruction, overwrite=True)


def test_the_instruction_is_refreshed_before_every_prompt_in_training_and_evaluation(tokenizer):
    gen = ScriptedGenerator(tokenizer, script=["go"])
    pool = EnvPool(ChangingInstruction, num_envs=1, in_process=True)
    RolloutManager(pool, tokenizer, gen, SAMPLING, max_prompt_tokens=400, run_id="t").collect(3)
    log = TurnCollector()
    specs = EvalProtocol(("steppertest/changing",), episodes_per_task=1, seed_start=0).episodes()
    run_episodes(specs, ScriptedGenerator(tokenizer, script=["go"]), tokenizer, SAMPLING, turn_log=log)
    for t in range(3):
        assert f"Steps taken so far: {t}." in tokenizer.decode(gen.prompts["t-s0-e1"][t])
        assert f"Steps taken so far: {t}." in log.turns[specs[0].episode_id][t].prompt_messages[0]["content"]


def test_a_failed_generation_is_retried_then_an_end_of_turn_answer_in_training_and_evaluation(tokenizer):
    specs = EvalProtocol(("test/corridor",), episodes_per_task=2, seed_start=5).episodes()
    broken = specs[1].episode_id
    gen = ScriptedGenerator(tokenizer, fail=[broken])
    log = TurnCollector()
    records = run_episodes(specs, gen, tokenizer, SAMPLING, max_steps=3, turn_log=log, generation_retries=2)
    assert records[0].generation_failures == 0
    assert records[1].generation_failures == records[1].num_steps == 3
    assert records[1].output_tokens == 3  # one end-of-turn token per failed turn, as a training row holds
    assert all(
        t.response == "" and not t.action_valid and "server went away" in t.extra["generation_error"]
        for t in log.turns[broken]
    )
    # training: the same answer (one EOS token, empty text, invalid action), counted as failed after the retries
    pool = make_env_pool("test/corridor", 1, env_kwargs={"max_steps": 3}, in_process=True)
    manager = RolloutManager(
        pool,
        tokenizer,
        ScriptedGenerator(tokenizer, fail=["run-s0-e1"]),
        SAMPLING,
        max_prompt_tokens=400,
        generation_retries=2,
    )
    batch = manager.collect(1)
    row = batch.rows[0]
    assert row.generation_failed and row.response_ids == [tokenizer.eos_token_id] and row.response_text == ""
    assert not row.action_valid and batch.generation_retries == 2


def test_evaluation_survives_a_worker_that_dies(tokenizer):
    """Evaluation steps a subprocess pool: a worker killed mid-episode ends that episode only (env_error)."""
    specs = EvalProtocol(("test/faulty",), episodes_per_task=2, seed_start=0).episodes()
    gen = ScriptedGenerator(tokenizer, script=["right"], scripts={specs[1].episode_id: ["right", "exit"]})
    records = run_episodes(
        specs, gen, tokenizer, SAMPLING, max_steps=6, in_process=False, num_workers=2, step_timeout=30
    )
    ok, died = records
    assert "env_error" not in ok.env_stats and ok.num_steps >= 1
    assert died.truncated and died.num_steps == 2 and "exit" in died.env_stats["env_error"]


def test_text_policies_and_order_checks(tokenizer):
    pool = make_env_pool("test/corridor", 2, in_process=True)
    stepper = EpisodeStepper(pool, tokenizer, [_memory(), _memory()], max_prompt_tokens=400)
    with pytest.raises(StepperError, match="no open episode"):
        stepper.step(CallbackPolicy(lambda turn: "ACTION: right"))
    stepper.reset(seeds=[3, 4])
    seen: list[PolicyInput] = []

    def person(turn: PolicyInput) -> str:
        seen.append(turn)
        return "ACTION: right"

    turns = stepper.step(CallbackPolicy(person, tokenizer))
    assert [t.row.action for t in turns] == ["right", "right"]
    assert [t.slot for t in seen] == [0, 1] and seen[0].instruction.startswith("Walk to the end")
    assert turns[0].row.response_ids[-1] == tokenizer.eos_token_id  # text answers are encoded as SFT targets
    rand = RandomValidPolicy(lambda slot: ["left", "right"], lambda action, slot: f"ACTION: {action}", seed=1)
    actions = [t.row.action for _ in range(10) for t in stepper.step(rand)]
    assert set(actions) == {"left", "right"}

    class Wrong:
        def act(self, inputs):
            return [Answer("x")]

    with pytest.raises(StepperError, match="1 answers for 2 turns"):
        stepper.step(Wrong())
    assert GeneratorPolicy(ScriptedGenerator(tokenizer), tokenizer, SAMPLING).retries_used == 0
