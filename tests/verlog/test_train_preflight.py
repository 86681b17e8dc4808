"""`verlog train` on an env of one's own, and what it refuses before anything starts (issue 15; docs/errors.md).

No Ray, no model: ``verlog.trainer.runner.train`` is replaced by a stub that records whether a run would start.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from envs.registry import IMPORTS_ENV_VAR
from verlog.commands.train import main
from verlog.config.preflight import RUN_OUTPUTS

REPO = Path(__file__).resolve().parents[2]
LAKE = """
import gymnasium as gym

import envs
from envs.adapter import GymTextAdapter


def make_lake(slippery: bool = False, **text_kwargs):
    env = gym.make("FrozenLake-v1", map_name="4x4", is_slippery=slippery)
    return GymTextAdapter(env, describe=lambda obs, info: f"cell {obs}", action_names=["w", "s", "e", "n"],
                          instruction="Reach the gift.", **text_kwargs)


envs.register("pflake/4x4", make_lake)
"""


@pytest.fixture
def user_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The user's folder (the current one) holding pflake.py; imports are undone after the test."""
    (tmp_path / "pflake.py").write_text(textwrap.dedent(LAKE))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv(IMPORTS_ENV_VAR, "")  # undone after the test
    sys.modules.pop("pflake", None)
    return tmp_path


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list:
    """The configs ``verlog train`` would have started a run with (the trainer is a stub)."""
    import verlog.trainer.runner

    runs: list = []
    monkeypatch.setattr(verlog.trainer.runner, "train", runs.append)
    return runs


def _err(capsys: pytest.CaptureFixture) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


