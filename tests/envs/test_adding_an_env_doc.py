"""docs/adding-an-env.md runs as written, from a folder outside the repository: its module, config, scripts, expected
output and every ``verlog`` command (through the installed console script, with no PYTHONPATH: the current folder
must be importable by itself).

Block conventions of that page: a ```python or ```yaml block whose first line is ``# file: PATH`` is saved as PATH;
every other ```python block is a script run on its own (in the folder holding those files); each ```text block must
appear in the output of the script or command just before it; each ``$ verlog ...`` line of a ```console block (with
``\\`` continuation lines) is run, ``verlog play`` with ``go east`` and ``:q`` as input.

The fast test runs everything but the commands that start verl or a model (``verlog train`` without ``--dry-run``,
``verlog eval``); the e2e test runs the whole page, including 2 PPO iterations on the user's env and the evaluation of
the trained model (about 3-5 minutes, most of it verl's start-up). Its only addition to the page's commands is a Ray
temp folder of its own.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "adding-an-env.md"
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```$", re.DOTALL | re.MULTILINE)
VERLOG_BIN = Path(sys.executable).parent / "verlog"


def _blocks() -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in BLOCK.finditer(DOC.read_text())]


def _commands(body: str) -> list[list[str]]:
    """The ``$ verlog ...`` commands of a console block (``\\`` joins continuation lines), without ``verlog``."""
    text = re.sub(r"\\\n\s*", " ", body)
    return [shlex.split(line.removeprefix("$ verlog ")) for line in text.splitlines() if line.startswith("$ verlog ")]


def _heavy(args: list[str]) -> bool:
    """A command that starts verl or loads a model (only the e2e test runs it)."""
    return (args[0] == "train" and "--dry-run" not in args) or args[0] == "eval"


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def _run(args: list[str], cwd: Path, stdin: str = "", check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(args, cwd=cwd, input=stdin, capture_output=True, text=True, timeout=1500, env=_env())
    if check:
        assert proc.returncode == 0, f"{shlex.join(args)} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}"
    return proc


def _run_doc(folder: Path, *, heavy: bool, train_extra: tuple[str, ...] = ()) -> dict[str, str]:
    """Run the page in ``folder``; returns the output of each verlog command that ran (by subcommand, last wins)."""
    assert not folder.resolve().is_relative_to(REPO), "the page is run from outside the repository"
    blocks = _blocks()
    for kind, body in blocks:
        first = body.splitlines()[0]
        if kind in ("python", "yaml") and first.startswith("# file: "):
            path = folder / first.removeprefix("# file: ").strip()
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(body)
    last_output: str | None = None
    outputs: dict[str, str] = {}
    scripts = 0
    for index, (kind, body) in enumerate(blocks):
        if kind == "python" and not body.startswith("# file: "):
            script = folder / f"block_{index}.py"
            script.write_text(body)
            last_output = _run([sys.executable, str(script)], folder).stdout
            scripts += 1
        elif kind == "text":
            assert last_output is not None, f"text block {index} has no script or command before it that ran"
            assert body.rstrip("\n") in last_output, f"text block {index} not in the output:\n{last_output}"
        elif kind == "console":
            for args in _commands(body):
                if _heavy(args) and not heavy:
                    last_output = None
                    continue
                extra = list(train_extra) if args[0] == "train" else []
                stdin = "go east\n:q\n" if args[0] == "play" else ""
                last_output = _run([str(VERLOG_BIN), *args, *extra], folder, stdin=stdin).stdout
                outputs[args[0]] = last_output
                if args[0] == "play":
                    assert "Your goal is to reach the gift" in last_output and "-> go east" in last_output
    assert scripts >= 4
    return outputs


def test_doc_has_the_expected_blocks() -> None:
    kinds = [kind for kind, _ in _blocks()]
    assert kinds.count("python") >= 4 and "text" in kinds and "console" in kinds and "yaml" in kinds
    assert _blocks()[0][1].startswith("# file: my_lake.py")
    commands = [args[0] for kind, body in _blocks() if kind == "console" for args in _commands(body)]
    for command in ("envs", "play", "tiny-model", "train", "eval"):
        assert command in commands, f"the page runs no `verlog {command}`"
    for kind, body in _blocks():  # every command that takes an env id gets the user's module
        if kind == "console":
            for args in _commands(body):
                if args[0] in ("envs", "play", "eval") or (args[0] == "train" and "--config-dir" not in args):
                    assert "--import" in args and "my_lake" in args, args


def test_every_block_of_the_doc_runs(tmp_path: Path) -> None:
    """Everything but training and evaluation (the e2e test below runs those)."""
    outputs = _run_doc(tmp_path, heavy=False)
    assert set(outputs) == {"envs", "play", "train", "tiny-model"}
    assert "id: lake/4x4" in outputs["train"] and "max_steps: 20" in outputs["train"]  # the dry run's config
    assert (tmp_path / "model" / "config.json").is_file() and (tmp_path / "conf" / "env" / "lake.yaml").is_file()


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_the_whole_doc_trains_and_evaluates_the_users_env(tmp_path: Path) -> None:
    folder = tmp_path / "user"
    folder.mkdir()
    ray_dir = tempfile.mkdtemp(prefix="verlog-ray-", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
    try:
        outputs = _run_doc(folder, heavy=True, train_extra=(f"hardware.ray.temp_dir={ray_dir}",))
    finally:
        shutil.rmtree(ray_dir, ignore_errors=True)
    run = folder / "runs" / "lake"
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    iterations = [r for r in records if "training/global_step" in r]
    assert [r["step"] for r in iterations] == [1, 2]
    for record in iterations:
        assert record["rollout/turns"] == 4 and record["rollout/env_errors"] == 0
        assert "actor/pg_loss" in record and "critic/vf_loss" in record
    assert "[verlog] iteration 2/2" in outputs["train"]
    config = (run / "config.yaml").read_text()
    assert "id: lake/4x4" in config and "- my_lake" in config and "in_process: false" in config
    summary = json.loads((run / "eval" / "summary.json").read_text())
    assert "lake/4x4" in json.dumps(summary)
    # the page says a second identical run is refused (nothing starts): resume or start clean
    train = next(args for kind, body in _blocks() if kind == "console" for args in _commands(body) if _heavy(args))
    again = _run([str(VERLOG_BIN), *train, "checkpoint.resume=disable"], folder, check=False)
    assert again.returncode == 2 and "Traceback" not in again.stderr
    assert "holds another run" in again.stderr and "checkpoint.resume=auto" in again.stderr


@pytest.mark.parametrize("path", ["envs/core.py", "envs/registry.py", "envs/__init__.py"])
def test_the_example_needs_no_core_change(path: str) -> None:
    """The ids of the example live only in the doc: no core file mentions them."""
    text = (DOC.parents[1] / path).read_text()
    assert "lake/4x4" not in text and "my_lake" not in text
