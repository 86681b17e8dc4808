"""BabyAI-Text on the real minigrid levels: golden layouts and texts, determinism, state, the expert, prompts."""

from __future__ import annotations

import multiprocessing as mp
import warnings

import numpy as np
import pytest
from env_runs import play_actions
from gymnasium.utils.env_checker import check_env

import envs
from envs.babyai import TASK_KINDS, BabyAITextEnv
from envs.babyai.describe import describe_lines, instruction
from envs.babyai.expert import BabyAIExpert
from envs.babyai.level import HELD_OUT
from envs.errors import EnvStateError

# Produced by BALROG's own code (docs/text-envs.md, "BabyAI-Text"): kind, seed, mission, max_steps, agent pos, dir, text
GOLDEN = [
    ("goto", 0, "go to the green key", 64, (6, 5), 2,
     "a wall 6 steps forward / a wall 2 steps left / a green key 1 step right and 2 steps forward"),
    ("goto", 2, "go to the grey key", 64, (5, 5), 3, "a wall 2 steps right / a grey key 2 steps forward"),
    ("open", 0, "open the blue door", 128, (13, 4), 0, "a wall 1 step forward / a wall 3 steps right"),
    ("open", 2, "open the yellow door", 128, (10, 1), 2,
     ("a wall 3 steps forward / a wall 1 step right / a yellow key 3 steps left and 1 step forward / "
      "a locked yellow door 1 step left and 3 steps forward")),
    ("putnext", 1, "put the purple ball next to the yellow ball", 128, (6, 2), 1,
     "a wall 1 step left / a purple ball 4 steps forward / a yellow ball 3 steps right and 4 steps forward"),
    ("pick_up_seq_go_to", 0, "pick up the green key, then go to the yellow key", 128, (6, 5), 2,
     ("a wall 6 steps forward / a wall 2 steps left / a yellow key 1 step left and 1 step forward / "
      "a green key 1 step right and 2 steps forward")),
    ("pick_up_seq_go_to", 1, "go to a yellow key after you pick up a yellow key", 128, (3, 4), 3,
     "a wall 4 steps forward / a wall 3 steps left"),
    ("pick_up_seq_go_to", 2, "go to the grey key after you pick up the grey box", 128, (2, 1), 2,
     "a wall 2 steps forward / a wall 1 step right / a grey key 1 step left and 1 step forward"),
]  # fmt: skip

GOTO_SEED0_INSTRUCTION = """You are an agent playing a simple navigation game. Your goal is to go to the green key. \
The following are the possible actions you can take in the game, followed by a short description of each action:

turn left: turn to the left,
turn right: turn to the right,
go forward: take one step forward,
pick up: pick up the object below you,
drop: drop the object that you are holding,
toggle: manipulate the object in front of you.

In a moment I will present you an observation.

Tips:
- Once the desired object you want to interact or pickup in front of you, you can use the 'toggle' action to \
interact with it.
- It doesn't make sense to repeat the same action over and over if the observation doesn't change.

PLAY!"""


@pytest.mark.parametrize(("kind", "seed", "mission", "max_steps", "pos", "direction", "text"), GOLDEN)
def test_golden_layouts_and_texts(
    kind: str,
    seed: int,
    mission: str,
    max_steps: int,
    pos: tuple[int, int],
    direction: int,
    text: str,
) -> None:
    env = envs.make(f"babyai/{kind}")
    obs, info = env.reset(seed=seed)
    assert env.mission == mission == info["mission"]
    assert env.max_steps == max_steps
    assert tuple(int(v) for v in env.level.agent_pos) == pos
    assert env.level.agent_dir == direction
    assert obs.text == text.replace(" / ", "\n")
    assert obs.long_term == obs.text and obs.short_term == ""
    assert info["progression"] == 0.0 and info["episode_step"] == 0


def test_goto_and_pickup_share_layouts() -> None:
    goto, pickup = BabyAITextEnv("goto"), BabyAITextEnv("pickup")
    for seed in range(5):
        a, _ = goto.reset(seed=seed)
        b, _ = pickup.reset(seed=seed)
        assert a.text == b.text
        assert goto.mission.replace("go to", "pick up") == pickup.mission


def test_instruction_is_balrogs_wording() -> None:
    env = BabyAITextEnv("goto")
    env.reset(seed=0)
    assert env.instruction == GOTO_SEED0_INSTRUCTION
    verlog = instruction("go to the green key", variant="verlog")
    assert "pick up: pick up the object one step in front of you,\n" in verlog
    assert "toggle: manipulate the object one step in front of you." in verlog
    assert verlog.replace("one step in front of you", "X") != GOTO_SEED0_INSTRUCTION.replace("below you", "X")


