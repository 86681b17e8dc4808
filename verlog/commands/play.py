"""``verlog play ENV_ID``: play a registered env in the terminal, as a person would.

Prints the instruction (again only when a new episode changes it), then each observation, and reads one action per
line: an action string (parsed by the env like a model's answer), or the action's number from ``:help``. Commands:
``:help`` lists the actions, ``:info`` shows the last info dict, ``:reset`` starts a new episode, ``:q`` quits (so
does end of input). After each step it prints the executed action, reward, terminated/truncated and progression; a
finished episode is summarised and the next one starts (seed + 1 when ``--seed`` was given).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import sys
from typing import Any, TextIO

from verlog.commands.common import UsageError, add_import_argument, build_env, import_user_modules, int_at_least, seed

QUIT = (":q", ":quit", ":exit")
HELP = (":help", ":h", "?")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("env_id", help="a registered env id, e.g. babyai/goto (see `verlog envs`)")
    parser.add_argument("--seed", type=seed, default=None, help="seed of the first episode (then seed+1, ...)")
    parser.add_argument(
        "--parse-mode", choices=["strict", "lenient"], default=None, help="action parsing mode (default: the env's)"
    )
    parser.add_argument(
        "--episodes", type=int_at_least(1, " (episodes to play)"), default=None, help="stop after this many episodes"
    )
    add_import_argument(parser)
    parser.add_argument(
        "--env-arg",
        dest="env_args",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="keyword argument for envs.make, VALUE read as a Python literal when it is one (repeatable)",
    )
    parser.add_argument("--show-info", action="store_true", help="print the whole info dict after every step")


def parse_env_args(pairs: list[str]) -> dict[str, Any]:
    """``["max_steps=10", "parse_mode=lenient"]`` -> ``{"max_steps": 10, "parse_mode": "lenient"}``."""
    kwargs: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.isidentifier():
            raise UsageError(f"--env-arg must look like KEY=VALUE with KEY a Python name, got {pair!r}")
        try:
            kwargs[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            kwargs[key] = value
    return kwargs


def run(args: argparse.Namespace) -> int:
    from verlog.commands.common import check_env_id

    import_user_modules(args.imports)
    kwargs = parse_env_args(args.env_args)
    check_env_id(args.env_id)
    if args.parse_mode is not None:
        kwargs["parse_mode"] = args.parse_mode
    env = build_env(args.env_id, kwargs, "--env-arg", seed=args.seed or 0)  # a bad setting fails here, named
    try:
        return play(env, sys.stdin, sys.stdout, seed=args.seed, episodes=args.episodes, show_info=args.show_info)
    finally:
        env.close()


def _short(value: Any, limit: int = 200) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def play(
    env: Any,
    stdin: TextIO,
    stdout: TextIO,
    *,
    seed: int | None = None,
    episodes: int | None = None,
    show_info: bool = False,
) -> int:
    """Run the interactive loop on a TextEnv, reading lines from ``stdin`` and writing to ``stdout``; returns 0."""

    def say(text: str = "") -> None:
        print(text, file=stdout, flush=True)

    def help_text() -> str:
        lines = [f"  {i}: {name}" for i, name in enumerate(env.actions)]
        return "\n".join(
            ["Actions (type the name or its number):", *lines, "Commands: :help  :info  :reset  :q (quit)"]
        )

    interactive = stdin is sys.stdin and stdout is sys.stdout and stdin.isatty()
    if interactive:
        with contextlib.suppress(ImportError):
            import readline  # noqa: F401  (line editing and history for input())

    def read_line(prompt: str) -> str:
        if interactive:
            try:
                return input(prompt) + "\n"
            except EOFError:
                return ""
        print(prompt, end="", file=stdout, flush=True)
        return stdin.readline()

    finished = 0
    shown_instruction = None
    episode_return = 0.0
    obs, info = env.reset(seed=seed)
    while True:
        if env.instruction != shown_instruction:
            shown_instruction = env.instruction
            say(f"=== Instruction ===\n{shown_instruction}\n")
        say(f"--- Episode {finished + 1}, step {info.get('episode_step', 0)} ---\n{obs.text}")
        action = None
        while action is None:
            line = read_line("action> ")
            if not line:  # end of input
                say("\n(end of input) bye")
                return 0
            line = line.strip()
            if not line:
                continue
            if line in QUIT:
                say("bye")
                return 0
            if line in HELP:
                say(help_text())
            elif line == ":info":
                say("\n".join(f"  {k}: {_short(v)}" for k, v in info.items()))
            elif line == ":reset":
                action = ""
            elif line.startswith(":"):
                say(f"unknown command {line!r}; {':help'} lists the actions and commands")
            elif line.isdigit():
                index = int(line)
                if index < len(env.actions):
                    action = env.actions[index]
                else:
                    say(f"no action number {index}: there are {len(env.actions)} (0-{len(env.actions) - 1})")
            else:
                action = line
        if action == "":  # :reset
            seed = None if seed is None else seed + 1
            obs, info = env.reset(seed=seed)
            episode_return = 0.0
            say("(new episode)")
            continue
        obs, reward, terminated, truncated, info = env.step(action)
        episode_return += reward
        note = "" if info.get("action_valid", True) else f" (not a valid action: executed {info.get('action')!r})"
        say(
            f"-> {info.get('action')}{note} | reward {reward:g} | terminated {terminated} | truncated {truncated}"
            f" | progression {info.get('progression', 0.0):.2f}"
        )
        if show_info:
            say("\n".join(f"  {k}: {_short(v)}" for k, v in info.items()))
        if terminated or truncated:
            finished += 1
            outcome = "success" if info.get("success") else "no success"
            say(
                f"=== Episode {finished} over after {info.get('episode_step')} steps: {outcome}, return "
                f"{episode_return:g} ===\n"
            )
            if episodes is not None and finished >= episodes:
                return 0
            seed = None if seed is None else seed + 1
            obs, info = env.reset(seed=seed)
            episode_return = 0.0
