"""Rows with images (issue 35, docs/vision.md): the rollout's prompts hold each image's expanded ``<|image_pad|>`` run
and carry the images; the trainer's rows get ``multi_modal_inputs`` and verl's four position rows, checked against
the processor, verl's ``get_rope_index`` and the model's own rotary positions."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import torch

from verlog.models.vision import (
    IMAGE_PAD,
    ImageTokenCounter,
    expand_image_pads,
    fold_image_pads,
    load_tiny_vlm_processor,
    multimodal_rows,
    placeholder_token_ids,
    prefix_sharing_off_reason,
    rollout_processor,
)
from verlog.prompting.memory import SlidingMemory
from verlog.rollout.manager import make_env_pool
from verlog.rollout.stepper import CallbackPolicy, EpisodeStepper, PolicyInput


@pytest.fixture(scope="module")
def processor(tiny_vlm: Path):
    return load_tiny_vlm_processor(tiny_vlm)


@pytest.fixture(scope="module")
def played(processor):
    """Two slots of toy/visual (3 turns an episode) played 3 turns with memory n=1, max_image_history=2: the rows
    and the policy inputs."""
    pool = make_env_pool("toy/visual", 2, env_kwargs={"length": 3}, keep_images=True, seed=3)
    counter = ImageTokenCounter(processor)
    memories = [SlidingMemory(n=1, max_image_history=2, image_tokens=counter) for _ in range(2)]
    stepper = EpisodeStepper(pool, processor.tokenizer, memories, max_prompt_tokens=400)
    seen: list[PolicyInput] = []

    def answer(turn: PolicyInput) -> str:
        seen.append(turn)
        return "THINK: red\nACTION: turn left"

    policy = CallbackPolicy(answer, processor.tokenizer)
    stepper.reset(3)
    rows = [s.row for _ in range(3) for s in stepper.step(policy)]
    pool.close()
    return rows, seen


def test_prompts_hold_the_processors_expanded_ids_and_their_images(processor, played) -> None:
    rows, seen = played
    assert [len(r.images) for r in rows] == [1, 1, 2, 2, 2, 2]  # the second turn shows the previous image too
    for turn, row in zip(seen, rows):
        expected = processor(text=[turn.prompt.text], images=turn.prompt.images, return_tensors="pt")["input_ids"]
        assert row.prompt_ids == expected[0].tolist() == turn.prompt.token_ids
        assert len(row.prompt_ids) == turn.prompt.num_tokens
        assert all(a is b for a, b in zip(row.images, turn.prompt.images))


def test_expand_image_pads_refuses_counts_that_do_not_pair_up() -> None:
    assert expand_image_pads([1, 9, 2, 9], 9, [2, 3]) == [1, 9, 9, 2, 9, 9, 9]
    with pytest.raises(ValueError, match="2 image placeholders for 1 images"):
        expand_image_pads([1, 9, 2, 9], 9, [2])


def test_folding_the_rows_prompts_gives_the_chat_templates_ids(processor, played) -> None:
    """What a standalone vLLM engine is sent (``VllmEngineGenerator``): each expanded run folded back to the one
    placeholder the chat template wrote, the token ids vLLM's processor expands again."""
    rows, seen = played
    placeholders = frozenset(placeholder_token_ids(processor.tokenizer))
    assert len(placeholders) == 2  # <|image_pad|>, <|video_pad|>: never sampled
    for turn, row in zip(seen, rows):
        templated = processor.tokenizer(turn.prompt.text, add_special_tokens=False)["input_ids"]
        assert fold_image_pads(row.prompt_ids, placeholders) == list(templated)
    assert fold_image_pads([1, 9, 9, 2, 9, 3, 3], frozenset({9})) == [1, 9, 2, 9, 3, 3]


def test_a_vlm_takes_the_vision_path_with_or_without_images(tiny_vlm: Path, tiny_model: Path) -> None:
    """A VLM's rows carry 4-row positions even on text only (verl's Qwen2-VL forward reads them): the rollout gets
    the processor and prefix sharing is off; a text model's run is unchanged."""
    assert multimodal_rows(tiny_vlm, 0) and multimodal_rows(tiny_vlm, 1)
    assert not multimodal_rows(tiny_model, 0)
    assert rollout_processor(str(tiny_vlm), 0) is not None and rollout_processor(str(tiny_model), 0) is None
    assert "a VLM's rows" in str(prefix_sharing_off_reason(tiny_vlm, 0, True))
    assert "rows with images" in str(prefix_sharing_off_reason(tiny_vlm, 1, True))
    assert (
        prefix_sharing_off_reason(tiny_vlm, 1, False) is None and prefix_sharing_off_reason(tiny_model, 0, True) is None
    )


