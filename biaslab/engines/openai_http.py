"""The HTTP side of `--backend openai`: one JSON client with bounded concurrency, timeouts and retries, the
server's errors in one line, and token ids read from vLLM's "token_id:N" tokens.

Requests are retried with exponential backoff (`BACKOFF_S` * 2^attempt, at most `BACKOFF_CAP_S`, or the server's
Retry-After) on 429, 5xx and connection errors, `retries` times; a 4xx, or a 500 whose message says the request
itself is invalid (a validation error: retrying cannot help), is raised at once. A read timeout (the server
took the request and answered nothing within `timeout_s`) is retried at most `TIMEOUT_RETRIES` times: a hung server
ends the run within (TIMEOUT_RETRIES + 1) x timeout_s plus one backoff, 4 minutes with the defaults. A request
that still fails raises `ServerError` (one line: what was asked, what came back).
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .base import EngineError, Unsupported

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
BACKOFF_S = 0.5
BACKOFF_CAP_S = 30.0
#: a request the server accepted but never answered (a read timeout) is sent again at most this often, whatever
#: `retries` says: with the defaults (120 s) a hung server ends a run within 2 x 120 s + the backoff, not 6 x 120 s
TIMEOUT_RETRIES = 1
#: a 500 whose message says this is the request's fault, not the server's: not retried
INVALID_REQUEST = re.compile(r"validat|invalid|must be|expected|unsupported|not supported", re.IGNORECASE)
#: vLLM's token representation with return_tokens_as_token_ids
TOKEN_ID = re.compile(r"^token_id:(\d+)$")
#: the limit in a refusal of too many top log-probabilities ("... max allowed: 20")
MAX_ALLOWED = re.compile(r"max(?:imum)?(?: allowed)?[^0-9]{0,20}(\d+)", re.IGNORECASE)

class ServerError(EngineError):
    """A request that failed for good (after its retries), or a server answer this backend cannot use."""



class Client:
    """Bounded-concurrency JSON requests with timeouts and retries (see the module docstring).

    Parameters
    ----------
    base_url : str
        The server's base URL (".../v1").
    api_key : str | None
        Sent as `Authorization: Bearer`.
    max_concurrency, timeout_s, retries : see `ENGINE_ARGS`.
    sleep : callable
        `time.sleep`, replaceable in tests.
    """

    def __init__(self, base_url: str, api_key: str | None = None, *, max_concurrency: int = 8,
                 timeout_s: float = 120.0, retries: int = 5, sleep: Callable[[float], None] = time.sleep) -> None:
        import httpx

        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.base_url, self.retries, self.sleep, self.timeout_s = base_url, retries, sleep, timeout_s
        self.max_concurrency = max_concurrency
        self.http = httpx.Client(headers=headers, timeout=httpx.Timeout(timeout_s, connect=min(10.0, timeout_s)),
                                 limits=httpx.Limits(max_connections=max_concurrency))
        self.attempts = 0  # requests sent, retries included (tests, diagnostics)
        self._lock = threading.Lock()

    def url(self, path: str) -> str:
        """`path` under the base URL ("completions"), or under the server root when it starts with "/"."""
        if path.startswith("/"):
            root = self.base_url[:-3] if self.base_url.endswith("/v1") else self.base_url
            return root + path
        return f"{self.base_url}/{path}"

    def request(self, method: str, path: str, body: dict | None = None) -> Any:
        """One request, retried on 429 / 5xx / connection errors; returns the decoded JSON or raises
        `ServerError` (one line: what was asked, what came back)."""
        import httpx

        silent = 0
        for attempt in range(self.retries + 1):
            with self._lock:
                self.attempts += 1
            retry_after = None
            try:
                response = self.http.request(method, self.url(path), json=body)
            except httpx.TransportError as exc:  # connection refused / reset, timeouts
                problem = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else 'no detail'}"
                if isinstance(exc, httpx.ReadTimeout):
                    silent += 1
                    if silent > TIMEOUT_RETRIES:  # accepted the connection, answered nothing, twice: hung
                        raise ServerError(f"{method} {self.url(path)} failed after {attempt + 1} attempts ({problem}): "
                                          f"the server accepted the connection but sent no answer within "
                                          f"{self.timeout_s:g} s, {silent} times") from None
            else:
                if response.status_code < 400:
                    try:
                        return response.json()
                    except ValueError:
                        raise ServerError(f"{method} {self.url(path)}: the answer is not JSON") from None
                problem = f"HTTP {response.status_code}: {error_message(response)}"
                invalid = response.status_code == 500 and INVALID_REQUEST.search(problem)
                if invalid or (response.status_code not in RETRY_STATUSES and response.status_code < 500):
                    raise ServerError(f"{method} {self.url(path)} refused: {problem}")
                retry_after = _retry_after(response)
            if attempt == self.retries:
                raise ServerError(f"{method} {self.url(path)} failed after {self.retries + 1} attempts ({problem})")
            self.sleep(retry_after if retry_after is not None else min(BACKOFF_CAP_S, BACKOFF_S * 2 ** attempt))
        raise AssertionError("unreachable")

    def map(self, path: str, bodies: Sequence[dict]) -> list[Any]:
        """POST every body, `max_concurrency` at a time; answers in input order. The first failure cancels what
        has not started and is raised (nothing is returned)."""
        if len(bodies) <= 1:
            return [self.request("POST", path, b) for b in bodies]
        with ThreadPoolExecutor(max_workers=min(self.max_concurrency, len(bodies))) as pool:
            futures = [pool.submit(self.request, "POST", path, b) for b in bodies]
            try:
                return [f.result() for f in futures]
            except BaseException:
                for f in futures:
                    f.cancel()
                raise

    def close(self) -> None:
        self.http.close()


def error_message(response: Any) -> str:
    """The server's error text in one line (OpenAI's {"error": {"message": ...}}, vLLM's, or the raw body)."""
    try:
        data = response.json()
    except ValueError:
        text = response.text
    else:
        error = data.get("error", data) if isinstance(data, dict) else data
        text = error.get("message", json.dumps(error)) if isinstance(error, dict) else str(error)
    return " ".join(str(text).split())[:300] or "(empty body)"


def _retry_after(response: Any) -> float | None:
    value = response.headers.get("retry-after")
    try:
        return min(BACKOFF_CAP_S, max(0.0, float(value))) if value is not None else None
    except ValueError:
        return None


def token_id(token: str) -> int:
    """The id in vLLM's "token_id:N" token representation (`return_tokens_as_token_ids`)."""
    match = TOKEN_ID.match(token)
    if match is None:
        raise Unsupported(f"the server returned the token {token!r} as text, not as an id: --backend openai needs "
                          f"token ids for choice and sampling (vLLM's return_tokens_as_token_ids)")
    return int(match.group(1))
