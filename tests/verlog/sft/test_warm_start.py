"""The format-only warm start: random valid answers in the rollout's prompt layout, plain-torch SFT."""

from __future__ import annotations

import collections

import pytest

from verlog.cli import main
from verlog.prompting.memory import PromptTemplate, SlidingMemory
from verlog.sft.warm_start import WarmStartConfig, WarmStartError, random_answer_rows, warm_start


def test_rows_are_the_rollouts_prompts_with_uniformly_random_valid_answers(tiny_model) -> None:
    from transformers import AutoTokenizer

    import envs

    tok = AutoTokenizer.from_pretrained(tiny_model)
    config = WarmStartConfig(env_id="toy/delayed", episodes=30, answer_format="action", max_prompt_tokens=512)
    rows = random_answer_rows(config, tok)
    assert len(rows) == 30 * 4
    env = envs.make("toy/delayed")
    obs, _ = env.reset(seed=0)
    memory = SlidingMemory(template=PromptTemplate.for_answer_format("action"))
    memory.reset(env.instruction)
    memory.observe(obs.long_term)
    assert rows[0][0] == list(memory.build_prompt(tok, 512).token_ids)  # token for token the rollout's prompt
    answers = collections.Counter(tok.decode(a[:-1]) for _, a in rows)
    assert set(answers) == {f"ACTION: {a}" for a in env.actions}
    assert min(answers.values()) >= 25  # roughly uniform over the 3 actions
    assert all(a[-1] == tok.eos_token_id for _, a in rows)


def test_warm_start_lowers_the_loss_and_saves_a_loadable_model(tiny_model, tmp_path) -> None:
    from transformers import AutoModelForCausalLM

    config = WarmStartConfig(env_id="toy/delayed", steps=30, batch_size=8, episodes=8, max_prompt_tokens=512)
    stats = warm_start(tiny_model, config, out_dir=tmp_path / "warm")
    assert stats["last_loss"] < stats["first_loss"] and stats["rows"] == 32
    assert AutoModelForCausalLM.from_pretrained(tmp_path / "warm") is not None
    with pytest.raises(WarmStartError, match="steps must be >= 1"):
        warm_start(tiny_model, WarmStartConfig(env_id="toy/delayed", steps=0))
    with pytest.raises(WarmStartError, match="not a model folder"):
        warm_start(tmp_path / "nothing", config)


def test_cli_refuses_an_unknown_env_before_building(tmp_path, capsys) -> None:
    assert main(["tiny-model", str(tmp_path / "m"), "--warm-start", "toy/nope"]) == 2
    assert "not a registered env" in capsys.readouterr().err and not (tmp_path / "m").exists()
