"""Run by tests/verlog/trainer/test_vlm_critic.py in a fresh interpreter (verl's model patches are process-wide).

``python vlm_critic_engine.py VLM_FOLDER`` loads the tiny VLM's critic through verl's loader, computes the values of a
two-row batch with images with the model alone, then applies verl's model patches to it as verl's FSDP engine does
(``apply_monkey_patch``) and runs the batch through the engine's own input and output code
(``FSDPEngineWithValueHead.prepare_model_inputs`` / ``prepare_model_outputs``: nested rows, ``[4, L]`` position ids,
``multi_modal_inputs`` merged across rows) and a backward pass. Prints one JSON line.
"""

from __future__ import annotations

import json
import sys


def batch(folder: str) -> dict:
    """Two rows of different lengths, each with its own 56x56 image: padded tensors and per-row image inputs."""
    import numpy as np
    import torch
    from verl.models.transformers.qwen2_vl import get_rope_index

    from verlog.models.vision import load_tiny_vlm_processor

    processor = load_tiny_vlm_processor(folder)
    processor.tokenizer.padding_side = "left"
    rng = np.random.default_rng(0)
    texts, images = [], []
    for words in ("look", "look at the square and answer"):
        message = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": words}]}]
        texts.append(processor.apply_chat_template(message, add_generation_prompt=True, tokenize=False))
        images.append(rng.integers(0, 256, (56, 56, 3), dtype=np.uint8))
    enc = processor(text=texts, images=images, return_tensors="pt", padding=True)
    rows = []
    for i in range(2):
        mask = enc["attention_mask"][i]
        grid = enc["image_grid_thw"][i : i + 1]
        rope = get_rope_index(processor, enc["input_ids"][i], image_grid_thw=grid, attention_mask=mask)  # [3, L]
        text = (mask.cumsum(0) - 1).clamp(min=0)[None]  # verl's agent loop: a text row before the 3 rotary rows
        rows.append(torch.cat([text, rope]))
    per_image = enc["image_grid_thw"].prod(-1).tolist()
    pixels = torch.split(enc["pixel_values"], per_image)
    mm = [{"pixel_values": pixels[i], "image_grid_thw": enc["image_grid_thw"][i : i + 1]} for i in range(2)]
    return {"enc": enc, "position_ids": torch.stack(rows), "mm": mm}  # position_ids [B, 4, L]


def main(folder: str) -> dict:
    import torch
    import verl.utils.model as verl_model
    from transformers import AutoConfig
    from verl.models.transformers.monkey_patch import apply_monkey_patch
    from verl.utils import tensordict_utils as tu
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithValueHead
    from verl.workers.utils.padding import left_right_2_no_padding

    import verlog.platform.cpu  # noqa: F401  (the CPU patches: verl's loader with sdpa)
    from verlog.trainer.value_model import register_value_models

    register_value_models()
    config = AutoConfig.from_pretrained(folder)
    config.num_labels, config.classifier_dropout = 1, 0.0  # as verl's engine sets them for the critic
    critic = verl_model.load_valuehead_model(folder, torch.float32, config, False)
    data = batch(folder)
    enc, mask = data["enc"], data["enc"]["attention_mask"]
    with torch.no_grad():
        plain = critic(
            input_ids=enc["input_ids"],
            attention_mask=mask,
            position_ids=data["position_ids"].transpose(0, 1),
            pixel_values=enc["pixel_values"],
            image_grid_thw=enc["image_grid_thw"],
        ).logits.squeeze(-1)  # [B, L]

    apply_monkey_patch(model=critic, use_remove_padding=False)  # what verl's engine does to the module it built
    engine = FSDPEngineWithValueHead.__new__(FSDPEngineWithValueHead)  # its input/output code, no process group
    engine.module, engine.pad_to_length = critic, False
    micro = tu.get_tensordict(
        {
            "input_ids": enc["input_ids"],
            "attention_mask": mask,
            "response_mask": torch.ones(2, 2, dtype=torch.long),
            "position_ids": data["position_ids"],
            "multi_modal_inputs": data["mm"],
        },
        {"use_remove_padding": False, "temperature": 1.0, "pad_token_id": 0},
    )
    micro = left_right_2_no_padding(micro)
    inputs, args = engine.prepare_model_inputs(micro)
    values = engine.prepare_model_outputs(critic(**inputs, use_cache=False), args, micro, None)["values"]
    values.values().sum().backward()
    rows = [row.detach() for row in values.unbind()]
    gaps = [float((row - plain[i][mask[i].bool()]).abs().max()) for i, row in enumerate(rows)]
    vision_grad = sum(float(p.grad.abs().sum()) for p in critic.model.visual.parameters() if p.grad is not None)
    return {
        "class": type(critic).__name__,
        "position_rows": int(inputs["position_ids"].shape[0]),
        "row_lengths": [int(r.shape[0]) for r in rows],
        "valid_lengths": mask.sum(-1).tolist(),
        "max_gap": max(gaps),
        "vision_grad": vision_grad,
        "score_grad": float(critic.score.weight.grad.abs().sum()),
    }


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1])))
