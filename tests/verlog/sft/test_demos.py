"""verlog.sft.demos: expert demos replay to success, and their prompts are the rollout's prompts token for token."""

from __future__ import annotations

import json

import pandas as pd
import pytest

import envs
from verlog.cli import main as cli_main
from verlog.prompting.memory import SlidingMemory
from verlog.rollout import Generation, RolloutManager, SamplingConfig, make_env_pool
from verlog.sft.demos import (
    DemoConfig,
    DemoError,
    generate_demos,
    read_manifest,
    record_episode,
    used_seeds,
    write_demos,
)


def _replay(env_id: str, seed: int, answers: list[str], env_kwargs: dict | None = None) -> tuple[bool, bool, int]:
    """Step a fresh env with the recorded answers; (terminated, success, steps taken)."""
    env = envs.make(env_id, **(env_kwargs or {}))
    env.reset(seed=seed)
    for i, answer in enumerate(answers):
        _obs, _r, terminated, truncated, info = env.step(answer)
        assert info["action_valid"], f"answer {answer!r} was not a valid action"
        if terminated or truncated:
            return terminated, bool(info.get("success")), i + 1
    return False, False, len(answers)


@pytest.mark.parametrize("env_id", ["babyai/goto", "babaisai/goto_win"])
def test_written_demos_replay_to_success(env_id, tmp_path):
    config = DemoConfig(env_id, episodes=4, seed_start=100, val_episodes=1)
    manifest = write_demos(generate_demos(config), tmp_path, config)
    assert manifest["seeds_tried"] == [100, 101, 102, 103]
    assert used_seeds(tmp_path) == {100, 101, 102, 103}
    frame = pd.concat([pd.read_parquet(tmp_path / "train.parquet"), pd.read_parquet(tmp_path / "val.parquet")])
    assert manifest["rows_train"] + manifest["rows_val"] == len(frame)
    assert sorted(manifest["seeds_train"] + manifest["seeds_val"]) == sorted(set(frame["seed"]))
    for seed, rows in frame.groupby("seed"):
        rows = rows.sort_values("turn")
        answers = [list(m)[-1]["content"] for m in rows["messages"]]
        assert all(list(m)[-1]["role"] == "assistant" for m in rows["messages"])
        assert all(a.startswith("THINK: ") and f"\nACTION: {act}" in a for a, act in zip(answers, rows["action"]))
        terminated, success, steps = _replay(env_id, int(seed), answers)
        assert terminated and success and steps == len(answers), f"seed {seed}: demo does not replay to a win"


def _rollout_prompts(env_id, seed, answers, tokenizer, memory_n, max_prompt_tokens):
    """The prompt ids RolloutManager builds when its model writes ``answers`` (one slot, same seed)."""

    class ScriptedGenerator:
        def __init__(self):
            self.turn = 0

        def generate(self, requests, sampling):
            ids = [*tokenizer.encode(answers[self.turn], add_special_tokens=False), tokenizer.eos_token_id]
            self.turn += 1
            return [Generation(token_ids=ids)]

    pool = make_env_pool(env_id, 1, in_process=True, seed=seed)
    manager = RolloutManager(
        pool,
        tokenizer,
        ScriptedGenerator(),
        SamplingConfig(max_tokens=64),
        max_prompt_tokens=max_prompt_tokens,
        memory_factory=lambda: SlidingMemory(n=memory_n),
        seed=seed,
    )
    batch = manager.collect(len(answers))
    assert batch.rows[-1].terminated, "the scripted rollout should end the episode on its last turn"
    return [row.prompt_ids for row in batch.rows]


