"""``verlog play ENV_ID``: play a registered env in the terminal, as a person would.

Prints the instruction (again only when a new episode changes it), then each observation, and reads one action per
line: an action string (parsed by the env like a model's answer), or the action's number from ``:help``. Commands:
``:help`` (or ``help``, ``?``) lists the actions, ``:info`` shows the last info dict, ``:reset`` starts a new
episode, ``:q`` quits (so does end of input). After each step it prints the executed action, reward,
terminated/truncated and progression; a finished episode is summarised and the next one starts (seed + 1 when
``--seed`` was given).

An env that fails (raises, returns what a text env must not, such as a NaN reward) or hangs (a reset or step that
runs longer than ``--step-timeout`` seconds, default :data:`STEP_TIMEOUT_S`) ends the game with one line on stderr,
``verlog play: error: the env failed ...``, and exit code :data:`EXIT_ENV_FAILED` (1).

The person is a policy of the rollout's own loop (:class:`verlog.rollout.stepper.EpisodeStepper`): the env is stepped
through the same one-slot pool, memory and turn record as the demos' expert, so what a person plays is what a model
would face. ``--record DIR`` appends every turn to ``DIR/tapes/play.jsonl``
(:class:`verlog.tapes.recorders.PlayTapeWriter`), tapes that ``verlog sft data.train=DIR`` fine-tunes on (docs/sft.md).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import os
import signal
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from verlog.commands.common import (
    UsageError,
    add_import_argument,
    build_env,
    float_in,
    import_user_modules,
    int_at_least,
    seed,
)
from verlog.errors import VerlogError

if TYPE_CHECKING:
    from verlog.rollout.stepper import PolicyInput
    from verlog.tapes.recorders import PlayTapeWriter

QUIT = (":q", ":quit", ":exit")
HELP = (":help", ":h", "?", "help")
"""What prints the actions and commands (``help`` too, typed as a person would, unless the env has an action of that
name: it used to be sent to the env as a move)."""
STEP_TIMEOUT_S = 30.0
"""Seconds an env's reset or step may run in ``verlog play`` before the game ends as hung (``--step-timeout``)."""
EXIT_ENV_FAILED = 1
"""Exit code of a game the env ended by failing or hanging (a bad command line is 2)."""


class EnvFailedError(VerlogError):
    """The env failed or hung while a person played it; the message says where and why."""


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
        help="keyword argument for envs.make, VALUE read as a Python literal or true/false/null when it is one "
        "(repeatable)",
    )
    parser.add_argument("--show-info", action="store_true", help="print the whole info dict after every step")
    parser.add_argument(
        "--step-timeout",
        type=float_in(0.0, low_open=True),
        default=STEP_TIMEOUT_S,
        metavar="SECONDS",
        help=f"end the game when one env reset or step runs longer (it hangs); default {STEP_TIMEOUT_S:g}",
    )
    parser.add_argument(
        "--record",
        metavar="DIR",
        default=None,
        help="append every turn played to DIR/tapes/play.jsonl (episode tapes: `verlog sft data.train=DIR` trains on "
        "them)",
    )


# the spellings of --env-arg values that YAML and JSON (env.kwargs, --env-kwargs) read as these constants
_CONSTANTS = {"true": True, "false": False, "null": None}


