"""Tapes as SFT data (verlog.sft.tapes): rows made from a training run's tapes, an evaluation's and a person's
recording are the rollout's prompts for the same answers, token for token, under the memory settings of the run that
will train; filters; bad tapes are refused before anything loads, in one line."""

from __future__ import annotations

import io
import json
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import torch

import envs
from verlog.cli import main
from verlog.eval.engine import LoadedModel
from verlog.prompting.memory import MemoryConfig, SlidingMemory
from verlog.rollout import Generation, GenerationRequest, RolloutManager, SamplingConfig, make_env_pool
from verlog.sft import SFTDataError, SFTTapesConfig, is_tapes, select_episodes, write_tape_rows
from verlog.sft.demos import DemoConfig, episode_rows, generate_demos
from verlog.tapes.record import TurnLog, TurnLogWriter
from verlog.tapes.recorders import PlayTapeWriter, TapesConfig, TrainingTapes

ENV_ID, SEED, SLOTS = "babyai/goto", 70, 2
ENV_KWARGS = {"max_steps": 5}
SCRIPT = ["go forward", "turn left", "fly away", "go forward", "turn right", "go forward"]
# the run that will train: not the tapes' own settings (evaluated with n = 1), so the prompts must be rebuilt
TARGET = SFTTapesConfig(
    success_only=False, valid_only=False, memory=MemoryConfig(n=3, keep_reasoning_turns=2), max_prompt_tokens=600
)


class ScriptedGenerator:
    """The k-th request of each request id gets ``SCRIPT[k]`` (with a THINK line); records every prompt by id."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.prompts: dict[str, list[list[int]]] = defaultdict(list)

    @staticmethod
    def answer(turn: int) -> str:
        return f"THINK: step {turn}, a plan long enough to show.\nACTION: {SCRIPT[turn % len(SCRIPT)]}"

    def generate(self, requests: Sequence[GenerationRequest], sampling: SamplingConfig) -> list[Generation]:
        out = []
        for r in requests:
            turn = len(self.prompts[r.request_id])
            self.prompts[r.request_id].append(list(r.prompt_ids))
            ids = [*self.tokenizer.encode(self.answer(turn), add_special_tokens=False), self.tokenizer.eos_token_id]
            out.append(Generation(token_ids=ids, log_probs=[-0.5] * len(ids)))
        return out


def _training_run(folder: Path, tokenizer: Any, memory: MemoryConfig) -> dict[int, list[list[int]]]:
    """A training rollout with ``memory`` whose tapes (every episode) go to ``folder`` with the run's config.yaml;
    returns the prompts of each slot's first episode by seed."""
    generator = ScriptedGenerator(tokenizer)
    pool = make_env_pool(ENV_ID, SLOTS, env_kwargs=ENV_KWARGS, in_process=True, seed=SEED)
    manager = RolloutManager(
        pool,
        tokenizer,
        generator,
        SamplingConfig(max_tokens=32),
        max_prompt_tokens=600,
        memory_factory=lambda: SlidingMemory.from_config(memory),
        seed=SEED,
    )
    try:
        batch = manager.collect(7)  # the first episodes end at turn 5 (the step limit); the second ones do not
    finally:
        pool.close()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.yaml").write_text(json.dumps({"env": {"id": ENV_ID, "kwargs": ENV_KWARGS, "tasks": {}}}))
    tapes = TrainingTapes(folder, TapesConfig(episodes_per_iteration=8), tokenizer, env_id=ENV_ID)
    width = max(len(r.response_ids) for r in batch.rows)
    mask = torch.tensor([[1] * len(r.response_ids) + [0] * (width - len(r.response_ids)) for r in batch.rows])
    assert tapes.record(batch.rows, {"response_mask": mask}, iteration=1) == len(batch.rows)
    firsts = {e.episode_id: e.seed for e in batch.episodes if e.episode_id.endswith("-e1")}
    assert sorted(firsts.values()) == [SEED + i for i in range(SLOTS)]
    return {seed: generator.prompts[episode_id] for episode_id, seed in firsts.items()}


