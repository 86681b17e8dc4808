"""Crafter-Text on the real crafter 1.8.3: golden texts, prompt, describer edge cases, state across processes."""

from __future__ import annotations

import multiprocessing as mp
import warnings

import numpy as np
import pytest
from env_runs import play_actions
from gymnasium.utils.env_checker import check_env

import envs
from envs.crafter import CrafterGame, CrafterTextEnv
from envs.crafter.describe import ACHIEVEMENT_TITLES, describe_long_term, instruction
from envs.errors import EnvStateError

SEED7_RESET = (
    "You see:\n- grass 1 step to your west\n- tree 5 steps to your north-east\n\nYou face grass at your front."
)
SEED7_AFTER_EEN = (
    "You see:\n- tree 2 steps to your north-east\n- grass 1 step to your west\n- sand 5 steps to your north-east\n"
    "- water 6 steps to your north-east\n\nYou face grass at your front."
)
SEED0_RESET = (
    "You see:\n- tree 7 steps to your north-west\n- grass 1 step to your west\n- cow 5 steps to your north-east"
    "\n\nYou face grass at your front."
)
STATUS_FULL = "Your status:\n- health: 9/9\n- food: 9/9\n- drink: 9/9\n- energy: 9/9"

# BALROG's current prompt (docs/text-envs.md, "Crafter-Text")
BALROG_PROMPT = """You are an agent playing Crafter. The following are the only valid actions you can take in the \
game, followed by a short description of each action:

Noop: do nothing,
Move West: move west on flat ground,
Move East: move east on flat ground,
Move North: move north on flat ground,
Move South: move south on flat ground,
Do: Multiuse action to collect material, drink from lake and hit creature in front,
Sleep: sleep when energy level is below maximum,
Place Stone: place a stone in front,
Place Table: place a table,
Place Furnace: place a furnace,
Place Plant: place a plant,
Make Wood Pickaxe: craft a wood pickaxe with a nearby table and wood in inventory,
Make Stone Pickaxe: craft a stone pickaxe with a nearby table, wood, and stone in inventory,
Make Iron Pickaxe: craft an iron pickaxe with a nearby table and furnace, wood, coal, and iron in inventory,
Make Wood Sword: craft a wood sword with a nearby table and wood in inventory,
Make Stone Sword: craft a stone sword with a nearby table, wood, and stone in inventory,
Make Iron Sword: craft an iron sword with a nearby table and furnace, wood, coal, and iron in inventory.

These are the game achievements you can get:
1. Collect Wood
2. Place Table
3. Eat Cow
4. Collect Sapling
5. Collect Drink
6. Make Wood Pickaxe
7. Make Wood Sword
8. Place Plant
9. Defeat Zombie
10. Collect Stone
11. Place Stone
12. Eat Plant
13. Defeat Skeleton
14. Make Stone Pickaxe
15. Make Stone Sword
16. Wake Up
17. Place Furnace
18. Collect Coal
19. Collect Iron
20. Make Iron Pickaxe
21. Make Iron Sword
22. Collect Diamond

In a moment I will present a history of actions and observations from the game.
Your goal is to get as far as possible by completing all the achievements.

PLAY!"""

# seed 7: two trees east of the start; crafter 1.8.3 turns a chopped tree into grass and a table costs 2 wood
WOOD_AND_TABLE = ["Move East", "Move East", "Move North", "Move North", "Move East", "Do"]
WOOD_AND_TABLE += ["Move South"] * 4 + ["Move East", "Do", "Place Table"]


