"""verlog/config: the typed schema, the checks before launch (every problem at once, each with its fix)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from verlog.commands.train import main
from verlog.config.checks import Problem, TrainConfigError, check_config, check_sizes, check_values, typed_config
from verlog.config.compose import load_config
from verlog.config.preflight import (
    CharTokenEstimate,
    check_model,
    check_resume,
    looks_like_a_hub_id,
    preflight,
)
from verlog.config.schema import LOGGERS, TrainConfig

REPO = Path(__file__).resolve().parents[3]

# the accepted-but-wrong inputs of issue 14, each with a text its problem must contain
BAD = {
    "memory.n=-1": "memory.n: -1 must be an integer >= 0",
    "algorithm.step_gamma=1.5": "algorithm.step_gamma: 1.5 must be in [0, 1]",
    "sampling.top_p=1.5": "sampling.top_p: 1.5 must be in (0, 1]",
    "rollout.max_prompt_tokens=10": "rollout.max_prompt_tokens: 10 tokens do not hold the first prompt of babyai/goto",
    "algorithm.ppo_epochs=0": "algorithm.ppo_epochs: 0 must be an integer >= 1",
    "logger=[consol]": "Did you mean logger=console?",
    "env.kwargs.parse_mode=strictt": "Did you mean env.kwargs.parse_mode=strict?",
    "model.path=/no/such": "model.path: '/no/such' does not exist",
    "seed=abc": "seed: 'abc' is not of type int",
    "hardware.n_gpus_per_node=0": "hardware.n_gpus_per_node: 0 must be an integer >= 1",
    "checkpoint.resume=autoo": "Did you mean checkpoint.resume=auto?",
}


def test_dry_run_reports_every_bad_setting_at_once(capsys) -> None:
    # model.build_tiny=false: with it, model.path is where a tiny model is built (checked to be creatable)
    assert main(["--dry-run", "model.build_tiny=false", *BAD]) == 2
    captured = capsys.readouterr()
    err = captured.err
    assert "Traceback" not in err and not captured.out
    assert err.startswith(f"verlog train: error: {len(BAD)} problems in the config (nothing was started):")
    for override, text in BAD.items():
        assert text in err, f"{override}: {text!r} not in\n{err}"
    assert len(re.findall(r"^  - ", err, re.M)) == len(BAD)  # one line each


def test_console_script_reports_them_without_a_traceback(tmp_path: Path) -> None:
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "verlog", "train", "--dry-run", "model.build_tiny=false", *BAD],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert all(text in proc.stderr for text in BAD.values())


def test_ctrl_c_exits_130_with_one_line(monkeypatch, capsys) -> None:
    import verlog.trainer.runner

    def interrupted(cfg):
        raise KeyboardInterrupt

    monkeypatch.setattr(verlog.trainer.runner, "train", interrupted)
    assert main(["env=toy_delayed", "checkpoint.resume=disable", f"output_dir={REPO}/outputs/never-written"]) == 130
    err = capsys.readouterr().err
    assert err.strip() == "verlog train: interrupted" and "Traceback" not in err


def test_dry_run_refuses_exactly_what_the_launch_refuses(tmp_path: Path, monkeypatch, capsys) -> None:
    """Each of these passed --dry-run and was refused by the launch (or failed after Ray started)."""
    import verlog.trainer.runner

    started: list = []
    monkeypatch.setattr(verlog.trainer.runner, "train", started.append)
    other_run = tmp_path / "other_run"
    other_run.mkdir()
    (other_run / "metrics.jsonl").write_text('{"step": 1}\n')
    out = f"output_dir={tmp_path / 'run'}"
    cases = {
        "env.num_workers=0": [out, "env.num_workers=0"],
        "step limit": [out, "algorithm.estimator=grpo", "rollout.group_size=2"],
        "another run": [f"output_dir={other_run}", "checkpoint.resume=disable"],
        "tiny sizes": [out, "model.tiny.hidden_size=40"],
    }
    for name, overrides in cases.items():
        assert main(["--dry-run", *overrides]) == 2, name
        dry = capsys.readouterr().err
        assert main(overrides) == 2, name
        assert capsys.readouterr().err == dry and dry.startswith("verlog train: error: "), name
    assert not started and not (tmp_path / "run").exists()


def test_typed_config_converts_and_names_wrong_types() -> None:
    cfg, problems = typed_config(load_config(["iterations=7", "sampling.top_p=0.5"]))
    assert isinstance(cfg, TrainConfig) and not problems
    assert (cfg.iterations, cfg.sampling.top_p, cfg.rollout.num_slots) == (7, 0.5, 4)
    assert cfg.model.path == "outputs/verlog-train/tiny-model"  # interpolations resolved
    cfg, problems = typed_config(load_config(["seed=abc", "hardware.cpu=maybe", "rollout.num_slots=2.5"]))
    assert {p.key for p in problems} == {"seed", "hardware.cpu", "rollout.num_slots"}
    assert cfg.seed == 0  # a bad value keeps the default, so the other checks can run
    assert "write hardware.cpu=true or hardware.cpu=false" in str(next(p for p in problems if p.key == "hardware.cpu"))


def test_typed_config_refuses_a_key_the_schema_lacks() -> None:
    data = OmegaConf.to_container(load_config([]), resolve=True)
    data["rollout"]["num_slot"] = 3
    _, problems = typed_config(data)
    assert problems == [problems[0]] and problems[0].key == "rollout.num_slot"
    assert "Did you mean rollout.num_slots?" in problems[0].message


@pytest.mark.parametrize(
    ("change", "key", "text"),
    [
        ({"iterations": 0}, "iterations", ">= 1"),
        ({"seed": -1}, "seed", ">= 0"),
        ({"rollout.turns_per_slot": 0}, "rollout.turns_per_slot", ">= 1"),
        ({"rollout.max_response_tokens": 0}, "rollout.max_response_tokens", ">= 1"),
        ({"sampling.temperature": -0.1}, "sampling.temperature", ">= 0"),
        ({"sampling.top_p": 0.0}, "sampling.top_p", "(0, 1]"),
        ({"sampling.top_k": -2}, "sampling.top_k", "-1, 0 (off)"),
        ({"algorithm.token_lam": -0.1}, "algorithm.token_lam", "[0, 1]"),
        ({"algorithm.clip_ratio": 0.0}, "algorithm.clip_ratio", "> 0"),
        ({"checkpoint.save_freq": 0}, "checkpoint.save_freq", "-1 (never)"),
        ({"hardware.rollout_gpu_memory_utilization": 1.5}, "hardware.rollout_gpu_memory_utilization", "(0, 1]"),
        ({"memory.answer_format": "cott"}, "memory.answer_format", "Did you mean memory.answer_format=cot?"),
        ({"algorithm.estimator": "ppo"}, "algorithm.estimator", "not one of dual_gae, grpo, gigpo"),
        ({"algorithm.advantage_level": "turns"}, "algorithm.advantage_level", "turn"),
        ({"logger": []}, "logger", "logger is empty"),
        ({"env.id": None}, "env.id", "env.id is not set"),
    ],
)
def test_check_values_names_the_key_the_range_and_a_fix(change, key, text) -> None:
    cfg = OmegaConf.structured(TrainConfig)
    for dotted, value in change.items():
        OmegaConf.update(cfg, dotted, value, merge=False)
    problems = check_values(OmegaConf.to_object(cfg))
    assert [p.key for p in problems] == [key]
    assert text in str(problems[0])


def test_the_defaults_pass_every_check() -> None:
    assert check_values(TrainConfig()) == [] and check_sizes(TrainConfig()) == []


def test_sizes_are_checked_without_dividing_by_zero() -> None:
    cfg = TrainConfig()
    cfg.hardware.n_gpus_per_node = 0
    assert check_sizes(cfg) == []  # reported by check_values, not divided by
    cfg = TrainConfig()
    cfg.rollout.num_slots, cfg.algorithm.mini_batches = 3, 5
    (problem,) = check_sizes(cfg)
    assert "the 12 rows of an iteration (num_slots 3 x turns_per_slot 4)" in problem.message
    cfg = TrainConfig()
    cfg.hardware.rollout_tp = 3
    assert [p.key for p in check_sizes(cfg)] == ["hardware.rollout_tp"]


def test_derived_sizes_are_defined_once() -> None:
    cfg = TrainConfig()
    cfg.rollout.num_slots, cfg.rollout.turns_per_slot, cfg.algorithm.mini_batches = 8, 4, 4
    cfg.hardware.n_gpus_per_node, cfg.hardware.nnodes, cfg.hardware.micro_batch_size_per_gpu = 2, 2, 8
    assert (cfg.rows_per_iteration, cfg.mini_batch_rows, cfg.ranks, cfg.micro_batch_rows) == (32, 8, 4, 2)
    # a rank's share of a mini-batch must split into whole micro-batches (verl asserts it in the update): 120 rows,
    # 4 mini-batches, 2 ranks -> 15 rows a rank; a cap of 8 gives micro-batches of 5
    cfg.rollout.num_slots, cfg.rollout.turns_per_slot, cfg.hardware.nnodes = 24, 5, 1
    assert (cfg.mini_batch_rows // cfg.ranks, cfg.micro_batch_rows) == (15, 5)
    cfg.rollout.num_slots, cfg.rollout.turns_per_slot, cfg.hardware.nnodes = 8, 4, 2
    cfg.iterations, cfg.algorithm.warmup_rollout_multiplier = 5, 3
    assert (cfg.warmup_rollout_turns, cfg.max_turns_per_slot) == (12, 32)
    from verlog.trainer.config import verl_overrides

    assert "data.train_batch_size=32" in verl_overrides(cfg)


def test_resume_must_be_a_mode_or_an_existing_checkpoint(tmp_path: Path) -> None:
    cfg = TrainConfig()
    for value in ("auto", "disable"):
        cfg.checkpoint.resume = value
        assert check_values(cfg) == [] and check_resume(cfg) == []
    step = tmp_path / "checkpoints" / "global_step_4"
    step.mkdir(parents=True)
    cfg.checkpoint.resume = str(step)
    assert check_values(cfg) == [] and check_resume(cfg) == []
    cfg.checkpoint.resume = str(tmp_path / "checkpoints" / "global_step_5")
    (problem,) = check_resume(cfg)
    assert "does not exist" in problem.message and "global_step_4" in problem.message
    cfg.checkpoint.resume = str(tmp_path / "checkpoints")
    assert "is not a checkpoint folder" in check_resume(cfg)[0].message
    cfg.checkpoint.resume = "Disable"
    assert "Did you mean checkpoint.resume=disable?" in check_values(cfg)[0].message


def test_model_path_is_a_folder_a_hub_id_or_built(tmp_path: Path) -> None:
    cfg = TrainConfig()
    cfg.model.build_tiny = False
    cfg.model.path = "Qwen/Qwen2.5-3B-Instruct"
    assert looks_like_a_hub_id(cfg.model.path) and check_model(cfg) == []
    cfg.model.path = str(tmp_path)
    assert "holds no config.json" in check_model(cfg)[0].message
    (tmp_path / "config.json").write_text("{}")
    assert "holds a config.json but no weights" in check_model(cfg)[0].message
    cfg.model.path = "./models/mine"
    assert "does not exist" in check_model(cfg)[0].message
    cfg.model.build_tiny = True  # built at launch: the folder must be creatable
    cfg.model.path = str(tmp_path / "new" / "tiny")
    assert check_model(cfg) == []
    (tmp_path / "afile").write_text("x")
    cfg.model.path = str(tmp_path / "afile" / "tiny")
    assert "cannot create it" in check_model(cfg)[0].message


def test_a_model_folder_must_load_as_the_launch_loads_it(tiny_model: Path, tmp_path: Path) -> None:
    """A truncated config.json, missing weights, no chat template or a context below the prompt budget plus the
    response passed --dry-run and failed after Ray and the workers had started (or with a traceback)."""
    import json
    import shutil

    cfg = TrainConfig()
    cfg.model.build_tiny = False
    cfg.model.path = str(tiny_model)
    assert check_model(cfg) == []

    def copy(name: str) -> Path:
        folder = tmp_path / name
        shutil.copytree(tiny_model, folder)
        cfg.model.path = str(folder)
        return folder

    config = (tiny_model / "config.json").read_text()
    (copy("truncated") / "config.json").write_text(config[: len(config) // 2])
    (problem,) = check_model(cfg)
    assert "truncated" in problem.message and "config.json does not parse" in problem.message
    (copy("no_weights") / "model.safetensors").unlink()
    assert "holds a config.json but no weights (*.safetensors" in check_model(cfg)[0].message
    short = copy("short")
    (short / "config.json").write_text(json.dumps({**json.loads(config), "max_position_embeddings": 512}))
    (problem,) = check_model(cfg)
    assert problem.key == "rollout.max_prompt_tokens" and problem.message.startswith(
        "rollout.max_prompt_tokens=1024 + rollout.max_response_tokens=512 = 1536 tokens exceed the model's context "
        "of 512 tokens (max_position_embeddings in"
    )
    assert "e.g. rollout.max_prompt_tokens=384 rollout.max_response_tokens=128" in problem.message
    base = copy("base")  # a base model's tokenizer: no chat template
    (base / "chat_template.jinja").unlink()
    assert "has no chat template" in check_model(cfg)[0].message
    cfg.model.build_tiny = True  # a model folder already there is used as it is, so it is checked the same
    assert "has no chat template" in check_model(cfg)[0].message


def test_the_tiny_model_built_at_launch_is_checked_first() -> None:
    """model.tiny's sizes failed in build_tiny_model at launch, with a traceback."""
    cfg = TrainConfig()
    assert check_model(cfg) == []
    cfg.model.tiny = {**cfg.model.tiny, "hidden_size": 40}
    assert [str(p) for p in check_model(cfg)] == [
        "model.tiny: head_dim = hidden_size / num_heads = 20; vLLM's CPU attention needs >= 32: raise hidden_size or "
        "lower num_heads"
    ]
    cfg.model.tiny = {"hiden_size": 96}
    assert "model.tiny has no size hiden_size: its sizes are hidden_size, num_layers" in str(check_model(cfg)[0])
    cfg.model.tiny = {"max_position_embeddings": 1000}
    (problem,) = check_model(cfg)
    assert problem.key == "rollout.max_prompt_tokens" and "exceed the tiny model's context of 1000 tokens" in str(
        problem
    )


