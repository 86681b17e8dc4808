"""End to end: PPO through verl 0.9.1 on this CPU with verlog's rollout, dual GAE and checkpoints.

One run of 3 iterations on babyai/goto (4 slots x 4 turns, actor and critic on 2 FSDP ranks, an env crash injected
in iteration 2, evaluation inside training before iteration 1 and after iterations 2 and 3), on the tiny model.
goto's step limit is set to 16 (env.kwargs.max_steps), above the 12 turns a slot takes in three iterations, so the
run's episodes span all three iterations: the long-horizon tests check, from its tapes, one episode id, consecutive
turns, the memory window across the boundaries, and advantages equal to the reference GAE over the whole episode given
the logged values and bootstrap values. The evaluations (training's env kwargs) play episodes of at most 16 steps;
with goto's own 64 the untrained model's evaluations ran to the limit and took 40 of run1's 51 s after start-up.

A second process, resumed from the iteration-2 checkpoint, used to check the resumed run's own settings; its
checks now ride on resumed runs that start anyway (one verl start-up less): a resume continues the checkpoint's env
slots and episodes (test_kill_e2e.py, and test_async_e2e.py across async modes), ``algorithm.boundary=cut`` and
``hardware.prefix_sharing=false`` (test_async_e2e.py's in_flight run, whose iteration 3 trains the very rows its
bootstrapping source run trained), no evaluation of the checkpoint's step and ``--verbose`` (test_lora_e2e.py's
resumed run).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from train_process import iteration_records, read_records, run_train, with_pythonpath  # beside this file

# one training process of 2-4 minutes on an idle 2-core machine (much longer when the machine is shared), then
# verlog eval and verlog export on its checkpoints
pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(2700)]

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]


def _train(out: Path, model: Path, *overrides: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return run_train(
        out,
        model,
        "env.id=crashy_env:make",
        "env.in_process=true",  # crashy_env counts the steps of its process: one process, so one crash, in iteration 2
        f"+env.kwargs.max_steps={MAX_STEPS}",
        "iterations=3",
        "rollout.num_slots=4",
        "rollout.turns_per_slot=4",
        "rollout.max_prompt_tokens=512",
        "rollout.max_response_tokens=16",
        "hardware.n_gpus_per_node=2",
        "algorithm.critic_warmup=1",
        "algorithm.ppo_epochs=2",
        "algorithm.mini_batches=2",
        "algorithm.actor_lr=1e-3",
        "algorithm.critic_lr=1e-3",
        "checkpoint.save_freq=2",
        f"hardware.ray.temp_dir={out.parent / 'ray'}",
        *overrides,
        timeout=1200,
        env=with_pythonpath(HERE, env),  # crashy_env beside this file
    )


EVAL_EPISODES = 4
MAX_STEPS = 16
"""The env's step limit (goto's own is 64): above the 12 turns a slot takes in run1's three iterations."""
EVAL_KEYS = ("success", "progression", "return", "valid_action_rate")


@pytest.fixture(scope="module")
def runs(tiny_model, tmp_path_factory):
    base = tmp_path_factory.mktemp("train_e2e")
    # evaluation before training, after iteration 2 (every=2) and after the last one; the injected crash counts
    # training steps only (crashy_env), so it lands in iteration 2's rollout
    evaluation = ["evaluation.every=2", f"evaluation.episodes={EVAL_EPISODES}"]
    # every episode taped (an episode that ends early makes more than 4 start in one iteration): the long-horizon
    # tests read every row from the tapes
    taped = "tapes.episodes_per_iteration=16"
    # every tracker that writes files, inside the run folder (wandb offline: no account on a test machine)
    trackers = "logger=[console,tensorboard,wandb]"
    first = _train(
        base / "run1",
        tiny_model,
        *evaluation,
        taped,
        trackers,
        env={"VERLOG_TEST_CRASH_AT_STEP": "22", "WANDB_MODE": "offline"},
    )
    return base, first