def parse_env_args(pairs: list[str]) -> dict[str, Any]:
    """``["max_steps=10", "parse_mode=lenient", "binary_reward=true"]`` -> ``{"max_steps": 10, "parse_mode":
    "lenient", "binary_reward": True}``: a Python literal, true / false / null as in env.kwargs, else the text
    (which the env's annotations then check: envs.registry.check_kwarg_types)."""
    kwargs: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.isidentifier():
            raise UsageError(f"--env-arg must look like KEY=VALUE with KEY a Python name, got {pair!r}")
        if value.strip().lower() in _CONSTANTS:
            kwargs[key] = _CONSTANTS[value.strip().lower()]
            continue
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
    record = _recorder(args.record, args.env_id, kwargs)
    env = build_env(args.env_id, kwargs, "--env-arg", seed=args.seed or 0)  # a bad setting fails here, named
    try:
        if record is not None:
            record.parse_mode = str(getattr(env, "parse_mode", "strict"))
        return play(
            env,
            sys.stdin,
            sys.stdout,
            seed=args.seed,
            episodes=args.episodes,
            show_info=args.show_info,
            record=record,
            step_timeout=args.step_timeout,
        )
    except EnvFailedError as exc:
        print(f"verlog play: error: {exc}", file=sys.stderr, flush=True)
        return EXIT_ENV_FAILED
    finally:
        env.close()
        if record is not None:
            record.close()


def _recorder(folder: str | None, env_id: str, env_kwargs: dict[str, Any]) -> PlayTapeWriter | None:
    """The tape writer of ``--record DIR`` (None without it), or UsageError for a DIR that cannot hold tapes."""
    if folder is None:
        return None
    from verlog.run.output_folder import creation_problem
    from verlog.tapes.recorders import TAPES_DIR, PlayTapeWriter

    if not folder.strip():
        raise UsageError("--record is empty: give the folder to record the episodes into")
    if Path(folder).exists() and not Path(folder).is_dir():
        raise UsageError(
            f"--record {folder!r} is a file, not a folder: give a folder (tapes go to DIR/tapes/play.jsonl)"
        )
    problem = creation_problem(Path(folder) / TAPES_DIR)
    fix = "give a folder you can write to (tapes go to DIR/tapes/play.jsonl)"
    if problem is not None:
        raise UsageError(f"--record {folder!r} cannot be written: {problem}; {fix}")
    try:  # creates DIR/tapes and opens play.jsonl: what the OS refuses there (a read-only file system) is named too
        return PlayTapeWriter(folder, env_id, env_kwargs)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        where = f": {exc.filename}" if exc.filename else ""
        raise UsageError(f"--record {folder!r} cannot be written ({reason}{where}); {fix}") from None


def _short(value: Any, limit: int = 200) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class _TimedEnv:
    """``env`` with each reset and step bounded by ``timeout`` seconds: a call that runs longer raises TimeoutError
    inside it (SIGALRM, so only from the main thread; elsewhere calls are not bounded), which the env pool turns into
    the slot's ``env_error`` like any exception of the env. Every other attribute is the env's."""

    def __init__(self, env: Any, timeout: float | None) -> None:
        self._env, self._timeout = env, timeout

    def __getattr__(self, name: str) -> Any:
        return getattr(self._env, name)

    def reset(self, *args: Any, **kwargs: Any) -> Any:
        return self._bounded("reset", args, kwargs)

    def step(self, *args: Any, **kwargs: Any) -> Any:
        return self._bounded("step", args, kwargs)

    def _bounded(self, name: str, args: tuple, kwargs: dict[str, Any]) -> Any:
        call = getattr(self._env, name)
        if not self._timeout or threading.current_thread() is not threading.main_thread():
            return call(*args, **kwargs)
        timeout = self._timeout

        def expired(signum: int, frame: Any) -> None:
            raise TimeoutError(f"the env's {name}() ran longer than --step-timeout={timeout:g} s: it hangs")

        previous = signal.signal(signal.SIGALRM, expired)
        signal.setitimer(signal.ITIMER_REAL, timeout)
        try:
            return call(*args, **kwargs)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)


class _Reset(Exception):
    """The person asked for a new episode (``:reset``)."""


class _Quit(Exception):
    """The person quit (``:q`` or end of input)."""