def test_prompt_budget_counts_with_the_models_tokenizer_when_there_is_one(tiny_model: Path) -> None:
    overrides = ["model.build_tiny=false", f"model.path={tiny_model}", "rollout.max_prompt_tokens=64"]
    with pytest.raises(TrainConfigError, match=f"counted with the tokenizer of {tiny_model}"):
        preflight(load_config(overrides))
    with pytest.raises(TrainConfigError, match="an estimate of 4 characters per token"):
        preflight(load_config(["rollout.max_prompt_tokens=64"]))
    preflight(load_config(["model.build_tiny=false", f"model.path={tiny_model}"]))


def test_char_estimate_counts_four_characters_a_token() -> None:
    tok = CharTokenEstimate()
    assert len(tok.encode("x" * 9)) == 3
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert text.endswith("<|im_start|>assistant\n")


def test_an_own_config_dir_reports_problems_of_its_env_config(tmp_path: Path, capsys) -> None:
    (tmp_path / "env").mkdir()
    (tmp_path / "env" / "mine.yaml").write_text("name: mine\nid: toy/delayed\nkwargs:\n  length: 0\n  parse_mode: x\n")
    assert main(["--config-dir", str(tmp_path), "env=mine", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "env.kwargs.parse_mode: 'x' is not one of strict, lenient, naive" in err and "Traceback" not in err


def test_problem_text_and_error() -> None:
    one = TrainConfigError([Problem("seed", "'x' is not of type int")])
    assert str(one) == "seed: 'x' is not of type int" and len(one.problems) == 1
    assert str(Problem("env.id", "env.id is not set")) == "env.id is not set"
    assert str(TrainConfigError("plain text")) == "plain text"


def test_schema_defaults_are_the_default_yaml() -> None:
    """The dataclass defaults and configs/' defaults (train.yaml with its default group options) agree."""
    composed, problems = typed_config(load_config([]))
    assert not problems
    defaults = TrainConfig()
    # the env config's own task key and the evaluation temperature (an interpolation) are set by the YAML only
    assert dataclasses.replace(composed, env=defaults.env) == defaults
    assert composed.env.id == defaults.env.id and composed.env.kwargs["parse_mode"] == "strict"


def test_loggers_are_verls_tracking_backends() -> None:
    source = (Path(__import__("verl").__file__).parent / "utils" / "tracking.py").read_text()
    block = re.search(r"supported_backend = \[(.*?)\]", source, re.S)
    assert block is not None
    assert set(re.findall(r'"(\w+)"', block.group(1))) == set(LOGGERS)


def test_values_that_leave_python_keep_their_type() -> None:
    """VLLM_CPU_KVCACHE_SPACE is read by vLLM as an integer: "1.0" failed the engine start."""
    cfg, problems = typed_config(load_config([]))
    assert not problems and str(cfg.hardware.vllm_kv_cache_gib) == "1"
    _, problems = typed_config(load_config(["hardware.vllm_kv_cache_gib=1.5"]))
    assert [p.key for p in problems] == ["hardware.vllm_kv_cache_gib"]


def test_a_resume_with_other_env_slots_is_refused_before_anything_starts(tmp_path: Path) -> None:
    """The checkpoint's verlog_rollout.pkl (written here by a real pool's state) is read before launch."""
    import pickle

    from verlog.config.preflight import check_resume_state
    from verlog.rollout import make_env_pool

    pool = make_env_pool("toy/delayed", 4, env_kwargs={"length": 3})
    pool.reset(seeds=0)
    state = {"format": "verlog.rollout/1", "num_slots": 4, "env_ids": list(pool.env_ids), "curriculum": None}
    step = tmp_path / "out" / "checkpoints" / "global_step_2"
    step.mkdir(parents=True)
    (step / "verlog_rollout.pkl").write_bytes(pickle.dumps(state))
    (step.parent / "latest_checkpointed_iteration.txt").write_text("2")
    cfg = TrainConfig()
    cfg.output_dir = str(tmp_path / "out")
    cfg.env.id, cfg.rollout.num_slots = "toy/delayed", 4
    assert check_resume_state(cfg) == []  # auto: the latest checkpoint, the same slots
    cfg.env.id, cfg.rollout.num_slots = "babyai/goto", 8
    problems = {p.key: p.message for p in check_resume_state(cfg)}
    assert "has 4 env slots, this run 8" in problems["rollout.num_slots"]
    assert "['toy/delayed'], this run env.id=babyai/goto" in problems["env.id"]
    cfg.env.tasks = {"a": "toy/delayed"}
    assert "saved by a single-task run and this run is multi-task" in check_resume_state(cfg)[-1].message
    cfg.checkpoint.resume = "disable"
    assert check_resume_state(cfg) == []  # a fresh run reads no checkpoint
    cfg.checkpoint.resume = str(step)
    assert check_resume_state(cfg)  # an explicit path is read too


@pytest.mark.parametrize(
    ("overrides", "text"),
    [
        (["env=toy_lengths", "curriculum.kind=secc"], "curriculum.kind is 'secc' (did you mean 'sec'?)"),
        (["env=toy_lengths", "curriculum.kind=sec", "curriculum.alpha=0"], "alpha"),
        (["env=toy_lengths", "curriculum.kind=weighted"], "weight"),
        (["curriculum.kind=sec"], "curriculum.kind=sec draws among task families, but env.tasks is empty"),
        (["env=toy_lengths", "+env.tasks.bad=babyai/nope"], "env.tasks.bad 'babyai/nope' is not a registered env"),
        (["env=toy_lengths", "+env.tasks.bad.env=toy/delayed"], "env.tasks.bad: give an env id"),
        (["env=toy_lengths", "+env.tasks.bad.id=toy/delayed", "+env.tasks.bad.kwargs.colour=red"], "env.tasks.bad"),
    ],
)
def test_multi_task_settings_are_checked_before_launch(overrides, text, capsys) -> None:
    assert main(["--dry-run", *overrides]) == 2
    err = capsys.readouterr().err
    assert text in err and "Traceback" not in err, err


def test_multi_task_settings_pass(capsys) -> None:
    assert main(["--dry-run", "env=toy_lengths", "curriculum.kind=sec"]) == 0
    weights = ["+env.tasks.goto.weight=1", "+env.tasks.pickup.weight=2", "+env.tasks.open.weight=1"]
    assert main(["--dry-run", "env=babyai_tasks", "curriculum.kind=weighted", *weights]) == 0  # as its header says


SHIPPED_ENV_CONFIGS = sorted(p.stem for p in (REPO / "configs" / "env").glob("*.yaml"))
SHIPPED_GROUP_OPTIONS = sorted(
    f"{group}={path.stem}"
    for group in ("model", "hardware", "algorithm")
    for path in (REPO / "configs").glob(f"{group}/*.yaml")
)
# what an env config needs besides itself (custom is a template: its header says to give env.id)
ENV_CONFIG_NEEDS = {"custom": ["env.id=toy/delayed"]}


@pytest.mark.parametrize("name", SHIPPED_ENV_CONFIGS)
def test_every_shipped_env_config_passes_its_own_dry_run(name: str, tmp_path: Path, capsys) -> None:
    """env=babyai_tasks used to refuse its own default curriculum (weights with curriculum.kind=uniform)."""
    assert main(["--dry-run", f"env={name}", f"output_dir={tmp_path / 'run'}", *ENV_CONFIG_NEEDS.get(name, [])]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("# verlog train --dry-run: nothing was started"), captured.err
    assert not (tmp_path / "run").exists()  # a dry run writes nothing


@pytest.mark.parametrize("option", SHIPPED_GROUP_OPTIONS)
def test_every_shipped_group_option_passes_its_dry_run(option: str, tmp_path: Path, capsys) -> None:
    """configs/model, hardware and algorithm: each option with the rest of the defaults (a Hugging Face id is not
    downloaded by a dry run)."""
    assert main(["--dry-run", option, f"output_dir={tmp_path / 'run'}"]) == 0, capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def documented_train_commands() -> list[list[str]]:
    """The ``verlog train`` commands of the docs' code blocks that stand alone: only ``key=value`` overrides, no
    placeholder (``...``, ``<name>``, ``DIR``), no path that must exist (a checkpoint, a model folder)."""
    commands = []
    for doc in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for block in re.findall(r"```[a-z]*\n(.*?)```", doc.read_text(encoding="utf-8"), re.S):
            for line in block.splitlines():
                words = line.split("#")[0].split()
                if words[:2] != ["verlog", "train"] or len(words) < 3:
                    continue
                args = words[2:]
                standalone = all(re.fullmatch(r"[\w.+~-]+=[^<>.][^<>]*", a) and "..." not in a for a in args)
                if standalone and not any(a.startswith(("checkpoint.resume=", "model.path=")) for a in args):
                    commands.append(args)
    return commands


def test_the_documented_train_commands_pass_their_dry_run(tmp_path: Path, capsys) -> None:
    """docs/curriculum.md's ``verlog train env=babyai_tasks curriculum.kind=sec`` used to be refused."""
    commands = documented_train_commands()
    assert ["env=babyai_tasks", "curriculum.kind=sec"] in commands
    for args in commands:
        args = [a for a in args if not a.startswith("output_dir=")]
        assert main(["--dry-run", *args, f"output_dir={tmp_path / 'run'}"]) == 0, (args, capsys.readouterr().err)
    assert not (tmp_path / "run").exists()


def test_one_class_per_section_and_the_moved_sampling_key() -> None:
    """The sections a plain module receives are that module's classes (one each); training's response length is
    ``rollout.max_response_tokens``, and ``sampling.max_tokens`` says so."""
    from verlog.algorithms import curriculum
    from verlog.config import schema
    from verlog.prompting import memory, sampling
    from verlog.tapes import recorders as tapes

    assert schema.SamplingConfig is sampling.SamplingConfig and schema.MemoryConfig is memory.MemoryConfig
    assert schema.TapesConfig is tapes.TapesConfig and schema.CurriculumConfig is curriculum.CurriculumConfig
    typed, problems = typed_config(load_config(["rollout.max_response_tokens=48", "evaluation.temperature=0.5"]))
    assert not problems and typed.rollout_sampling.max_tokens == 48 and typed.eval_sampling.temperature == 0.5
    _, problems = typed_config(load_config(["+sampling.max_tokens=48"]))
    assert [str(p) for p in problems] == [
        "sampling.max_tokens is set by rollout.max_response_tokens in the training config: write "
        "rollout.max_response_tokens=N"
    ]
    with pytest.raises(Exception, match=r"Write rollout\.max_response_tokens=48"):
        load_config(["sampling.max_tokens=48"])


def test_prefix_sharing_conflicts() -> None:
    """hardware.prefix_sharing refuses the verl settings it cannot honour (each naming both fixes), accepts
    use_remove_padding (the shared pass packs its own tokens), and takes only true or false."""
    from verlog.config.checks import config_problems

    def problems(*overrides: str) -> list[str]:
        typed, found = typed_config(load_config(list(overrides)))
        return [str(p) for p in found] + ([str(p) for p in config_problems(typed)] if not found else [])

    assert problems() == []
    for key in (
        "verl.actor_rollout_ref.actor.use_dynamic_bsz",
        "verl.critic.use_dynamic_bsz",
        "verl.actor_rollout_ref.ref.log_prob_use_dynamic_bsz",
        "verl.actor_rollout_ref.model.use_fused_kernels",
    ):
        (found,) = problems(f"{key}=true")
        assert found.startswith(f"{key}: ") and f"set {key}=false or hardware.prefix_sharing=false" in found
        assert problems(f"{key}=true", "hardware.prefix_sharing=false") == []
    (found,) = problems("verl.actor_rollout_ref.actor.ulysses_sequence_parallel_size=2")
    assert "sequence parallelism" in found and "=1 or hardware.prefix_sharing=false" in found
    (found,) = problems("verl.trainer.balance_batch=false")
    assert "drop verl.trainer.balance_batch=false" in found
    assert problems("verl.actor_rollout_ref.model.use_remove_padding=true") == []
    for value in ("1", "yes", "maybe"):
        (found,) = problems(f"hardware.prefix_sharing={value}")
        assert "is not true or false: write hardware.prefix_sharing=true or hardware.prefix_sharing=false" in found


def test_lora_settings_become_verls_keys_for_the_actor_and_optionally_the_critic() -> None:
    from verlog.trainer.config import verl_overrides

    def lora_keys(*overrides: str) -> list[str]:
        cfg = check_config(load_config(["env=toy_delayed", *overrides]))
        return [o for o in verl_overrides(cfg) if "lora" in o or "target" in o]

    assert lora_keys() == []  # rank 0: full fine-tuning, verl's keys untouched
    assert lora_keys("model.lora.rank=8") == [
        "actor_rollout_ref.model.lora_rank=8",
        "actor_rollout_ref.model.lora_alpha=16",
        "actor_rollout_ref.model.target_modules=all-linear",
    ]
    both = lora_keys(
        "model.lora.rank=16",
        "model.lora.alpha=32",
        "model.lora.critic=true",
        "model.lora.target_modules=[q_proj,v_proj]",
    )
    assert both[3:] == [
        "critic.model.lora_rank=16",
        "critic.model.lora_alpha=32",
        "critic.model.target_modules=[q_proj,v_proj]",
    ]
