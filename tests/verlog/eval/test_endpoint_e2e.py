"""``verlog eval --endpoint``: vLLM's own OpenAI-compatible server on 127.0.0.1 with the tiny model and an API key
(issue 36). The endpoint plays the local vLLM engine's episodes at temperature 0 (the local evaluation is
vllm_eval_run.py's, shared with test_eval_command.py); a wrong served model name and a wrong key are refused in one
line (exit 2); a server killed mid-run stops the evaluation (exit 1) and ``--resume`` finishes it against the
restarted server. One server for the module (restarted once, by the last test)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from vllm_eval_run import PROTOCOL  # beside this file

from verlog.cli import main
from verlog.eval.report import read_episode_records
from verlog.tapes.record import read_turn_logs

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

KEY = "sk-verlog-e2e-4f1c9a7d2b"
KEY_ENV = "VERLOG_E2E_ENDPOINT_KEY"
SERVED = "tiny-served"


class Server:
    """``python -m vllm.entrypoints.openai.api_server`` on a free port, in its own process group (vLLM spawns its
    engine core): :meth:`start`, :meth:`kill` (the whole group, as a crash would), :meth:`start` again."""

    def __init__(self, model: Path, log: Path) -> None:
        self.model, self.log = model, log
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(self.model)]
        command += ["--served-model-name", SERVED, "--api-key", KEY, "--host", "127.0.0.1", "--port", str(self.port)]
        command += ["--dtype", "float32", "--enforce-eager", "--max-model-len", "1536", "--seed", "0"]
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"}
        with self.log.open("a") as log:
            self.proc = subprocess.Popen(command, stdout=log, stderr=log, env=env, start_new_session=True)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"the server exited: {self.log.read_text()[-3000:]}"
            request = urllib.request.Request(f"{self.url}/models", headers={"Authorization": f"Bearer {KEY}"})
            try:
                with urllib.request.urlopen(request, timeout=5) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                time.sleep(0.5)
        pytest.fail(f"the server did not answer in 300 s: {self.log.read_text()[-3000:]}")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=60)


@pytest.fixture(scope="module")
def server(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    served = Server(tiny_model, tmp_path_factory.mktemp("endpoint") / "server.log")
    served.start()
    yield served
    served.kill()


def _verlog(*args: str, key: str | None = KEY, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != KEY_ENV}
    if key is not None:
        env[KEY_ENV] = key
    return subprocess.run(
        [sys.executable, "-m", "verlog", "eval", *args], capture_output=True, text=True, timeout=timeout, env=env
    )


def _endpoint(server: Server, out: Path, *extra: str) -> list[str]:
    return ["--endpoint", server.url, "--served-model", SERVED, "--api-key-env", KEY_ENV, "--out", str(out), *extra]


def _turns(out: Path) -> dict[tuple[str, int], list[tuple]]:
    """Each episode's turns as (response, action, valid, reward, prompt tokens, response tokens)."""
    episodes: dict[tuple[str, int], list[tuple]] = {}
    for t in sorted(read_turn_logs(out / "turns.jsonl"), key=lambda t: (t.episode_id, t.turn)):
        row = (t.response, t.action, t.action_valid, t.reward, t.prompt_tokens, t.response_tokens)
        episodes.setdefault((t.env_id, t.seed), []).append(row)
    return episodes


