"""The model an evaluation talks to, served elsewhere: any OpenAI-compatible chat-completions server.

``verlog eval --endpoint URL --served-model NAME`` plays BALROG's protocol against vLLM's own server (``vllm serve``)
or a hosted API, with the local engines' protocol, seeds, prompts, parsing and statistics: the runner sees an
:class:`EndpointModel` as it sees :class:`verlog.eval.engine.LoadedModel` (its :meth:`EndpointModel.policy` answers a
batch of turns). Each turn's chat messages (the instruction, past turns, the current observation) go to
``POST {URL}/chat/completions``, where the server applies the model's chat template, as the local engine does with
the tokenizer's.

- **Checked before the evaluation** (:func:`connect`): ``GET {URL}/models`` answers, lists the served model, and one
  one-token chat completion is accepted (the key, the request's fields); each refusal is an :class:`EndpointError`
  (one line, exit 2).
- **During it**: requests run in threads (one per open episode), each with a timeout; connection errors, timeouts,
  429 and 5xx answers are retried with exponential backoff and jitter, at least as long as the server's
  ``Retry-After`` says; ``requests_per_minute`` spaces the requests out. A request still failing after its retries
  stops the evaluation with :class:`EndpointDownError` (exit 1; the finished episodes are kept for ``--resume``).
- **The key** is read from an environment variable and sent as ``Authorization: Bearer``; it is never logged, never
  written, and blanked out of any server text an error shows.
- **vLLM's server** (its model list says ``owned_by: vllm``) is asked for the response's token ids and log-probs
  (``logprobs``, ``return_tokens_as_token_ids``) and for the local engine's sampling defaults (top-k off, no
  repetition penalty) over the model's ``generation_config``; with the model's tokenizer (``--tokenizer``) the
  prompts are counted and cut to the budget and the answers decoded exactly as the local engine does.
"""

from __future__ import annotations

import email.utils
import json
import os
import random
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verlog.errors import RunFault, VerlogError
from verlog.prompting.sampling import SamplingConfig
from verlog.rollout.stepper import Answer, PolicyInput, request_seed

ENGINE = "endpoint"
"""The ``engine`` an endpoint evaluation records (summary.json, settings.json)."""
DEFAULT_KEY_ENV = "OPENAI_API_KEY"
"""Environment variable holding the API key unless ``--api-key-env`` names another."""
RETRY_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
"""HTTP answers worth retrying (overload, rate limit, a restarting server); other 4xx are the request's fault."""
FAULT_STATUS = frozenset({401, 403, 404})
"""HTTP answers during the run that no retry mends (the key revoked, the model gone): the evaluation stops."""
BACKOFF_BASE_S = 1.0
"""First retry waits about this long; each further one twice as long (with jitter), up to :data:`BACKOFF_CAP_S`."""
BACKOFF_CAP_S = 60.0
PREFLIGHT_TIMEOUT_S = 30.0
"""Longest wait for the model list before the evaluation (a server that does not answer in that time is refused)."""
MODELS_SHOWN = 20
"""Names of served models listed when ``--served-model`` is not among them (hosted APIs serve hundreds)."""


def retryable(status: int) -> bool:
    """Whether an HTTP status is worth another try (:data:`RETRY_STATUS`, any 5xx)."""
    return status in RETRY_STATUS or status >= 500


class EndpointError(VerlogError, ValueError):
    """The endpoint cannot serve this evaluation as given (no answer, another model, the key refused): the message
    names the fix; found before the first episode."""


class EndpointDownError(RunFault):
    """The endpoint stopped answering during the evaluation (after every retry), or refused it (key, model)."""


class HttpStatusError(Exception):
    """An HTTP answer other than 2xx: ``status``, the server's text (key blanked) and its ``Retry-After`` in s."""

    def __init__(self, status: int, text: str, retry_after: float | None) -> None:
        super().__init__(f"HTTP {status}: {text}")
        self.status, self.text, self.retry_after = status, text, retry_after