@pytest.mark.parametrize(
    ("env_id", "seed", "memory_n", "max_prompt_tokens"),
    [("babyai/goto", 13, 1, 1024), ("babyai/goto", 14, 2, 1024), ("babaisai/goto_win", 1, 1, 1024)],
)
def test_demo_conversations_render_to_the_rollout_prompts(tokenizer, env_id, seed, memory_n, max_prompt_tokens):
    memory = SlidingMemory(n=memory_n)
    episode = record_episode(env_id, seed, memory=memory, tokenizer=tokenizer, max_prompt_tokens=max_prompt_tokens)
    assert episode.success and len(episode.turns) >= 3, "pick a seed whose demo has a few turns"
    answers = [t.answer for t in episode.turns]
    prompts = _rollout_prompts(env_id, seed, answers, tokenizer, memory_n, max_prompt_tokens)
    assert len(prompts) == len(episode.turns)
    for t, (turn, prompt_ids) in enumerate(zip(episode.turns, prompts)):
        conversation = turn.conversation()
        full = tokenizer.encode(tokenizer.apply_chat_template(conversation, tokenize=False), add_special_tokens=False)
        # the conversation = the rollout's prompt (generation prompt included), then the answer and end of turn
        assert full[: len(prompt_ids)] == prompt_ids, f"turn {t}: demo prompt differs from the rollout prompt"
        tail = tokenizer.decode(full[len(prompt_ids) :])
        assert tail.startswith(turn.answer + "<|im_end|>"), tail
        if t >= 1:  # the window really holds history: the previous answer as "Previous plan:"
            assert conversation[-3]["content"] == "Previous plan:\n" + episode.turns[t - 1].answer


def test_prompt_budget_applies_like_the_rollout(tokenizer):
    """With a budget that forces turns out, demos drop them exactly as the rollout does."""
    env_id, seed = "babyai/goto", 14
    episode = record_episode(env_id, seed, memory=SlidingMemory(n=2), tokenizer=tokenizer)
    memory = SlidingMemory(n=2)
    env = envs.make(env_id)
    obs, _ = env.reset(seed=seed)
    memory.reset(env.instruction)
    memory.observe(obs.long_term, obs.short_term)
    budget = memory.build_prompt(tokenizer).num_tokens + 40  # room for the first turn, not for two past turns
    tight = record_episode(env_id, seed, memory=SlidingMemory(n=2), tokenizer=tokenizer, max_prompt_tokens=budget)
    assert [t.answer for t in tight.turns] == [t.answer for t in episode.turns]
    assert any(len(a.messages) < len(b.messages) for a, b in zip(tight.turns, episode.turns))
    prompts = _rollout_prompts(env_id, seed, [t.answer for t in tight.turns], tokenizer, 2, budget)
    for turn, prompt_ids in zip(tight.turns, prompts):
        assert len(prompt_ids) <= budget
        rendered = tokenizer.apply_chat_template(turn.messages, tokenize=False, add_generation_prompt=True)
        assert tokenizer.encode(rendered, add_special_tokens=False) == prompt_ids


def test_errors_name_the_problem(tmp_path):
    with pytest.raises(DemoError, match="no scripted expert for env 'crafter/default'"):
        record_episode("crafter/default", 0)
    # BALROG's naive parser reads the whole answer, THINK line included: the demo format does not fit it
    with pytest.raises(DemoError, match="parse_mode"):
        record_episode("babyai/goto", 0, env_kwargs={"parse_mode": "naive"})
    with pytest.raises(DemoError, match="val_episodes"):
        DemoConfig("babyai/goto", episodes=2, val_episodes=2)
    with pytest.raises(DemoError, match="does not exist"):
        read_manifest(tmp_path)


def test_cli_writes_parquet_and_manifest(tmp_path, capsys):
    out = tmp_path / "demos"
    code = cli_main(
        ["demos", "babyai/goto", "--episodes", "3", "--out", str(out), "--seed-start", "7", "--env-kwargs",
         json.dumps({"max_steps": 64}), "--quiet"]
    )  # fmt: skip
    assert code == 0
    manifest = read_manifest(out)
    assert manifest["seeds_tried"] == [7, 8, 9] and manifest["config"]["env_kwargs"] == {"max_steps": 64}
    frame = pd.read_parquet(out / "train.parquet")
    assert {"messages", "env_id", "seed", "turn", "action"} <= set(frame.columns)
    assert "3/3 episodes kept" in capsys.readouterr().out
    assert cli_main(["demos", "babyai/goto", "--episodes", "1", "--out", str(out), "--env-kwargs", "{bad"]) == 2


