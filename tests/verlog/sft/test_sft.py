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
from verlog.sft import (
    SFTConfigError,
    SFTDataError,
    check_data,
    keep_last_run,
    load_config,
    run_sft,
)
from verlog.sft.demos import DemoConfig, generate_demos, write_demos

REPO = Path(__file__).resolve().parents[3]


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


TINY = ["model.build_tiny=true", "model.tiny.hidden_size=64", "model.tiny.num_heads=2", "model.tiny.num_kv_heads=1",
        "model.tiny.num_layers=1", "model.tiny.intermediate_size=64", "model.tiny.vocab_size=400",
        "model.tokenizer_from_data=true"]  # fmt: skip


def test_a_dry_run_with_bad_data_builds_no_model(demo_dir, tmp_path, capsys, monkeypatch, platform_env):
    """issue 37: `verlog sft --dry-run` with model.build_tiny checks the data with the tokenizer the model would get
    (trained, not built) and refuses bad data with nothing written (it built a 38 MB model first and left it
    behind); with good data it prints the command and builds nothing either."""
    monkeypatch.chdir(tmp_path)
    rows = [[{"role": "user", "content": "hi"}, {"role": "user", "content": "no answer"}]] * 20
    pd.DataFrame({"messages": rows}).to_parquet(tmp_path / "bad.parquet")
    args = ["sft", str(REPO / "configs" / "sft" / "cpu.yaml"), "--dry-run", "output_dir=out", *TINY]
    assert cli_main([*args, "data.train=bad.parquet"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "verlog sft: error: bad.parquet row 0: roles ['user', 'user'] do not end with an assistant message, so it "
        "has nothing to learn\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.parquet"]
    assert cli_main([*args, f"data.train={demo_dir}", "data.max_length=40", "train.max_tokens_per_rank=40"]) == 2
    assert "rows of" in capsys.readouterr().err and not (tmp_path / "out").exists()  # too long for the tokenizer
    assert cli_main([*args, f"data.train={demo_dir}", "train.batch_size=2"]) == 0
    out = capsys.readouterr().out
    assert f"model.path={tmp_path / 'out' / 'base-model'}" in out.split()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.parquet"]  # no model, no output_dir


def test_the_checks_tokenizer_is_the_one_the_built_model_gets(demo_dir, tmp_path):
    """The tokenizer the data are checked with before a tiny model is built is the one the built model gets (BPE
    training may break ties differently from one run to the next, so it is not trained twice)."""
    from transformers import AutoTokenizer

    from verlog.sft.launch import model_tokenizer, prepare_model

    config = load_config(None, [f"model.path={tmp_path / 'base'}", *TINY])
    train = str(demo_dir / "train.parquet")
    checked, trained = model_tokenizer(config.model, train)
    assert not (tmp_path / "base").exists()
    built = AutoTokenizer.from_pretrained(prepare_model(config.model, train, tokenizer=trained))
    texts = [m["content"] for raw in pd.read_parquet(train)["messages"] for m in raw]
    assert [checked.encode(t) for t in texts] == [built.encode(t) for t in texts]
    assert checked.chat_template == built.chat_template


def test_overrides_go_on_both_sides_of_an_option(demo_dir, tiny_model, tmp_path, capsys, platform_env):
    """issue 37: `verlog sft CONFIG --dry-run k=v` (it was refused: unrecognized arguments)."""
    config = REPO / "configs" / "sft" / "cpu.yaml"
    before = [f"model.path={tiny_model}", f"output_dir={tmp_path / 'out'}"]
    after = [f"data.train={demo_dir}", "train.batch_size=2", "train.steps=3"]
    assert cli_main(["sft", str(config), *before, "--dry-run", *after]) == 0
    out = capsys.readouterr().out.split()
    assert "data.train_batch_size=2" in out and "trainer.total_training_steps=3" in out
    assert f"model.path={tiny_model}" in out and not (tmp_path / "out").exists()
    assert cli_main(["sft", "--dry-run", str(config), *before, *after]) == 0
    assert capsys.readouterr().out.split() == out
    assert cli_main(["sft", str(config), "--dry-run", *after, "stray"]) == 2
    assert "'stray' is not key=value; only the first argument" in capsys.readouterr().err


def test_sft_without_a_config_says_what_it_needs(tmp_path, capsys, monkeypatch):
    """issue 37: `verlog sft` alone said that 'outputs/sft/base-model' is not a Hugging Face repo id."""
    monkeypatch.chdir(tmp_path)
    for args in (["sft"], ["sft", "--dry-run"]):
        assert cli_main(args) == 2
        assert capsys.readouterr().err == (
            "verlog sft: error: no SFT config and no settings given: verlog sft needs an SFT YAML (the model, the "
            "data, the training length), then key=value overrides, e.g. verlog sft configs/sft/cpu.yaml "
            "data.train=outputs/demos/babyai-goto; docs/sft.md lists the keys\n"
        )
    (tmp_path / "outputs" / "demos").mkdir(parents=True)  # the default data.train exists; the default model does not
    pd.DataFrame({"messages": [[{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]]}).to_parquet(
        tmp_path / "outputs" / "demos" / "train.parquet"
    )
    assert cli_main(["sft", "train.steps=2", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "verlog sft: error: model.path 'outputs/sft/base-model' is not a model folder (no config.json): give the "
        "folder of the model to fine-tune"
    )
    assert "Repo id" not in err and err.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["outputs"]


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
def test_two_step_sft_run_writes_a_loadable_changed_model(demo_dir, tmp_path, platform_env, capsys):
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
    # the console: verlog's lines, a progress line per step here (about ten in a longer run); verl's output in the log
    console = capsys.readouterr().out.splitlines()
    assert all(line.startswith("[verlog sft] ") for line in console), console
    assert [line.split(" |")[0] for line in console if " step " in line] == [
        "[verlog sft] step 1/2",
        "[verlog sft] step 2/2",
    ]
    assert "step:2 - " in (tmp_path / "sft" / "logs" / "sft.log").read_text()
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