# ------------------------------------------------------------------------------------------------ URLs and waits
def base_url(url: str) -> str:
    """The API's base URL (what ``/models`` and ``/chat/completions`` are appended to): a bare ``host:port`` gains
    ``/v1``; a trailing ``/chat/completions`` or ``/`` is dropped. Raises EndpointError for a scheme other than
    http(s)."""
    parts = urllib.parse.urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise EndpointError(
            f"--endpoint {shown_url(url)!r} is not an http(s) URL: give the server's base URL, e.g. "
            "http://127.0.0.1:8000/v1 (vllm serve) or https://api.openai.com/v1"
        )
    path = parts.path.rstrip("/")
    for tail in ("/chat/completions", "/completions", "/models"):
        if path.endswith(tail):
            path = path[: -len(tail)]
    if not path:
        path = "/v1"
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def shown_url(url: str) -> str:
    """``url`` as logs and summaries show it: without user, password, query or fragment (where keys hide)."""
    parts = urllib.parse.urlsplit(url.strip())
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    if parts.port is not None:
        netloc += f":{parts.port}"
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds a ``Retry-After`` header asks to wait (a number of seconds or an HTTP date), or None."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when - (time.time() if now is None else now))


def retry_delay(attempt: int, retry_after: float | None = None, rng: random.Random | None = None) -> float:
    """Seconds before retry ``attempt`` (0 = the first): ``min(cap, base * 2**attempt)`` times a jitter in [0.5, 1]
    (requests that failed together do not come back together), and never less than ``retry_after``."""
    draw = (rng or random).uniform(0.5, 1.0)
    wait = min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2**attempt) * draw
    return max(wait, retry_after or 0.0)


class RateLimiter:
    """Spaces request starts at least ``60 / requests_per_minute`` seconds apart across threads (None: no limit)."""

    def __init__(self, requests_per_minute: float | None) -> None:
        self.interval = 60.0 / requests_per_minute if requests_per_minute else 0.0
        self._next = 0.0
        self._lock = threading.Lock()

    def wait(self) -> None:
        if not self.interval:
            return
        with self._lock:
            now = time.monotonic()
            start = max(now, self._next)
            self._next = start + self.interval
        if start > now:
            time.sleep(start - now)


# ------------------------------------------------------------------------------------------------ the client
@dataclass
class Usage:
    """What the server counted (``usage`` of its answers) and what the client did, for the summary."""

    requests: int = 0
    retries: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


class EndpointClient:
    """JSON over HTTP to an OpenAI-compatible API, with timeouts, retries and a rate limit (thread-safe).

    Args:
        url: the base URL (:func:`base_url`).
        api_key: sent as ``Authorization: Bearer``; None sends no such header.
        timeout: seconds one request may take.
        retries: further tries of a request after a connection error, a timeout, 429 or 5xx.
        requests_per_minute: the rate limit (None: none).
        on_retry: called with a one-line note before each retry's wait.
    """

    def __init__(
        self,
        url: str,
        api_key: str | None,
        *,
        timeout: float = 120.0,
        retries: int = 6,
        requests_per_minute: float | None = None,
        on_retry: Callable[[str], None] | None = None,
    ) -> None:
        self.url = base_url(url)
        self._key = api_key or None
        self.timeout = timeout
        self.retries = retries
        self.limiter = RateLimiter(requests_per_minute)
        self.on_retry = on_retry
        self.usage = Usage()
        self._lock = threading.Lock()

    def blank(self, text: str) -> str:
        """``text`` with the key replaced by ``***`` (a server may quote what it was sent)."""
        return text.replace(self._key, "***") if self._key else text

    def once(self, method: str, path: str, body: dict[str, Any] | None = None, timeout: float | None = None) -> Any:
        """One request, no retry: the parsed JSON answer. Raises HttpStatusError, OSError (no connection, timeout)
        or ValueError (not JSON)."""
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode("utf-8")
            headers["Content-Type"] = "application/json"
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        request = urllib.request.Request(self.url + path, data=data, headers=headers, method=method)
        self.limiter.wait()
        with self._lock:
            self.usage.requests += 1
        try:
            with urllib.request.urlopen(request, timeout=timeout or self.timeout) as answer:
                raw = answer.read()
        except urllib.error.HTTPError as exc:
            text = exc.read().decode("utf-8", "replace") if exc.fp is not None else ""
            raise HttpStatusError(
                exc.code, self.blank(_server_message(text)), parse_retry_after(exc.headers.get("Retry-After"))
            ) from None
        return json.loads(raw.decode("utf-8"))

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """:meth:`once` with retries (connection errors, timeouts, 429, 5xx); the last error once they are spent."""
        rng = random.Random()
        for attempt in range(self.retries + 1):
            try:
                return self.once(method, path, body)
            except HttpStatusError as exc:
                if not retryable(exc.status) or attempt == self.retries:
                    raise
                wait, why = retry_delay(attempt, exc.retry_after, rng), f"HTTP {exc.status}"
            except (OSError, ValueError) as exc:  # refused, reset, timed out; a cut-off answer that is not JSON
                if attempt == self.retries:
                    raise
                wait, why = retry_delay(attempt, None, rng), _reason(exc)
            with self._lock:
                self.usage.retries += 1
            if self.on_retry is not None:
                self.on_retry(f"{path} failed ({why}); retry {attempt + 1}/{self.retries} in {wait:.1f} s")
            time.sleep(wait)
        raise AssertionError("unreachable")  # pragma: no cover

    def count(self, answer: dict[str, Any]) -> None:
        """Add an answer's ``usage`` to :attr:`usage`."""
        usage = answer.get("usage") or {}
        with self._lock:
            self.usage.prompt_tokens += int(usage.get("prompt_tokens") or 0)
            self.usage.completion_tokens += int(usage.get("completion_tokens") or 0)


