"""Episodes per task, explicit seeds, task names, and seed disjointness."""

from __future__ import annotations

import pytest

from verlog.eval.protocol import BALROG_EPISODES_PER_TASK, EvalProtocol, EvalProtocolError, expand_tasks, split_task


def test_episodes_use_seed_start_plus_index_for_every_task() -> None:
    protocol = EvalProtocol(("babyai/goto", "babyai/pickup"), episodes_per_task=3, seed_start=1000)
    episodes = protocol.episodes()
    assert [(e.env_id, e.episode_index, e.seed) for e in episodes] == [
        ("babyai/goto", 0, 1000),
        ("babyai/goto", 1, 1001),
        ("babyai/goto", 2, 1002),
        ("babyai/pickup", 0, 1000),
        ("babyai/pickup", 1, 1001),
        ("babyai/pickup", 2, 1002),
    ]
    assert episodes[4].episode_id == "babyai/pickup/run_01"
    assert (episodes[4].env_name, episodes[4].task) == ("babyai", "pickup")
    described = protocol.as_dict()
    assert described["seeds"] == [1000, 1001, 1002]
    assert described["seed_start"] == 1000 and described["episodes_per_task"] == 3


def test_balrog_default_is_ten_episodes_per_task() -> None:
    assert BALROG_EPISODES_PER_TASK == 10
    assert len(EvalProtocol(("crafter/default",)).episodes()) == 10


def test_explicit_seeds_override_the_count() -> None:
    protocol = EvalProtocol(("babyai/goto",), episodes_per_task=10, seeds=(5, 9, 2))
    assert protocol.episodes_per_task == 3
    assert [e.seed for e in protocol.episodes()] == [5, 9, 2]
    assert protocol.as_dict()["seed_start"] is None
    with pytest.raises(EvalProtocolError, match="repeat"):
        EvalProtocol(("babyai/goto",), seeds=(1, 1))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tasks": ()}, "at least one task"),
        ({"tasks": ("babyai/goto", "babyai/goto")}, "twice"),
        ({"tasks": ("babyai/goto",), "episodes_per_task": 0}, "episodes_per_task"),
        ({"tasks": ("babyai/goto",), "seed_start": -1}, "seed_start"),
        ({"tasks": ("babyai/goto",), "seed_start": 2**32 - 2, "episodes_per_task": 3}, "seeds must lie"),
        ({"tasks": ("babyai/goto",), "max_steps": 0}, "max_steps"),
    ],
)
def test_bad_protocols_are_rejected(kwargs: dict, message: str) -> None:
    with pytest.raises(EvalProtocolError, match=message):
        EvalProtocol(**kwargs)


def test_check_disjoint_names_the_overlap_and_the_fix() -> None:
    protocol = EvalProtocol(("babyai/goto",), episodes_per_task=200, seed_start=10_000)
    protocol.check_disjoint(range(0, 10_000), what="demonstrations")
    with pytest.raises(EvalProtocolError, match=r"2 evaluation seed\(s\) were also used for training \(10000, 10001\)"):
        protocol.check_disjoint([10_000, 10_001, 50_000])
    with pytest.raises(EvalProtocolError, match="seed_start=10002"):
        protocol.check_disjoint([10_000, 10_001])


def test_expand_tasks() -> None:
    registered = ["babyai/goto", "babyai/open", "babyai/pickup", "crafter/default"]
    assert expand_tasks(["babyai/pickup", "crafter"], registered) == ["babyai/pickup", "crafter/default"]
    assert expand_tasks(["babyai", "babyai/goto"], registered) == ["babyai/goto", "babyai/open", "babyai/pickup"]
    with pytest.raises(EvalProtocolError, match="did you mean babyai/pickup"):
        expand_tasks(["babyai/pikup"], registered)
    with pytest.raises(EvalProtocolError, match="no tasks"):
        expand_tasks(["", " "], registered)
    assert "babyai/goto" in expand_tasks(["babyai"])  # the real registry
    assert split_task("babyai/goto") == ("babyai", "goto")
    assert split_task("crafter") == ("crafter", "crafter")
