"""docs/adding-an-env.md runs as written: its module, scripts, expected output and `verlog play` command.

Block conventions of that page: a ```python block whose first line is ``# file: NAME`` is saved as NAME; every other
```python block is a script run on its own (in the folder holding those files); each ```text block must appear in
the output of the script just before it; each ``$ verlog ...`` line of a ```console block is run with ``:q`` as input.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "adding-an-env.md"
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```$", re.DOTALL | re.MULTILINE)


def _blocks() -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in BLOCK.finditer(DOC.read_text())]


def _run(args: list[str], cwd: Path, stdin: str = "") -> str:
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    proc = subprocess.run(args, cwd=cwd, input=stdin, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, f"{shlex.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def test_doc_has_the_expected_blocks() -> None:
    kinds = [kind for kind, _ in _blocks()]
    assert kinds.count("python") >= 4 and "text" in kinds and "console" in kinds
    assert _blocks()[0][1].startswith("# file: my_lake.py")


def test_every_block_of_the_doc_runs(tmp_path: Path) -> None:
    blocks = _blocks()
    for kind, body in blocks:
        first = body.splitlines()[0]
        if kind == "python" and first.startswith("# file: "):
            (tmp_path / first.removeprefix("# file: ").strip()).write_text(body)
    last_output = None
    ran = 0
    for index, (kind, body) in enumerate(blocks):
        if kind == "python" and not body.startswith("# file: "):
            script = tmp_path / f"block_{index}.py"
            script.write_text(body)
            last_output = _run([sys.executable, str(script)], tmp_path)
            ran += 1
        elif kind == "text":
            assert last_output is not None, f"text block {index} has no script before it"
            assert body.rstrip("\n") in last_output, f"text block {index} not in the output:\n{last_output}"
        elif kind == "console":
            for line in body.splitlines():
                if line.startswith("$ verlog "):
                    args = shlex.split(line.removeprefix("$ verlog "))
                    out = _run([sys.executable, "-m", "verlog", *args], tmp_path, stdin="go east\n:q\n")
                    assert "Your goal is to reach the gift" in out and "-> go east" in out
                    ran += 1
    assert ran >= 5


@pytest.mark.parametrize("path", ["envs/core.py", "envs/registry.py", "envs/__init__.py"])
def test_the_example_needs_no_core_change(path: str) -> None:
    """The ids of the example live only in the doc: no core file mentions them."""
    text = (DOC.parents[1] / path).read_text()
    assert "lake/4x4" not in text and "my_lake" not in text
