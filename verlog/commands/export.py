"""``verlog export``: a training run's policy as a plain Hugging Face folder that transformers and vLLM load, LoRA
merged; or, with ``--adapter-only``, a LoRA run's adapter as a PEFT folder (docs/export.md).

Example::

    verlog export outputs/my_run --out exports/my_policy
    verlog export outputs/my_run --step 20 --adapter-only --out exports/my_adapter
"""

from __future__ import annotations

import argparse
from pathlib import Path

from verlog.commands.common import UsageError, int_at_least
from verlog.console import say


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "source",
        metavar="RUN_DIR|CHECKPOINT",
        help="a run's output_dir (its latest complete checkpoint), its checkpoints/ folder, a global_step_K folder or "
        "its actor/ folder",
    )
    parser.add_argument(
        "--out", required=True, metavar="DIR", help="the folder to write; it must not exist or be empty"
    )
    parser.add_argument(
        "--adapter-only",
        action="store_true",
        help="a LoRA run only: the adapter as a PEFT folder (adapter_config.json naming the base model, "
        "adapter_model.safetensors, the tokenizer) instead of the merged model",
    )
    parser.add_argument(
        "--step",
        type=int_at_least(0),
        default=None,
        metavar="K",
        help="the checkpoint of iteration K (global_step_K) instead of the latest complete one",
    )


def run(args: argparse.Namespace) -> int:
    from verlog.trainer.export import ExportError, export_checkpoint, find_source, out_problem

    out = Path(args.out).expanduser()
    if not args.out.strip():
        raise UsageError("--out is empty: give the folder to write the export into")
    problem = out_problem(out)
    if problem is not None:
        raise UsageError(problem)
    try:
        source = find_source(args.source, args.step)
        export_checkpoint(source, out, args.adapter_only, say=lambda line: say(f"verlog export: {line}"))
    except ExportError as exc:
        raise UsageError(str(exc)) from None
    if args.adapter_only:
        base = source.base_model or "the model the run started from (model.path)"
        say(f"verlog export: done: {out}, a PEFT adapter over {base} (docs/export.md: loading it)")
    else:
        say(f"verlog export: done: {out} (load it as a Hugging Face model; verlog eval --model {out})")
    return 0