def test_own_env_with_import_and_the_custom_group(user_folder: Path, started: list, capsys) -> None:
    assert main(["--import", "pflake", "env=custom", "env.id=pflake/4x4", "+env.kwargs.max_steps=7", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "id: pflake/4x4" in out and "max_steps: 7" in out and "- pflake" in out  # imports recorded
    assert "# command: python -m verlog.train --import=pflake env=custom" in out
    assert main(["--import", "pflake", "env=custom", "env.id=pflake/4x4", "output_dir=run"]) == 0
    (cfg,) = started
    assert list(cfg.env.imports) == ["pflake"] and dict(cfg.env.kwargs) == {}
    # the entry-point form needs no --import: the current folder is importable
    assert main(["env=custom", "env.id=pflake:make_lake", "--dry-run"]) == 0


def test_default_env_settings_on_an_own_env_name_the_fix(user_folder: Path, started: list, capsys) -> None:
    """The issue's path: env.id=... with the default (BabyAI) env group, whose binary_reward the factory rejects."""
    assert main(["--import", "pflake", "env.id=pflake/4x4", "--dry-run"]) == 2
    err = _err(capsys)
    assert "env 'pflake/4x4' takes no keyword argument 'binary_reward' (from env.kwargs: binary_reward=True)" in err
    assert "~env.kwargs.binary_reward" in err and "env=custom" in err and "--config-dir" in err
    assert main(["env.id=pflake:make_lake"]) == 2 and "binary_reward" in _err(capsys)
    assert main(["env=custom", "env.id=pflake/8x8"]) == 2  # an id no imported module registers
    assert "is not a registered env" in (err := _err(capsys)) and "--import MODULE" in err
    assert main(["env=custom"]) == 2 and "env.id is not set" in _err(capsys)
    assert main(["--import", "no_such_mod", "env=custom"]) == 2
    assert "--import: no module named 'no_such_mod'" in _err(capsys)
    assert main(["env=custom", "env.id=pflake/4x4", "env.imports=[no_such_mod]"]) == 2
    assert "env.imports: no module named 'no_such_mod'" in _err(capsys)
    assert main(["--import", "pflake", "env=custom", "env.id=pflake/4x4", "+env.kwargs.slipery=true"]) == 2
    assert "takes no keyword argument 'slipery'" in _err(capsys)
    assert not started


def test_an_env_config_of_ones_own_in_config_dir(user_folder: Path, started: list, capsys) -> None:
    conf = user_folder / "conf" / "env"
    conf.mkdir(parents=True)
    (conf / "pflake.yaml").write_text(
        "name: pflake\nid: pflake/4x4\nimports: [pflake]\nkwargs:\n  max_steps: 9\nin_process: true\n"
        "num_workers: null\n"
    )
    assert main(["--config-dir", "conf", "env=pflake", "env.kwargs.max_steps=11", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "id: pflake/4x4" in out and "max_steps: 11" in out and "model:" in out  # verlog's other groups remain
    assert main(["--config-dir", "conf", "env=pflak"]) == 2
    assert "Did you mean env=pflake?" in _err(capsys)
    assert main(["--config-dir", "no_such_dir", "env=pflake"]) == 2
    assert "--config-dir 'no_such_dir' is not a folder" in _err(capsys)
    assert not started


def _run_folder(path: Path, checkpoint: int | None = None) -> Path:
    path.mkdir(parents=True)
    (path / "metrics.jsonl").write_text('{"step": 1}\n')
    (path / "rollout.jsonl").write_text("{}\n")
    (path / "tiny-model").mkdir()  # where model.build_tiny builds the model (empty: a model there must load)
    if checkpoint is not None:
        (path / "checkpoints" / f"global_step_{checkpoint}").mkdir(parents=True)
        (path / "checkpoints" / "latest_checkpointed_iteration.txt").write_text(str(checkpoint))
    return path


def test_a_fresh_run_into_another_runs_output_dir_is_refused(tmp_path: Path, started: list, capsys) -> None:
    old = _run_folder(tmp_path / "old", checkpoint=2)
    base = ["env=toy_delayed", f"output_dir={old}"]
    assert main([*base, "checkpoint.resume=disable"]) == 2
    err = _err(capsys)
    assert f"output_dir={old} holds another run (metrics.jsonl, rollout.jsonl, checkpoints)" in err
    assert "checkpoint.resume=auto" in err and "iteration 2" in err and "--overwrite" in err and "new output_dir" in err
    assert not started and (old / "metrics.jsonl").exists()
    assert main(base) == 0 and len(started) == 1  # resume=auto with a checkpoint: a resume, allowed
    bare = _run_folder(tmp_path / "bare")  # outputs but no checkpoint: auto would be a fresh run too
    assert main(["env=toy_delayed", f"output_dir={bare}"]) == 2
    assert "no checkpoint for checkpoint.resume=auto" in _err(capsys) and len(started) == 1
    assert main(["env=toy_delayed", f"output_dir={bare}", f"checkpoint.resume={old}/checkpoints/global_step_2",
                 "--overwrite"]) == 2  # fmt: skip
    assert "--overwrite starts a fresh run" in _err(capsys)
    # --overwrite removes the old run's outputs, nothing else (a tiny model built there stays)
    (old / "config.yaml").write_text("{}")
    assert main([*base, "checkpoint.resume=disable", "--overwrite"]) == 0 and len(started) == 2
    # the run's lock (verlog/run/folder.py) and the new run's log (verlog.console): the old run's log went with it
    assert sorted(p.name for p in old.iterdir()) == ["logs", "run.lock", "tiny-model"]
    assert (old / "logs" / "train.log").read_text().count("===== ") == 1
    assert "--overwrite: removed" in capsys.readouterr().out
    assert set(RUN_OUTPUTS) >= {"metrics.jsonl", "rollout.jsonl", "checkpoints"}
    started_only = tmp_path / "started"  # a run that failed while starting left only its config: not a run
    started_only.mkdir()
    (started_only / "config.yaml").write_text("{}")
    assert main(["env=toy_delayed", f"output_dir={started_only}", "checkpoint.resume=disable"]) == 0
    (tmp_path / "afile").write_text("x")
    assert main(["env=toy_delayed", f"output_dir={tmp_path / 'afile'}"]) == 2
    assert "is a file, not a folder" in _err(capsys)


def test_the_quick_start_starts_fresh_on_purpose() -> None:
    """recipes/cpu/quickstart.sh runs checkpoint.resume=disable into the same folder every time: with --overwrite."""
    text = (REPO / "recipes" / "cpu" / "quickstart.sh").read_text()
    assert "-m verlog.train --overwrite" in text and "checkpoint.resume=disable" in text
    # its tiny-model target is emptied first (recipes/cpu/cpu_common.sh builds the start model in a clean folder)
    assert 'build_toy_start_model "$MODEL"' in text
    common = (REPO / "recipes" / "cpu" / "cpu_common.sh").read_text()
    body = common[common.index("build_toy_start_model() {") :]
    assert body.index('rm -rf "$1"') < body.index("}")


def test_overrides_may_come_after_an_option(capsys) -> None:
    from verlog.cli import main as cli_main

    assert main(["env=toy_delayed", "--dry-run", "iterations=7"]) == 0
    assert "\niterations: 7\n" in capsys.readouterr().out
    assert cli_main(["train", "env=toy_delayed", "--dry-run", "iterations=8"]) == 0
    assert "\niterations: 8\n" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_info:
        cli_main(["train", "--dry-run", "--no-such-option"])
    assert exit_info.value.code == 2 and "unrecognized arguments: --no-such-option" in capsys.readouterr().err
