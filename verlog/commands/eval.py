"""``verlog eval``: evaluate a model on text-game tasks with BALROG's protocol (docs/evaluation.md).

Examples::

    verlog eval --model checkpoints/run/global_step_300/actor/huggingface --tasks babyai --episodes 10 --out eval/
    verlog eval --endpoint http://127.0.0.1:8000/v1 --served-model qwen --tasks babyai --out eval/qwen

The second plays the same protocol against an OpenAI-compatible server (:mod:`verlog.eval.endpoint`).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from verlog.commands.common import (
    UsageError,
    accept_negative_lists,
    add_answer_format_argument,
    add_import_argument,
    add_memory_arguments,
    build_env,
    build_env_with_images,
    float_in,
    import_user_modules,
    int_at_least,
    json_object,
    register_entry_point,
    seed,
    seed_list,
)
from verlog.console import say
from verlog.run.summary import duration

EPISODES = 10
"""Episodes per task without ``--episodes`` (BALROG's ``eval.num_episodes``)."""
EVAL_LOG = "logs/eval.log"
"""The engine's log in ``--out`` (verlog.console), appended at every start."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    _add_model_and_episode_arguments(parser)
    parser.add_argument("--out", required=True, help="output folder: summary.json, episodes.jsonl, turns.jsonl")
    parser.add_argument("--engine", choices=("vllm", "transformers"), default=None, help="local engine (default vllm)")
    parser.add_argument(
        "--dtype", choices=("auto", "float32", "bfloat16", "float16"), default=None, help="local engine (default auto)"
    )
    parser.add_argument("--temperature", type=float_in(0.0), default=1.0, help="sampling temperature (0 = greedy)")
    parser.add_argument("--top-p", type=float_in(0.0, 1.0, low_open=True), default=1.0)
    parser.add_argument("--max-tokens", type=int_at_least(1), default=512, help="most tokens per response")
    parser.add_argument(
        "--max-prompt-tokens",
        type=int_at_least(1),
        default=None,
        help=f"prompt budget, old turns dropped (default {MAX_PROMPT_TOKENS}; with --endpoint it needs --tokenizer)",
    )
    add_memory_arguments(parser)
    parser.add_argument(
        "--max-image-history",
        type=int_at_least(0),
        default=0,
        help="newest observations shown with their image, as training's memory.max_image_history (default 0: text "
        "only); needs a vision-language model on the vllm engine and an env that draws images",
    )
    add_answer_format_argument(parser)
    parser.add_argument(
        "--max-steps", type=int_at_least(1), default=None, help="step limit per episode (default: the env's)"
    )
    parser.add_argument(
        "--env-kwargs", default="{}", help='JSON keyword arguments for every env, e.g. \'{"parse_mode": "lenient"}\''
    )
    parser.add_argument(
        "--concurrency", type=int_at_least(1), default=None, help="most episodes open at once (default: all)"
    )
    parser.add_argument("--sampling-seed", type=int_at_least(0), default=0, help="seed of the engine's sampling")
    parser.add_argument("--log-turns", action="store_true", help="also write turns.jsonl (one record per turn)")
    parser.add_argument("--resume", action="store_true", help="continue an interrupted evaluation in --out")
    parser.add_argument("--bootstrap-resamples", type=int_at_least(1), default=10_000)
    parser.add_argument("--quiet", action="store_true", help="no line per finished episode")
    parser.add_argument(
        "--verbose",
        action="store_true",
        help=f"show the engine's log (vLLM) on the terminal; by default it goes to OUT/{EVAL_LOG}",
    )
    _add_endpoint_arguments(parser)
    add_import_argument(parser)
    # None = not given: --run's settings, else the command's defaults, fill them in (_fill_settings)
    parser.set_defaults(**dict.fromkeys(_command_defaults()))


def _add_model_and_episode_arguments(parser: argparse.ArgumentParser) -> None:
    """``--model``, ``--run``, ``--tasks`` and the episodes' seeds."""
    parser.add_argument(
        "--model",
        default=None,
        help="a Hugging Face folder, a verl checkpoint's huggingface/ folder, a global_step_K folder or a run folder "
        "(or --endpoint instead)",
    )
    parser.add_argument(
        "--run",
        default=None,
        help="a training run's folder (verlog train's output_dir): evaluate its latest checkpoint with the settings it "
        "trained with (env id and kwargs, memory, answer format, image history, token budgets, its evaluation's "
        "temperature and top-p); options given here win",
    )
    parser.add_argument(
        "--tasks",
        default=None,
        help="comma-separated env ids (babyai/goto,babyai/pickup) or env names meaning all their tasks (babyai); "
        "required unless --run gives it",
    )
    parser.add_argument(
        "--episodes", type=int_at_least(1), default=None, help=f"episodes per task (default {EPISODES}, BALROG's)"
    )
    parser.add_argument(
        "--seed-start",
        type=seed,
        default=None,
        help="episode i of each task uses seed S+i (default 0; keep clear of training seeds)",
    )
    parser.add_argument(
        "--seeds",
        type=seed_list,
        default=None,
        help="explicit comma-separated seeds, one episode each (instead of --episodes and --seed-start)",
    )
    accept_negative_lists(parser)


def _command_defaults() -> dict[str, Any]:
    """The defaults of the options a run folder can give (``--run``); ``--max-prompt-tokens`` has its own rule
    (:func:`_check_source`). The memory's are training's (:class:`verlog.prompting.memory.MemoryConfig`)."""
    from verlog.prompting.memory import MemoryConfig

    memory = MemoryConfig()
    return {
        "env_kwargs": "{}",
        "temperature": 1.0,
        "top_p": 1.0,
        "max_tokens": 512,
        "memory_n": memory.n,
        "keep_reasoning_turns": memory.keep_reasoning_turns,
        "answer_format": "cot",
        "max_image_history": 0,
    }


def _fill_settings(args: argparse.Namespace) -> None:
    """Each option not given on the command line from ``--run``'s training settings, else its default; ``--model``
    is the run folder unless ``--model`` or ``--endpoint`` names another."""
    if args.run is not None:
        from verlog.eval.from_run import RunSettingsError, eval_settings_of_run

        try:
            trained = eval_settings_of_run(args.run)
        except RunSettingsError as exc:
            raise UsageError(f"--run: {exc}") from None
        if args.endpoint is not None and args.tokenizer is None:
            trained.pop("max_prompt_tokens")  # an endpoint's prompts are counted only with --tokenizer
        for name, value in trained.items():
            if getattr(args, name) is None:
                setattr(args, name, value)
        if args.model is None and args.endpoint is None:
            args.model = args.run
    for name, value in _command_defaults().items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.tasks is None:
        raise UsageError("give the tasks to evaluate: --tasks ENV_ID[,ENV_ID...], or --run RUN_DIR (its env id)")


def _add_endpoint_arguments(parser: argparse.ArgumentParser) -> None:
    from verlog.eval.endpoint import DEFAULT_KEY_ENV

    group = parser.add_argument_group(
        "a served model (an OpenAI-compatible chat-completions server, docs/evaluation.md)"
    )
    group.add_argument("--endpoint", default=None, help="the API's base URL, e.g. http://127.0.0.1:8000/v1")
    group.add_argument("--served-model", default=None, help="the model's name at the endpoint (its /v1/models)")
    group.add_argument(
        "--api-key-env",
        default=DEFAULT_KEY_ENV,
        help=f"environment variable holding the API key (default {DEFAULT_KEY_ENV}; unset: no key sent)",
    )
    group.add_argument(
        "--tokenizer",
        default=None,
        help="a folder with the served model's tokenizer: prompts counted and cut to --max-prompt-tokens, token ids "
        "decoded as the local engine does (vLLM servers)",
    )
    group.add_argument(
        "--request-timeout", type=float_in(0.0, low_open=True), default=120.0, help="seconds per request (120)"
    )
    group.add_argument(
        "--retries",
        type=int_at_least(0),
        default=6,
        help="retries of a request after a connection error, a timeout, 429 or 5xx, with backoff (6)",
    )
    group.add_argument(
        "--requests-per-minute", type=float_in(0.0, low_open=True), default=None, help="rate limit (default none)"
    )


def run(args: argparse.Namespace) -> int:
    from verlog.eval import EvalProtocol, expand_tasks, format_table
    from verlog.eval.protocol import EvalProtocolError
    from verlog.prompting.memory import MemoryConfig, check_answer_format
    from verlog.prompting.sampling import SamplingConfig

    import_user_modules(args.imports)
    _fill_settings(args)
    env_kwargs = json_object("--env-kwargs", args.env_kwargs)
    if args.seeds is not None and (args.episodes is not None or args.seed_start is not None):
        given = "--episodes" if args.episodes is not None else "--seed-start"
        raise UsageError(
            f"{given} does not go with --seeds: --seeds {','.join(map(str, args.seeds))} plays {len(args.seeds)} "
            f"episode(s) of each task on those seeds; drop {given} (or --seeds)"
        )
    for task in args.tasks.split(","):
        if ":" in task:
            register_entry_point(task.strip(), "--tasks")
    try:
        seeds = args.seeds
        protocol = EvalProtocol(
            tasks=tuple(expand_tasks(args.tasks.split(","))),
            episodes_per_task=EPISODES if args.episodes is None else args.episodes,
            seed_start=args.seed_start or 0,
            seeds=seeds,
            max_steps=args.max_steps,
            env_kwargs=env_kwargs,
        )
        sampling = SamplingConfig(temperature=args.temperature, top_p=args.top_p, max_tokens=args.max_tokens).check()
        memory = MemoryConfig(
            n=args.memory_n,
            keep_reasoning_turns=args.keep_reasoning_turns,
            answer_format=check_answer_format(args.answer_format),
            max_image_history=args.max_image_history,
        )
    except (EvalProtocolError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    _check_source(args)
    # everything an engine start (or a request) would waste time on is checked first: the output folder, the model
    # folder and its tokenizer, each task's env and its first prompt
    _check_out_folder(args)
    if args.endpoint is not None:
        model_path: Path | str = args.served_model
        tokenizer = None if args.tokenizer is None else _tokenizer(_check_tokenizer(args.tokenizer), "--tokenizer")
    else:
        model_path = _check_model(args)
        tokenizer = _tokenizer(model_path)
    _check_resume(args, protocol, model_path, sampling, memory)
    image_tokens = _check_images(args, model_path)
    kwargs = dict(env_kwargs, **({} if args.max_steps is None else {"max_steps": args.max_steps}))
    for task in protocol.tasks:
        env = _build_task_env(task, kwargs, protocol.seed_list()[0], image_tokens is not None)
        try:
            if tokenizer is not None:
                counted = args.tokenizer or model_path
                _check_budget(
                    env, task, tokenizer, memory, args.max_prompt_tokens, protocol.seed_list()[0], counted, image_tokens
                )
        finally:
            env.close()
    n_episodes = len(protocol.episodes())
    seed_list = protocol.seed_list()
    seeds_text = f"seeds {seed_list[0]}..{seed_list[-1]}" if seeds is None else f"{len(seed_list)} explicit seeds"
    say(
        f"verlog eval: {len(protocol.tasks)} task(s) x {protocol.episodes_per_task} episodes = {n_episodes}, "
        f"{seeds_text}, engine {args.engine}, model {_model_shown(args, model_path)}"
    )
    if args.endpoint is not None:
        summary = _evaluate_endpoint(args, protocol, tokenizer, sampling, memory)
    else:
        summary = _evaluate_quietly(args, protocol, model_path, sampling, memory)
    say("")
    for line in format_table(summary).splitlines():
        say(line)
    say(f"\nwrote {args.out}/summary.json and episodes.jsonl ({summary['wall_time_s']:.1f} s)")
    return 0


MAX_PROMPT_TOKENS = 1024
"""The prompt budget without ``--max-prompt-tokens`` (none for an endpoint without ``--tokenizer``)."""


def _check_source(args: argparse.Namespace) -> None:
    """Either ``--model`` (a local engine) or ``--endpoint`` with ``--served-model``, and only the options that go
    with the one given; fills in the defaults (engine, dtype, prompt budget)."""
    if args.endpoint is None:
        extra = [f"--{name.replace('_', '-')}" for name in ("served_model", "tokenizer") if getattr(args, name)]
        if args.model is None:
            raise UsageError(
                "give the model to evaluate: --model PATH (a local folder or run) or --endpoint URL --served-model "
                "NAME (an OpenAI-compatible server)"
            )
        if extra:
            raise UsageError(
                f"{extra[0]} goes with --endpoint URL: drop it, or evaluate a served model with --endpoint"
            )
        args.engine, args.dtype = args.engine or "vllm", args.dtype or "auto"
        args.max_prompt_tokens = args.max_prompt_tokens or MAX_PROMPT_TOKENS
        return
    from verlog.eval.endpoint import ENGINE

    local = [
        opt for opt, value in (("--model", args.model), ("--engine", args.engine), ("--dtype", args.dtype)) if value
    ]
    if local:
        raise UsageError(
            f"{local[0]} does not go with --endpoint: the server runs the model; drop {local[0]} (--tokenizer PATH "
            "gives the served model's tokenizer, to count prompt tokens)"
        )
    if not args.served_model:
        raise UsageError(
            "--endpoint needs --served-model NAME, the model's name at the server (GET <endpoint>/models lists them)"
        )
    if args.max_prompt_tokens is not None and args.tokenizer is None:
        raise UsageError(
            "--max-prompt-tokens with --endpoint needs --tokenizer PATH (the served model's tokenizer counts the "
            "prompt); without one, prompts keep their --memory-n turns whole"
        )
    args.engine = ENGINE
    if args.tokenizer is not None:
        args.max_prompt_tokens = args.max_prompt_tokens or MAX_PROMPT_TOKENS


def _model_shown(args: argparse.Namespace, model_path: Path | str) -> str:
    """The model as the console names it: its folder, or the served name and where (never a key)."""
    if args.endpoint is None:
        return str(model_path)
    from verlog.eval.endpoint import shown_url

    return f"{args.served_model} at {shown_url(args.endpoint)}"


def _check_tokenizer(path: str) -> Path:
    """``--tokenizer``'s folder, or UsageError."""
    folder = Path(path).expanduser()
    if not (folder / "tokenizer_config.json").is_file():
        raise UsageError(
            f"--tokenizer {path!r} holds no tokenizer (no tokenizer_config.json): give the served model's Hugging "
            "Face folder, or leave --tokenizer out"
        )
    return folder


def _progress(args: argparse.Namespace, n_episodes: int) -> tuple[Any, list[float]]:
    """The per-episode line (unless ``--quiet``) and the clock its ETA counts from (reset when episodes start)."""
    import time

    finished = [0]
    started = [time.monotonic()]

    def progress(rec: Any) -> None:
        finished[0] += 1
        if not args.quiet:
            eta = (time.monotonic() - started[0]) / finished[0] * (n_episodes - finished[0])
            say(
                f"[{finished[0]}/{n_episodes}] {rec.episode_id} seed {rec.seed}: "
                f"{'success' if rec.success else 'failure'}, return {rec.episode_return:.2f}, "
                f"{rec.num_steps} steps, valid {rec.valid_action_rate:.2f} | ETA {duration(eta)}"
            )

    return progress, started


def _evaluate_with_args(
    args: argparse.Namespace, protocol: Any, model: Any, sampling: Any, memory: Any, progress: Any
) -> dict:
    """:func:`verlog.eval.evaluate` with the command line's settings; an earlier evaluation in OUT that does not
    fit (:class:`EvalProtocolError`) is a UsageError."""
    from verlog.eval import evaluate
    from verlog.eval.protocol import EvalProtocolError

    try:
        return evaluate(
            protocol,
            model,
            sampling,
            args.out,
            memory=memory,
            max_prompt_tokens=args.max_prompt_tokens,
            concurrency=args.concurrency,
            log_turns=args.log_turns,
            resume=args.resume,
            n_resamples=args.bootstrap_resamples,
            on_episode=progress,
        )
    except EvalProtocolError as exc:
        raise UsageError(str(exc)) from None


def _evaluate_endpoint(args: argparse.Namespace, protocol: Any, tokenizer: Any, sampling: Any, memory: Any) -> dict:
    """Check the endpoint (exit 2 when it does not answer, serves another model or refuses the key), then play
    every episode against it. A server lost during the run is EndpointDownError (exit 1) with the resume hint."""
    import time

    from verlog.eval.endpoint import EndpointDownError, EndpointError, connect
    from verlog.eval.report import EPISODES_FILE

    try:
        model = connect(
            args.endpoint,
            args.served_model,
            key_env=args.api_key_env,
            tokenizer=tokenizer,
            tokenizer_path=None if args.tokenizer is None else Path(args.tokenizer).absolute(),
            timeout=args.request_timeout,
            retries=args.retries,
            requests_per_minute=args.requests_per_minute,
            sampling_seed=args.sampling_seed,
            on_retry=lambda line: say(f"verlog eval: {line}", err=True),
        )
    except EndpointError as exc:
        raise UsageError(str(exc)) from None
    progress, started = _progress(args, len(protocol.episodes()))
    started[0] = time.monotonic()
    try:
        return _evaluate_with_args(args, protocol, model, sampling, memory, progress)
    except EndpointDownError as exc:
        episodes = Path(args.out) / EPISODES_FILE
        kept = sum(1 for line in episodes.open(encoding="utf-8") if line.strip()) if episodes.exists() else 0
        raise EndpointDownError(
            f"{exc}; the {kept} finished episode(s) are kept in {episodes}: once the server answers again, run the "
            "same command with --resume to play the rest"
        ) from None


def _evaluate_quietly(args: argparse.Namespace, protocol: Any, model_path: Path, sampling: Any, memory: Any) -> dict:
    """Start the engine and play every episode with the engine's log in ``OUT/logs/eval.log`` (verlog.console;
    ``--verbose`` shows it); a line per finished episode with the ETA unless ``--quiet``. Returns the summary."""
    import time

    from verlog.console import QuietConsole
    from verlog.eval import load_model
    from verlog.eval.engine import EvalModelError

    log = Path(args.out) / EVAL_LOG
    console = QuietConsole(log, verbose=args.verbose, title=f"verlog eval --model {args.model} --out {args.out}")
    progress, started = _progress(args, len(protocol.episodes()))

    try:
        with console:
            if console.active:
                say(f"verlog eval: the engine's log: {log} (--verbose shows it here)")
            try:
                model = load_model(
                    model_path,
                    engine=args.engine,
                    dtype=args.dtype,
                    max_model_len=args.max_prompt_tokens + args.max_tokens,
                    seed=args.sampling_seed,
                    images_per_prompt=max(1, args.max_image_history),
                )
            except EvalModelError as exc:
                raise UsageError(str(exc)) from None
            started[0] = time.monotonic()  # the pace of the episodes, not of the engine's start
            try:
                return _evaluate_with_args(args, protocol, model, sampling, memory, progress)
            finally:
                model.close()  # vLLM's shutdown lines into the log, not after the summary
    except UsageError:
        raise
    except Exception:
        if not args.verbose:
            say(f"verlog eval: the evaluation stopped; the last lines of {log}:", err=True)
            for line in console.tail():
                say(f"    {line[:400]}", err=True)
        raise


def _check_model(args: argparse.Namespace) -> Path:
    """The model folder ``--model`` designates, loadable: its config.json parses and the prompt budget plus the
    response fit its context (:mod:`verlog.models.folder`); or UsageError. A run folder or a checkpoint designates
    its latest complete checkpoint's actor, merged into a Hugging Face folder on demand
    (:mod:`verlog.trainer.checkpoint_model`)."""
    from verlog.console import say
    from verlog.eval.engine import EvalModelError, resolve_model_path
    from verlog.models.folder import context_problem, folder_problems
    from verlog.trainer.checkpoint_model import CheckpointModelError, trained_model_folder

    try:
        trained = trained_model_folder(args.model, on_merge=lambda line: say(f"verlog eval: {line}"))
        folder = resolve_model_path(trained if trained is not None else args.model)
    except CheckpointModelError as exc:
        raise UsageError(f"--model: {exc}") from None
    except EvalModelError as exc:
        raise UsageError(f"--model: {exc}") from None
    problems = folder_problems(folder)
    if problems:
        raise UsageError(f"--model: {problems[0]}")
    fit = context_problem(folder, args.max_prompt_tokens, args.max_tokens, "--max-prompt-tokens", "--max-tokens")
    if fit is not None:
        raise UsageError(fit)
    return folder


RUN_MARKERS = ("metrics.jsonl", "checkpoints", "run.lock", "verl_config.yaml")
"""What only a training run's output_dir holds: ``--out`` there would mix an evaluation's files with the run's."""


def _check_out_folder(args: argparse.Namespace) -> None:
    """``--out`` can hold this evaluation: a folder (or one that can be created) that is not a training run's, without
    an earlier evaluation unless ``--resume`` is given; checked before anything is loaded or merged."""
    from verlog.eval.report import EPISODES_FILE
    from verlog.run.output_folder import creation_problem

    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {args.out!r} is a file, not a folder: give the folder for summary.json")
    markers = [name for name in RUN_MARKERS if (out / name).exists()]
    if markers:
        raise UsageError(
            f"--out {args.out!r} is a training run's folder (it holds {', '.join(markers)}): an evaluation's files "
            f"there would mix with the run's; give a folder of its own, e.g. --out {out / 'final_eval'}"
        )
    problem = creation_problem(out)
    if problem is not None:
        raise UsageError(f"--out {args.out!r} cannot be created: {problem}: give a folder under one you can write to")
    if (out / EPISODES_FILE).exists() and not args.resume:
        raise UsageError(
            f"{out / EPISODES_FILE} exists from an earlier evaluation: pass --resume to continue it, or choose "
            "another --out"
        )


def _check_resume(args: argparse.Namespace, protocol: Any, model_path: Path | str, sampling: Any, memory: Any) -> None:
    """With ``--resume``, the evaluation in ``--out`` has the same settings
    (:func:`verlog.eval.evaluation.other_evaluation`)."""
    from verlog.eval.evaluation import evaluation_settings, other_evaluation
    from verlog.eval.report import EPISODES_FILE

    out = Path(args.out)
    if not (out / EPISODES_FILE).exists():
        return
    settings = evaluation_settings(protocol, model_path, args.engine, sampling, memory, args.max_prompt_tokens)
    other = other_evaluation(out, settings)
    if other is not None:
        raise UsageError(other)


def _tokenizer(model_path: Path, option: str = "--model") -> Any:
    """The model's tokenizer, with a chat template (every prompt is rendered with it), or UsageError."""
    from verlog.models.folder import ModelFolderError, load_chat_tokenizer

    try:
        return load_chat_tokenizer(model_path)
    except ModelFolderError as exc:
        raise UsageError(f"{option}: {exc}") from None


def _check_images(args: argparse.Namespace, model_path: Path | str) -> Any:
    """With ``--max-image-history`` > 0: the model's tokens per image (its processor), after checking that images
    can be sent (a local vision-language model on the vllm engine, a processor that loads); None for text."""
    if args.max_image_history <= 0:
        return None
    from verlog.errors import ImageSetupError
    from verlog.models.vision import ImageTokenCounter, is_vision_model, load_vision_processor

    fix = "or leave --max-image-history out (text only)"
    if args.endpoint is not None:
        raise UsageError(f"--max-image-history with --endpoint: an endpoint evaluation sends text only; {fix}")
    if args.engine != "vllm":
        raise UsageError(f"--max-image-history with --engine {args.engine}: images go through --engine vllm; {fix}")
    if not is_vision_model(model_path):
        raise UsageError(
            f"--max-image-history: {model_path} is a text-only model (its config.json has no vision_config): "
            f"evaluate a vision-language model, {fix}"
        )
    try:
        return ImageTokenCounter(load_vision_processor(model_path))
    except ImageSetupError as exc:
        raise UsageError(f"--max-image-history: {exc}") from None


def _build_task_env(task: str, kwargs: dict[str, Any], seed: int, images: bool) -> Any:
    """The task's env as the evaluation builds it (with ``images=True`` when prompts show images; an env that draws
    none is a UsageError naming the fix)."""
    if not images:
        return build_env(task, kwargs, "--env-kwargs", seed=seed)
    fix = "evaluate an env with images (toy/visual, babyai, babaisai, crafter), or leave --max-image-history out"
    return build_env_with_images(task, kwargs, "--env-kwargs", f"--max-image-history: {task}", fix, seed=seed)


def _check_budget(
    env: Any,
    task: str,
    tokenizer: Any,
    memory: Any,
    budget: int,
    seed: int,
    model_path: Path | str,
    image_tokens: Any = None,
) -> None:
    """The first prompt of ``task`` fits ``--max-prompt-tokens`` (:func:`verlog.prompting.budget.budget_problem`),
    its image counted with ``image_tokens``."""
    from verlog.prompting.budget import budget_problem

    counted = f"the tokenizer of {model_path}"
    problem = budget_problem(
        env, task, tokenizer, memory, budget, "--max-prompt-tokens", counted, seed=seed, image_tokens=image_tokens
    )
    if problem is not None:
        raise UsageError(f"--max-prompt-tokens: {problem}")