class _Terminal:
    """The person's side of a game: writes to ``stdout``, reads one line per answer from ``stdin``, and keeps what
    the next prompt shows (the instruction last printed, the observation and info of the turn, episodes finished)."""

    def __init__(self, env: Any, stdin: TextIO, stdout: TextIO) -> None:
        self.env, self.stdin, self.stdout = env, stdin, stdout
        self.interactive = stdin is sys.stdin and stdout is sys.stdout and stdin.isatty()
        if self.interactive:
            with contextlib.suppress(ImportError):
                import readline  # noqa: F401  (line editing and history for input())
        self.shown_instruction: str | None = None
        self.observation: Any = None
        self.info: dict[str, Any] = {}
        self.finished = 0

    def say(self, text: str = "") -> None:
        print(text, file=self.stdout, flush=True)

    def help_text(self) -> str:
        lines = [f"  {i}: {name}" for i, name in enumerate(self.env.actions)]
        return "\n".join(
            ["Actions (type the name or its number):", *lines, "Commands: :help  :info  :reset  :q (quit)"]
        )

    def read_line(self, prompt: str) -> str:
        if self.interactive:
            try:
                return input(prompt) + "\n"
            except EOFError:
                return ""
        print(prompt, end="", file=self.stdout, flush=True)
        try:
            fd = self.stdin.fileno() if self.stdin is sys.stdin else None
        except (AttributeError, OSError, ValueError):  # a stand-in without a descriptor (io.UnsupportedOperation)
            fd = None
        return self.stdin.readline() if fd is None else _read_line_interruptibly(fd)

    def ask(self, turn: PolicyInput) -> str:
        """The person's answer for this turn (the policy); :reset and :q leave the turn unplayed."""
        if turn.instruction != self.shown_instruction:
            self.shown_instruction = turn.instruction
            self.say(f"=== Instruction ===\n{turn.instruction}\n")
        self.say(
            f"--- Episode {self.finished + 1}, step {self.info.get('episode_step', 0)} ---\n{self.observation.text}"
        )
        show_image(getattr(getattr(self.env, "last_observation", None), "image", None), self.interactive, self.say)
        while True:
            line = self.read_line("action> ")
            if not line:  # end of input
                self.say("\n(end of input) bye")
                raise _Quit
            action = self._answer(line.strip())
            if action is not None:
                return action

    def _answer(self, line: str) -> str | None:
        """The action one typed line names, or None after a command or a line that names none (said why)."""
        actions = self.env.actions
        if not line:
            return None
        if line in QUIT:
            self.say("bye")
            raise _Quit
        if line in HELP and line not in actions:
            self.say(self.help_text())
        elif line == ":info":
            self.say("\n".join(f"  {k}: {_short(v)}" for k, v in self.info.items()))
        elif line == ":reset":
            raise _Reset
        elif line.startswith(":"):
            self.say(f"unknown command {line!r}; {':help'} lists the actions and commands")
        elif line.isdigit():
            index = int(line)
            if index < len(actions):
                return str(actions[index])
            self.say(f"no action number {index}: there are {len(actions)} (0-{len(actions) - 1})")
        else:
            return line
        return None

    def take_turn(self, turn: Any) -> None:
        """Keep the played turn's observation and info for the next prompt, or raise EnvFailedError when the env
        failed in it."""
        row, info = turn.row, turn.info
        self.observation, self.info = turn.next_observation, info
        if row.env_error is not None:  # its own bug: the game cannot go on as the env meant it
            reason = row.env_error.strip().splitlines()[-1]
            raise EnvFailedError(
                f"the env failed at step {int(info.get('episode_step', 0))} of episode {self.finished + 1} "
                f"(action {info.get('raw_action')!r}), so the game ends: {reason}"
            )

    def show_step(self, turn: Any, show_info: bool) -> None:
        """The line of an executed step (and its whole info dict with ``show_info``)."""
        row, info = turn.row, turn.info
        note = "" if row.action_valid else f" (not a valid action: executed {info.get('action')!r})"
        self.say(
            f"-> {info.get('action')}{note} | reward {row.reward:g} | terminated {row.terminated} | truncated "
            f"{row.truncated} | progression {info.get('progression', 0.0):.2f}"
        )
        if show_info:
            self.say("\n".join(f"  {k}: {_short(v)}" for k, v in info.items()))

    def show_episode_end(self, info: dict[str, Any], episode_return: float) -> None:
        self.finished += 1
        outcome = "success" if info.get("success") else "no success"
        self.say(
            f"=== Episode {self.finished} over after {info.get('episode_step')} steps: {outcome}, "
            f"return {episode_return:g} ===\n"
        )