def test_instruction_before_reset_is_an_error() -> None:
    with pytest.raises(EnvStateError, match="reset"):
        _ = BabyAITextEnv("goto").instruction


def test_solved_open_episode_matches_the_spec() -> None:
    """Spec 1.2: open, seed 5, the upstream bot solves it in 16 steps; reward 1 - 0.9 * 16 / 128."""
    env = BabyAITextEnv("open")
    env.reset(seed=5)
    assert env.mission == "open the door"
    expert = BabyAIExpert(env)
    texts, actions = [], []
    while True:
        actions.append(expert.next_action())
        obs, reward, terminated, truncated, info = env.step(actions[-1])
        texts.append(obs.text)
        if terminated or truncated:
            break
    assert len(actions) == 16 and actions[-1] == "toggle"
    assert texts[-2] == "You carry a yellow key\na wall 2 steps right\na locked yellow door 1 step forward"
    assert texts[-1] == "You carry a yellow key\na wall 2 steps right\na open yellow door 1 step forward"
    assert reward == pytest.approx(0.8875) and terminated and not truncated
    assert info["success"] is True and info["progression"] == 1.0


@pytest.mark.parametrize("kind", TASK_KINDS)
def test_expert_through_the_text_interface_solves_95_percent(kind: str) -> None:
    env = envs.make(f"babyai/{kind}")
    solved = 0
    for seed in range(50):
        env.reset(seed=seed)
        expert = BabyAIExpert(env)
        while True:
            _, reward, terminated, truncated, info = env.step(expert.next_action())
            if terminated or truncated:
                break
        solved += info["success"]
        assert info["success"] == (reward > 0)
    assert solved >= 48, f"{kind}: the bot solved only {solved}/50"


def test_same_seed_same_episode_and_no_stdout_noise(
    capfd: pytest.CaptureFixture[str],
) -> None:
    rng = np.random.default_rng(0)
    actions = [str(a) for a in rng.choice(BabyAITextEnv("goto").actions, size=40)]
    for kind in TASK_KINDS:
        runs = []
        for _ in range(2):
            env = BabyAITextEnv(kind)
            obs, _ = env.reset(seed=11)
            trace = [obs.text]
            for a in actions:
                obs, reward, terminated, truncated, _ = env.step(a)
                trace.append((obs.text, reward))
                if terminated or truncated:
                    break
            runs.append(trace)
        assert runs[0] == runs[1]
    env = BabyAITextEnv("putnext")
    for seed in range(60):  # putnext rejects layouts often (objects already adjacent)
        env.reset(seed=seed)
    assert capfd.readouterr().out == ""


def test_held_out_combinations_never_appear() -> None:
    for kind in TASK_KINDS:
        env = BabyAITextEnv(kind)
        for seed in range(40):
            env.reset(seed=seed)
            assert not any(banned in env.mission for banned in HELD_OUT)
            for obj in env.level.grid.grid:
                if obj is not None and obj.type != "wall":
                    assert f"{obj.color} {obj.type}" not in HELD_OUT


def test_num_dists_adds_objects() -> None:
    env = BabyAITextEnv("goto", num_dists=3)
    env.reset(seed=0)
    objects = [o for o in env.level.grid.grid if o is not None and o.type in ("key", "ball", "box")]
    assert len(objects) == 4


def test_reset_without_seed_continues_the_rng() -> None:
    env = BabyAITextEnv("goto")
    env.reset(seed=3)
    first = env.mission, tuple(env.level.agent_pos)
    missions = set()
    for _ in range(5):
        env.reset()
        missions.add((env.mission, tuple(env.level.agent_pos)))
    assert len(missions) > 1 or first not in missions


def test_carried_object_and_walls_describer() -> None:
    image = np.zeros((7, 7, 3), dtype=np.uint8)  # all unseen
    image[3, 6] = (
        5,
        0,
        0,
    )  # the carried key on the agent's cell is never described as seen
    image[3, 5] = (1, 0, 0)  # empty
    image[3, 4] = (2, 5, 0)  # wall 2 forward
    image[2, 6] = (
        4,
        4,
        0,
    )  # open yellow door 1 left: no wall line left, but an object line
    image[0, 6] = (2, 5, 0)
    image[6, 6] = (2, 5, 0)  # wall 3 right
    image[5, 2] = (6, 3, 0)  # purple ball 2 right and 4 forward

    class Carried:
        color, type = "red", "ball"

    assert describe_lines(image, Carried()) == [
        "You carry a red ball",
        "a wall 2 steps forward",
        "a wall 3 steps right",
        "a open yellow door 1 step left",
        "a purple ball 2 steps right and 4 steps forward",
    ]


