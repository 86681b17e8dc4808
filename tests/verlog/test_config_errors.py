"""Config keys: misspelt overrides name the closest key, verl.* passes through, the saved config round-trips."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from verlog.commands.train import main
from verlog.config.checks import TrainConfigError
from verlog.config.compose import ConfigKeyError, closest_key, load_config
from verlog.config.preflight import preflight


@pytest.mark.parametrize(
    ("override", "closest"),
    [
        ("rollout.num_slot=4", "rollout.num_slots"),
        ("iteration=10", "iterations"),
        ("algorithm.critic_warmpu=3", "algorithm.critic_warmup"),
        ("env.kwargs.format_penality=0.2", "env.kwargs.format_penalty"),
        ("memory.keep_reasoning=2", "memory.keep_reasoning_turns"),
    ],
)
def test_misspelt_key_names_the_closest_key(override, closest):
    with pytest.raises(ConfigKeyError) as info:
        load_config([override])
    message = str(info.value)
    key = override.split("=")[0]
    assert f"unknown config key {key!r}" in message
    assert f"Did you mean {closest!r}? Write {closest}={override.split('=')[1]}" in message
    if key.startswith("env.kwargs."):  # how to add a new key on purpose (only free-form sections take them)
        assert f"+{override}" in message
    else:
        assert "+" not in message


def test_unknown_key_with_no_close_match_lists_the_section():
    with pytest.raises(ConfigKeyError, match="Keys under rollout: num_slots, turns_per_slot") as info:
        load_config(["rollout.zzzzzz=1"])
    assert "Did you mean" not in str(info.value)


def test_misspelt_group_option_names_the_closest_option():
    with pytest.raises(ConfigKeyError, match=r"Did you mean hardware=8xh100\?"):
        load_config(["hardware=8xh10"])
    with pytest.raises(ConfigKeyError, match=r"Did you mean model=qwen2.5-7b-instruct\?"):
        load_config(["model=qwen2.5-7b-instruc"])


def test_key_of_another_group_option_is_found_after_the_choice():
    cfg = load_config(["env=crafter", "env.kwargs.achievements=remaining"])
    assert cfg.env.kwargs.achievements == "remaining"
    with pytest.raises(ConfigKeyError, match=r"Did you mean 'env\.kwargs\.achievements'"):
        load_config(["env=crafter", "env.kwargs.achievement=remaining"])


def test_plus_still_adds_and_verl_keys_pass_through():
    cfg = load_config(["+env.kwargs.invalid_action_feedback=true", "verl.trainer.max_actor_ckpt_to_keep=2"])
    assert cfg.env.kwargs.invalid_action_feedback is True
    assert cfg.verl.trainer.max_actor_ckpt_to_keep == 2


def test_closest_key_prefers_the_same_section():
    valid = ["rollout.num_slots", "rollout.turns_per_slot", "seed"]
    assert closest_key("rollout.slots", valid) == "rollout.num_slots"
    assert closest_key("nothing.like.it", valid) is None


def test_cli_prints_the_error_without_a_traceback(capsys):
    assert main(["rollout.num_slot=4", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("verlog train: error: unknown config key 'rollout.num_slot'") and "Traceback" not in err


def test_dry_run_checks_the_env_id():
    with pytest.raises(TrainConfigError, match="Did you mean babyai/pickup"):
        preflight(load_config(["env=babyai", "env.task=pickupp"]))


def test_every_env_config_builds_its_env():
    import envs

    for env_cfg in ("babyai", "babaisai", "crafter", "babyai_goto"):
        cfg = load_config([f"env={env_cfg}"])
        env = envs.make(str(cfg.env.id), **OmegaConf.to_container(cfg.env.kwargs))
        env.reset(seed=0)
        assert env.format_penalty == 0.1 and env.binary_reward is (env_cfg != "crafter")


def test_saved_resolved_config_round_trips(tmp_path, capsys):
    overrides = ["env=babaisai", "env.task=two_room-goto_win", "model=qwen2.5-3b-instruct", "hardware=4xa40"]
    cfg = load_config([*overrides, f"output_dir={tmp_path}/run", "iterations=9"])
    # what verlog.trainer.runner.train writes before it starts Ray: the resolved config, interpolations filled in
    OmegaConf.save(cfg, tmp_path / "config.yaml", resolve=True)
    saved = OmegaConf.load(tmp_path / "config.yaml")
    assert saved.run_name == "babaisai-two_room-goto_win-qwen2.5-3b" and saved.env.id == "babaisai/two_room-goto_win"
    # compose from the saved file (as `verlog train --config-dir RUN --config-name config` does): the same config
    again = load_config([], config_dir=tmp_path, config_name="config")
    assert OmegaConf.to_container(again) == OmegaConf.to_container(cfg, resolve=True)
    # overrides and the did-you-mean check apply on top of it
    assert load_config(["iterations=11"], config_dir=tmp_path, config_name="config").iterations == 11
    with pytest.raises(ConfigKeyError, match="'iterations'"):
        load_config(["iteratons=11"], config_dir=tmp_path, config_name="config")
    assert main(["--config-dir", str(tmp_path), "--config-name", "config", "--dry-run"]) == 0
    assert "--config-name config" in capsys.readouterr().out


def test_configuration_doc_lists_every_key_and_option():
    from pathlib import Path

    from verlog.config.compose import DEFAULT_CONFIG_DIR, flat_keys, group_options

    doc = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text()
    keys: set[str] = set()
    for group in ("env", "model", "hardware", "algorithm"):
        for option in group_options(DEFAULT_CONFIG_DIR, group):
            assert f"{option}" in doc, f"docs/configuration.md does not mention {group}={option}"
            keys |= set(flat_keys(load_config([f"{group}={option}"])))
    # model.tiny.* and the families under env.tasks are free-form (their keys are the user's names)
    missing = [k for k in sorted(keys) if f"`{k}`" not in doc and not k.startswith(("model.tiny.", "env.tasks."))]
    assert not missing, f"docs/configuration.md does not describe {missing}"


@pytest.mark.parametrize(
    ("override", "says"),
    [
        ("run_name=café", "(its value holds 'é'): quote the value, with quotes that reach Hydra: run_name='café' "
         "(in a shell: \"run_name='café'\")"),
        ("run_name=x y=z", "(its value holds ' ', '='): quote the value"),
        ("run_name=it's (mine)", "run_name=\"it's (mine)\" (in a shell: 'run_name=\"it's (mine)\"')"),
    ],
)  # fmt: skip
def test_an_override_hydra_cannot_read_says_how_to_quote_it(override: str, says: str) -> None:
    """Hydra's own message was its lexer's (LexerNoViableAltException: run_name=café ^) with a link."""
    with pytest.raises(ConfigKeyError) as info:
        load_config([override])
    assert str(info.value).startswith(f"override {override!r} cannot be read by Hydra's override parser")
    assert says in str(info.value) and "Lexer" not in str(info.value)
    quoted = str(info.value).split("quotes that reach Hydra: ")[1].split(" (in a shell")[0]
    assert load_config([quoted]).run_name == override.split("=", 1)[1]  # the quoted form is read as meant


def test_a_config_file_that_is_not_yaml_names_the_file_and_line(tmp_path) -> None:
    """It was PyYAML's traceback."""
    (tmp_path / "env").mkdir()
    (tmp_path / "env" / "mine.yaml").write_text("name: mine\nid: toy/delayed\nkwargs: [a\n")
    with pytest.raises(ConfigKeyError) as info:
        load_config(["env=mine"], tmp_path)
    assert str(info.value) == (
        f"{tmp_path / 'env' / 'mine.yaml'}, line 4, column 1 is not valid YAML (expected ',' or ']', but got "
        "'<stream end>'): fix that file (a tab, an unclosed [ or {, a stray quote, ...)"
    )