def _server_message(text: str) -> str:
    """The ``error.message`` of an OpenAI-style error body, else the body's first 300 characters, on one line."""
    try:
        data = json.loads(text)
        error = data.get("error", data) if isinstance(data, dict) else data
        message = error.get("message", error) if isinstance(error, dict) else error
        text = message if isinstance(message, str) else json.dumps(message)
    except (ValueError, AttributeError):
        pass
    return " ".join(text.split())[:300]


def _reason(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None) or exc
    return f"{type(reason).__name__}: {reason}" if str(reason) else type(reason).__name__


# ------------------------------------------------------------------------------------------------ requests
@dataclass(frozen=True)
class RequestShape:
    """What every chat completion of an evaluation carries besides its messages."""

    served_model: str
    vllm: bool
    sampling_seed: int
    max_tokens_field: str = "max_tokens"

    def body(self, messages: list[dict[str, str]], sampling: SamplingConfig, seed: int) -> dict[str, Any]:
        """The request body: the sampling settings, and on vLLM the token ids, log-probs and local defaults."""
        body: dict[str, Any] = {
            "model": self.served_model,
            "messages": messages,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            self.max_tokens_field: sampling.max_tokens,
            "n": 1,
            "seed": seed,
        }
        if self.vllm:
            body.update(
                logprobs=True,
                top_logprobs=0,
                return_tokens_as_token_ids=True,
                top_k=max(sampling.top_k, 0),
                min_p=0.0,
                repetition_penalty=1.0,
                presence_penalty=0.0,
                frequency_penalty=0.0,
            )
        return body

    def seed_of(self, episode_id: str, turn: int) -> int:
        """The request's sampling seed: a hash of ``--sampling-seed``, the episode and the turn (a re-run or a
        resumed evaluation asks for the same samples)."""
        return request_seed(self.sampling_seed, episode_id, turn)


def read_answer(answer: dict[str, Any], tokenizer: Any) -> Answer:
    """An :class:`Answer` from a chat completion: its text, and the token ids and log-probs vLLM sends (kept only
    with a tokenizer, which decodes them as the local engine does; else the server's text, no token ids)."""
    choices = answer.get("choices") or []
    if not choices or not isinstance(choices[0], dict):
        return Answer("", [], None, failed=True, error="the answer has no choices")
    choice = choices[0]
    text = (choice.get("message") or {}).get("content") or ""
    content = (choice.get("logprobs") or {}).get("content") or []
    ids = [_token_id(step.get("token", "")) for step in content]
    if tokenizer is None or not ids or any(i is None for i in ids):
        return Answer(text, [], None)
    token_ids = [int(i) for i in ids if i is not None]
    log_probs = [max(float(step.get("logprob", 0.0)), -1e4) for step in content]
    return Answer(tokenizer.decode(token_ids, skip_special_tokens=True), token_ids, log_probs)


def _token_id(token: str) -> int | None:
    """``"token_id:42"`` (vLLM's ``return_tokens_as_token_ids``) -> 42; anything else -> None."""
    head, _, tail = str(token).partition(":")
    return int(tail) if head == "token_id" and tail.lstrip("-").isdigit() else None


