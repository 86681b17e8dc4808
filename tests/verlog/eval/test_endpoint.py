"""The endpoint client without vLLM (issue 36): URLs, backoff, Retry-After, the rate limit, and the checks before an
evaluation against a small scripted HTTP server on 127.0.0.1 (vLLM's own server is in test_endpoint_e2e.py; it
never answers 429 or 503, which the retries are for)."""

from __future__ import annotations

import json
import random
import socket
import threading
import time
from collections.abc import Iterator
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from verlog.cli import main
from verlog.eval.endpoint import (
    BACKOFF_CAP_S,
    EndpointClient,
    EndpointError,
    HttpStatusError,
    RateLimiter,
    base_url,
    connect,
    parse_retry_after,
    retry_delay,
    shown_url,
)


class Scripted(BaseHTTPRequestHandler):
    """Answers from ``server.script``: a list of (status, headers, body) popped per request (then 200 + a chat
    completion); ``/v1/models`` lists ``server.models``; records each request's headers in ``server.seen``."""

    def log_message(self, *args) -> None:  # keep the test output clean
        pass

    def _answer(self) -> None:
        server = self.server
        server.seen.append((self.command, self.path, dict(self.headers)))  # type: ignore[attr-defined]
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        if server.script:  # type: ignore[attr-defined]
            status, headers, payload = server.script.pop(0)  # type: ignore[attr-defined]
        elif self.path.endswith("/models"):
            status, headers = 200, {}
            payload = {"object": "list", "data": [{"id": m, "owned_by": "acme"} for m in server.models]}  # type: ignore[attr-defined]
        else:
            status, headers = 200, {}
            payload = {"choices": [{"message": {"content": f"ACTION: go forward ({body['model']})"}}], "usage": {}}
        raw = json.dumps(payload).encode()
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    do_GET = do_POST = _answer


@pytest.fixture
def scripted() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Scripted)
    server.script, server.seen, server.models = [], [], ["m-1", "m-2"]  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _url(server: ThreadingHTTPServer) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}/v1"


def test_urls_are_normalised_and_shown_without_credentials() -> None:
    assert base_url("http://127.0.0.1:8000") == "http://127.0.0.1:8000/v1"
    assert base_url("http://h:8000/v1/") == "http://h:8000/v1"
    assert base_url("https://api.example.com/api/v1/chat/completions") == "https://api.example.com/api/v1"
    assert shown_url("https://user:sk-secret@h:8443/v1?api-key=sk-secret#x") == "https://h:8443/v1"
    with pytest.raises(EndpointError, match="is not an http"):
        base_url("127.0.0.1:8000")


def test_backoff_doubles_with_jitter_and_honours_retry_after() -> None:
    rng = random.Random(0)
    for attempt in range(10):
        full = min(BACKOFF_CAP_S, 2.0**attempt)
        waits = [retry_delay(attempt, None, rng) for _ in range(200)]
        assert full * 0.5 <= min(waits) and max(waits) <= full and max(waits) - min(waits) > full * 0.3
    assert retry_delay(0, 7.5, rng) == 7.5
    assert parse_retry_after("3") == 3.0 and parse_retry_after("soon") is None and parse_retry_after(None) is None
    now = time.time()
    assert 9.0 <= parse_retry_after(formatdate(now + 10, usegmt=True), now) <= 10.0  # type: ignore[operator]


def test_the_client_retries_503_and_429_after_retry_after(scripted: ThreadingHTTPServer) -> None:
    notes: list[str] = []
    scripted.script += [(429, {"Retry-After": "1"}, {"error": "slow"}), (503, {}, {"error": {"message": "busy"}})]
    client = EndpointClient(_url(scripted), "sk-abc", retries=2, on_retry=notes.append)
    start = time.monotonic()
    answer = client.call("POST", "/chat/completions", {"model": "m-1", "messages": []})
    assert time.monotonic() - start >= 1.0 + 1.0  # Retry-After 1 s (over a backoff of 0.5-1 s), then 1-2 s
    assert answer["choices"][0]["message"]["content"] == "ACTION: go forward (m-1)"
    assert client.usage.requests == 3 and client.usage.retries == 2
    assert notes[0] == "/chat/completions failed (HTTP 429); retry 1/2 in 1.0 s"
    assert notes[1].startswith("/chat/completions failed (HTTP 503); retry 2/2 in ")
    assert all(headers["Authorization"] == "Bearer sk-abc" for *_, headers in scripted.seen)  # type: ignore[attr-defined]
    scripted.script += [(400, {}, {"error": {"message": "bad field, key sk-abc"}})]  # type: ignore[attr-defined]
    with pytest.raises(HttpStatusError) as refused:  # not retried
        client.call("POST", "/chat/completions", {"model": "m-1", "messages": []})
    assert refused.value.status == 400 and refused.value.text == "bad field, key ***" and client.usage.requests == 4


