"""SFT data: checks against the model's chat template and length limit before launch; loss on the final answer.

:class:`LastTurnSFTDataset` (verl's ``MultiTurnSFTDataset`` with the loss on the final assistant message only) is
built on first attribute access, so importing this module does not import verl; verl loads it by name through
``data.custom_cls`` (``pkg://verlog.sft.data``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verlog.sft.config import SFTDataConfig, SFTDataError
from verlog.sft.demos import IMAGE_PLACEHOLDER


@dataclass
class DataReport:
    """What :func:`check_data` found: row count and token lengths (chat template applied)."""

    path: str
    rows: int
    max_tokens: int
    mean_tokens: float
    loss_tokens: int


DATA_KINDS = (
    "a `verlog demos` folder, a parquet file with a 'messages' column, or tapes (a training run's or an evaluation's "
    "folder, a `verlog play --record` folder, a .jsonl tape file)"
)
_PARQUET_MAGIC = b"PAR1"


def resolve_data(data: SFTDataConfig) -> tuple[str, str | None]:
    """The train and val parquet files of ``data`` (a demo folder gives its train.parquet and val.parquet)."""
    from verlog.sft.demos import TRAIN_FILE, VAL_FILE

    train = Path(data.train)
    val = Path(data.val) if data.val else None
    if train.is_dir():
        if not (train / TRAIN_FILE).is_file():
            raise SFTDataError(
                f"data.train {str(train)!r} holds no {TRAIN_FILE} and no tapes; give {DATA_KINDS} (`verlog demos "
                "... --out DIR` writes demonstrations)"
            )
        if val is None and (train / VAL_FILE).is_file():
            val = train / VAL_FILE
        train = train / TRAIN_FILE
    if not train.is_file():
        raise SFTDataError(
            f"data.train {str(train)!r} does not exist; give {DATA_KINDS} (`verlog demos ... --out DIR` writes "
            "demonstrations)"
        )
    check_parquet(str(train), "data.train")
    if val is not None:
        if not val.is_file():
            raise SFTDataError(f"data.val {str(val)!r} does not exist; give a parquet file, or leave data.val null")
        check_parquet(str(val), "data.val")
    return str(train), None if val is None else str(val)


def check_parquet(path: str, key: str) -> None:
    """Raise :class:`SFTDataError` (one line, with the fix) when ``path`` is not a parquet file."""
    with open(path, "rb") as handle:
        head = handle.read(4)
    if head != _PARQUET_MAGIC:
        raise SFTDataError(f"{key} {path!r} is not a parquet file (it does not start with PAR1); give {DATA_KINDS}")


def read_rows(path: str) -> Any:
    """The DataFrame of an SFT parquet file, or :class:`SFTDataError` when it cannot be read."""
    import pandas as pd

    try:
        return pd.read_parquet(path)
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SFTDataError(f"{path!r} cannot be read as parquet ({reason}); give {DATA_KINDS}") from None


def _token_ids(tokenizer: Any, messages: list[dict[str, str]], add_generation_prompt: bool = False) -> list[int]:
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)
    return list(tokenizer.encode(text, add_special_tokens=False))


def _check_template(tokenizer: Any, messages: list[dict[str, str]], where: str) -> None:
    """verl tokenizes each message on its own and concatenates; that must equal the whole conversation's tokens."""
    empty = [{"role": "user", "content": ""}]
    one, two = _token_ids(tokenizer, empty), _token_ids(tokenizer, empty * 2)
    system_prefix = len(one) - (len(two) - len(one))  # a default system prompt the template adds to every render
    generation = _token_ids(tokenizer, empty, add_generation_prompt=True)[len(one) :]
    pieces: list[int] = []
    for i, message in enumerate(messages):
        ids = _token_ids(tokenizer, [message])
        if i and message["role"] != "system":
            ids = ids[system_prefix:]
        if message["role"] == "assistant" and ids[: len(generation)] != generation:
            raise SFTDataError(
                f"{where}: an assistant message does not start with the chat template's generation prompt "
                f"{tokenizer.decode(generation)!r}, so the loss mask would cover prompt tokens: use a chat template "
                "whose generation prompt opens the assistant turn (e.g. ChatML, as verlog.models.tiny_model builds)"
            )
        pieces.extend(ids)
    if pieces != _token_ids(tokenizer, messages):
        raise SFTDataError(
            f"{where}: the chat template renders messages differently alone than in a conversation, and verl's "
            "SFT dataset tokenizes each message alone (it would fail with an input_ids mismatch); use a template "
            "without per-position changes (e.g. ChatML)"
        )


