"""Run by tests/verlog/trainer/test_vlm_text_rows.py in a fresh interpreter (verl's model patches are process-wide).

``python vlm_text_forward.py VLM_FOLDER`` runs a batch of two text-only rows (no image) through the tiny VLM: once
plainly, then with verl's model patches (``apply_monkey_patch``, as verl's FSDP engine applies them) and verl's
``[4, B, L]`` positions, first with verl's own ``_get_input_embeds``, then with verlog's wrapper
(``verlog.trainer.vlm_text_rows``), with a backward pass. Prints one JSON line.
"""

from __future__ import annotations

import json
import sys


def main(folder: str) -> dict:
    import torch
    from transformers import Qwen2VLForConditionalGeneration
    from verl.models.transformers.monkey_patch import apply_monkey_patch

    import verlog.platform.cpu  # noqa: F401  (the CPU patches)
    from verlog.models.vision import load_tiny_vlm_processor
    from verlog.trainer.vision_rows import mrope_position_ids

    processor = load_tiny_vlm_processor(folder)
    processor.tokenizer.padding_side = "left"
    texts = [
        processor.apply_chat_template([{"role": "user", "content": words}], add_generation_prompt=True, tokenize=False)
        for words in ("look", "look at the square and answer")
    ]
    enc = processor.tokenizer(texts, return_tensors="pt", padding=True)
    positions = torch.stack(
        [mrope_position_ids(processor, enc["input_ids"][i], enc["attention_mask"][i], None) for i in range(2)]
    )  # [B, 4, L]
    model = Qwen2VLForConditionalGeneration.from_pretrained(folder, dtype=torch.float32, attn_implementation="sdpa")
    keep = enc["attention_mask"].bool()
    with torch.no_grad():
        plain = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).logits[keep]

    apply_monkey_patch(model=model, use_remove_padding=False)
    inputs = {
        "input_ids": enc["input_ids"],
        "attention_mask": enc["attention_mask"],
        "position_ids": positions.transpose(0, 1),  # [4, B, L], as verl's engine passes them
    }
    try:
        with torch.no_grad():
            model(**inputs)
        verl_error = None
    except Exception as exc:  # verl 0.9.1 under transformers 5: the dummy image's output is not unpacked
        verl_error = f"{type(exc).__name__}: {exc}"

    from verlog.trainer.vlm_text_rows import install

    install()
    logits = model(**inputs).logits
    logits[keep].sum().backward()
    visual = [p.grad for p in model.model.visual.parameters()]
    return {
        "verl_error": verl_error,
        "gap": float((logits.detach()[keep] - plain).abs().max()),
        "visual_grads": sum(g is not None for g in visual),
        "visual_params": len(visual),
        "visual_grad_max": max(float(g.abs().max()) for g in visual if g is not None),
        "text_grad_max": float(model.model.language_model.layers[0].mlp.up_proj.weight.grad.abs().max()),
    }


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1])))