def _evaluation(folder: Path, tokenizer: Any, tiny_model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`verlog eval --log-turns` of the scripted model (memory n = 1: the tapes' own setting) into ``folder``."""
    fake = LoadedModel(ScriptedGenerator(tokenizer), tokenizer, tiny_model, "scripted", "auto", "cpu")
    monkeypatch.setattr("verlog.eval.load_model", lambda *args, **kwargs: fake)
    args = ["eval", "--model", str(tiny_model), "--tasks", ENV_ID, "--episodes", str(SLOTS), "--quiet"]
    args += ["--seed-start", str(SEED), "--max-steps", "5", "--max-tokens", "32", "--log-turns", "--out", str(folder)]
    assert main(args) == 0


def _prompt_ids(tokenizer: Any, messages: list[dict[str, str]]) -> list[int]:
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return list(tokenizer.encode(text, add_special_tokens=False))


def test_rows_from_training_and_evaluation_tapes_are_the_rollouts_prompts(
    tokenizer: Any, tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rollout = _training_run(tmp_path / "rollout", tokenizer, TARGET.memory)  # the prompts the run would build
    _training_run(tmp_path / "run", tokenizer, MemoryConfig())  # a run with the default memory (n = 1) tapes them
    _evaluation(tmp_path / "eval", tokenizer, tiny_model, monkeypatch)
    for source in ("run", "eval"):
        assert is_tapes(tmp_path / source)
        selection = select_episodes(tmp_path / source, TARGET)
        # the run's second episodes are still running when its tapes end: left out, counted
        assert selection.counts["kept"] == SLOTS and selection.counts["unfinished"] == (SLOTS if source == "run" else 0)
        train, val, manifest = write_tape_rows(selection, tokenizer, TARGET, tmp_path / f"data_{source}")
        assert val is None and manifest["seeds"] == {ENV_ID: [SEED + i for i in range(SLOTS)]}
        frame = pd.read_parquet(train)
        assert len(frame) == SLOTS * 5 and manifest["rows_train"] == len(frame)
        for row in frame.itertuples():
            messages = [dict(m) for m in row.messages]
            assert messages[-1] == {"role": "assistant", "content": ScriptedGenerator.answer(row.turn)}
            want = rollout[row.seed][row.turn]
            got = _prompt_ids(tokenizer, messages[:-1])
            assert got == want, f"{source} seed {row.seed} turn {row.turn}:\n{tokenizer.decode(got)}"
        # the history holds two full plans (keep_reasoning_turns=2) and three turns, not the tapes' one
        last = [dict(m) for m in frame[frame.turn == 4].iloc[0].messages]
        assert sum(m["content"].startswith("Previous plan:") for m in last) == 2 and len(last) == 1 + 2 * 3 + 2


@pytest.mark.slow
def test_verls_dataset_trains_on_the_answer_after_the_rollouts_prompt(tokenizer: Any, tmp_path: Path) -> None:
    """Through verl's own dataset (verlog's last-turn subclass): the tokens before the loss are the rollout's prompt."""
    from verlog.sft.data import LastTurnSFTDataset

    rollout = _training_run(tmp_path / "rollout", tokenizer, TARGET.memory)
    _training_run(tmp_path / "run", tokenizer, MemoryConfig())
    train, _, _ = write_tape_rows(select_episodes(tmp_path / "run", TARGET), tokenizer, TARGET, tmp_path / "data")
    dataset = LastTurnSFTDataset(
        train, tokenizer, {"pad_mode": "no_padding", "max_length": 1024, "truncation": "error"}
    )
    frame = pd.read_parquet(train)
    for i, row in enumerate(frame.itertuples()):
        prompt = rollout[row.seed][row.turn]
        answer = tokenizer.encode(ScriptedGenerator.answer(row.turn) + "<|im_end|>\n", add_special_tokens=False)
        item = dataset[i]
        assert item["input_ids"].tolist() == prompt + answer
        assert item["loss_mask"].tolist() == [0] * len(prompt) + [1] * len(answer)


def test_a_recorded_play_trains_like_the_experts_demonstration(tmp_path: Path) -> None:
    """A person who plays the expert's moves, recorded with `verlog play --record`, gives verlog demos' rows."""
    seed = 3
    demo = generate_demos(DemoConfig(ENV_ID, episodes=1, seed_start=seed))[0]
    assert demo.success
    from verlog.commands.play import play

    env = envs.make(ENV_ID)
    lines = io.StringIO("".join(f"{turn.action}\n" for turn in demo.turns))
    with PlayTapeWriter(tmp_path / "me", ENV_ID, {}) as record:
        assert play(env, lines, io.StringIO(), seed=seed, episodes=1, record=record) == 0
    env.close()
    taped = [json.loads(line) for line in (tmp_path / "me" / "tapes" / "play.jsonl").read_text().splitlines()]
    assert [t["response"] for t in taped] == [t.action for t in demo.turns]  # the person typed bare actions
    assert taped[0]["source"] == "play" and taped[0]["extra"]["env_kwargs"] == {} and taped[-1]["success"] is True
    settings = SFTTapesConfig(max_prompt_tokens=None)
    train, _, _ = write_tape_rows(select_episodes(tmp_path / "me", settings), None, settings, tmp_path / "data")
    rows = pd.read_parquet(train)
    want = episode_rows(demo)
    assert len(rows) == len(want)
    for got, expected in zip(rows.itertuples(), want):
        assert [dict(m) for m in got.messages] == expected["messages"]  # answers in the prompt's format, as demos'
    # a second session recorded into the same folder at once: its episode is another one, not a continuation
    env = envs.make(ENV_ID)
    lines = io.StringIO("".join(f"{turn.action}\n" for turn in demo.turns))
    with PlayTapeWriter(tmp_path / "me", ENV_ID, {}) as record:
        assert play(env, lines, io.StringIO(), seed=seed, episodes=1, record=record) == 0
    env.close()
    assert select_episodes(tmp_path / "me", settings).counts["kept"] == 2


def _tape(path: Path, episodes: list[dict[str, Any]]) -> None:
    """Synthetic tapes: each episode ``{id, iteration, rewards, success, env_id, finished}``."""
    with TurnLogWriter(path, append=True) as writer:
        for e in episodes:
            n = len(e["rewards"])
            for t, reward in enumerate(e["rewards"]):
                last = t == n - 1
                writer.write(
                    TurnLog(
                        e["id"],
                        t,
                        env_id=e.get("env_id", ENV_ID),
                        seed=1,
                        reward=reward,
                        source="train",
                        iteration=e["iteration"],
                        terminated=last and e.get("finished", True),
                        success=e["success"] if last else None,
                    )
                )


def test_filters_keep_what_they_say_and_count_what_they_leave_out(tmp_path: Path) -> None:
    run = tmp_path / "run"
    _tape(
        run / "tapes" / "train.jsonl",
        [
            {"id": "a", "iteration": 1, "rewards": [0.0, 1.0], "success": True},
            {"id": "b", "iteration": 2, "rewards": [0.0, 0.0], "success": False},
            {"id": "c", "iteration": 3, "rewards": [0.5], "success": True},
            {"id": "d", "iteration": 3, "rewards": [1.0], "success": True, "env_id": "babyai/pickup"},
            {"id": "e", "iteration": 3, "rewards": [0.0, 0.0], "success": False, "finished": False},
        ],
    )
    (run / "config.yaml").write_text("env:\n  id: babyai/goto\n  kwargs: {max_steps: 5}\n")

    def kept(**kw: Any) -> list[str]:
        return [e.episode_id for e in select_episodes(run, SFTTapesConfig(**kw)).episodes]

    assert kept() == ["a", "c", "d"]  # successful, finished
    assert kept(success_only=False) == ["a", "b", "c", "d"]
    assert kept(env_ids=["babyai/goto"]) == ["a", "c"]
    assert kept(last_iterations=1) == ["c", "d"] and kept(last_iterations=2, success_only=False) == ["b", "c", "d"]
    assert kept(min_return=0.75) == ["a", "d"]
    selection = select_episodes(run, SFTTapesConfig(min_return=0.75))
    assert selection.counts == {"episodes": 5, "unfinished": 1, "env error": 0, "no seed": 0, "multi-task": 0,
                                "other env": 0, "not successful": 1, "return below": 1, "kept": 2}  # fmt: skip
    assert selection.episodes[0].env_kwargs == {"max_steps": 5}  # the run's env.kwargs, from its config.yaml
    with pytest.raises(SFTDataError, match=r"lower data.tapes.min_return \(now 5.0; the best return is 1\)"):
        select_episodes(run, SFTTapesConfig(min_return=5.0))
    with pytest.raises(SFTDataError, match=r"lists none of the tapes' env ids \(babyai/goto, babyai/pickup\)"):
        select_episodes(run, SFTTapesConfig(env_ids=["babyai/open"]))


def test_tapes_replayed_with_other_env_settings_are_refused(tokenizer: Any, tmp_path: Path) -> None:
    _training_run(tmp_path / "run", tokenizer, MemoryConfig())
    settings = SFTTapesConfig(success_only=False, env_kwargs={"max_steps": 3})  # the tapes ran with 5 steps
    selection = select_episodes(tmp_path / "run", settings)
    with pytest.raises(SFTDataError, match=r"turn 2 differs from the tape in the end of the episode.*max_steps': 3"):
        write_tape_rows(selection, tokenizer, settings, tmp_path / "data")
    assert not (tmp_path / "data").exists()  # nothing written


def _sft(*args: str) -> list[str]:
    return ["sft", *args]


def test_sft_refuses_bad_tapes_and_data_in_one_line_before_anything_starts(
    tokenizer: Any, tiny_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    _training_run(tmp_path / "run", tokenizer, MemoryConfig())  # scripted answers: no episode succeeds
    out = tmp_path / "out"
    cases = {
        (f"data.train={tmp_path / 'run'}",): "no episode of the 4 in the tapes of",
        (f"data.train={tmp_path / 'run'}", "data.tapes.success_only=false", "data.tapes.env_ids=[babyai/open]"): (
            "data.tapes.env_ids lists none of the tapes' env ids (babyai/goto)"
        ),
        (f"data.train={tmp_path / 'run'}", "data.tapes.memory.answer_format=cott"): "is not one of cot, action",
        ("data.trian=x",): "data.trian: the SFT config has no such key; did you mean data.train?",
        (f"data.train={tmp_path / 'empty'}",): "holds no train.parquet and no tapes",
    }
    (tmp_path / "empty").mkdir()
    csv = tmp_path / "rows.csv"
    csv.write_text("messages\nhello\n")
    cases[(f"data.train={csv}",)] = "is not a parquet file (it does not start with PAR1); give a `verlog demos`"
    for args, message in cases.items():
        code = main(_sft(*args, f"model.path={tiny_model}", f"output_dir={out}", "--dry-run"))
        err = capsys.readouterr().err
        assert code == 2, (args, err)
        assert err.startswith("verlog sft: error: ") and message in err, (args, err)
        assert err.count("\n") == 1 and "Traceback" not in err, err
        assert not out.exists()  # refused before any data was written or a model prepared


def test_play_record_refuses_a_file(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    target = tmp_path / "file"
    target.write_text("x")
    assert main(["play", ENV_ID, "--record", str(target)]) == 2
    assert "--record '" in capsys.readouterr().err
