"""``verlog demos ENV_ID --episodes N --out DIR``: scripted-expert demonstrations as SFT parquet (verlog.demos)."""

from __future__ import annotations

import argparse
import json
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("env_id", help="a registered env with a scripted expert: babyai/* or babaisai/*")
    parser.add_argument("--episodes", type=int, required=True, help="episodes to try (one seed each)")
    parser.add_argument("--out", required=True, help="output folder: train.parquet, val.parquet, demos.json")
    parser.add_argument("--seed-start", type=int, default=0, help="seed of the first episode (then +1 each)")
    parser.add_argument("--memory-n", type=int, default=1, help="past turns in the prompt (the RL memory.n)")
    parser.add_argument(
        "--keep-reasoning-turns", type=int, default=1, help="the RL memory.keep_reasoning_turns (default 1)"
    )
    parser.add_argument(
        "--max-prompt-tokens",
        type=int,
        default=None,
        help="the RL prompt budget (rollout.max_prompt_tokens); needs --tokenizer to apply it",
    )
    parser.add_argument("--tokenizer", default=None, help="model folder whose tokenizer counts prompt tokens")
    parser.add_argument(
        "--env-kwargs", default="{}", help="JSON keyword arguments of envs.make, e.g. '{\"max_steps\": 64}'"
    )
    parser.add_argument(
        "--answer-format",
        choices=["cot", "action"],
        default="cot",
        help="cot: THINK then ACTION (default); action: the ACTION line alone (the RL memory.answer_format)",
    )
    parser.add_argument("--val-episodes", type=int, default=0, help="the last this-many kept episodes -> val.parquet")
    parser.add_argument("--quiet", action="store_true", help="no per-episode lines")


def run(args: argparse.Namespace) -> int:
    from verlog.demos import DemoConfig, DemoEpisode, DemoError, generate_demos, write_demos

    try:
        env_kwargs = json.loads(args.env_kwargs)
    except json.JSONDecodeError as exc:
        print(f"error: --env-kwargs is not JSON ({exc}): {args.env_kwargs!r}", file=sys.stderr)
        return 2
    if args.max_prompt_tokens is not None and args.tokenizer is None:
        print("error: --max-prompt-tokens needs --tokenizer MODEL_DIR to count tokens", file=sys.stderr)
        return 2
    tokenizer = None
    if args.tokenizer is not None:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    try:
        config = DemoConfig(
            env_id=args.env_id,
            episodes=args.episodes,
            seed_start=args.seed_start,
            memory_n=args.memory_n,
            keep_reasoning_turns=args.keep_reasoning_turns,
            max_prompt_tokens=args.max_prompt_tokens,
            env_kwargs=env_kwargs,
            val_episodes=args.val_episodes,
            answer_format=args.answer_format,
        )

        def progress(i: int, episode: DemoEpisode) -> None:
            if not args.quiet:
                status = "won" if episode.success else "not won (left out)"
                print(f"[demos] {i + 1}/{config.episodes} seed {episode.seed}: {len(episode.turns)} turns, {status}")

        episodes = generate_demos(config, tokenizer=tokenizer, progress=progress)
        manifest = write_demos(episodes, args.out, config)
    except DemoError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(
        f"[demos] {manifest['episodes_kept']}/{config.episodes} episodes kept, {manifest['rows_train']} train rows, "
        f"{manifest['rows_val']} val rows, written to {args.out} (seeds {config.seed_start}.."
        f"{config.seed_start + config.episodes - 1}; evaluate on other seeds)"
    )
    return 0