def test_vision_columns_match_verls_functions_and_the_models_own_positions(tiny_vlm, processor, played) -> None:
    from transformers import Qwen2VLForConditionalGeneration
    from verl.models.transformers.qwen2_vl import get_rope_index
    from verl.utils.model import extract_multi_modal_inputs

    from verlog.rollout.batch import TurnBatch
    from verlog.trainer.vision_rows import ImageRowError, image_row_metrics, vision_columns

    rows, _ = played
    batch = TurnBatch(rows)
    laid = batch.to_tensors(processor.tokenizer.pad_token_id, 400, 16)
    positions, column = vision_columns(processor, rows, laid["input_ids"], laid["attention_mask"])
    assert positions.shape == (len(rows), 4, 416)
    model = Qwen2VLForConditionalGeneration.from_pretrained(tiny_vlm, attn_implementation="sdpa").eval()
    for i, row in enumerate(rows):
        grid = column[i]["image_grid_thw"]
        assert grid.shape == (len(row.images), 3)
        assert column[i]["pixel_values"].shape[0] == int(grid.prod(dim=-1).sum())
        assert column[i]["images_seqlens"].tolist() == (grid[:, 1] * grid[:, 2]).tolist()
        keep = laid["attention_mask"][i].bool()
        ids = laid["input_ids"][i][keep]
        assert torch.equal(positions[i, 1:, keep], get_rope_index(processor, input_ids=ids, image_grid_thw=grid))
        assert torch.equal(positions[i, 0, keep], torch.arange(len(ids)))
        with torch.no_grad():  # our positions give the logits the model gives with the positions it computes itself
            inputs = {"pixel_values": column[i]["pixel_values"], "image_grid_thw": grid}
            ours = model(input_ids=ids[None], position_ids=positions[i, :, keep][:, None], **inputs).logits
            kinds = (ids == processor.image_token_id).int()[None]  # the model's own positions need the image tokens
            own = model(input_ids=ids[None], mm_token_type_ids=kinds, **inputs).logits
        torch.testing.assert_close(ours, own)
    merged = extract_multi_modal_inputs(list(column))  # what verl's FSDP engine feeds the model for a micro-batch
    assert merged["pixel_values"].shape[0] == sum(int(c["image_grid_thw"].prod(-1).sum()) for c in column)
    assert image_row_metrics(rows) == {"rollout/image_rows": 6.0, "rollout/images_per_row": pytest.approx(5 / 3)}
    rows[0].images = rows[0].images * 2  # two images for one placeholder run: the row cannot be trained on
    with pytest.raises(ImageRowError, match="holds 4 image tokens for 2 image"):
        vision_columns(processor, rows[:1], laid["input_ids"][:1], laid["attention_mask"][:1])


def test_the_pad_token_is_the_templates_placeholder(processor) -> None:
    pad = processor.tokenizer.convert_tokens_to_ids(IMAGE_PAD)
    assert pad == processor.image_token_id


def test_rows_of_four_position_rows_survive_verls_mini_batch_cut() -> None:
    """verl cuts the actor's batch into mini-batches by rebuilding its nested rows: [4, L] position ids keep their
    shape with verlog's fix (torch 2.13 ignores the ragged dimension verl sets afterwards)."""
    from tensordict import TensorDict
    from verl.utils.tensordict_utils import index_select_tensor_dict
    from verl.workers import engine_workers
    from verl.workers.utils.padding import left_right_2_no_padding

    import verlog.trainer.nested_rows  # noqa: F401  (installs the fix, as verl's external-module hook does)

    rows, prompt, response = 4, 6, 3
    ids = torch.randint(0, 10, (rows, prompt + response))
    mask = torch.ones(rows, prompt + response, dtype=torch.long)
    mask[0, :2] = mask[1, :1] = 0  # left-padded prompts of 4, 5, 6, 6 tokens
    data = {"input_ids": ids, "attention_mask": mask, "response_mask": torch.ones(rows, response, dtype=torch.long)}
    data["position_ids"] = torch.arange(prompt + response).expand(rows, 4, -1).clone()
    nested = left_right_2_no_padding(TensorDict(data, batch_size=rows))
    picked = index_select_tensor_dict(nested, torch.tensor([0, 2]))["position_ids"]
    assert [tuple(p.shape) for p in picked.unbind()] == [(4, 7), (4, 9)]
    assert torch.equal(picked.unbind()[0][2], torch.arange(2, 9))
    for lengths in ((7, 9, 9, 9), (9, 9, 9, 9)):  # rows of one length: torch makes the tensor ragged along dim 1
        shipped = pickle.loads(pickle.dumps(_nested_positions(lengths).consolidate()))  # as Ray hands it to a worker
        engine_workers.maybe_fix_3d_position_ids(shipped)  # verl's worker calls its module global, which the fix swaps
        picked = index_select_tensor_dict(shipped, torch.tensor([3, 0]))["position_ids"]
        assert [tuple(p.shape) for p in picked.unbind()] == [(4, lengths[3]), (4, lengths[0])]
    from verlog.trainer.seams import check_seams

    check_seams()  # the launch's check of verl's seams still passes with the function swapped


def _nested_positions(lengths: tuple[int, ...]):
    """A batch of rows of ``lengths`` tokens (left-padded) in verl's no-padding layout, ``[4, L]`` position ids."""
    from tensordict import TensorDict
    from verl.workers.utils.padding import left_right_2_no_padding

    width, response = max(lengths), 3
    mask = torch.zeros(len(lengths), width, dtype=torch.long)
    for i, n in enumerate(lengths):
        mask[i, width - n :] = 1
    data = {"input_ids": torch.randint(0, 10, (len(lengths), width)), "attention_mask": mask}
    data["response_mask"] = torch.ones(len(lengths), response, dtype=torch.long)
    data["position_ids"] = torch.arange(width).expand(len(lengths), 4, -1).clone()
    return left_right_2_no_padding(TensorDict(data, batch_size=len(lengths)))
