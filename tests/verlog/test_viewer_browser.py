"""``verlog view``'s page in a real browser: headless Chromium (Debian's ``chromium`` package, driven by its command
line) opens a page built from a run this test makes, at an episode (``#episode=<id>``), and must render the turn table
and the value/advantage chart; a screenshot of it must not be blank.

Chromium is required in CI (``CI`` set: .ci/run installs it); elsewhere the test is skipped when it is missing
(``apt-get install -y chromium``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import quote

import pytest
from viewer_run import make_training_run

from verlog.viewer import build_view

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")


def chromium() -> str:
    """The browser binary (``VERLOG_CHROMIUM`` or the first of :data:`CHROMIUM_NAMES` on PATH); fails in CI when
    there is none, skips elsewhere."""
    found = os.environ.get("VERLOG_CHROMIUM") or next((p for p in map(shutil.which, CHROMIUM_NAMES) if p), None)
    if found:
        return found
    if os.environ.get("CI"):
        pytest.fail("chromium is not installed but CI is set: the browser test must run in CI (.ci/run installs it)")
    pytest.skip("chromium is not installed (apt-get install -y chromium); CI runs this test")


def run_chromium(binary: str, profile: Path, url: str, *args: str) -> subprocess.CompletedProcess:
    cmd = [
        binary,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
        *args,
        url,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


class DomSummary(HTMLParser):
    """What the test checks in the dumped DOM: body attributes, the turn table's rows, the chart's lines."""

    def __init__(self) -> None:
        super().__init__()
        self.body: dict[str, str | None] = {}
        self.stack: list[str] = []
        self.in_turn_table = False
        self.in_turn_chart = False
        self.turn_rows: list[dict[str, str | None]] = []
        self.chart_paths: list[dict[str, str | None]] = []
        self.chart_bars = 0
        self.episode_section: dict[str, str | None] = {}
        self.frames = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "body":
            self.body = a
        if tag == "table" and a.get("id") == "turn-table":
            self.in_turn_table = True
        if tag == "svg" and a.get("id") == "turn-chart":
            self.in_turn_chart = True
        if tag == "section" and a.get("id") == "episode":
            self.episode_section = a
        if self.in_turn_table and tag == "tr" and a.get("class") == "turn":
            self.turn_rows.append(a)
        if self.in_turn_table and tag == "img" and "frame" in (a.get("class") or ""):
            self.frames += 1
        if self.in_turn_chart and tag == "path" and a.get("class") == "series":
            self.chart_paths.append(a)
        if self.in_turn_chart and tag == "rect" and a.get("height"):
            self.chart_bars += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self.in_turn_table = False
        if tag == "svg":
            self.in_turn_chart = False


def not_blank(png: Path) -> tuple[int, float]:
    """(distinct colours, share of pixels that differ from the most common colour) of a screenshot."""
    from PIL import Image

    image = Image.open(png).convert("RGB")
    colours = image.getcolors(maxcolors=1 << 20) or []
    top = max(count for count, _ in colours)
    total = image.width * image.height
    return len(colours), 1 - top / total


def test_episode_page_renders_in_chromium(tmp_path: Path) -> None:
    binary = chromium()
    start = time.perf_counter()
    run = make_training_run(tmp_path / "run")
    page = build_view(run, tmp_path / "view.html").path
    data_episode = "synthetic-s0-e1"
    expected_turns = sum(1 for line in (run / "tapes" / "train.jsonl").read_text().splitlines() if data_episode in line)
    assert expected_turns >= 2
    url = page.resolve().as_uri() + "#episode=" + quote(data_episode, safe="")
    profile = tmp_path / "profile"

    dom = run_chromium(binary, profile, url, "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    summary = DomSummary()
    summary.feed(dom.stdout)
    assert summary.body.get("data-ready") == "1", "the page's script did not finish (a JavaScript error?)"
    assert summary.episode_section.get("data-episode") == data_episode
    assert len(summary.turn_rows) == expected_turns
    assert [r.get("data-turn") for r in summary.turn_rows] == [str(t) for t in range(expected_turns)]
    assert summary.frames == expected_turns  # the BabyAI frames
    names = {p.get("data-series"): int(p.get("data-points") or 0) for p in summary.chart_paths}
    assert names.get("V(s_t)") == expected_turns and names.get("advantage") == expected_turns
    assert "return" in names

    shot = tmp_path / "episode.png"
    result = run_chromium(binary, profile, url, "--window-size=1400,1000", f"--screenshot={shot}")
    assert result.returncode == 0 and shot.is_file(), result.stderr[-2000:]
    colours, ink = not_blank(shot)
    assert colours > 50 and ink > 0.05, f"the screenshot looks blank: {colours} colours, {ink:.1%} non-background"

    overview = run_chromium(binary, profile, page.resolve().as_uri(), "--dump-dom")
    assert 'id="episode-table"' in overview.stdout and 'class="episode"' in overview.stdout
    assert overview.stdout.count('class="chart-card"') >= 4  # learning curves

    # the list's filter and sort from the URL: training episodes only, longest first
    episodes = json.loads(re.search(r'type="application/json">(.*?)</script>', page.read_text(), re.S).group(1))
    train = [e for e in episodes["episodes"] if e["src"] == "train"]
    expected = [e["id"] for e in sorted(train, key=lambda e: e["n"], reverse=True)]
    listed = run_chromium(binary, profile, page.resolve().as_uri() + "#src=train&sort=-n", "--dump-dom")
    rows = re.findall(r'<tr class="episode" data-id="([^"]+)"', listed.stdout)
    assert rows == expected and len(rows) < len(episodes["episodes"])
    print(f"browser test: {time.perf_counter() - start:.1f} s, screenshot {shot} ({colours} colours)")