def _random_actions(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [CrafterTextEnv().actions[i] for i in rng.integers(0, 17, n)]


def test_golden_texts_seed7_and_seed0() -> None:
    env = envs.make("crafter/default")
    obs, info = env.reset(seed=7)
    assert obs.long_term == SEED7_RESET
    assert obs.short_term == STATUS_FULL + "\n\nYou have nothing in your inventory."
    assert obs.text == obs.short_term + "\n" + obs.long_term
    assert info["progression"] == 0.0 and info["score"] == 0
    obs, reward, *_ = env.step("Do")
    assert reward == 1.0 and obs.long_term == SEED7_RESET
    assert obs.short_term.endswith("Your inventory:\n- sapling: 1")
    for action in ("Move East", "Move East", "Move North"):
        obs, *_ = env.step(action)
    assert obs.long_term == SEED7_AFTER_EEN
    obs, _ = env.reset(seed=0)
    assert obs.long_term == SEED0_RESET


def test_instruction_balrog_and_remaining() -> None:
    env = CrafterTextEnv()
    env.reset(seed=7)
    assert env.instruction == BALROG_PROMPT
    remaining = CrafterTextEnv(achievements="remaining")
    remaining.reset(seed=7)
    assert remaining.instruction == BALROG_PROMPT
    remaining.step("Do")  # collects a sapling
    prompt = remaining.instruction
    assert "Collect Sapling" not in prompt and "4. Collect Drink\n" in prompt and "21. Collect Diamond\n" in prompt
    assert len(ACHIEVEMENT_TITLES) == 22
    assert instruction({"collect_wood"}, achievements="all") == BALROG_PROMPT


def test_scripted_wood_and_table_progression_rises() -> None:
    env = CrafterTextEnv()
    env.reset(seed=7)
    progression = [0.0]
    for action in WOOD_AND_TABLE:
        obs, reward, terminated, truncated, info = env.step(action)
        assert info["action_valid"] and not terminated and not truncated
        progression.append(info["progression"])
    assert info["achievements"]["collect_wood"] >= 1 and info["achievements"]["place_table"] == 1
    assert reward == 1.0 and obs.long_term.endswith("You face table at your front.")
    assert progression == sorted(progression) and progression[-1] == pytest.approx(2 / 22)
    assert progression[6] == pytest.approx(1 / 22)  # after the first Do


def test_same_seed_same_episode_and_next_world_differs() -> None:
    actions = _random_actions(120, seed=1)
    traces = []
    for _ in range(2):
        env = CrafterTextEnv()
        trace = [env.reset(seed=3)[0].text]
        for a in actions:
            obs, reward, terminated, _, _ = env.step(a)
            trace.append((obs.text, reward))
            if terminated:
                break
        traces.append(trace)
    assert traces[0] == traces[1]
    env = CrafterTextEnv()
    first = env.reset(seed=3)[0].text
    second = env.reset()[0].text  # the next world of the same seed
    assert env.reset(seed=3)[0].text == first
    assert (first, env.game._episode) != (second, 2)


def test_rendering_does_not_change_the_game() -> None:
    """At night crafter's render draws from the world RNG; render=False makes the same draws without drawing."""
    actions = np.random.default_rng(2).integers(0, 17, 60)
    games = [CrafterGame(5, render=True), CrafterGame(5, render=False)]
    for game in games:
        game.reset()
        game._step = 130  # late afternoon: night (daylight < 0.5) starts near step 150
    for a in actions:
        out = [game.step(int(a)) for game in games]
        assert out[0][0] is not None and out[1][0] is None
        assert (out[0][3]["semantic"] == out[1][3]["semantic"]).all() and out[0][1] == out[1][1]
    states = [g.world.random.get_state()[1] for g in games]
    assert (states[0] == states[1]).all()
    assert games[1].world.daylight < 0.5  # the run did cover the night


def _continue_in_fresh_process(state: bytes, prefix: list[str], actions: list[str]) -> tuple[list, list]:
    """In a new process: continue from ``state``, and also replay the whole episode from its seed."""

    restored = CrafterTextEnv()
    restored.set_state(state)
    replayed = CrafterTextEnv()
    replayed.reset(seed=10)
    for a in prefix:
        replayed.step(a)
    return play_actions(restored, actions), play_actions(replayed, actions)


def test_state_round_trip_in_a_fresh_process_for_250_steps() -> None:
    env = CrafterTextEnv()
    env.reset(seed=10)
    prefix = _random_actions(20, seed=3)
    for a in prefix:
        env.step(a)
    state = env.get_state()
    actions = _random_actions(250, seed=6)  # this random player survives all 250 steps (through the night)
    expected = play_actions(env, actions)
    assert len(expected) == 250
    with mp.get_context("spawn").Pool(1) as pool:
        restored, replayed = pool.apply(_continue_in_fresh_process, (state, prefix, actions))
    assert restored == expected
    assert replayed == expected  # same seed and actions in another process: the same world (despawns included)


def test_truncation_at_max_steps_and_invalid_action() -> None:
    env = envs.make("crafter/default", max_steps=4, format_penalty=0.5, invalid_action_feedback=True)
    env.reset(seed=7)
    obs, reward, _, _, info = env.step("ACTION: dance")
    assert info["action"] == "Noop" and info["action_valid"] is False and reward == -0.5
    assert obs.long_term.startswith(
        "\n\nYour previous output did not contain a valid action. Defaulted to action: Noop\n\nObservation:\nYou see:"
    )
    flags = [env.step("Noop")[2:4] for _ in range(3)]
    assert flags == [(False, False), (False, False), (False, True)]
    with pytest.raises(EnvStateError):
        env.step("Noop")


def test_death_terminates_with_the_died_prefix() -> None:
    env = CrafterTextEnv(max_steps=10)
    env.reset(seed=7)
    env.game.player.health = 0
    obs, _, terminated, truncated, info = env.step("Noop")
    assert terminated and not truncated and info["success"] is False
    assert obs.long_term.startswith("You died.\n\n\n\nYou see:")


def test_describer_edges_and_prefixes() -> None:
    sem = np.full((64, 64), 2, dtype=np.uint8)  # grass everywhere
    sem[3, 10] = 6
    # west edge: plain slicing with a negative start gives an empty window
    assert (
        describe_long_term(sem, (3, 10), (0, 1)) == "You see nothing away from you.\n\nYou face nothing at your front."
    )
    assert describe_long_term(sem, (10, 2), (0, 1)).startswith("You see nothing")
    # east edge: the window is cut (no padding); the faced cell outside the map is "nothing"
    sem[63, 30], sem[61, 30] = 13, 6
    text = describe_long_term(sem, (63, 30), (1, 0))
    assert (
        text == "You see:\n- grass 1 step to your west\n- tree 2 steps to your west\n\nYou face nothing at your front."
    )
    assert describe_long_term(sem, (20, 20), (0, -1), sleeping=True).startswith(
        "You are sleeping, and will not be able take actions until energy is full.\n\n\n\nYou see:\n- grass 1 step"
    )
    # first-met order, nearest kept with the strictly smaller distance
    sem2 = np.full((64, 64), 2, dtype=np.uint8)
    sem2[30, 30] = 13
    sem2[26, 27], sem2[34, 33], sem2[31, 29] = 6, 14, 6
    assert describe_long_term(sem2, (30, 30), (-1, 0)) == (
        "You see:\n- tree 2 steps to your north-east\n- grass 1 step to your west\n- cow 7 steps to your south-east"
        "\n\nYou face grass at your front."
    )


def test_older_text_variants() -> None:
    sem = np.full((64, 64), 2, dtype=np.uint8)
    sem[30, 30] = 13
    sem[28, 31], sem[29, 32] = 6, 3  # tree 2 west 1 south, stone 1 west 2 south
    sem[31, 29], sem[34, 33] = 14, 1  # cow 1 north-east, water at the window's south-east corner
    v2 = describe_long_term(sem, (30, 30), (0, -1))
    v1 = describe_long_term(sem, (30, 30), (0, -1), variant="v1")
    v0_north = describe_long_term(sem, (30, 30), (0, -1), variant="v0")
    v0_east = describe_long_term(sem, (30, 30), (1, 0), variant="v0")
    assert v2 == (
        "You see:\n- grass 1 step to your west\n- tree 3 steps to your south-west\n- stone 3 steps to your south-west"
        "\n- cow 2 steps to your north-east\n- water 7 steps to your south-east\n\nYou face grass at your front."
    )
    # v0/v1: ordered by semantic id (water 1, grass 2, stone 3, tree 6, cow 14), always "steps"
    assert v1 == (
        "You see:\n- water 7 steps to your south-east\n- grass 1 steps to your west\n- stone 3 steps to your "
        "south-west\n- tree 3 steps to your south-west\n- cow 2 steps to your north-east"
        "\n\nYou face grass at your front."
    )
    # v0 facing north names the cell 2 west and 1 south; facing east, the cell 1 west and 2 south
    assert v0_north.endswith("You face tree at your front.") and v0_east.endswith("You face stone at your front.")
    assert v0_north.split("\n\n")[0] == v1.split("\n\n")[0]
    assert describe_long_term(sem, (30, 30), (0, 1), variant="v0").endswith("You face grass at your front.")
    env = CrafterTextEnv(text_variant="v1")
    assert env.reset(seed=0)[0].long_term == (
        "You see:\n- grass 1 steps to your west\n- tree 7 steps to your north-west\n- cow 5 steps to your north-east"
        "\n\nYou face grass at your front."
    )
    with pytest.raises(ValueError, match="variant"):
        CrafterTextEnv(text_variant="v3")


def test_lenient_synonyms() -> None:
    env = CrafterTextEnv(parse_mode="lenient")
    env.reset(seed=7)
    assert env.step("THINK: wood.\nACTION: chop tree")[4]["action"] == "Do"
    assert env.step("ACTION: move north-west")[4]["action_valid"] is False


def test_gymnasium_env_checker() -> None:
    env = CrafterTextEnv()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", message=".*not having a spec.*")
        check_env(env)
    frame = env.render()
    assert frame is not None and frame.shape == (256, 256, 3) and frame.dtype == np.uint8


def test_explicit_integer_seed_is_required_by_the_game() -> None:
    with pytest.raises(TypeError, match="integer seed"):
        CrafterGame(None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="achievements"):
        CrafterTextEnv(achievements="some")
