"""``verlog demos ENV_ID --episodes N --out DIR``: scripted-expert demonstrations as SFT parquet (verlog.sft.demos)."""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import fields
from typing import Any

from verlog.commands.common import (
    UsageError,
    add_answer_format_argument,
    add_import_argument,
    add_memory_arguments,
    build_env,
    build_env_with_images,
    check_env_id,
    check_output_folder,
    import_user_modules,
    int_at_least,
    json_object,
    seed,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("env_id", help="a registered env with a scripted expert: babyai/*, babaisai/* or toy/visual")
    parser.add_argument("--episodes", type=int_at_least(1), required=True, help="episodes to try (one seed each)")
    parser.add_argument(
        "--out", required=True, help="output folder: train.parquet, val.parquet, demos.json (new or empty)"
    )
    parser.add_argument("--force", action="store_true", help="write into --out even when it is not empty")
    parser.add_argument("--seed-start", type=seed, default=0, help="seed of the first episode (then +1 each)")
    add_memory_arguments(parser)
    parser.add_argument(
        "--max-prompt-tokens",
        type=int_at_least(1),
        default=None,
        help="the RL prompt budget (rollout.max_prompt_tokens); needs --tokenizer to apply it",
    )
    parser.add_argument("--tokenizer", default=None, help="model folder whose tokenizer counts prompt tokens")
    parser.add_argument(
        "--max-image-history",
        type=int_at_least(0),
        default=0,
        help="newest observations shown with their image, as training's memory.max_image_history (default 0: text "
        "only); needs --tokenizer a vision-language model folder (its processor counts image tokens) and an env "
        "that draws images",
    )
    parser.add_argument(
        "--env-kwargs", default="{}", help="JSON keyword arguments of envs.make, e.g. '{\"max_steps\": 64}'"
    )
    add_answer_format_argument(parser, "; use the RL config's memory.answer_format")
    parser.add_argument(
        "--val-episodes",
        type=int_at_least(0),
        default=0,
        help="the last this-many kept episodes -> val.parquet",
    )
    parser.add_argument("--quiet", action="store_true", help="no per-episode lines")
    add_import_argument(parser)


def _load_tokenizer(path: str):
    """The tokenizer of a model folder (or hub id), with a chat template (the prompts are rendered with it), or
    UsageError: a path that does not exist is not tried."""
    if path.startswith((os.sep, ".", "~")) and not os.path.isdir(os.path.expanduser(path)):
        raise UsageError(
            f"--tokenizer {path!r} is not a folder: give a model folder (e.g. one `verlog tiny-model` wrote)"
        )
    from verlog.models.folder import ModelFolderError, load_chat_tokenizer

    try:
        return load_chat_tokenizer(os.path.expanduser(path))
    except ModelFolderError as exc:
        raise UsageError(f"--tokenizer {path!r}: {exc}") from None


def _image_tokens(args: argparse.Namespace, env_kwargs: dict) -> Any:
    """With ``--max-image-history`` > 0: the model's tokens per image (the processor of ``--tokenizer``), after
    checking that the env draws images; None for text."""
    if args.max_image_history <= 0:
        return None
    from verlog.errors import ImageSetupError
    from verlog.models.vision import ImageTokenCounter, is_vision_model, load_vision_processor

    fix = "or leave --max-image-history out (text only)"
    if args.tokenizer is None or not is_vision_model(os.path.expanduser(args.tokenizer)):
        raise UsageError(
            f"--max-image-history needs --tokenizer a vision-language model folder (its processor counts the image "
            f"tokens; e.g. one `verlog tiny-model --vision` wrote), {fix}"
        )
    fix_env = "record an env with images (toy/visual, babyai, babaisai), or leave --max-image-history out"
    build_env_with_images(
        args.env_id, env_kwargs, "--env-kwargs", f"--max-image-history: {args.env_id}", fix_env, seed=args.seed_start
    ).close()
    try:
        return ImageTokenCounter(load_vision_processor(os.path.expanduser(args.tokenizer)))
    except ImageSetupError as exc:
        raise UsageError(f"--max-image-history: {exc}") from None


def _check_budget(config, tokenizer, tokenizer_path: str, image_tokens: Any = None) -> None:
    """The env's first prompt fits ``--max-prompt-tokens`` (:func:`verlog.prompting.budget.budget_problem`), its
    image counted with ``image_tokens``, before any demonstration is played."""
    from verlog.prompting.budget import budget_problem

    memory = config.memory
    kwargs = {**config.env_kwargs, **({"images": True} if image_tokens is not None else {})}
    env = build_env(config.env_id, kwargs, "--env-kwargs", seed=config.seed_start)
    try:
        problem = budget_problem(
            env,
            config.env_id,
            tokenizer,
            memory,
            config.max_prompt_tokens,
            "--max-prompt-tokens",
            f"the tokenizer of {tokenizer_path}",
            seed=config.seed_start,
            image_tokens=image_tokens,
        )
    finally:
        env.close()
    if problem is not None:
        raise UsageError(f"--max-prompt-tokens: {problem}")


def run(args: argparse.Namespace) -> int:
    from verlog.sft.demos import EXPERTS, DemoConfig, DemoEpisode, DemoError, generate_demos, write_demos

    import_user_modules(args.imports)
    env_kwargs = json_object("--env-kwargs", args.env_kwargs)
    if args.max_prompt_tokens is not None and args.tokenizer is None:
        raise UsageError("--max-prompt-tokens needs --tokenizer MODEL_DIR to count tokens")
    check_env_id(args.env_id)
    if not any(args.env_id.startswith(prefix) for prefix in EXPERTS):
        families = ", ".join(f"{p}*" for p in EXPERTS)
        raise UsageError(f"no scripted expert for env {args.env_id!r}: demonstrations exist for {families}")
    build_env(args.env_id, env_kwargs, "--env-kwargs", seed=args.seed_start).close()
    try:
        # every field of DemoConfig is the option of its name (--env-kwargs as parsed above)
        options = {f.name: getattr(args, f.name) for f in fields(DemoConfig) if f.name != "env_kwargs"}
        config = DemoConfig(**options, env_kwargs=env_kwargs)
    except DemoError as exc:
        raise UsageError(str(exc)) from None
    check_output_folder(args.out, "--out", force=args.force, what="demonstrations")
    image_tokens = _image_tokens(args, env_kwargs)
    tokenizer = None if args.tokenizer is None else _load_tokenizer(args.tokenizer)
    if tokenizer is not None and config.max_prompt_tokens is not None:
        _check_budget(config, tokenizer, args.tokenizer, image_tokens)
    try:

        def progress(i: int, episode: DemoEpisode) -> None:
            if not args.quiet:
                status = "won" if episode.success else "not won (left out)"
                print(f"[demos] {i + 1}/{config.episodes} seed {episode.seed}: {len(episode.turns)} turns, {status}")

        episodes = generate_demos(config, tokenizer=tokenizer, progress=progress, image_tokens=image_tokens)
        manifest = write_demos(episodes, args.out, config)
    except DemoError as exc:
        print(f"verlog demos: error: {exc}", file=sys.stderr)
        return 1
    print(
        f"[demos] {manifest['episodes_kept']}/{config.episodes} episodes kept, {manifest['rows_train']} train rows, "
        f"{manifest['rows_val']} val rows, written to {args.out} (seeds {config.seed_start}.."
        f"{config.seed_start + config.episodes - 1}; evaluate on other seeds)"
    )
    return 0
