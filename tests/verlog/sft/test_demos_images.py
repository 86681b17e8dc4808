"""Demonstrations and SFT with images (issue 35): ``verlog demos --max-image-history K`` records the frames the
rollout's prompts show, the data checks count their tokens, verl's SFT dataset (through verlog's) gives the model
the pixels, and ``verlog sft`` trains a vision-language model on them."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from verlog.cli import main as cli_main
from verlog.sft import SFTConfigError, SFTDataError, check_data, load_config, run_sft
from verlog.sft.data import row_images
from verlog.sft.demos import IMAGE_PLACEHOLDER, DemoConfig, generate_demos, write_demos

REPO = Path(__file__).resolve().parents[3]
FILLED = {"min_side": 56, "max_side": 56}


@pytest.fixture(scope="module")
def processor(tiny_vlm: Path):
    from verlog.models.vision import load_vision_processor

    return load_vision_processor(tiny_vlm)


@pytest.fixture(scope="module")
def image_demos(tiny_vlm: Path, processor, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """toy/visual demos with each turn's frame (2 turns an episode, 12 episodes, 2 of them for validation)."""
    from verlog.models.vision import ImageTokenCounter

    out = tmp_path_factory.mktemp("image_demos")
    config = DemoConfig(
        "toy/visual", episodes=12, val_episodes=2, memory_n=1, answer_format="action", max_image_history=1,
        env_kwargs={"length": 2}, max_prompt_tokens=512,
    )  # fmt: skip
    episodes = generate_demos(config, tokenizer=processor.tokenizer, image_tokens=ImageTokenCounter(processor))
    write_demos(episodes, out, config)
    return out


def test_demo_rows_hold_the_frames_the_prompts_show(image_demos: Path) -> None:
    import envs

    frame = pd.read_parquet(image_demos / "train.parquet")
    assert len(frame) == 20 and list(frame.columns[:2]) == ["messages", "images"]
    for _, row in frame.iterrows():
        images = row_images(row["images"], "row")
        placeholders = sum(m["content"].count(IMAGE_PLACEHOLDER) for m in row["messages"])
        assert placeholders == len(images) == 1  # max_image_history=1: the current frame only, not the past turn's
        env = envs.make("toy/visual", length=2, images=True)
        obs, _ = env.reset(seed=int(row["seed"]))
        for _ in range(int(row["turn"])):
            obs = env.step(env.answer)[0]
        assert np.array_equal(images[0], obs.image)  # lossless: the pixels the rollout gives the processor
        user = [m["content"] for m in row["messages"] if m["role"] == "user"][-1]
        assert user.startswith(IMAGE_PLACEHOLDER + "Current Observation:")
        assert row["messages"][-1]["content"] == f"ACTION: {row['action']}"  # the colour's answer


def test_check_data_counts_image_tokens_and_names_mismatches(image_demos: Path, processor, tmp_path: Path) -> None:
    from verlog.models.vision import ImageTokenCounter

    counter = ImageTokenCounter(processor)
    path = str(image_demos / "train.parquet")
    report = check_data(path, processor.tokenizer, 1024, image_tokens=counter)
    first = pd.read_parquet(path).iloc[0]
    text_only = processor.tokenizer.apply_chat_template(
        [{"role": m["role"], "content": m["content"].replace(IMAGE_PLACEHOLDER, "")} for m in first["messages"]],
        tokenize=True,
    )
    # the frame costs its markup (<|vision_start|>, one pad, <|vision_end|>) plus 3 more pads: 4 tokens a 56x56 frame
    assert report.max_tokens >= len(_ids(text_only)) + 2 + 4
    with pytest.raises(SFTDataError, match="train a vision-language model"):
        check_data(path, processor.tokenizer, 1024)
    with pytest.raises(SFTDataError, match=r"longer than data\.max_length"):
        check_data(path, processor.tokenizer, report.max_tokens - 1, image_tokens=counter)
    broken = pd.read_parquet(path)
    broken.at[0, "images"] = []
    broken.to_parquet(tmp_path / "broken.parquet", index=False)
    with pytest.raises(SFTDataError, match=r"row 0: 1 <image> placeholder\(s\) in its messages but 0 image\(s\)"):
        check_data(str(tmp_path / "broken.parquet"), processor.tokenizer, 1024, image_tokens=counter)