def test_action_only_demos_answer_with_the_action_line_the_env_accepts() -> None:
    from verlog.prompting.memory import ACTION_FORMAT_INSTRUCTION
    from verlog.sft.demos import DemoConfig, generate_demos

    config = DemoConfig(env_id="babyai/goto", episodes=2, answer_format="action")
    episodes = generate_demos(config)
    turns = [turn for episode in episodes for turn in episode.turns]
    assert turns and all(turn.answer == f"ACTION: {turn.action}" for turn in turns)
    assert all(turn.messages[-1]["content"].endswith(ACTION_FORMAT_INSTRUCTION) for turn in turns)
    with pytest.raises(DemoError, match="answer format"):
        DemoConfig(env_id="babyai/goto", episodes=2, answer_format="prose")


# ------------------------------------------------------------------------------------------------ bad inputs (issue 15)
@pytest.fixture
def no_tokenizer_loads(monkeypatch):
    """Fail the test if a tokenizer (the only model part demos load) is loaded."""
    import transformers

    def refuse(*args, **kwargs):
        raise AssertionError("a tokenizer was loaded before the arguments were checked")

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", refuse)


def _demos(tmp_path, *args: str) -> list[str]:
    return ["demos", "babyai/goto", "--episodes", "1", "--out", str(tmp_path / "out"), *args]


def test_bad_demo_arguments_are_refused_before_anything_loads(tmp_path, tiny_model, capsys, no_tokenizer_loads):
    (tmp_path / "file").write_text("x")
    cases = [
        (["--out", str(tmp_path / "file")], "is a file, not a folder"),
        (["--out", ""], "--out is empty"),
        (["--tokenizer", "/no/such"], "--tokenizer '/no/such' is not a folder"),
        (["--env-kwargs", '{"max_step": 3}'], "takes no keyword argument 'max_step'"),
        (["--env-kwargs", "[1]"], "--env-kwargs must be a JSON object"),
        (["--max-prompt-tokens", "64"], "--max-prompt-tokens needs --tokenizer"),
        (["--import", "no_such_mod"], "--import: no module named 'no_such_mod'"),
    ]
    for extra, message in cases:
        tokenizer = [] if "--max-prompt-tokens" in extra else ["--tokenizer", str(tiny_model)]  # a valid one
        assert cli_main([*_demos(tmp_path, *tokenizer), *extra]) == 2, extra
        err = capsys.readouterr().err
        assert message in err and "verlog demos: error: " in err, (extra, err)
    assert cli_main(["demos", "babyai/gotoo", "--episodes", "1", "--out", str(tmp_path / "o")]) == 2
    assert "Did you mean babyai/goto" in capsys.readouterr().err
    assert cli_main(["demos", "toy/delayed", "--episodes", "1", "--out", str(tmp_path / "o")]) == 2
    assert "no scripted expert for env 'toy/delayed'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        cli_main(_demos(tmp_path, "--memory-n", "-1"))
    assert exit_info.value.code == 2 and "argument --memory-n: '-1' is not an integer >= 0" in capsys.readouterr().err
    assert not (tmp_path / "out").exists() and not (tmp_path / "o").exists()


def test_demos_refuse_to_overwrite_without_force(tmp_path, capsys):
    out = tmp_path / "out"
    assert cli_main([*_demos(tmp_path, "--quiet")]) == 0
    manifest = (out / "demos.json").read_text()
    assert cli_main([*_demos(tmp_path, "--quiet", "--seed-start", "5")]) == 2
    err = capsys.readouterr().err
    assert f"--out '{out}' is not empty (2 entries: demos.json, train.parquet)" in err and "--force" in err
    assert (out / "demos.json").read_text() == manifest  # the earlier demos are untouched
    assert cli_main([*_demos(tmp_path, "--quiet", "--seed-start", "5", "--force")]) == 0
    assert read_manifest(out)["seeds_tried"] == [5]
