"""The curriculum recipe's report (verlog.reports.curriculum, `verlog report curriculum`) on a small synthetic
run folder in the layout verlog train writes (metrics.jsonl with curriculum/ and family/ metrics,
eval/episodes.jsonl)."""

from __future__ import annotations

import json
from pathlib import Path

from verlog.cli import main as verlog_main
from verlog.reports import curriculum

REPO = Path(__file__).resolve().parents[3]


def _write(path: Path, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def _run(folder: Path, draws: dict[str, int], success_after: dict[str, float]) -> None:
    records = []
    for step in range(1, 6):
        r = {"step": step, "training/global_step": step}
        for f, n in draws.items():
            r[f"curriculum/{f}/prob"] = n / sum(draws.values())
            r[f"curriculum/{f}/q"] = n / 100
            r[f"curriculum/{f}/draws"] = float(n * step)
            r[f"family/{f}/episodes"] = float(n)
        records.append(r)
    _write(folder / "metrics.jsonl", records)
    episodes = []
    for iteration, success in ((0, {f: 0.0 for f in draws}), (5, success_after)):
        for f, p in success.items():
            for i in range(4):
                ok = i < round(4 * p)
                episodes.append({"iteration": iteration, "family": f, "success": ok, "episode_return": float(ok)})
    _write(folder / "eval" / "episodes.jsonl", episodes)


def test_report_shows_the_shift_and_the_success_per_family(tmp_path):
    _run(tmp_path / "uniform", {"a": 10, "b": 10}, {"a": 0.5, "b": 0.5})
    _run(tmp_path / "sec", {"a": 30, "b": 10}, {"a": 1.0, "b": 0.25})
    (tmp_path / "settings.env").write_text("SMOKE=0\n")
    text = curriculum.render(tmp_path)
    sec = text[text.index("## sec") :]
    assert "| a | 75% | 75% | 0.75 | 0.300 | 150 |" in sec  # shares of ended episodes, P, Q, draws
    assert "| b | 4 | 0.00 [0.00, 0.00] | 0.25 [0.00, 0.75] |" in sec  # success before/after, bootstrap CI
    uniform = text[text.index("## uniform") : text.index("## sec")]
    assert "| a | 50% | 50% | 0.50 | 0.100 | 50 |" in uniform
    assert "SMOKE" not in text


def test_missing_runs_and_folders_are_reported(tmp_path, capsys):
    assert "Not run yet." in curriculum.render(tmp_path)
    assert verlog_main(["report", "curriculum", str(tmp_path / "nope"), "--out", str(tmp_path / "c.md")]) == 2
    assert "does not exist" in capsys.readouterr().err