def test_invalid_action_defaults_to_go_forward_with_penalty_and_feedback() -> None:
    env = envs.make("babyai/goto", format_penalty=0.1, invalid_action_feedback=True)
    reference = BabyAITextEnv("goto")
    env.reset(seed=0)
    reference.reset(seed=0)
    obs, reward, _, _, info = env.step("I am not sure")
    ref_obs, _, _, _, _ = reference.step("go forward")
    assert info["action"] == "go forward" and info["action_valid"] is False
    assert info["raw_action"] == "I am not sure"
    assert reward == -0.1
    assert obs.text == (
        "\n\nYour previous output did not contain a valid action. Defaulted to action: go forward\n\nObservation:\n"
        + ref_obs.text
    )


def test_lenient_mode_through_make() -> None:
    env = envs.make("babyai/goto", parse_mode="lenient")
    env.reset(seed=0)
    _, _, _, _, info = env.step("THINK: ahead.\nAction: **Turn_Left**.")
    assert info["action"] == "turn left" and info["action_valid"] is True


def test_truncation_at_max_steps_override() -> None:
    env = envs.make("babyai/goto", max_steps=3)
    env.reset(seed=0)
    assert env.max_steps == 3
    results = [env.step("turn left") for _ in range(3)]
    assert [r[3] for r in results] == [False, False, True]
    assert not any(r[2] for r in results)
    assert results[-1][4]["success"] is False
    with pytest.raises(EnvStateError):
        env.step("turn left")


def _continue_in_fresh_process(kind: str, state: bytes, actions: list[str]) -> list[tuple[str, float, bool]]:
    env = BabyAITextEnv(kind)
    env.set_state(state)
    out = play_actions(env, actions)
    env.reset()  # the level's RNG was restored too: the next layout is the same
    out.append((env.mission, 0.0, False))
    return out


def test_state_round_trip_in_a_fresh_process() -> None:
    rng = np.random.default_rng(5)
    env = BabyAITextEnv("pick_up_seq_go_to")
    env.reset(seed=4)
    expert = BabyAIExpert(env)
    for _ in range(4):
        env.step(expert.next_action())
    state = env.get_state()
    actions = [str(a) for a in rng.choice(env.actions, size=50)]
    expected = play_actions(env, actions)
    env.reset()
    expected.append((env.mission, 0.0, False))
    with mp.get_context("spawn").Pool(1) as pool:
        got = pool.apply(_continue_in_fresh_process, ("pick_up_seq_go_to", state, actions))
    assert got == expected


def test_state_restores_success_and_progression() -> None:
    env = BabyAITextEnv("goto")
    env.reset(seed=0)
    expert = BabyAIExpert(env)
    state = env.get_state()
    while True:
        _, _, terminated, truncated, info = env.step(expert.next_action())
        if terminated or truncated:
            break
    assert info["progression"] == 1.0
    env.set_state(state)
    assert env.last_observation is not None and env.episode_step == 0
    _, _, _, _, info = env.step("turn left")
    assert info["progression"] == 0.0


@pytest.mark.parametrize("kind", ["goto", "open"])
def test_gymnasium_env_checker(kind: str) -> None:
    env = BabyAITextEnv(kind)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any checker warning fails the test
        warnings.filterwarnings("ignore", message=".*not having a spec.*")
        check_env(env)
    frame = env.render()
    assert frame is not None and frame.dtype == np.uint8 and frame.shape[2] == 3


def test_image_is_attached_on_request() -> None:
    env = envs.make("babyai/goto", render_image=True)
    obs, _ = env.reset(seed=0)
    assert obs.image is not None and obs.image.shape == (112, 112, 3)
    assert BabyAITextEnv("goto").reset(seed=0)[0].image is None


def test_registry_and_bad_arguments() -> None:
    assert {f"babyai/{k}" for k in TASK_KINDS} <= set(envs.list_envs())
    with pytest.raises(ValueError, match="task kind"):
        BabyAITextEnv("gotoo")
    with pytest.raises(ValueError, match="num_dists"):
        BabyAITextEnv("goto", num_dists=-1)
    with pytest.raises(ValueError, match="instruction_variant"):
        BabyAITextEnv("goto", instruction_variant="other")