def check_data(
    path: str,
    tokenizer: Any,
    max_length: int,
    loss_on: str = "last",
    *,
    template_rows: int = 4,
    image_tokens: Callable[[Any], int] | None = None,
) -> DataReport:
    """Check an SFT parquet file against a tokenizer before launching verl.

    Checks: a chat template exists; a ``messages`` column of ``{role, content}`` lists with roles system / user /
    assistant and (for ``loss_on='last'``) an assistant message last; the first ``template_rows`` rows tokenize the
    same message by message as whole (verl's dataset needs it); no row is longer than ``max_length`` tokens. Rows
    with images (an ``images`` column, ``verlog demos --max-image-history``): as many images as ``<image>``
    placeholders, each counted with ``image_tokens`` (a vision-language model's tokens per image, required then).

    Raises:
        SFTDataError: naming the file, the row and the fix.
    """
    if getattr(tokenizer, "chat_template", None) is None:
        raise SFTDataError(
            f"the tokenizer {getattr(tokenizer, 'name_or_path', '')!r} has no chat template, so the demos cannot be "
            "rendered as the rollout renders prompts: use a model folder with a chat template "
            "(verlog.models.tiny_model.build_tiny_model writes ChatML) or set tokenizer.chat_template and save it"
        )
    frame = read_rows(path)
    if "messages" not in frame.columns:
        raise SFTDataError(
            f"{path} has no 'messages' column (columns: {list(frame.columns)}): verl's SFT trainer reads chat "
            "conversations from 'messages'; write the data with `verlog demos`"
        )
    if len(frame) == 0:
        raise SFTDataError(f"{path} has no rows; give data with at least one conversation")
    with_images = IMAGES_COLUMN in frame.columns
    if with_images and image_tokens is None:
        raise SFTDataError(
            f"{path} has images (an {IMAGES_COLUMN!r} column): train a vision-language model (model.path a folder "
            "with a vision_config and its processor, e.g. one `verlog tiny-model --vision` wrote, and "
            "model.build_tiny: false), or make the demos without --max-image-history"
        )
    lengths: list[int] = []
    loss_tokens = 0
    for i, raw in enumerate(frame["messages"]):
        messages: list[dict[str, Any]] = _as_messages(raw, f"{path} row {i}")
        roles = [m["role"] for m in messages]
        if "assistant" not in roles or (loss_on == "last" and roles[-1] != "assistant"):
            want = "end with an assistant message" if loss_on == "last" else "hold an assistant message"
            raise SFTDataError(f"{path} row {i}: roles {roles} do not {want}, so it has nothing to learn")
        images = row_images(frame[IMAGES_COLUMN].iloc[i], f"{path} row {i}") if with_images else []
        placeholders = sum(m["content"].count(IMAGE_PLACEHOLDER) for m in messages)
        if placeholders != len(images):
            raise SFTDataError(
                f"{path} row {i}: {placeholders} {IMAGE_PLACEHOLDER} placeholder(s) in its messages but "
                f"{len(images)} image(s): each image stands where one placeholder is (write the data with `verlog "
                "demos --max-image-history K`)"
            )
        if images:
            messages = [with_image_parts(m) for m in messages]
        if i < template_rows:
            _check_template(tokenizer, messages, f"{path} row {i}")
        ids = _token_ids(tokenizer, messages)
        image_extra = sum(int(image_tokens(image)) - 1 for image in images) if image_tokens else 0  # beyond each pad
        lengths.append(len(ids) + image_extra)
        loss_tokens += len(ids) - len(_token_ids(tokenizer, messages[:-1], add_generation_prompt=True))
    over = [i for i, n in enumerate(lengths) if n > max_length]
    if over:
        longest = max(lengths)
        raise SFTDataError(
            f"{len(over)} of {len(lengths)} rows of {path} are longer than data.max_length = {max_length} tokens "
            f"(longest: {longest} tokens, row {lengths.index(longest)}): raise data.max_length to at least "
            f"{longest}, or make the demos with a smaller prompt budget (`verlog demos --max-prompt-tokens ... "
            "--tokenizer MODEL`)"
        )
    return DataReport(path, len(lengths), max(lengths), sum(lengths) / len(lengths), loss_tokens)


IMAGES_COLUMN = "images"
"""The column of a row's images (verl's ``data.image_key`` default): a list of ``{"bytes": PNG}``."""


def row_images(cell: Any, where: str) -> list[Any]:
    """The images of a row's ``images`` cell as ``[H, W, 3]`` uint8 arrays (decoded from PNG bytes)."""
    import io

    import numpy as np
    from PIL import Image, UnidentifiedImageError

    items = [] if cell is None else list(cell)
    out = []
    for item in items:
        data = item.get("bytes") if isinstance(item, dict) else None
        if not isinstance(data, bytes):
            raise SFTDataError(f"{where}: each image must be {{'bytes': PNG bytes}}, got {item!r:.100}")
        try:
            out.append(np.asarray(Image.open(io.BytesIO(data)).convert("RGB")))
        except (UnidentifiedImageError, OSError) as exc:
            raise SFTDataError(f"{where}: an image does not decode ({exc})") from None
    return out