def test_three_iterations_losses_metrics_and_sync(runs):
    base, proc = runs
    metrics = iteration_records(base / "run1")
    assert [m["step"] for m in metrics] == [1, 2, 3]
    for m in metrics:
        assert math.isfinite(m["critic/vf_loss"])
        for key in ("env/episodes", "rollout/valid_action_ratio", "rollout/prompt_tokens/mean", "adv/mean"):
            assert key in m, key
        assert m["rollout/turns"] == 16
        assert math.isfinite(m["critic/advantages/mean"]) and math.isfinite(m["critic/returns/mean"])
    assert "actor/pg_loss" not in metrics[0]  # critic warm-up: iteration 1 trains the critic only
    for m in metrics[1:]:
        assert math.isfinite(m["actor/pg_loss"])
        assert m["actor/ppo_kl"] != 0.0 or m["actor/pg_clipfrac"] > 0  # the actor moved during its update
    # generation after the sync runs on the new weights: vLLM's token probabilities match the updated FSDP actor's
    # (seen: about 2e-5 with the sync; docs/stack.md: 3e-4 to 5e-4 when syncs were skipped on purpose)
    assert metrics[2]["training/rollout_probs_diff_mean"] < 1e-4
    assert "[verlog] iteration 3/3 | " in proc.stdout


def test_the_console_shows_verlogs_lines_and_the_log_holds_the_rest(runs):
    """run1 ran with the quiet console (the default): a screen of verlog's own lines on the terminal, and Ray's
    workers, vLLM and verl's console logger in logs/train.log (--verbose: test_lora_e2e.py's resumed run)."""
    base, quiet = runs
    metrics = iteration_records(base / "run1")
    lines = (quiet.stdout + quiet.stderr).splitlines()
    assert len(lines) <= 40, "\n".join(lines)
    assert all(line.startswith("[verlog] ") for line in lines), "\n".join(lines)  # no worker's, vLLM's or verl's
    log = (base / "run1" / "logs" / "train.log").read_text()
    assert f"logs of Ray's workers, verl and vLLM: {base / 'run1' / 'logs' / 'train.log'}" in quiet.stdout
    assert "pid=" in log and "critic/vf_loss" in log  # the workers' lines and verl's console logger's
    for k in (1, 2, 3):  # verlog's line per iteration, on the terminal and in the log
        line = next(x for x in lines if x.startswith(f"[verlog] iteration {k}/3 | "))
        assert "s/it" in line and "ETA" in line and line in log
        assert ("return " in line) == ("env/return_mean" in metrics[k - 1])  # when episodes ended


