"""verlog.sft: config, data checks before launch, the last-turn loss mask, a real 2-step run of verl's SFT trainer."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pandas as pd
import pytest
import torch

from verlog.cli import main as cli_main
from verlog.demos import DemoConfig, generate_demos, write_demos
from verlog.sft import (
    SFTConfigError,
    SFTDataError,
    check_data,
    keep_last_run,
    load_config,
    run_sft,
)

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("demos")
    config = DemoConfig("babyai/goto", episodes=6, seed_start=0, val_episodes=2)
    write_demos(generate_demos(config), out, config)
    return out


@pytest.fixture
def platform_env(monkeypatch):
    """enable_cpu_platform() writes these into os.environ: restore them after the test."""
    for key in ("VERL_USE_EXTERNAL_MODULES", "VERLOG_PLATFORM", "VERL_ENGINE_DEVICE", "VLLM_CPU_OMP_THREADS_BIND"):
        if key in os.environ:
            monkeypatch.setenv(key, os.environ[key])
        else:
            monkeypatch.delenv(key, raising=False)


@pytest.mark.parametrize(
    ("mask", "expected"),
    [
        ([0, 1, 1, 0, 0, 1, 1, 1, 0], [0, 0, 0, 0, 0, 1, 1, 1, 0]),
        ([1, 1, 0, 1], [0, 0, 0, 1]),
        ([0, 1, 1, 1], [0, 1, 1, 1]),
        ([0, 0, 0], [0, 0, 0]),
    ],
)
def test_keep_last_run(mask, expected):
    assert keep_last_run(torch.tensor(mask)).tolist() == expected


def test_config_yaml_overrides_and_errors(tmp_path):
    config = load_config(REPO / "configs" / "sft" / "cpu.yaml", ["train.steps=3", "data.loss_on=all"])
    assert config.train.steps == 3 and config.data.loss_on == "all"
    assert config.model.path == f"{config.output_dir}/base-model"
    with pytest.raises(SFTConfigError, match=r"train\.bogus"):
        load_config(None, ["train.bogus=1"])
    with pytest.raises(SFTConfigError, match="loss_on must be 'last' or 'all'"):
        load_config(None, ["data.loss_on=first"])
    with pytest.raises(SFTConfigError, match=r"batch_size \(5\) must be a positive multiple of train.nproc \(2\)"):
        load_config(None, ["train.nproc=2", "train.batch_size=5"])
    with pytest.raises(SFTConfigError, match="max_tokens_per_rank"):
        load_config(None, ["data.max_length=4096", "train.max_tokens_per_rank=1024"])
    with pytest.raises(SFTConfigError, match="does not exist"):
        load_config(tmp_path / "missing.yaml")


def test_check_data_reports_lengths(demo_dir, tokenizer):
    report = check_data(str(demo_dir / "train.parquet"), tokenizer, 1024)
    frame = pd.read_parquet(demo_dir / "train.parquet")
    assert report.rows == len(frame)
    first = [dict(m) for m in frame["messages"][0]]
    ids = tokenizer.apply_chat_template(first, tokenize=False)
    assert report.max_tokens >= len(tokenizer.encode(ids, add_special_tokens=False))
    assert 0 < report.loss_tokens < report.rows * report.max_tokens


def test_check_data_errors_name_the_fix(demo_dir, tokenizer, tmp_path):
    train = str(demo_dir / "train.parquet")
    with pytest.raises(SFTDataError, match=r"longer than data.max_length = 64 tokens \(longest: \d+ tokens"):
        check_data(train, tokenizer, 64)
    template = tokenizer.chat_template
    try:
        tokenizer.chat_template = None
        with pytest.raises(SFTDataError, match="has no chat template"):
            check_data(train, tokenizer, 1024)
    finally:
        tokenizer.chat_template = template
    pd.DataFrame({"prompt": ["hi"]}).to_parquet(tmp_path / "no_messages.parquet")
    with pytest.raises(SFTDataError, match="no 'messages' column"):
        check_data(str(tmp_path / "no_messages.parquet"), tokenizer, 1024)
    rows = [
        [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "?"}]
    ]
    pd.DataFrame({"messages": rows}).to_parquet(tmp_path / "user_last.parquet")
    with pytest.raises(SFTDataError, match="do not end with an assistant message"):
        check_data(str(tmp_path / "user_last.parquet"), tokenizer, 1024)
    check_data(str(tmp_path / "user_last.parquet"), tokenizer, 1024, loss_on="all")  # fine for verl's own masking
    rows = [[{"role": "narrator", "content": "hi"}, {"role": "assistant", "content": "ok"}]]
    pd.DataFrame({"messages": rows}).to_parquet(tmp_path / "bad_role.parquet")
    with pytest.raises(SFTDataError, match="role 'narrator'"):
        check_data(str(tmp_path / "bad_role.parquet"), tokenizer, 1024)


def test_dry_run_command_has_the_cpu_overrides(demo_dir, tiny_model, tmp_path, platform_env):
    config = load_config(
        None,
        [f"data.train={demo_dir}", f"model.path={tiny_model}", f"output_dir={tmp_path}", "train.batch_size=4",
         "train.steps=2", "verl=[trainer.max_ckpt_to_keep=1]"],
    )  # fmt: skip
    command = run_sft(config, dry_run=True)
    assert command[1:5] == ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node=1"]
    assert command[5:7] == ["-m", "verlog.sft"]
    for item in (
        f"data.train_files={demo_dir / 'train.parquet'}",
        f"data.val_files={demo_dir / 'val.parquet'}",
        "engine.strategy=fsdp2",
        "model.use_remove_padding=False",
        "+model.override_config.attn_implementation=sdpa",
        "engine.use_torch_compile=False",
        "data.num_workers=0",
        "trainer.device=cpu",
        "trainer.logger=[console]",
        "checkpoint.save_contents=[model,optimizer,extra,hf_model]",
        "+engine.mixed_precision={param_dtype:fp32,reduce_dtype:fp32,buffer_dtype:fp32}",
        "data.custom_cls.path=pkg://verlog.sft.data",
        "data.custom_cls.name=LastTurnSFTDataset",
    ):
        assert item in command, item
    assert command[-1] == "trainer.max_ckpt_to_keep=1"  # the user's verl overrides come last
    assert not (tmp_path / "checkpoints").exists()  # a dry run launches nothing


def test_cli_bad_data_fails_before_launch(tiny_model, tmp_path, capsys):
    bad = tmp_path / "bad"
    bad.mkdir()
    pd.DataFrame({"text": ["hello"]}).to_parquet(bad / "train.parquet")
    code = cli_main(["sft", f"data.train={bad}", f"model.path={tiny_model}", f"output_dir={tmp_path / 'out'}"])
    assert code == 2  # a bad input: `verlog sft: error: <what>; <fix>` on one line (it was a bare `error:`, exit 1)
    err = capsys.readouterr().err
    assert err.startswith("verlog sft: error: ") and "no 'messages' column" in err and err.count("\n") == 1
    assert not (tmp_path / "out").exists()
    assert cli_main(["sft", "train.steps=2", "stray"]) == 2
    assert "verlog sft: error: 'stray' is not key=value; only the first argument" in capsys.readouterr().err
    bogus = tmp_path / "bogus.parquet"  # a parquet name on another file: one line, not pyarrow's traceback
    bogus.write_text("not parquet")
    assert cli_main(["sft", f"data.train={bogus}", f"model.path={tiny_model}", f"output_dir={tmp_path / 'out'}"]) == 2
    err = capsys.readouterr().err
    assert "is not a parquet file" in err and err.count("\n") == 1 and "Traceback" not in err
    assert cli_main(["sft", str(tmp_path / "missing.yaml")]) == 2
    assert "does not exist; give an SFT YAML" in capsys.readouterr().err


@pytest.mark.slow
def test_last_turn_dataset_masks_only_the_final_answer(demo_dir, tokenizer):
    """verl's dataset (through our subclass): the tokens before the loss are the rollout prompt, the loss covers the
    final answer and its end-of-turn, and earlier "Previous plan:" answers stay context."""
    from verl.utils.dataset.multiturn_sft_dataset import MultiTurnSFTDataset

    from verlog.sft.data import LastTurnSFTDataset

    path = str(demo_dir / "train.parquet")
    cfg = {"pad_mode": "no_padding", "max_length": 1024, "truncation": "error"}
    ours, verls = LastTurnSFTDataset(path, tokenizer, cfg), MultiTurnSFTDataset(path, tokenizer, cfg)
    frame = pd.read_parquet(path)
    history_rows = 0
    for i, raw in enumerate(frame["messages"]):
        messages = [dict(m) for m in raw]
        prompt_text = tokenizer.apply_chat_template(messages[:-1], tokenize=False, add_generation_prompt=True)
        prompt = tokenizer.encode(prompt_text, add_special_tokens=False)
        answer = tokenizer.encode(messages[-1]["content"] + "<|im_end|>\n", add_special_tokens=False)
        row = ours[i]
        assert row["input_ids"].tolist() == prompt + answer
        assert row["loss_mask"].tolist() == [0] * len(prompt) + [1] * len(answer)
        if sum(m["role"] == "assistant" for m in messages) > 1:
            history_rows += 1
            assert verls[i]["loss_mask"].sum() > row["loss_mask"].sum()  # verl's own trains the history too
    assert history_rows > 0


@pytest.mark.slow
def test_two_step_sft_run_writes_a_loadable_changed_model(demo_dir, tmp_path, platform_env):
    from omegaconf import OmegaConf
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from verlog.trainer.runner import prepare_model

    base = tmp_path / "base"
    config = load_config(
        REPO / "configs" / "sft" / "cpu.yaml",
        [f"data.train={demo_dir}", f"output_dir={tmp_path / 'sft'}", f"model.path={base}",
         "model.tiny.hidden_size=64", "model.tiny.num_layers=2", "model.tiny.num_heads=2", "model.tiny.num_kv_heads=1",
         "model.tiny.intermediate_size=128", "model.tiny.vocab_size=512",
         "train.batch_size=4", "train.steps=2", "train.warmup_ratio=0"],
    )  # fmt: skip
    result = run_sft(config)
    assert result.steps == 2 and len(result.losses) == 2 and all(math.isfinite(x) for x in result.losses)
    assert len(result.val_losses) == 1 and math.isfinite(result.val_losses[0])
    model_dir = Path(result.model_dir)
    assert model_dir == tmp_path / "sft" / "model"
    assert json.loads((model_dir / "config.json").read_text())["dtype"] == "float32"
    metrics = [json.loads(line) for line in (tmp_path / "sft" / "sft_metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics if "train/loss" in m] == [1, 2]

    model = AutoModelForCausalLM.from_pretrained(model_dir)
    assert next(model.parameters()).dtype == torch.float32
    start = load_file(str(base / "model.safetensors"))
    trained = model.state_dict()
    changed = [k for k, v in start.items() if k in trained and not torch.equal(v, trained[k])]
    assert len(changed) >= len(start) // 2, f"only {changed} changed"
    tok = AutoTokenizer.from_pretrained(model_dir)
    assert tok.chat_template is not None
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False)
    with torch.no_grad():
        logits = model(torch.tensor([tok.encode(text, add_special_tokens=False)])).logits
    assert torch.isfinite(logits).all()
    # `verlog train model.path=<model_dir>` takes the folder as it is (no tiny model is built over it)
    assert prepare_model(OmegaConf.create({"model": {"path": str(model_dir), "build_tiny": True}})) == str(model_dir)