# ------------------------------------------------------------------------------------------------ the policy
class EndpointPolicy:
    """A :class:`~verlog.rollout.stepper.Policy`: each turn's messages to the endpoint, the turns of a batch in
    parallel threads. A request the server refused (400, 422...) is sent again up to ``retries`` times, then becomes
    a failed answer (empty text: the env's default action, counted in ``generation_failures``), as a failed local
    generation does; a server that stays unreachable, or refuses the key or the model, raises EndpointDownError."""

    def __init__(self, model: EndpointModel, sampling: SamplingConfig, retries: int = 1) -> None:
        self.model = model
        self.sampling = sampling.check()
        self.retries = retries

    def act(self, inputs: Sequence[PolicyInput]) -> list[Answer]:
        if not inputs:
            return []
        with ThreadPoolExecutor(max_workers=len(inputs), thread_name_prefix="endpoint") as pool:
            return list(pool.map(self._answer, inputs))

    def _answer(self, turn: PolicyInput) -> Answer:
        shape, client = self.model.shape, self.model.client
        body = shape.body(turn.prompt.messages, self.sampling, shape.seed_of(turn.episode_id, turn.turn))
        error = ""
        for _ in range(self.retries + 1):
            try:
                answer = client.call("POST", "/chat/completions", body)
            except HttpStatusError as exc:
                if exc.status in FAULT_STATUS or retryable(exc.status):
                    raise self.model.down(f"HTTP {exc.status}: {exc.text}") from None
                error = f"HTTP {exc.status}: {exc.text}"
                continue
            except (OSError, ValueError) as exc:
                raise self.model.down(_reason(exc)) from None
            client.count(answer)
            got = read_answer(answer, self.model.tokenizer)
            if not got.failed:
                return got
            error = got.error or "no answer"
        eos = getattr(self.model.tokenizer, "eos_token_id", None)
        return Answer("", [] if eos is None else [int(eos)], None, failed=True, error=error)


# ------------------------------------------------------------------------------------------------ the model
@dataclass
class EndpointModel:
    """A served model, checked by :func:`connect`; what the runner needs of a model (``tokenizer``,
    ``model_path``, ``engine``, :meth:`policy`, :meth:`describe`, :meth:`close`)."""

    client: EndpointClient
    shape: RequestShape
    tokenizer: Any = None
    tokenizer_path: Path | None = None
    key_env: str = DEFAULT_KEY_ENV
    key_sent: bool = False
    owned_by: str | None = None
    engine: str = ENGINE

    @property
    def model_path(self) -> str:
        """The served model's name: what an endpoint evaluation is of (``--resume`` compares it)."""
        return self.shape.served_model

    def policy(self, sampling: SamplingConfig, retries: int = 1) -> EndpointPolicy:
        return EndpointPolicy(self, sampling, retries)

    def down(self, why: str) -> EndpointDownError:
        return EndpointDownError(
            f"the endpoint {shown_url(self.client.url)} stopped answering for {self.shape.served_model} after "
            f"{self.client.retries} retries ({self.client.blank(why)})"
        )

    def describe(self) -> dict[str, Any]:
        """The summary's ``model`` block: the served model, where it was served, what the server counted; never the
        key (only the name of its environment variable, and whether one was sent)."""
        usage = self.client.usage
        return {
            "path": self.shape.served_model,
            "engine": ENGINE,
            "served_model": self.shape.served_model,
            "endpoint": shown_url(self.client.url),
            "owned_by": self.owned_by,
            "tokenizer": None if self.tokenizer_path is None else str(self.tokenizer_path),
            "api_key_env": self.key_env,
            "api_key_sent": self.key_sent,
            "requests": usage.requests,
            "retries": usage.retries,
            "server_prompt_tokens": usage.prompt_tokens,
            "server_completion_tokens": usage.completion_tokens,
        }

    def close(self) -> None:
        """Nothing to stop: the server is not ours."""


