"""``env.backend`` and ``env.ray`` from the config to the rollout's env pool: the checks before launch (one line
each, naming the fix), the old ``env.in_process: true`` (one line saying what it now means), and build_rollout
handing the backend to the pool. No Ray is started here (tests/envs/test_pool_ray.py runs the Ray backend)."""

from __future__ import annotations

import socket

import pytest

from verlog.config.checks import typed_config
from verlog.config.env_backend import LEGACY_NOTE, env_backend_problems, env_pool_arguments
from verlog.config.schema import TrainConfig
from verlog.prompting.memory import MemoryConfig
from verlog.rollout import SamplingConfig
from verlog.rollout.build import build_rollout


def _config(**env) -> TrainConfig:
    cfg, problems = typed_config({"env": env})
    assert problems == []
    return cfg


def test_the_default_is_subprocess_and_passes() -> None:
    cfg = TrainConfig()
    assert cfg.env.backend == "subprocess" and env_backend_problems(cfg) == []
    assert env_pool_arguments(cfg, say=None) == {"backend": "subprocess", "ray_options": None}


def test_an_unknown_backend_names_the_close_match() -> None:
    problems = env_backend_problems(_config(backend="rya"))
    assert problems == [
        "env.backend='rya' is not one of subprocess, ray, in_process (where the env workers run). Did you mean "
        "env.backend=ray?"
    ]


def test_the_old_in_process_key_still_works_and_says_what_it_means() -> None:
    said: list[str] = []
    cfg = _config(in_process=True)
    assert env_backend_problems(cfg) == []
    assert env_pool_arguments(cfg, say=said.append) == {"backend": "in_process", "ray_options": None}
    assert said == [LEGACY_NOTE] and "env.backend=in_process" in LEGACY_NOTE
    assert env_backend_problems(_config(in_process=True, backend="in_process")) == []
    (problem,) = env_backend_problems(_config(in_process=True, backend="ray"))
    assert problem.startswith("env.in_process=true and env.backend=ray contradict each other: drop env.in_process")


def test_ray_keys_are_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    cfg = _config(backend="ray", ray={"num_cpus_per_worker": 0.5, "resources": {"envnode": 1}})
    assert env_backend_problems(cfg) == []
    assert env_pool_arguments(cfg, say=None) == {
        "backend": "ray",
        "ray_options": {"num_cpus": 0.5, "resources": {"envnode": 1.0}},
    }
    assert env_backend_problems(_config(backend="ray", ray={"num_cpus_per_worker": -1})) == [
        "env.ray.num_cpus_per_worker is -1.0: give a number >= 0, e.g. 1"
    ]
    assert env_backend_problems(_config(backend="ray", ray={"resources": {"envnode": 0}})) == [
        "env.ray.resources.envnode is 0.0: give an amount > 0 per worker, e.g. 1"
    ]
    (problem,) = env_backend_problems(_config(ray={"resources": {"envnode": 1}}))
    assert problem.startswith("env.ray.resources are requests of Ray env workers, but env.backend=subprocess")


def test_a_ray_address_that_does_not_answer_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{port}")
    (problem,) = env_backend_problems(_config(backend="ray"))
    assert problem.startswith(f"env.backend=ray: the Ray cluster at RAY_ADDRESS=127.0.0.1:{port} does not answer")
    assert problem.endswith("or unset RAY_ADDRESS to start a local Ray")
    assert env_backend_problems(_config(backend="subprocess")) == []  # only the Ray backend needs the cluster


def test_build_rollout_hands_the_backend_to_the_pool(tokenizer) -> None:
    kwargs = {
        "env_id": "toy/delayed",
        "env_kwargs": {},
        "tasks": None,
        "num_slots": 2,
        "tokenizer": tokenizer,
        "generator": None,
        "sampling": SamplingConfig(max_tokens=8),
        "memory": MemoryConfig(),
        "max_prompt_tokens": 256,
    }
    for backend, in_process, want in (("in_process", False, "in_process"), (None, True, "in_process")):
        rollout = build_rollout(**kwargs, backend=backend, in_process=in_process)
        try:
            assert rollout.pool.backend == want
        finally:
            rollout.close()


@pytest.mark.parametrize(
    "override", ["env.ray.resources={envnode: 1}", "env.ray.resources.envnode=1", "+env.ray.resources={envnode: 1}"]
)
def test_a_resource_is_set_as_docs_ray_envs_writes_it(override: str) -> None:
    """docs/ray-envs.md's overrides: a resource name of the user's is set without Hydra's ``+`` (it is not a key of
    the config), and reaches the pool's requests."""
    from verlog.config.compose import load_config

    cfg, problems = typed_config(load_config(["env.backend=ray", "env.ray.num_cpus_per_worker=0", override]))
    assert not problems
    assert env_pool_arguments(cfg, say=None)["ray_options"] == {"num_cpus": 0.0, "resources": {"envnode": 1.0}}