def _ids(encoded) -> list[int]:
    return list(encoded["input_ids"] if isinstance(encoded, dict) or hasattr(encoded, "keys") else encoded)


def test_demos_command_refuses_images_it_cannot_count(tiny_model: Path, tmp_path: Path, capsys) -> None:
    base = ["demos", "toy/visual", "--episodes", "1", "--max-image-history", "1", "--out", str(tmp_path / "d")]
    assert cli_main(base) == 2
    assert "--max-image-history needs --tokenizer a vision-language model folder" in capsys.readouterr().err
    assert cli_main([*base, "--tokenizer", str(tiny_model)]) == 2  # a text-only model has no image processor
    assert "vision-language model folder" in capsys.readouterr().err
    assert not (tmp_path / "d").exists()


@pytest.mark.slow
def test_verls_dataset_gives_the_model_the_frames(image_demos: Path, processor) -> None:
    """verl's MultiTurnSFTDataset through verlog's subclass: each row's pixels, its image pads in the input ids,
    multimodal rotary positions (4 rows), the loss on the final answer only."""
    from verlog.models.vision import IMAGE_PAD, pixel_inputs
    from verlog.sft.data import LastTurnSFTDataset

    path = str(image_demos / "train.parquet")
    cfg = {"pad_mode": "no_padding", "max_length": 1024, "truncation": "error"}
    dataset = LastTurnSFTDataset(path, processor.tokenizer, cfg, processor=processor)
    frame = pd.read_parquet(path)
    pad = processor.tokenizer.convert_tokens_to_ids(IMAGE_PAD)
    for i in range(len(frame)):
        row = dataset[i]
        expected = pixel_inputs(processor, row_images(frame["images"].iloc[i], "row"))
        assert np.allclose(row["multi_modal_inputs"]["pixel_values"], expected["pixel_values"])
        assert row["input_ids"].tolist().count(pad) == 4
        assert row["position_ids"].shape[0] == 4  # Qwen2-VL's multimodal rotary positions
        answer = processor.tokenizer.encode(frame["messages"].iloc[i][-1]["content"] + "<|im_end|>\n")
        assert row["input_ids"][row["loss_mask"].bool()].tolist() == answer


@pytest.mark.slow
def test_sft_with_images_trains_a_vlm_and_exports_its_processor(
    image_demos: Path, tiny_vlm: Path, tmp_path: Path, monkeypatch
) -> None:
    from verlog.models.vision import is_vision_model, load_vision_processor

    for key in ("VERL_USE_EXTERNAL_MODULES", "VERLOG_PLATFORM", "VERL_ENGINE_DEVICE", "VLLM_CPU_OMP_THREADS_BIND"):
        monkeypatch.delenv(key, raising=False)  # enable_cpu_platform() sets them: restored after the test
    base = tmp_path / "base"
    shutil.copytree(tiny_vlm, base)
    settings = [f"data.train={image_demos}", f"output_dir={tmp_path / 'sft'}", "data.max_length=512"]
    with pytest.raises(SFTConfigError, match=r"has images: model\.path must be a vision-language model folder"):
        run_sft(load_config(REPO / "configs" / "sft" / "cpu.yaml", [*settings, f"model.path={tmp_path / 'tiny'}"]))
    config = load_config(
        REPO / "configs" / "sft" / "cpu.yaml",
        [*settings, f"model.path={base}", "model.build_tiny=false", "train.batch_size=4", "train.steps=3"],
    )
    result = run_sft(config)
    assert result.steps == 3 and all(math.isfinite(x) for x in result.losses)
    assert result.losses[-1] < result.losses[0]
    model_dir = Path(result.model_dir)
    assert is_vision_model(model_dir) and load_vision_processor(model_dir) is not None
