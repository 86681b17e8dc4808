"""``verlog tiny-model OUT``: build a tiny random-weight Qwen2 model and tokenizer for smoke runs, optionally with a
format-only warm start (``--warm-start ENV_ID``: SFT on uniformly random valid answers, verlog.sft.warm_start).
``--vision`` builds a tiny Qwen2-VL model with its image processor instead (verlog.models.tiny_vlm, docs/vision.md);
its warm start shows the env's frames in the prompts (``--max-image-history``, default 1)."""

from __future__ import annotations

import argparse
import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from verlog.commands.common import (
    UsageError,
    add_answer_format_argument,
    add_import_argument,
    build_env,
    build_env_with_images,
    check_env_id,
    check_output_folder,
    float_in,
    import_user_modules,
    int_at_least,
    register_entry_point,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("out", help="output folder (a Hugging Face model folder; new or empty)")
    parser.add_argument("--force", action="store_true", help="write into OUT even when it is not empty")
    parser.add_argument("--hidden-size", type=int_at_least(1), default=64)
    parser.add_argument("--num-layers", type=int_at_least(1), default=2)
    parser.add_argument(
        "--num-heads", type=int_at_least(1), default=2, help="hidden_size / num_heads must be >= 32 (vLLM CPU)"
    )
    parser.add_argument("--num-kv-heads", type=int_at_least(1), default=1)
    parser.add_argument(
        "--intermediate-size", type=int_at_least(1), default=None, help="feed-forward width (default 2 x hidden)"
    )
    parser.add_argument("--vocab-size", type=int_at_least(1), default=512)
    parser.add_argument("--seed", type=int_at_least(0), default=0)
    parser.add_argument(
        "--vision",
        action="store_true",
        help="a tiny Qwen2-VL vision-language model (a small vision tower before the text model) with its image "
        "processor and a chat template that places images (docs/vision.md); --warm-start then shows the env's "
        "frames in the prompts (--max-image-history)",
    )
    group = parser.add_argument_group("format-only warm start (plain-torch SFT on random valid answers)")
    group.add_argument("--warm-start", metavar="ENV_ID", default=None, help="fine-tune on this env's prompts")
    group.add_argument("--warm-start-steps", type=int_at_least(1), default=250)
    group.add_argument("--warm-start-batch", type=int_at_least(1), default=16)
    group.add_argument("--warm-start-lr", type=float_in(0.0, low_open=True), default=1e-3)
    add_answer_format_argument(group, "; use the training config's memory.answer_format")
    group.add_argument("--memory-n", type=int_at_least(0), default=1, help="the training config's memory.n")
    group.add_argument(
        "--max-image-history",
        type=int_at_least(0),
        default=None,
        help="the training config's memory.max_image_history: observations per prompt that show their frame "
        "(with --vision; default 1 there, 0 without)",
    )
    group.add_argument(
        "--max-prompt-tokens", type=int_at_least(1), default=1024, help="the training config's prompt budget"
    )
    parser.add_argument(
        "--tokenizer-env",
        metavar="ENV_ID",
        action="append",
        default=[],
        help="also train the tokenizer on this env's texts (its instruction and the observations of a few "
        "random-action episodes), so its words become whole tokens and prompts get shorter; repeatable",
    )
    add_import_argument(parser)


def run(args: argparse.Namespace) -> int:
    """Check every input, build the model (and warm-start it) in a staging folder, then move it into OUT: a failure
    or Ctrl-C at any point leaves OUT as it was (nothing is written)."""
    from transformers.utils import logging as transformers_logging

    from verlog.models.folder import load_chat_tokenizer
    from verlog.models.tiny_model import TinyModelSpec, build_tiny_model

    import_user_modules(args.imports)
    if args.vision:
        return _run_vision(args)
    spec = _checked_spec(args, TinyModelSpec)
    warm = _warm_config(args)
    out, corpus = _output_and_corpus(args)
    transformers_logging.disable_progress_bar()  # stderr is for errors (a tiny model takes no time to write)
    with _staged_into(out, "verlog-tiny-model-") as staging:
        build_tiny_model(staging, corpus=corpus, spec=spec)
        if warm is not None:  # counted with the tokenizer as the warm start loads it (from the model folder)
            _check_budget(load_chat_tokenizer(staging), warm)
            _warm_up(staging, warm)
    print(f"tiny model written to {out}")
    return 0


def _run_vision(args: argparse.Namespace) -> int:
    """``--vision``: build the tiny VLM in a staging folder and move it into OUT."""
    from transformers.utils import logging as transformers_logging

    from verlog.models.tiny_vlm import TinyVLMSpec, build_tiny_vlm
    from verlog.models.vision import ImageTokenCounter, load_vision_processor

    spec = _checked_spec(args, TinyVLMSpec)
    warm = _warm_config(args, vision=True)
    out, corpus = _output_and_corpus(args)
    transformers_logging.disable_progress_bar()
    with _staged_into(out, "verlog-tiny-vlm-") as staging:
        build_tiny_vlm(staging, corpus=corpus, spec=spec)
        if warm is not None:
            processor = load_vision_processor(staging)
            counter = ImageTokenCounter(processor) if warm.max_image_history > 0 else None
            _check_budget(processor.tokenizer, warm, counter)
            _warm_up(staging, warm)
    print(f"tiny vision-language model (Qwen2-VL) written to {out}")
    return 0


def _warm_config(args: argparse.Namespace, vision: bool = False) -> Any:
    """The checked warm start of the command line (``WarmStartConfig``), or None without ``--warm-start``."""
    from verlog.sft.warm_start import WarmStartConfig, WarmStartError

    images = args.max_image_history
    if images is not None and images > 0 and not vision:
        raise UsageError("--max-image-history needs --vision (a text model reads no images): drop it or add --vision")
    if args.warm_start is None:
        return None
    check_env_id(args.warm_start, "--warm-start")
    register_entry_point(args.warm_start, "--warm-start")
    warm = WarmStartConfig(
        env_id=args.warm_start,
        steps=args.warm_start_steps,
        batch_size=args.warm_start_batch,
        lr=args.warm_start_lr,
        answer_format=args.answer_format,
        memory_n=args.memory_n,
        max_prompt_tokens=args.max_prompt_tokens,
        max_image_history=(1 if vision else 0) if images is None else images,
        seed=args.seed,
    )
    try:
        warm.check()
    except WarmStartError as exc:
        raise UsageError(str(exc)) from None
    return warm


def _warm_up(folder: Path, warm: Any) -> None:
    """Run the warm start on the model in ``folder`` (in place), one progress line every 25 steps."""
    from verlog.errors import PromptTooLongError
    from verlog.sft.warm_start import WarmStartError, warm_start

    print(f"tiny model built; warm start on {warm.env_id}", flush=True)

    def progress(step: int, loss: float) -> None:
        print(f"[warm-start] step {step}/{warm.steps}: loss {loss:.3f}", flush=True)

    try:
        stats = warm_start(folder, warm, progress=progress)
    except (PromptTooLongError, WarmStartError) as exc:  # a later prompt, longer than the first one
        raise UsageError(f"the warm start failed: {exc}; nothing was written") from None
    images = f", {stats['images_per_row']:.1f} images a prompt" if warm.max_image_history > 0 else ""
    print(
        f"[warm-start] {warm.env_id}: {stats['steps']:.0f} steps on {stats['rows']:.0f} random-answer rows "
        f"(answers {stats['answer_tokens_mean']:.1f} tokens{images}) in {stats['wall_s']:.0f} s; loss "
        f"{stats['first_loss']:.2f} -> {stats['last_loss']:.2f}"
    )


def _checked_spec(args: argparse.Namespace, spec_type: Any) -> Any:
    """The model shape of the command line as ``spec_type`` (TinyModelSpec or TinyVLMSpec), checked: a shape that
    cannot be built is a UsageError naming the options."""
    spec = spec_type(
        hidden_size=args.hidden_size,
        num_layers=args.num_layers,
        num_heads=args.num_heads,
        num_kv_heads=args.num_kv_heads,
        intermediate_size=args.intermediate_size or 2 * args.hidden_size,
        vocab_size=args.vocab_size,
        seed=args.seed,
    )
    try:
        spec.validate()
    except ValueError as exc:
        raise UsageError(f"{exc} (--hidden-size, --num-heads, --num-kv-heads, --vocab-size)") from None
    return spec


def _output_and_corpus(args: argparse.Namespace) -> tuple[Path, list[str]]:
    """The checked OUT folder and the tokenizer's training texts (the default corpus and each --tokenizer-env's)."""
    from verlog.models.tiny_model import DEFAULT_CORPUS, env_corpus

    for env_id in args.tokenizer_env:
        check_env_id(env_id, "--tokenizer-env")
    out = check_output_folder(args.out, "OUT", force=args.force, what="the model")
    return out, [*DEFAULT_CORPUS, *(text for env_id in args.tokenizer_env for text in env_corpus(env_id))]


@contextlib.contextmanager
def _staged_into(out: Path, prefix: str) -> Iterator[Path]:
    """A new staging folder to build the model in: its files move into ``out`` when the block ends without an error
    (files of the same name are replaced: --force), and it is removed either way (an error or Ctrl-C leaves OUT as it
    was)."""
    staging = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield staging
        out.mkdir(parents=True, exist_ok=True)
        for item in sorted(staging.iterdir()):
            shutil.move(str(item), str(out / item.name))
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _check_budget(tokenizer: Any, warm: Any, image_tokens: Any = None) -> None:
    """The warm-start env's first prompt (with its frame when ``warm.max_image_history`` > 0, ``image_tokens``
    counting it) fits ``--max-prompt-tokens`` with the new model's tokenizer, before any step is trained
    (:func:`verlog.prompting.budget.budget_problem`)."""
    from verlog.prompting.budget import budget_problem
    from verlog.prompting.memory import MemoryConfig

    memory = MemoryConfig(warm.memory_n, warm.keep_reasoning_turns, warm.answer_format, warm.max_image_history)
    origin = "the warm start's env kwargs"
    if warm.max_image_history > 0:
        fix = "with --vision the prompts show frames: use an env with images (babyai/*, crafter/default, babaisai/*, "
        fix += "toy/visual) or --max-image-history 0"
        label = f"--warm-start {warm.env_id}"
        env = build_env_with_images(warm.env_id, dict(warm.env_kwargs), origin, label, fix, seed=warm.seed)
    else:
        env = build_env(warm.env_id, dict(warm.env_kwargs), origin, seed=warm.seed)
    try:
        problem = budget_problem(
            env,
            warm.env_id,
            tokenizer,
            memory,
            warm.max_prompt_tokens,
            "--max-prompt-tokens",
            "the new model's tokenizer",
            seed=warm.seed,
            image_tokens=image_tokens,
        )
    finally:
        env.close()
    if problem is not None:
        raise UsageError(f"--max-prompt-tokens: {problem}; nothing was written")
