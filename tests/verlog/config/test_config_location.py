"""Where verlog's configs are (issue 25): the top-level configs/ of a checkout, verlog/configs/ of an installed package.

The installed layout itself is tests/verlog/test_install.py's (a non-editable install, slow); here: the lookup order,
the error when neither folder holds them, and the paths under the old verlog/configs/ that still work (with a note).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from verlog.cli import main as cli_main
from verlog.config import compose
from verlog.config.compose import (
    DEFAULT_CONFIG_DIR,
    ConfigKeyError,
    find_config_dir,
    load_config,
    moved_config_path,
)

REPO = Path(__file__).resolve().parents[3]


def test_a_checkout_uses_the_top_level_configs_folder() -> None:
    assert DEFAULT_CONFIG_DIR == REPO / "configs"
    assert (DEFAULT_CONFIG_DIR / "train.yaml").is_file() and (DEFAULT_CONFIG_DIR / "sft" / "cpu.yaml").is_file()
    assert not (REPO / "verlog" / "configs").exists()  # one folder, not one letter away from verlog/config/


def _configs(folder: Path) -> Path:
    (folder / "env").mkdir(parents=True)
    (folder / "train.yaml").write_text("defaults:\n  - _self_\nseed: 1\n")
    return folder


def test_the_installed_copy_wins_and_a_folder_without_train_yaml_does_not_count(tmp_path, monkeypatch) -> None:
    installed, checkout = tmp_path / "site" / "verlog" / "configs", _configs(tmp_path / "repo" / "configs")
    monkeypatch.setattr(compose, "CONFIG_DIR_CANDIDATES", (installed, checkout))
    assert find_config_dir() == checkout
    installed.mkdir(parents=True)  # e.g. leftovers of the old layout in a checkout
    assert find_config_dir() == checkout
    (installed / "train.yaml").write_text("seed: 2\n")
    assert find_config_dir() == installed


def test_missing_configs_are_one_clear_error(tmp_path, monkeypatch) -> None:
    candidates = (tmp_path / "site" / "verlog" / "configs", tmp_path / "repo" / "configs")
    monkeypatch.setattr(compose, "CONFIG_DIR_CANDIDATES", candidates)
    monkeypatch.setattr(compose, "DEFAULT_CONFIG_DIR", compose.find_config_dir())
    with pytest.raises(ConfigKeyError, match=r"verlog's configs are missing: neither .* holds train\.yaml") as info:
        load_config()
    assert all(str(c) in str(info.value) for c in candidates)
    assert load_config(["seed=3"], config_dir=_configs(tmp_path / "own")).seed == 3  # a full folder of one's own


def test_paths_under_the_old_folder_map_to_the_new_one(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(REPO)
    assert moved_config_path("verlog/configs/sft/cpu.yaml") == Path("configs/sft/cpu.yaml")
    assert moved_config_path("verlog/configs") == Path("configs")
    assert moved_config_path(REPO / "verlog" / "configs" / "train.yaml") == REPO / "configs" / "train.yaml"
    assert moved_config_path("configs/sft/cpu.yaml") is None  # exists: nothing to map
    assert moved_config_path("verlog/configs/sft/no_such.yaml") is None
    assert moved_config_path("other/configs/sft/cpu.yaml") is None
    monkeypatch.chdir(tmp_path)  # elsewhere: verlog's own copy
    assert moved_config_path("verlog/configs/sft/cpu.yaml") == DEFAULT_CONFIG_DIR / "sft" / "cpu.yaml"


def test_commands_given_an_old_path_say_where_it_moved_and_go_on(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    assert cli_main(["train", "--config-dir", "verlog/configs", "--print-config", "iterations=2"]) == 0
    captured = capsys.readouterr()
    assert "verlog's configs moved from verlog/configs/ to configs/" in captured.err
    assert str(DEFAULT_CONFIG_DIR) in captured.err and "iterations: 2" in captured.out
    # the SFT config is read from its new place: the error is the bad key's, not a missing file's
    assert cli_main(["sft", "verlog/configs/sft/cpu.yaml", "no_such_key=1"]) != 0
    err = capsys.readouterr().err
    assert err.splitlines()[0].startswith("note: verlog's configs moved from verlog/configs/ to configs/")
    assert str(DEFAULT_CONFIG_DIR / "sft" / "cpu.yaml") in err
    assert "no_such_key" in err and "does not exist" not in err