def connect(
    url: str,
    served_model: str,
    *,
    key_env: str = DEFAULT_KEY_ENV,
    tokenizer: Any = None,
    tokenizer_path: Path | None = None,
    timeout: float = 120.0,
    retries: int = 6,
    requests_per_minute: float | None = None,
    sampling_seed: int = 0,
    on_retry: Callable[[str], None] | None = None,
) -> EndpointModel:
    """Check the endpoint and return the model to evaluate: the model list answers and holds ``served_model``, and a
    one-token chat completion with the evaluation's request fields is accepted.

    Raises:
        EndpointError: no answer, not an OpenAI-compatible API, another model, the key refused, the request refused.
    """
    key = os.environ.get(key_env) or None
    client = EndpointClient(
        url, key, timeout=timeout, retries=retries, requests_per_minute=requests_per_minute, on_retry=on_retry
    )
    where = shown_url(client.url)
    models = _served_models(client, where, key_env, key is not None)
    if served_model not in models:
        names = sorted(models)
        listed = ", ".join(names[:MODELS_SHOWN]) + (
            f" ... ({len(names) - MODELS_SHOWN} more)" if len(names) > MODELS_SHOWN else ""
        )
        raise EndpointError(
            f"--served-model {served_model!r} is not served at {where}: it serves {listed or 'no model'}; pass one of "
            "those names as --served-model"
        )
    owned_by = models[served_model]
    shape = RequestShape(served_model, vllm=owned_by == "vllm", sampling_seed=sampling_seed)
    shape = _probe(client, shape, where, key_env, key is not None)
    return EndpointModel(client, shape, tokenizer, tokenizer_path, key_env, key is not None, owned_by)


def _served_models(client: EndpointClient, where: str, key_env: str, key_sent: bool) -> dict[str, str | None]:
    """``GET /models``: served name -> ``owned_by``; or EndpointError."""
    try:
        answer = client.once("GET", "/models", timeout=min(client.timeout, PREFLIGHT_TIMEOUT_S))
    except HttpStatusError as exc:
        if exc.status in (401, 403):
            raise EndpointError(_key_refused(where, key_env, key_sent, exc)) from None
        raise EndpointError(
            f"--endpoint {where}: GET {where}/models answered HTTP {exc.status} ({exc.text}): give the base URL of an "
            "OpenAI-compatible API, the part before /chat/completions (e.g. http://127.0.0.1:8000/v1)"
        ) from None
    except OSError as exc:
        raise EndpointError(
            f"--endpoint {where} does not answer ({_reason(exc)}): start the server (e.g. vllm serve MODEL --port "
            "8000) or correct the URL"
        ) from None
    except ValueError:
        answer = None
    data = answer.get("data") if isinstance(answer, dict) else None
    if not isinstance(data, list):
        raise EndpointError(
            f"--endpoint {where}: GET {where}/models gave no model list: give the base URL of an OpenAI-compatible "
            "API, the part before /chat/completions (e.g. http://127.0.0.1:8000/v1)"
        )
    return {str(m["id"]): m.get("owned_by") for m in data if isinstance(m, dict) and "id" in m}


def _probe(client: EndpointClient, shape: RequestShape, where: str, key_env: str, key_sent: bool) -> RequestShape:
    """One chat completion of one token, shaped as the evaluation's; a server that wants ``max_completion_tokens``
    instead of ``max_tokens`` (OpenAI's newer models) gets it. Returns the shape that was accepted."""
    messages = [{"role": "user", "content": "Answer with one word: ready?"}]
    for _ in range(2):
        try:
            client.call("POST", "/chat/completions", shape.body(messages, SamplingConfig(max_tokens=1), 0))
            return shape
        except HttpStatusError as exc:
            if exc.status in (401, 403):
                raise EndpointError(_key_refused(where, key_env, key_sent, exc)) from None
            if "max_completion_tokens" in exc.text and shape.max_tokens_field == "max_tokens":
                shape = RequestShape(shape.served_model, shape.vllm, shape.sampling_seed, "max_completion_tokens")
                continue
            raise EndpointError(
                f"--endpoint {where} refused a one-token chat completion for {shape.served_model} (HTTP "
                f"{exc.status}: {exc.text}): fix what the server names (a model served without a chat template: "
                "vllm serve --chat-template FILE)"
            ) from None
        except (OSError, ValueError) as exc:
            raise EndpointError(
                f"--endpoint {where} did not complete a chat request for {shape.served_model} ({_reason(exc)}): "
                "check that the server finished starting, or raise --request-timeout"
            ) from None
    raise EndpointError(f"--endpoint {where} refused max_tokens and max_completion_tokens alike")


def _key_refused(where: str, key_env: str, key_sent: bool, exc: HttpStatusError) -> str:
    if not key_sent:
        return (
            f"--endpoint {where} wants an API key (HTTP {exc.status}) and ${key_env} is not set: export {key_env}=<key>"
            " (or name the variable that holds it with --api-key-env NAME)"
        )
    return (
        f"--endpoint {where} refused the API key in ${key_env} (HTTP {exc.status}: {exc.text}): set {key_env} to a "
        "key it accepts (or name another variable with --api-key-env NAME)"
    )
