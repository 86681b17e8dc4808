"""The ``verl:`` section checked before anything starts (verlog/config/preflight.py, ``check_verl_section``): an
unknown verl key is one line naming it, verl's closest keys and the fix, with ``--dry-run`` as with a launch (issue
37: it was OmegaConf's multi-line "Key ... is not in struct" text, at launch after a tiny model had been built)."""

from __future__ import annotations

from pathlib import Path

import pytest

from verlog.commands.train import main
from verlog.config.checks import typed_config
from verlog.config.compose import load_config
from verlog.config.preflight import VERL_KEYS_VERLOG_ADDS, check_verl_section, verl_ppo_config


def _problems(*overrides: str) -> list[str]:
    cfg, problems = typed_config(load_config(list(overrides)))
    assert not problems
    return [str(p) for p in check_verl_section(cfg)]


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "verl.actor_rollout_ref.actor.ppo_mini_bach_size=4",
            "verl.actor_rollout_ref.actor.ppo_mini_bach_size: verl's PPO config has no key 'ppo_mini_bach_size' under "
            "verl.actor_rollout_ref.actor. Did you mean verl.actor_rollout_ref.actor.ppo_mini_batch_size, ",
        ),
        (  # the right name in another section
            "verl.actor_rollout_ref.ppo_mini_batch_size=4",
            "Did you mean verl.actor_rollout_ref.actor.ppo_mini_batch_size, verl.critic.ppo_mini_batch_size? Write "
            "verl.actor_rollout_ref.actor.ppo_mini_batch_size=4, or drop it; the verl: section takes only the keys of "
            "verl's own PPO config (verl/trainer/config/ppo_trainer.yaml in the verl package)",
        ),
        ("verl.trainr.total_epochs=3", "no key 'trainr' at its top level. Did you mean verl.trainer.total_epochs?"),
        ("verl.trainer.nonsense=1", "no key 'nonsense' under verl.trainer. Keys under verl.trainer: balance_batch, "),
    ],
)
def test_an_unknown_verl_key_is_one_line_with_the_closest_keys(
    override: str, message: str, tmp_path: Path, capsys, monkeypatch
) -> None:
    import verlog.trainer.runner

    started: list = []
    monkeypatch.setattr(verlog.trainer.runner, "train", started.append)
    out = f"output_dir={tmp_path / 'run'}"
    for args in (["--dry-run", out, override], [out, override]):  # a launch refuses it as early
        assert main(args) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"verlog train: error: {override.split('=')[0]}: ") and message in err, err
        assert err.count("\n") == 1 and "full_key" not in err and "Traceback" not in err
    assert not started and not (tmp_path / "run").exists()


def test_verls_keys_and_the_keys_verlog_adds_are_taken() -> None:
    assert not _problems(
        "verl.actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "verl.trainer.total_epochs=3",
        "verl.actor_rollout_ref.actor.checkpoint.save_contents=[model,optimizer,extra,hf_model]",
        "verl.actor_rollout_ref.rollout.enable_sleep_mode=false",  # added by verlog (+key)
        "verl.actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=bf16",  # under one verlog adds
        "verl.actor_rollout_ref.model.custom_chat_template.x=1",  # a null value in verl's config: verl decides
    )
    assert len(_problems("verl.trainer.nonsense=1", "verl.critic.optim.lrr=1")) == 2  # every problem at once


def test_the_keys_verlog_adds_are_the_plus_keys_of_its_verl_overrides() -> None:
    """VERL_KEYS_VERLOG_ADDS mirrors the keys verlog/trainer/config.py adds to verl's config with Hydra's `+`, on the
    CPU profile and on a GPU one; each is absent from verl's own config (else it would not need the `+`)."""
    from verlog.trainer.config import verl_overrides

    added = set()
    for profile in ([], ["hardware=8xh100"]):
        cfg, _ = typed_config(load_config(profile))
        added |= {o[1:].split("=", 1)[0] for o in verl_overrides(cfg) if o.startswith("+")}
    assert added == set(VERL_KEYS_VERLOG_ADDS)
    base = verl_ppo_config()
    assert base is not None
    for key in VERL_KEYS_VERLOG_ADDS:
        node = base
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        assert node is None, f"{key} is in verl's own config"