def test_trackers_write_verlogs_and_verls_metrics_inside_the_run(runs):
    """logger=[console,tensorboard,wandb]: both trackers' files are in the run folder and hold the same numbers as
    metrics.jsonl, verlog's (env/, eval/, check/) beside verl's (critic/)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from trackers_read import wandb_history

    base, proc = runs
    records = {r["step"]: r for r in read_records(base / "run1" / "metrics.jsonl")}
    keys = ("env/return_mean", "critic/vf_loss", "check/prefix_sharing_log_probs_gap", "eval/success")
    events = EventAccumulator(str(base / "run1" / "tensorboard"))
    events.Reload()
    for key in keys:
        logged = {e.step: e.value for e in events.Scalars(key)}
        expected = {step: r[key] for step, r in records.items() if key in r}
        assert logged.keys() == expected.keys(), key
        assert all(abs(logged[s] - expected[s]) <= 1e-6 * max(1.0, abs(expected[s])) for s in expected), key
    history = wandb_history(base / "run1" / "wandb")
    by_step = {row["_step"]: row for row in history}
    for key in keys:
        expected = {step: r[key] for step, r in records.items() if key in r}
        assert {s for s in by_step if key in by_step[s]} == expected.keys(), key
        assert all(abs(by_step[s][key] - v) <= 1e-6 * max(1.0, abs(v)) for s, v in expected.items()), key
    assert f"tensorboard: {base / 'run1' / 'tensorboard'}" in proc.stdout and "wandb: offline" in proc.stdout


def test_eval_takes_the_run_folder(runs, tmp_path):
    """``verlog eval --model RUN_DIR``: the latest complete checkpoint's actor, its FSDP shards merged on demand into
    a Hugging Face folder; the console fits a screen (vLLM's lines in OUT/logs/eval.log)."""
    base, _ = runs
    run = base / "run1"
    out = tmp_path / "eval"
    args = [sys.executable, "-m", "verlog", "eval", "--model", str(run), "--tasks", "babyai/goto", "--episodes", "2"]
    args += ["--max-steps", "3", "--max-prompt-tokens", "512", "--max-tokens", "16", "--out", str(out)]
    proc = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    merged = run / "checkpoints" / "global_step_3" / "actor" / "huggingface_merged"
    assert (merged / "model.safetensors").is_file() and (merged / "tokenizer_config.json").is_file()
    assert f"model {merged}" in proc.stdout and "merging the FSDP shards" in proc.stdout
    lines = (proc.stdout + proc.stderr).splitlines()
    assert len(lines) <= 20 and not [x for x in lines if "INFO" in x or "WARNING" in x], "\n".join(lines)
    assert json.loads((out / "summary.json").read_text())["environments"]["babyai"]["tasks"]["goto"]
    assert "vllm" in (out / "logs" / "eval.log").read_text().lower()


def test_prefix_sharing_is_checked_against_verls_path(runs):
    """run1 shares prefixes (the default): its first iteration computed one micro-batch per rank both ways (a run on
    verl's per-row passes, hardware.prefix_sharing=false: test_async_e2e.py's in_flight run)."""
    base, _ = runs
    metrics = iteration_records(base / "run1")
    for key in ("check/prefix_sharing_log_probs_gap", "check/prefix_sharing_values_gap"):
        assert key in metrics[0] and all(key not in m for m in metrics[1:]), key
        assert metrics[0][key] < 1e-4, (key, metrics[0][key])  # fp32: float noise (about 1e-6)
    for m in metrics:
        assert m["prefix/rows_per_group"] > 1.0 and m["prefix/computed_token_share"] < 1.0


def test_logged_metrics_match_docs_metrics_md(runs):
    from metrics_doc import documented_metrics, is_verlog_metric, undocumented

    base, _ = runs
    records = read_records(base / "run1" / "metrics.jsonl")
    logged = {k for r in records for k in r if is_verlog_metric(k)}
    doc = documented_metrics()
    assert not undocumented(logged, doc), f"logged but not in docs/metrics.md: {undocumented(logged, doc)}"
    # this run: dual GAE, an evaluation every 2 iterations, episodes ending (the 16-step limit is never reached in
    # 3 x 4 turns, but the injected crash cuts an episode)
    expected = {
        k for k, when in doc.items() if when in ("always", "dual_gae", "evaluation", "episodes", "prefix_sharing")
    }
    assert expected <= logged, f"in docs/metrics.md but never logged: {sorted(expected - logged)}"


def _check_eval(record: dict) -> None:
    assert record["eval/episodes"] == EVAL_EPISODES and "eval/failed" not in record
    for key in EVAL_KEYS:
        assert math.isfinite(record[f"eval/{key}"]) and record[f"eval/{key}_se"] >= 0, key
    assert 0 <= record["eval/success"] <= 1 and 0 <= record["eval/valid_action_rate"] <= 1
    assert 1 <= record["eval/length"] <= MAX_STEPS  # the env's step limit: training's env kwargs reached it


def test_evaluation_inside_training(runs):
    """Before training and every 2 iterations (a resumed run does not evaluate its checkpoint's step:
    test_lora_e2e.py's resumed run)."""
    base, proc = runs
    records = read_records(base / "run1" / "metrics.jsonl")
    assert [m["step"] for m in records] == [0, 1, 2, 3]
    # before training: the starting model, a record of its own at step 0
    _check_eval(records[0])
    assert not any(k.startswith(("training/", "critic/", "env/")) for k in records[0])
    assert not any(k.startswith("eval/") for k in records[1])  # iteration 1: no evaluation
    for m in records[2:]:  # after iteration 2 (every=2) and the last one, in the iteration's own record
        _check_eval(m)
        assert "critic/vf_loss" in m
    for k in (0, 2, 3):
        assert f"[verlog] eval at iteration {k}: success " in proc.stdout
    episodes = read_records(base / "run1" / "eval" / "episodes.jsonl")
    held_out = [2**31 + i for i in range(EVAL_EPISODES)]  # the seeds no training slot can draw
    assert [(e["iteration"], e["seed"]) for e in episodes] == [(k, s) for k in (0, 2, 3) for s in held_out]
    trained = {s for r in read_records(base / "run1" / "rollout.jsonl") for s in r["episode_seeds"].values()}
    assert trained and not trained & set(held_out)


def test_env_crash_does_not_stop_training(runs):
    base, _ = runs
    metrics = iteration_records(base / "run1")
    assert sum(m["rollout/env_errors"] for m in metrics) == 1


def test_checkpoints_hold_the_env_slots_and_episodes_keep_their_seeds(runs):
    """The checkpoint holds the rollout's state (a resumed run continues its episodes: test_kill_e2e.py), and the
    episodes going on at the iteration boundary carry over."""
    base, _ = runs
    assert (base / "run1" / "checkpoints" / "global_step_2" / "verlog_rollout.pkl").exists()
    first = {r["step"]: r for r in read_records(base / "run1" / "rollout.jsonl")}
    assert all(turn > 0 for _, turn in first[3]["start_episodes"])
    # every finished episode is logged with the env seed it was reset with (checkable against evaluation seeds)
    finished = [e for r in first.values() for e in r["finished_episodes"]]
    assert finished and all(isinstance(e["seed"], int) for e in finished)
    seeds = {eid: seed for r in first.values() for eid, seed in r["episode_seeds"].items()}
    assert all(seeds[e["id"]] == e["seed"] for e in finished) and all(isinstance(s, int) for s in seeds.values())


# ------------------------------------------------------------------------------------------------ long horizon
def test_every_row_is_linked_bootstrapped_or_ended(runs):
    """Each iteration's 16 rows split exactly into linked rows (the episode's next turn is in the batch), bootstrapped
    rows (the episode goes on past the batch: V(s_T)) and rows that end their episode, as the tapes record them."""
    from verlog.tapes.record import read_turn_logs

    base, _ = runs
    tapes = read_turn_logs(base / "run1" / "tapes" / "train.jsonl")
    metrics = iteration_records(base / "run1")
    for m in metrics:
        rows = [r for r in tapes if r.iteration == m["step"]]
        assert len(rows) == 16  # 4 slots, every episode taped (tapes.episodes_per_iteration = 16)
        present = {(r.episode_id, r.turn) for r in rows}
        linked = sum((r.episode_id, r.turn + 1) in present for r in rows)
        ended = sum(r.terminated for r in rows)
        assert m["adv/linked_rows"] == linked
        assert m["adv/bootstrap_rows"] == 16 - linked - ended == sum(r.next_value is not None for r in rows)


def test_an_episode_across_three_iterations(runs):
    """An episode that spans all three iterations keeps one id, consecutive turns and its memory window across the
    iteration boundaries, and its advantages are those of the whole episode computed in one piece by the reference
    GAE, with the boundaries bootstrapped by the logged V(s_T)."""
    import numpy as np

    from verlog.algorithms.dual_gae import reference_dual_discount_gae
    from verlog.config.schema import TrainConfig
    from verlog.tapes.record import group_episodes, read_turn_logs

    base, _ = runs
    episodes = group_episodes(read_turn_logs(base / "run1" / "tapes" / "train.jsonl"))
    spanning = {eid: turns for eid, turns in episodes.items() if {r.iteration for r in turns} == {1, 2, 3}}
    assert spanning, "no episode ran through all three iterations"
    rollout = {r["step"]: r for r in read_records(base / "run1" / "rollout.jsonl")}
    defaults = TrainConfig()
    alg = defaults.algorithm
    for eid, turns in spanning.items():
        k = len(turns)
        assert [r.turn for r in turns] == list(range(k))
        iterations = [r.iteration for r in turns]
        assert iterations == sorted(iterations)
        # the last turn of each iteration but the last is a boundary; the slot resumes the same episode there (not a
        # new one) with its memory window carried over
        last = [i for i in range(k - 1) if iterations[i + 1] != iterations[i]]
        assert len(last) == 2
        for i in last:
            assert [eid, i + 1] in rollout[iterations[i + 1]]["start_episodes"]
            assert turns[i + 1].memory_turns >= 1
        assert [r.memory_turns for r in turns] == [min(t, defaults.memory.n) for t in range(k)]
        boundary = [i in last or (i == k - 1 and not r.terminated) for i, r in enumerate(turns)]
        assert [r.next_value is not None for r in turns] == boundary
        # one piece: the episode's turns as one batch, cut only at the iteration boundaries (with the logged V(s_T)).
        # With token gamma = lambda = 1 a turn's first-position advantage depends only on its summed token rewards,
        # V(s_t), and the next turn's value and advantage, so one position per turn stands for its tokens.
        assert (alg.token_gamma, alg.token_lam) == (1.0, 1.0)
        adv, _ = reference_dual_discount_gae(
            [[r.turn_reward] for r in turns],
            [[r.value] for r in turns],
            [[1]] * k,
            [-1 if cut or r.terminated else i + 1 for i, (r, cut) in enumerate(zip(turns, boundary))],
            [r.next_value or 0.0 for r in turns],
            [r.terminated for r in turns],
            1.0,
            1.0,
            alg.step_gamma,
            alg.step_lam,
        )
        np.testing.assert_allclose(adv[:, 0], [r.advantage_raw for r in turns], rtol=1e-4, atol=1e-4)


def test_boundary_rows_get_the_critics_values(runs):
    """algorithm.boundary=bootstrap (the default): rows whose episode goes on past the batch get the critic's V(s_T)
    (boundary=cut's zeros: test_async_e2e.py's in_flight run)."""
    base, _ = runs
    bootstrapped = iteration_records(base / "run1")
    assert all(m["adv/bootstrap_rows"] > 0 and m["adv/next_value_mean"] != 0.0 for m in bootstrapped)


def test_bootstrap_values_equal_an_ordinary_critic_call(runs):
    """The bootstrap values V(s_T) (prompt-only rows) equal the critic's value of the same prompt laid out as an
    ordinary row with a response: the trainer checks it once a run and logs the largest gap."""
    base, _ = runs
    metrics = iteration_records(base / "run1")
    gaps = [m["check/bootstrap_value_gap"] for m in metrics if "check/bootstrap_value_gap" in m]
    assert len(gaps) == 1 and "check/bootstrap_value_gap" in metrics[0]  # the first iteration bootstraps
    assert gaps[0] < 1e-4, gaps


# ------------------------------------------------------------------------------------------------ export (issue 36)
def _export_checks():
    """tests/verlog/export_checks.py, shared with the LoRA end-to-end test."""
    if str(HERE.parent) not in sys.path:
        sys.path.insert(0, str(HERE.parent))
    import export_checks

    return export_checks


@pytest.fixture(scope="module")
def exported(runs, tmp_path_factory):
    """``verlog export RUN_DIR``: run1's latest checkpoint (iteration 3) as a Hugging Face folder."""
    base, _ = runs
    out = tmp_path_factory.mktemp("export") / "policy"
    args = [sys.executable, "-m", "verlog", "export", str(base / "run1"), "--out", str(out)]
    proc = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    return out, proc


def test_export_gives_the_checkpoints_log_probs(runs, exported, tmp_path):
    """The export holds the checkpoint's weights (equal to its FSDP shards, read here without verl's merger); loaded
    with transformers as it is (its config's dtype), it gives the log-probs of the shards' weights; vLLM, started as
    ``verlog eval`` starts it, gives the same within the sync tolerance and plays an episode."""
    import torch
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    checks = _export_checks()
    base, _ = runs
    out, proc = exported
    actor = base / "run1" / "checkpoints" / "global_step_3" / "actor"
    lines = (proc.stdout + proc.stderr).splitlines()
    assert lines[0].startswith("verlog export: the model of checkpoint ") and "(iteration 3, full" in lines[0]
    assert lines[-1].startswith(f"verlog export: done: {out}") and len(lines) <= 5, "\n".join(lines)
    meta = json.loads((out / "verlog_export.json").read_text())
    assert (meta["step"], meta["contents"], meta["lora"]) == (3, "model", None)
    assert meta["source"] == str(actor.parent.resolve())
    assert {"config.json", "generation_config.json", "tokenizer.json", "chat_template.jinja"} <= set(meta["files"])

    shards = checks.shard_state_dict(actor)
    weights = load_file(str(out / "model.safetensors"))
    assert weights.keys() <= shards.keys() and all(torch.equal(weights[k], shards[k]) for k in weights)
    model = AutoModelForCausalLM.from_pretrained(out).eval()  # as anyone loads it: in config.json's dtype
    assert model.dtype == torch.float32
    tokenizer = AutoTokenizer.from_pretrained(out)
    exported_lp = checks.answer_log_probs(model, tokenizer)
    reference = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(actor / "huggingface"), dtype=torch.float32)
    reference.load_state_dict(shards, strict=True)
    assert checks.max_gap(exported_lp, checks.answer_log_probs(reference.eval(), tokenizer)) < 1e-6  # 0.0

    served_lp = checks.vllm_answer_log_probs(out, tmp_path / "eval")
    gap = checks.max_gap(served_lp, exported_lp)
    assert gap < checks.FLOAT_NOISE, (gap, served_lp, exported_lp)  # measured 4.8e-7
    summary = json.loads((tmp_path / "eval" / "summary.json").read_text())
    assert summary["episodes"] == 1 and summary["model"]["path"] == str(out)