def with_image_parts(message: dict[str, Any]) -> dict[str, Any]:
    """``message`` with its ``<image>`` placeholders as ``{"type": "image"}`` chat parts (as the rollout's prompts
    hold them); a message without placeholders is unchanged."""
    content = message["content"]
    if not isinstance(content, str) or IMAGE_PLACEHOLDER not in content:
        return message
    parts: list[dict[str, str]] = []
    for i, text in enumerate(content.split(IMAGE_PLACEHOLDER)):
        if i:
            parts.append({"type": "image"})
        if text:
            parts.append({"type": "text", "text": text})
    return {"role": message["role"], "content": parts}


def data_texts(path: str) -> list[str]:
    """The message texts of an SFT parquet file's rows, in row order (a tokenizer corpus: see
    ``model.tokenizer_from_data``)."""
    frame = read_rows(path)
    if "messages" not in frame.columns:
        raise SFTDataError(f"{path} has no 'messages' column: write the data with `verlog demos`")
    return [m["content"] for i, raw in enumerate(frame["messages"]) for m in _as_messages(raw, f"{path} row {i}")]


def _as_messages(raw: Any, where: str) -> list[dict[str, str]]:
    items = list(raw) if raw is not None and not isinstance(raw, (str, bytes, dict)) else None
    if not items:
        raise SFTDataError(f"{where}: 'messages' must be a non-empty list of {{role, content}}, got {raw!r:.200}")
    out = []
    for m in items:
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            raise SFTDataError(f"{where}: every message needs string 'role' and 'content', got {m!r:.200}")
        if m["role"] not in ("system", "user", "assistant"):
            raise SFTDataError(f"{where}: role {m['role']!r} is not one of system, user, assistant")
        out.append({"role": m["role"], "content": m["content"]})
    return out


# --------------------------------------------------------------------------------------------------- dataset
def _last_turn_dataset_class() -> type:
    from verl.utils.dataset.multiturn_sft_dataset import MultiTurnSFTDataset

    class LastTurnSFTDataset(MultiTurnSFTDataset):
        """verl's MultiTurnSFTDataset with the loss on the final assistant message only.

        ``loss_mask`` (shape ``[seq_len]``, 1 = token in the loss) keeps only its last run of ones: the final
        assistant message (without its generation prompt); earlier assistant messages become context.
        """

        def __getitem__(self, item: int) -> dict[str, Any]:
            row = super().__getitem__(item)
            row["loss_mask"] = keep_last_run(row["loss_mask"])
            return row

        def _build_messages(self, example: dict) -> list:
            # rows with images: the placeholders become image parts holding PIL images, here (verl's version decodes
            # {"bytes": ...} through qwen_vl_utils, not a dependency, and resizes; the rollout hands the processor
            # the env's pixels as they are)
            images = example.get(self.image_key)
            if images is None or len(images) == 0:
                return super()._build_messages(example)
            pictures = iter([_pil(image) for image in images])
            messages = []
            for message in example[self.messages_key]:
                message = with_image_parts(dict(message))
                if isinstance(message["content"], list):
                    message["content"] = [
                        {"type": "image", "image": next(pictures)} if part["type"] == "image" else part
                        for part in message["content"]
                    ]
                messages.append(message)
            if next(pictures, None) is not None:
                raise SFTDataError("a row holds more images than <image> placeholders (check_data should have said)")
            return messages

    return LastTurnSFTDataset


def _pil(image: Any) -> Any:
    """A row's image (``{"bytes": PNG}`` or a PIL image) as an RGB PIL image."""
    import io

    from PIL import Image

    if isinstance(image, dict) and isinstance(image.get("bytes"), bytes):
        return Image.open(io.BytesIO(image["bytes"])).convert("RGB")
    return image


def keep_last_run(mask: Any) -> Any:
    """A copy of the 0/1 ``mask`` (shape ``[seq_len]``) with only its last run of consecutive non-zeros kept."""
    import torch

    nz = torch.nonzero(mask).flatten()
    out = torch.zeros_like(mask)
    if nz.numel() == 0:
        return out
    end = int(nz[-1])
    gaps = torch.nonzero(nz[1:] - nz[:-1] != 1).flatten()
    start = int(nz[int(gaps[-1]) + 1]) if gaps.numel() else int(nz[0])
    out[start : end + 1] = mask[start : end + 1]
    return out


def __getattr__(name: str) -> Any:
    # verl loads the dataset class by name (data.custom_cls); build it on first use so that importing verlog.sft
    # does not import verl.
    if name == "LastTurnSFTDataset":
        cls = _last_turn_dataset_class()
        globals()[name] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
