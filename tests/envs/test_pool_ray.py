"""EnvPool(backend="ray") on a two-node Ray cluster simulated on this machine (ray.cluster_utils.Cluster): the same
results, episodes and states as subprocess workers (the pool alone, and rows through the RolloutManager in lockstep
and pipelined), workers placed by a custom resource on the second node, killed actors and an exiting or hanging env
recovered as subprocess workers are, and the bad inputs (unknown backend, resources no node has, a dead address)."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import socket
import subprocess
import sys
import time
import zlib
from collections.abc import Iterator

import faulty_envs
import psutil
import pytest

from envs.pool import EnvBackendError, EnvPool
from envs.pool_ray import RayResourcesError

faulty_envs.register_test_envs()
IDS = ["test/corridor", "test/frozen_lake", "test/corridor", "test/faulty", "test/corridor"]
KWARGS = [{}, {"parse_mode": "strict"}, {"length": 5}, {}, {}]
ENV_NODE = {"envnode": 4}
ANYWHERE = {"num_cpus": 0.25}
ON_ENV_NODE = {"num_cpus": 0.25, "resources": {"envnode": 1}}


@pytest.fixture(scope="module")
def cluster():
    """A head with one CPU and a second node with two CPUs and the custom resource ``envnode``; this process is
    connected to it (as ``verlog train`` is to its cluster)."""
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    env_node = cluster.add_node(num_cpus=2, resources=ENV_NODE)
    ray.init(address=cluster.address, log_to_driver=False)
    cluster.wait_for_nodes()
    try:
        yield cluster, env_node.node_id
    finally:
        ray.shutdown()
        cluster.shutdown()


def _walk(step: int, n: int) -> list[str]:
    moves = ["right", "left", "down", "right", "up"]
    return [moves[(step * 7 + i * 3) % 5] for i in range(n)]


def _play(pool: EnvPool, steps: int, crash_at: int = -1) -> list:
    """Reset with fixed seeds, then ``steps`` steps of a fixed action pattern (slot 3 crashes at ``crash_at``)."""
    out: list = [pool.reset(seeds=11)]
    for t in range(steps):
        actions = _walk(t, pool.num_envs)
        if t == crash_at:
            actions[3] = "crash"
        out.append(pool.step(actions))
    return out


@pytest.mark.e2e
def test_ray_workers_give_the_results_episodes_and_states_of_subprocess_workers(cluster) -> None:
    with (
        EnvPool(IDS, env_kwargs=KWARGS, num_workers=2, seed=3) as local,
        EnvPool(IDS, env_kwargs=KWARGS, num_workers=2, seed=3, backend="ray", ray_options=ANYWHERE) as remote,
    ):
        assert remote.backend == "ray" and not remote.in_process
        want, got = _play(local, 14, crash_at=6), _play(remote, 14, crash_at=6)
        assert got == want  # observations, rewards, flags and infos (auto-resets, env_error of the crash) alike
        assert any("env_error" in r[4] for r in got[7]) and remote.stats == local.stats == {
            "worker_restarts": 0,
            "env_errors": 1,
        }
        states = local.slot_states()
        assert remote.slot_states() == states
        for pool in (local, remote):  # both go on from the other's states
            pool.restore_slots(states)
        assert remote.step(_walk(3, 5)) == local.step(_walk(3, 5))
        assert remote.instruction(1) == local.instruction(1)


class HashGenerator:
    """Answers each prompt from its tokens alone (a hash picks the action), so the answers do not depend on how
    requests are batched or ordered (pipelined or lockstep)."""

    ANSWERS = ("go forward", "turn left", "turn right", "go forward", "fly away")

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer

    def generate(self, requests, sampling):
        from verlog.rollout import Generation

        out = []
        for r in requests:
            h = zlib.crc32(repr(r.prompt_ids).encode())
            text = f"ACTION: {self.ANSWERS[h % len(self.ANSWERS)]}"
            ids = [*self.tokenizer.encode(text, add_special_tokens=False), self.tokenizer.eos_token_id]
            out.append(Generation(token_ids=ids, log_probs=[-(h % 5) / 10] * len(ids)))
        return out


def _rollout(tokenizer, backend: str, pipeline_groups: int | None):
    from verlog.prompting.memory import MemoryConfig
    from verlog.rollout import SamplingConfig
    from verlog.rollout.build import build_rollout

    rollout = build_rollout(
        env_id="toy/delayed",
        env_kwargs={"length": 3},
        tasks=None,
        num_slots=5,
        tokenizer=tokenizer,
        generator=HashGenerator(tokenizer),
        sampling=SamplingConfig(max_tokens=16),
        memory=MemoryConfig(),
        max_prompt_tokens=512,
        backend=backend,
        ray_options=ANYWHERE if backend == "ray" else None,
        num_workers=2,
        seed=5,
        run_id="r",
        pipeline_groups=pipeline_groups,
    )
    rollout.pipeline_min_env_share = 0.0  # pipeline every collect, however fast these envs answer
    return rollout


@pytest.mark.e2e
def test_rollout_rows_with_ray_workers_equal_subprocess_lockstep_and_pipelined(cluster, tokenizer) -> None:
    managers = []
    try:
        for backend, groups in (("subprocess", None), ("ray", None), ("ray", 2)):
            managers.append(_rollout(tokenizer, backend, groups))
        want_manager, *ray_managers = managers
        assert ray_managers[0].pool.backend == "ray"
        assert len(ray_managers[1].slot_groups) == 2
        for turns in (3, 4):
            want = want_manager.collect(turns)
            for m in ray_managers:
                got = m.collect(turns)
                assert [dataclasses.asdict(r) for r in got.rows] == [dataclasses.asdict(r) for r in want.rows]
                assert got.episodes == want.episodes
                assert m.state_dict() == want_manager.state_dict()
        assert got.timing["rollout/pipelined"] == 1.0  # the last batch: ray_managers[1]'s
    finally:
        for m in managers:
            m.close()


def _dead(pids: list[int], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        if not alive:
            return True
        time.sleep(0.1)
    return False


@contextlib.contextmanager
def _env_node_pool_and_twin(env_node: str, seed: int, turns: int) -> Iterator[tuple[EnvPool, EnvPool]]:
    """Four envs as Ray workers (2 actors) on the env node beside the same envs in process, both reset with ``seed``
    and stepped ``turns`` turns with equal answers: the pools, for the test to go on with."""
    ids, kwargs = IDS[:4], KWARGS[:4]
    with (
        EnvPool(ids, env_kwargs=kwargs, num_workers=2, backend="ray", ray_options=ON_ENV_NODE) as pool,
        EnvPool(ids, env_kwargs=kwargs, backend="in_process") as ref,
    ):
        assert pool.worker_nodes() == [env_node, env_node]
        assert pool.reset(seeds=seed) == ref.reset(seeds=seed)
        for t in range(turns):
            assert pool.step(_walk(t, 4)) == ref.step(_walk(t, 4))
        yield pool, ref


@pytest.mark.e2e
def test_workers_go_to_the_node_with_their_resource_and_its_killed_workers_lose_nothing(cluster) -> None:
    _, env_node = cluster
    with _env_node_pool_and_twin(env_node, seed=7, turns=4) as (pool, ref):
        old = pool.worker_pids()
        for pid in old:  # both actors of that node, between two steps of the iteration
            os.kill(pid, signal.SIGKILL)
        assert _dead(old)
        got, want = pool.step(_walk(4, 4)), ref.step(_walk(4, 4))
        # no env call was running: every episode is rebuilt by replay on new actors of that node and goes on
        assert got == want and all("env_error" not in r[4] for r in got)
        assert pool.stats == {"worker_restarts": 2, "env_errors": 0}
        assert pool.worker_nodes() == [env_node, env_node] and set(pool.worker_pids()).isdisjoint(old)
        for t in range(5, 9):
            assert pool.step(_walk(t, 4)) == ref.step(_walk(t, 4))


@pytest.mark.e2e
def test_an_exiting_or_hanging_env_ends_only_its_episode_as_in_subprocess_workers(cluster) -> None:
    with (
        EnvPool(
            "test/faulty", num_envs=4, num_workers=2, step_timeout=3.0, backend="ray", ray_options=ANYWHERE
        ) as pool,
        EnvPool("test/corridor", num_envs=4, backend="in_process") as ref,
    ):
        for fault, slot, text in (("exit", 0, "Ray actor died"), ("hang", 3, "step_timeout=3.0s")):
            assert pool.reset(seeds=100) == ref.reset(seeds=100)
            for _ in range(3):
                assert pool.step(["left", "right", "right", "left"]) == ref.step(["left", "right", "right", "left"])
            before = pool.worker_pids()
            actions = ["right", "left", "right", "left"]
            faulty = list(actions)
            faulty[slot] = fault
            start = time.monotonic()
            got, want = pool.step(faulty), ref.step(actions)
            assert time.monotonic() - start < 30
            for i in range(4):
                if i == slot:
                    assert got[i][1:4] == (0.0, False, True) and text in got[i][4]["env_error"]
                else:  # the worker's other slot was replayed on the new actor
                    assert got[i][:4] == want[i][:4] and "env_error" not in got[i][4]
            after = pool.worker_pids()
            w = pool.worker_of(slot)
            assert after[w] != before[w] and after[1 - w] == before[1 - w]
        assert pool.stats == {"worker_restarts": 2, "env_errors": 2}


# ------------------------------------------------------------------------------------------------ bad inputs
def test_an_unknown_or_contradicting_backend_is_one_line_naming_the_fix() -> None:
    with pytest.raises(EnvBackendError, match=r"unknown env pool backend 'rya'.*Did you mean 'ray'\?"):
        EnvPool("test/corridor", num_envs=2, backend="rya")
    with pytest.raises(EnvBackendError, match="in_process=True and backend='ray' contradict"):
        EnvPool("test/corridor", num_envs=2, backend="ray", in_process=True)
    with pytest.raises(EnvBackendError, match="ray_options are for backend='ray'"):
        EnvPool("test/corridor", num_envs=2, ray_options={"num_cpus": 1})
    with EnvPool("test/corridor", num_envs=2, in_process=True) as pool:  # the old spelling still works
        assert pool.backend == "in_process" and pool.in_process


@pytest.mark.e2e
def test_resources_no_node_has_are_refused_before_any_worker_starts(cluster) -> None:

    with pytest.raises(
        RayResourcesError, match=r"no node of the Ray cluster can give one env worker \{CPU: 1, gpu_box: 1\}"
    ) as err:
        EnvPool("test/corridor", num_envs=2, backend="ray", ray_options={"resources": {"gpu_box": 1}})
    assert "\n" not in str(err.value) and "envnode: 4" in str(err.value)
    with pytest.raises(RayResourcesError, match=r"\{CPU: 3, envnode: 1\}"):  # no node has both
        EnvPool("test/corridor", num_envs=2, backend="ray", ray_options={"num_cpus": 3, "resources": {"envnode": 1}})
    with pytest.raises(RayResourcesError, match=r"resources\.envnode is 0"):
        EnvPool("test/corridor", num_envs=2, backend="ray", ray_options={"resources": {"envnode": 0}})


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_ray_address_that_does_not_answer_is_one_line_naming_the_fix() -> None:
    code = (
        "from envs.pool import EnvPool\n"
        "try:\n"
        "    EnvPool('toy/delayed', num_envs=2, backend='ray')\n"
        "except Exception as exc:\n"
        "    print(type(exc).__name__, exc)\n"
    )
    address = f"127.0.0.1:{_free_port()}"
    env = {**os.environ, "RAY_ADDRESS": address}
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert time.monotonic() - start < 30
    line = done.stdout.strip()
    assert line.startswith(f"RayClusterError the Ray cluster at RAY_ADDRESS={address} does not answer"), done
    assert "unset RAY_ADDRESS" in line and "\n" not in line


@pytest.mark.e2e
def test_a_lost_node_s_workers_come_back_on_another_node_with_the_resource(cluster) -> None:
    """The env node goes away (its raylet and actors killed) between two turns; the workers are re-placed on the
    node that still has the resource, every episode rebuilt by replay (runs last: it removes the module's node)."""
    import ray

    cluster_, env_node = cluster
    with _env_node_pool_and_twin(env_node, seed=21, turns=3) as (pool, ref):
        spare = cluster_.add_node(num_cpus=1, resources=ENV_NODE)
        cluster_.wait_for_nodes()
        lost = next(node for node in cluster_.worker_nodes if node.node_id == env_node)
        cluster_.remove_node(lost)
        deadline = time.monotonic() + 60
        while any(n["NodeID"] == env_node and n["Alive"] for n in ray.nodes()) and time.monotonic() < deadline:
            time.sleep(0.2)
        got, want = pool.step(_walk(3, 4)), ref.step(_walk(3, 4))
        assert got == want and all("env_error" not in r[4] for r in got)
        assert pool.stats == {"worker_restarts": 2, "env_errors": 0}
        assert pool.worker_nodes() == [spare.node_id, spare.node_id]


@pytest.mark.e2e
def test_evaluation_inside_training_steps_its_envs_on_trainings_ray_workers(cluster, tokenizer, monkeypatch) -> None:
    """``env.backend=ray`` with a resource only the env node has: the in-training evaluation's pool is a Ray pool with
    training's requests, its workers on that node, and its episodes equal in-process ones."""
    import ray

    from verlog.config.compose import load_config
    from verlog.eval.protocol import EpisodeSpec
    from verlog.eval.runner import run_episodes
    from verlog.rollout import SamplingConfig
    from verlog.trainer.evaluation import pool_kwargs

    del cluster  # an earlier test may have replaced the env node: ask Ray which live node has the resource now
    env_node = next(n["NodeID"] for n in ray.nodes() if n["Alive"] and "envnode" in n["Resources"])
    cfg = load_config(["env.backend=ray", "env.ray.num_cpus_per_worker=0.25", "env.ray.resources={envnode: 1}"])
    kwargs = pool_kwargs(cfg)
    assert kwargs["backend"] == "ray" and kwargs["ray_options"] == {"num_cpus": 0.25, "resources": {"envnode": 1.0}}
    specs = [EpisodeSpec("toy/delayed", i, 100 + i) for i in range(4)]
    pools: list[EnvPool] = []
    nodes: list[str] = []
    real_init = EnvPool.__init__

    def noted(self, *args, **kw) -> None:  # the real pool, noted to ask where its workers are while it runs
        real_init(self, *args, **kw)
        pools.append(self)

    def play(**pool) -> list:
        sampling = SamplingConfig(max_tokens=16, temperature=0.0)
        return run_episodes(
            specs,
            HashGenerator(tokenizer),
            tokenizer,
            sampling,
            env_kwargs={"length": 3},
            on_episode=lambda _: nodes.extend(pools[-1].worker_nodes() if pools[-1].backend == "ray" else []),
            **pool,
        )

    monkeypatch.setattr(EnvPool, "__init__", noted)
    got = play(**kwargs)
    want = play(backend="in_process")
    assert [p.backend for p in pools] == ["ray", "in_process"]
    assert nodes and set(nodes) == {env_node}

    def played(results: list) -> list[dict]:  # everything but the clock
        return [{k: v for k, v in dataclasses.asdict(r).items() if k != "wall_time_s"} for r in results]

    assert played(got) == played(want)
    plain = pool_kwargs(load_config([]))
    assert plain["backend"] == "subprocess" and plain["ray_options"] is None
    assert pool_kwargs(load_config(["env.in_process=true"]))["backend"] == "in_process"  # the old key