def test_export_of_an_earlier_step(runs, tmp_path):
    """``--step 2``: the weights of iteration 2's checkpoint, which the actor's updates in iteration 3 changed."""
    import torch
    from safetensors.torch import load_file

    from verlog.cli import main

    checks = _export_checks()
    base, _ = runs
    out = tmp_path / "step2"
    assert main(["export", str(base / "run1"), "--step", "2", "--out", str(out)]) == 0
    assert json.loads((out / "verlog_export.json").read_text())["step"] == 2
    weights = load_file(str(out / "model.safetensors"))
    checkpoints = base / "run1" / "checkpoints"
    step2, step3 = (checks.shard_state_dict(checkpoints / f"global_step_{k}" / "actor") for k in (2, 3))
    assert all(torch.equal(weights[k], step2[k]) for k in weights)
    assert not all(torch.equal(weights[k], step3[k]) for k in weights)


def test_eval_takes_an_export(exported, tmp_path):
    """``verlog eval --model EXPORT_DIR``: every check of the command passes and it evaluates (the transformers
    engine: vLLM loaded the export in the test above, through the engine verlog eval starts)."""
    from verlog.cli import main

    out, _ = exported
    args = ["eval", "--model", str(out), "--tasks", "babyai/goto", "--episodes", "1", "--max-steps", "2"]
    args += ["--engine", "transformers", "--max-prompt-tokens", "512", "--max-tokens", "16", "--out", str(tmp_path)]
    assert main(args) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["episodes"] == 1 and summary["model"]["path"] == str(out)