def test_endpoint_plays_the_local_engines_episodes(
    server: Server, tiny_model: Path, tmp_path: Path, vllm_eval_of_tiny_model
) -> None:
    """Temperature 0, the same seeds: the same responses, actions, returns and token counts as the local vLLM
    engine (vllm_eval_run.py's evaluation of the same weights), and the key in no file of the evaluation nor on its
    console."""
    served = tmp_path / "served"
    proc = _verlog(*_endpoint(server, served, "--tokenizer", str(tiny_model)), *PROTOCOL)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert f"model {SERVED} at {server.url}" in proc.stdout and "overall (BALROG" in proc.stdout
    local, ref = vllm_eval_of_tiny_model
    assert ref.returncode == 0, ref.stdout[-2000:] + ref.stderr[-3000:]

    def outcome(out: Path) -> dict:
        return {
            (r.env_id, r.seed): (r.episode_return, r.num_steps, r.success, r.valid_actions, r.action_frequency)
            for r in read_episode_records(out)
        }

    assert outcome(served) == outcome(local) and len(outcome(served)) == 4
    assert _turns(served) == _turns(local)
    assert sum(len(turns) for turns in _turns(served).values()) >= 4
    assert any(response for turns in _turns(served).values() for response, *_ in turns)
    summary = json.loads((served / "summary.json").read_text())
    model = summary["model"]
    assert model["engine"] == "endpoint" and model["served_model"] == SERVED and model["endpoint"] == server.url
    assert model["owned_by"] == "vllm" and model["api_key_env"] == KEY_ENV and model["api_key_sent"] is True
    assert model["server_completion_tokens"] == sum(r.output_tokens for r in read_episode_records(served))
    local_summary = json.loads((local / "summary.json").read_text())
    assert summary["environments"] == local_summary["environments"]
    files = [p for p in served.rglob("*") if p.is_file()]
    assert {p.name for p in files} >= {"summary.json", "settings.json", "episodes.jsonl", "turns.jsonl"}
    assert not [p for p in files if KEY in p.read_text(errors="replace")]
    assert KEY not in proc.stdout + proc.stderr


def test_wrong_model_and_wrong_key_are_refused_in_one_line(
    server: Server, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "eval"
    args = ["eval", "--endpoint", server.url, "--api-key-env", KEY_ENV, "--tasks", "babyai/goto", "--out", str(out)]
    monkeypatch.setenv(KEY_ENV, KEY)

    def refused(*extra: str) -> str:
        assert main([*args, *extra]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("verlog eval: error: ") and KEY not in err, err
        return err

    err = refused("--served-model", "tiny-serve")
    assert f"--served-model 'tiny-serve' is not served at {server.url}: it serves {SERVED}; pass one of" in err
    monkeypatch.setenv(KEY_ENV, "sk-wrong")
    err = refused("--served-model", SERVED)
    assert f"refused the API key in ${KEY_ENV} (HTTP 401" in err and f"set {KEY_ENV} to a key it accepts" in err
    monkeypatch.delenv(KEY_ENV)
    err = refused("--served-model", SERVED)
    assert f"wants an API key (HTTP 401) and ${KEY_ENV} is not set: export {KEY_ENV}=<key>" in err
    assert not out.exists()


def test_a_server_lost_mid_run_stops_and_resume_finishes(server: Server, tmp_path: Path) -> None:
    """The server is killed after the first episode (requests spaced by --requests-per-minute so that the run is
    still going): exit 1, one error line with the resume hint, no summary; restarted, --resume plays the rest."""
    out = tmp_path / "eval"
    protocol = ["--tasks", "babyai/goto", "--episodes", "4", "--seed-start", "7", "--max-steps", "5"]
    protocol += ["--max-tokens", "8", "--concurrency", "1", "--bootstrap-resamples", "100", "--retries", "1"]
    command = [sys.executable, "-m", "verlog", "eval", *_endpoint(server, out), *protocol]
    env = {**os.environ, KEY_ENV: KEY}
    proc = subprocess.Popen([*command, "--requests-per-minute", "150"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    episodes = out / "episodes.jsonl"
    deadline = time.monotonic() + 120
    while not (episodes.exists() and episodes.read_text().strip()) and time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.1)
    server.kill()
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 1, stdout[-2000:] + stderr[-3000:]
    errors = [line for line in stderr.splitlines() if line.startswith("verlog eval: error: ")]
    assert len(errors) == 1 and stderr.rstrip().endswith(errors[0]), stderr
    assert f"the endpoint {server.url} stopped answering for {SERVED} after 1 retries" in errors[0]
    assert "finished episode(s) are kept in" in errors[0] and "run the same command with --resume" in errors[0]
    assert not (out / "summary.json").exists()
    kept = len(read_episode_records(out))
    assert 1 <= kept < 4
    server.start()
    resumed = subprocess.run([*command, "--resume"], env=env, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["episodes"] == 4 and summary["episodes_resumed"] == kept
    assert sorted(r.seed for r in read_episode_records(out)) == [7, 8, 9, 10]
