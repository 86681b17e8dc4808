"""Images reach the rollout's vLLM as the trainer sees them after a weight sync (docs/vision.md, "Weight sync").

verl starts its rollout engine on placeholder weights (``load_format=dummy``) and fills them with the actor's tensors
(``convert_weight_keys`` -> ``split_buffer_updates`` -> ``load_weights`` -> ``process_weights_after_loading``, then the
caches reset). This script runs those same functions of verl on an in-process vLLM engine started with the settings
verlog gives the training rollout of a VLM (``verlog.models.vision.vllm_vision_kwargs``) and compares the engine's
prompt log-probs of image prompts with the Hugging Face model's. The control starts vLLM with its own default
(pixels normalised inside the model by buffers that the placeholder start fills with noise and no sync repairs): it
must stay far off, or the upstream bug is gone and the setting can go.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine in this process: its model is reachable
    import verlog.platform.cpu  # noqa: F401  (the CPU patches, as in every verl process)

    import numpy as np
    import torch
    from PIL import Image
    from transformers import AutoProcessor, Qwen2VLForConditionalGeneration
    from verl.utils.model import convert_weight_keys
    from verl.workers.rollout.vllm_rollout.utils import split_buffer_updates
    from vllm import LLM, SamplingParams
    from vllm.model_executor.model_loader.utils import process_weights_after_loading

    from verlog.models.vision import vllm_vision_kwargs

    def gap(path, device_normalize):
        processor = AutoProcessor.from_pretrained(path)
        hf = Qwen2VLForConditionalGeneration.from_pretrained(path, dtype=torch.float32).eval()
        kwargs = vllm_vision_kwargs(1)
        if device_normalize:
            kwargs.pop("mm_device_do_normalize")  # vLLM's default
        llm = LLM(model=path, load_format="dummy", dtype="float32", enforce_eager=True, max_model_len=512,
                  kv_cache_memory_bytes=2**28, **kwargs)
        runner = llm.llm_engine.engine_core.engine_core.model_executor.driver_worker.worker.model_runner
        # verl's naive sync (verl.workers.rollout.vllm_rollout.utils: update_weights_from_ipc, _update_weights)
        params, buffers, _ = split_buffer_updates(runner.model, list(convert_weight_keys(hf.state_dict(), hf).items()))
        runner.model.load_weights(params)
        process_weights_after_loading(runner.model, runner.model_config, torch.device("cpu"))
        llm.reset_prefix_cache()
        llm.llm_engine.reset_encoder_cache()
        text = processor.apply_chat_template(
            [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Which colour?"}]}],
            add_generation_prompt=True, tokenize=False)
        worst = 0.0
        for colour in [(255, 0, 0), (0, 255, 0), (0, 0, 255), (40, 200, 90)]:
            image = np.full((56, 56, 3), colour, np.uint8)
            enc = processor(text=[text], images=[Image.fromarray(image)], return_tensors="pt")
            ids = enc["input_ids"][0]
            with torch.no_grad():
                logits = hf(**enc).logits[0, :-1].float()
            want = torch.log_softmax(logits, -1).gather(1, ids[1:, None])[:, 0]
            out = llm.generate([{"prompt": text, "multi_modal_data": {"image": image}}],
                               SamplingParams(max_tokens=1, prompt_logprobs=0), use_tqdm=False)[0]
            got = torch.tensor([step[int(ids[i])].logprob for i, step in enumerate(out.prompt_logprobs) if i > 0])
            worst = max(worst, float((want - got).abs().max()))
        del llm
        return worst

    if __name__ == "__main__":
        print("RESULT " + json.dumps({"verlog": gap(sys.argv[1], False), "device_normalize": gap(sys.argv[1], True)}),
              flush=True)
    """
)


def test_vlm_rollout_engine_sees_the_trainers_images_after_a_sync(tmp_path: Path) -> None:
    from verlog.models.tiny_vlm import build_tiny_vlm

    folder = build_tiny_vlm(tmp_path / "vlm")
    script = tmp_path / "sync.py"
    script.write_text(SCRIPT)
    proc = subprocess.run([sys.executable, str(script), str(folder)], capture_output=True, text=True, timeout=600)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-4000:]
    gaps = json.loads(lines[-1][len("RESULT ") :])
    assert gaps["verlog"] < 1e-3, gaps  # fp32 float noise: the engine sees the pixels the trainer's rows hold
    assert gaps["device_normalize"] > 0.1, gaps  # the upstream bug the setting avoids (see the module docstring)