def play(
    env: Any,
    stdin: TextIO,
    stdout: TextIO,
    *,
    seed: int | None = None,
    episodes: int | None = None,
    show_info: bool = False,
    record: PlayTapeWriter | None = None,
    step_timeout: float | None = STEP_TIMEOUT_S,
) -> int:
    """Run the interactive loop on a TextEnv, reading lines from ``stdin`` and writing to ``stdout``; returns 0.
    With ``record``, every turn played is written to its tape file.

    Raises:
        EnvFailedError: the env failed, or one of its resets or steps ran longer than ``step_timeout`` seconds
            (None: no bound).
    """
    from verlog.prompting.memory import SlidingMemory
    from verlog.rollout.stepper import CallbackPolicy, EpisodeStepper, LocalEnv

    terminal = _Terminal(env, stdin, stdout)
    timed = _TimedEnv(env, step_timeout)
    pool = LocalEnv(timed, rebuild=lambda: timed).pool()  # the game ends at a failure: no fresh env is needed
    # episode ids stay unique across recordings into one folder (two sessions may start within the same second)
    run_id = f"play-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
    stepper = EpisodeStepper(
        pool, None, [SlidingMemory()], max_prompt_tokens=None, bootstrap_prompts=False, run_id=run_id
    )
    person = CallbackPolicy(terminal.ask)
    episode_return = 0.0

    def new_episode(next_seed: int | None) -> None:
        ((terminal.observation, terminal.info),) = stepper.reset([next_seed])

    try:
        new_episode(seed)
        while True:
            try:
                (turn,) = stepper.step(person, continue_episodes=False)
            except _Quit:
                return 0
            except _Reset:
                seed = None if seed is None else seed + 1
                new_episode(seed)
                episode_return = 0.0
                terminal.say("(new episode)")
                continue
            terminal.take_turn(turn)
            if record is not None:
                record.record(turn)
            episode_return += turn.row.reward
            terminal.show_step(turn, show_info)
            if turn.episode is not None:
                terminal.show_episode_end(turn.info, episode_return)
                if episodes is not None and terminal.finished >= episodes:
                    return 0
                seed = None if seed is None else seed + 1
                new_episode(seed)
                episode_return = 0.0
    finally:
        pool.close()


def show_image(image: Any, interactive: bool, say: Any) -> None:
    """An observation's image (envs.images): saved as a PNG whose path is printed, and drawn in the terminal when
    it is one (24-bit colour)."""
    if image is None:
        return
    import tempfile

    from envs.images import ansi_image, write_png

    folder = Path(tempfile.gettempdir()) / "verlog-play-frames"
    folder.mkdir(exist_ok=True)
    path = write_png(image, folder / f"frame-{os.getpid()}-{time.monotonic_ns()}.png")
    if interactive:
        say(ansi_image(image))
    say(f"[image {image.shape[1]}x{image.shape[0]}: {path}]")


def _read_line_interruptibly(fd: int) -> str:
    """One line from a piped standard input, read byte by byte (no buffer that a wait could miss) and waiting in
    short ``select`` slices: the main thread returns to Python between them, so a Ctrl-C that the OS delivered to
    another thread still raises KeyboardInterrupt at once instead of when the next line arrives."""
    import select

    data = bytearray()
    while True:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if not ready:
            continue
        byte = os.read(fd, 1)
        if not byte:  # end of input
            break
        data += byte
        if byte == b"\n":
            break
    return data.decode("utf-8", errors="replace")