def test_the_rate_limit_spaces_requests_across_threads() -> None:
    limiter = RateLimiter(requests_per_minute=600)  # 0.1 s apart
    start = time.monotonic()
    threads = [threading.Thread(target=limiter.wait) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert 0.5 <= time.monotonic() - start < 2.0
    assert RateLimiter(None).interval == 0.0


def test_connect_refuses_what_cannot_serve_the_evaluation(scripted: ThreadingHTTPServer, monkeypatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    url = _url(scripted)
    model = connect(url, "m-2")
    assert model.owned_by == "acme" and not model.shape.vllm and model.describe()["api_key_sent"] is False
    assert "Authorization" not in scripted.seen[-1][2]  # type: ignore[attr-defined]
    with pytest.raises(EndpointError, match=r"--served-model 'm-3' is not served at .*: it serves m-1, m-2; pass"):
        connect(url, "m-3")
    scripted.script.append((401, {}, {"error": {"message": "no key"}}))  # type: ignore[attr-defined]
    with pytest.raises(EndpointError, match=r"wants an API key \(HTTP 401\) and \$OPENAI_API_KEY is not set"):
        connect(url, "m-1")
    scripted.script.append((404, {}, "Not Found"))  # type: ignore[attr-defined]
    with pytest.raises(EndpointError, match=r"answered HTTP 404 \(Not Found\): give the base URL"):
        connect(url, "m-1")
    message = "Unsupported parameter: 'max_tokens'. Use 'max_completion_tokens' instead."
    scripted.script += [(200, {}, {"data": [{"id": "m-1"}]}), (400, {}, {"error": {"message": message}})]  # type: ignore[attr-defined]
    assert connect(url, "m-1").shape.max_tokens_field == "max_completion_tokens"


def test_an_endpoint_that_does_not_answer_is_one_line(tmp_path: Path, capsys) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    out = tmp_path / "eval"
    args = ["eval", "--endpoint", f"http://127.0.0.1:{port}", "--served-model", "m", "--tasks", "babyai/goto"]
    assert main([*args, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--endpoint http://127.0.0.1:{port}/v1 does not answer (" in err
    assert "start the server (e.g. vllm serve MODEL --port 8000) or correct the URL" in err and not out.exists()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ([], "--endpoint needs --served-model NAME"),
        (["--served-model", "m", "--model", "x"], "--model does not go with --endpoint: the server runs the model"),
        (["--served-model", "m", "--engine", "vllm"], "--engine does not go with --endpoint"),
        (["--served-model", "m", "--max-prompt-tokens", "99"], "--max-prompt-tokens with --endpoint needs --tokenizer"),
        (["--served-model", "m", "--tokenizer", "nowhere"], "--tokenizer 'nowhere' holds no tokenizer"),
    ],
    ids=["no-served-model", "model", "engine", "budget", "tokenizer"],
)
def test_endpoint_options_that_do_not_fit_are_refused(extra, message, tmp_path: Path, capsys) -> None:
    out = tmp_path / "eval"
    assert main(["eval", "--endpoint", "http://127.0.0.1:9", "--tasks", "babyai/goto", "--out", str(out), *extra]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and not out.exists()


def test_neither_model_nor_endpoint_is_refused(tmp_path: Path, capsys) -> None:
    assert main(["eval", "--tasks", "babyai/goto", "--out", str(tmp_path / "o")]) == 2
    assert "give the model to evaluate: --model PATH (a local folder or run) or --endpoint" in capsys.readouterr().err
    assert main(["eval", "--model", "m", "--served-model", "x", "--tasks", "babyai/goto", "--out", str(tmp_path)]) == 2
    assert "--served-model goes with --endpoint URL" in capsys.readouterr().err
