"""``verlog tiny-model OUT``: build a tiny random-weight Qwen2 model and tokenizer for smoke runs."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("out", help="output folder (a Hugging Face model folder)")
    parser.add_argument("--hidden-size", type=int, default=64)
    parser.add_argument("--num-layers", type=int, default=2)
    parser.add_argument("--num-heads", type=int, default=2, help="hidden_size / num_heads must be >= 32 (vLLM CPU)")
    parser.add_argument("--vocab-size", type=int, default=512)
    parser.add_argument("--seed", type=int, default=0)


def run(args: argparse.Namespace) -> int:
    from verlog.testing import build_tiny_model

    path = build_tiny_model(
        args.out,
        hidden_size=args.hidden_size,
        num_layers=args.num_layers,
        num_heads=args.num_heads,
        intermediate_size=2 * args.hidden_size,
        vocab_size=args.vocab_size,
        seed=args.seed,
    )
    print(f"tiny model written to {path}")
    return 0
