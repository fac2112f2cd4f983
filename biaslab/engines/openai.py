"""The OpenAI-compatible server backend (`--backend openai --base-url URL [--api-key-env VAR]`).

Any server with the `/v1/completions` endpoint (vLLM, SGLang, llama.cpp server, TGI) is a `Backend` through
plain HTTP (httpx; no `openai` package). Prompts are sent as token-id lists (the completions API takes a list of
ints), built with the tokenizer of `--model` loaded locally (the folder or alias of the served model), so the ids
the server scores are the ids stored; nothing is re-tokenized.

- `score` (prob): `echo=true, logprobs=1, max_tokens=1`: the server returns the log-probability of every prompt
  token given the tokens before it (`token_logprobs`, the first one null); the generated token is dropped.
- `top_k` (choice exact): one new token with `logprobs=K` (greedy, so the sampled token is the top one); the K
  log-probabilities are normalized, so `TopK.logits` = z - logsumexp(z) and `TopK.logsumexp` = 0 (DESIGN.md
  section 10). K is what the server returns: `prepare` probes it (a request asking for `PROBE_K`, read from the
  returned count or the refusal's "max allowed: N"), and a K above it is refused in one line that says the
  server's K. `expander`: the `StatelessExpander` (each trie level re-submits prompt + path; a server with prefix
  caching makes the repeated prompt cheap).
- `sample` (choice sample, gen): one request per sample with its `seed`, temperature, top_k, top_p, min_tokens,
  min_p 0 and neutral penalties set explicitly, `logprobs=1`, the stop ids as `stop_token_ids`. The
  log-probabilities stored are what the server returns: vLLM's default `--logprobs-mode raw_logprobs` gives the
  model's own temperature-1 values (DESIGN.md section 4); another mode or server may not.
- Token ids of returned tokens come from vLLM's `return_tokens_as_token_ids` ("token_id:N"); a server that returns
  only token strings cannot serve `top_k` or `sample` (one line).

Requests run `max_concurrency` at a time (a thread pool over one `httpx.Client`), each with a timeout, and are
retried with exponential backoff (`BACKOFF_S` * 2^attempt, at most `BACKOFF_CAP_S`, or the server's
Retry-After) on 429, 5xx and connection errors, `retries` times. A request that still fails makes the whole call
raise `ServerError`: nothing is returned, so the chunk in flight is not stored, and a rerun completes it (the
runner writes chunk by chunk). The model key holds the backend, the server's reported version (`GET /version`,
vLLM) and the served model's name (`GET /v1/models`); the base URL is not part of it.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .base import (SAMPLE, SCORE, TOP_K, BackendOptions, EngineBase, Identified, Sample, SamplingSettings, TopK,
                   Unsupported, engine_options)
from .models import served_token_ids

NAME = "openai"
CAPABILITIES = frozenset({SCORE, TOP_K, SAMPLE})
#: how many top log-probabilities `prepare` asks for when probing the server's K
PROBE_K = 256
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
BACKOFF_S = 0.5
BACKOFF_CAP_S = 30.0


class Options(BaseModel):
    """The engine arguments of `--backend openai` (`--engine-arg KEY=VALUE`, or the dedicated flags); anything else
    is refused in one line."""

    model_config = ConfigDict(extra="forbid")

    base_url: str | None = Field(None, description="the server's base URL, e.g. http://127.0.0.1:8000/v1")
    api_key_env: str | None = Field(None, description="environment variable holding the API key")
    max_concurrency: int = Field(8, ge=1, description="requests in flight at once")
    timeout_s: float = Field(120.0, gt=0, description="seconds one request may take")
    retries: int = Field(5, ge=0, description="retries of a request after a 429, a 5xx or a connection error")
    served_model: str | None = Field(None, description="the served model's name, when the server serves several")

    @field_validator("base_url")
    @classmethod
    def _http(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^https?://", value):
            raise ValueError("must start with http:// or https://")
        return value.rstrip("/") if value else value


_TOKEN_ID = re.compile(r"^token_id:(\d+)$")
_MAX_ALLOWED = re.compile(r"max(?:imum)?(?: allowed)?[^0-9]{0,20}(\d+)", re.IGNORECASE)


class ServerError(RuntimeError):
    """A request that failed for good (after its retries), or a server answer this backend cannot use."""


def installed() -> tuple[bool, str]:
    """(True, "httpx 0.x"): the backend needs only httpx."""
    try:
        import httpx
    except ImportError as exc:
        return False, f"httpx does not import ({exc}); pip install httpx"
    return True, f"httpx {httpx.__version__}"


def engine_settings(options: BackendOptions) -> dict[str, Any]:
    """The engine arguments checked by `Options` (one-line `ValueError`s), defaults filled in."""
    out = engine_options(Options, NAME, options.engine_args).model_dump()
    if not out["base_url"]:
        raise ValueError("--backend openai needs --base-url (e.g. http://127.0.0.1:8000/v1)")
    var = out["api_key_env"]
    if var is not None and not os.environ.get(var):
        raise ValueError(f"--api-key-env {var}: the environment variable {var} is not set (or empty)")
    return out


def validate_options(options: BackendOptions) -> None:
    """Refuse what this backend cannot do, in one line, before anything is read or any server is asked."""
    if options.quant not in ("none", None):
        raise ValueError(f"--backend openai: --quant {options.quant} is chosen by the server, not here")
    if options.device not in (None,):
        raise ValueError("--backend openai: the server places the model (no --device)")
    if options.model_args:
        raise ValueError("--backend openai: --model-arg belongs to the server's own command line")
    if options.revision is not None:
        raise ValueError("--backend openai: --revision belongs to the server's own command line")
    engine_settings(options)
    if options.dtype is None:
        raise ValueError("--backend openai needs --dtype: the dtype the server runs (e.g. its --dtype), which is "
                         "part of the model key and which the server does not report")


# ---------------------------------------------------------------------------------------------------- HTTP
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
        self.base_url, self.retries, self.sleep = base_url, retries, sleep
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

        for attempt in range(self.retries + 1):
            with self._lock:
                self.attempts += 1
            retry_after = None
            try:
                response = self.http.request(method, self.url(path), json=body)
            except httpx.TransportError as exc:  # connection refused / reset, timeouts
                problem = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else 'no detail'}"
            else:
                if response.status_code < 400:
                    try:
                        return response.json()
                    except ValueError:
                        raise ServerError(f"{method} {self.url(path)}: the answer is not JSON") from None
                problem = f"HTTP {response.status_code}: {error_message(response)}"
                if response.status_code not in RETRY_STATUSES and response.status_code < 500:
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
    match = _TOKEN_ID.match(token)
    if match is None:
        raise Unsupported(f"the server returned the token {token!r} as text, not as an id: --backend openai needs "
                          f"token ids for choice and sampling (vLLM's return_tokens_as_token_ids)")
    return int(match.group(1))


# ---------------------------------------------------------------------------------------------------- prepare
def server_identity(client: Client, model: str, folder: str, wanted: str | None) -> tuple[str, str]:
    """(served model name, server version): GET /v1/models and GET /version (vLLM; "unknown" elsewhere)."""
    listed = client.request("GET", "models")
    ids = [m.get("id") for m in listed.get("data", []) if isinstance(m, dict)]
    if not ids:
        raise ServerError(f"GET {client.url('models')}: the server lists no model")
    if wanted is not None:
        if wanted not in ids:
            raise ValueError(f"served_model {wanted!r} is not served at {client.base_url} (it serves {', '.join(ids)})")
        served = wanted
    elif len(ids) == 1:
        served = ids[0]
    else:
        roots = {m.get("id"): m.get("root") for m in listed["data"] if isinstance(m, dict)}
        matches = [i for i in ids if i in (model, folder) or roots.get(i) in (model, folder)]
        if len(matches) != 1:
            raise ValueError(f"{client.base_url} serves {len(ids)} models ({', '.join(ids)}); name one with the "
                             f"engine argument served_model")
        served = matches[0]
    try:
        version = str(client.request("GET", "/version").get("version", "unknown"))
    except (ServerError, AttributeError):
        version = "unknown"
    return served, version


def probe_top_k(client: Client, served: str, prompt: list[int], want: int = PROBE_K) -> int:
    """The number of top log-probabilities per token the server returns (its K): asked for `want`, the count it
    returns, or the N of its refusal ("... max allowed: N")."""
    body = {"model": served, "prompt": prompt, "max_tokens": 1, "temperature": 0.0, "logprobs": want,
            "return_tokens_as_token_ids": True}
    try:
        answer = client.request("POST", "completions", body)
    except ServerError as exc:
        match = _MAX_ALLOWED.search(str(exc))
        if match is None:
            raise ServerError(f"cannot find the server's top-logprobs limit: {exc}") from None
        return int(match.group(1))
    top = (answer["choices"][0].get("logprobs") or {}).get("top_logprobs") or [None]
    return min(want, len(top[0] or {}))


def prepare(model: str, options: BackendOptions) -> "OpenAIPrepared":
    """Load the tokenizer of `model` (alias or folder of the served model) locally, ask the server what it serves
    and its K, and compute the model key. No weights load here or anywhere."""
    from .models import bos_token_id, read_model

    validate_options(options)
    s = engine_settings(options)
    hf = read_model(model, dtype=options.dtype or "bf16", backend=NAME)
    if hf.spec.kind == "masked":
        raise Unsupported(f"--backend openai cannot score masked LMs ({model} is one: use --backend hf)")
    client = make_client(s)
    try:
        served, version = server_identity(client, model, hf.folder, s["served_model"])
        k = probe_top_k(client, served, [bos_token_id(hf.tokenizer)[0]])
    finally:
        client.close()
    spec = hf.spec.model_copy(update={"backend": NAME, "backend_version": version, "dtype": options.dtype,
                                      "engine_args": {"served_model": served}})
    return OpenAIPrepared(spec=spec, tokenizer=hf.tokenizer, folder=hf.folder, settings=s, served=served,
                          max_top_k=k)


def make_client(settings: dict[str, Any]) -> Client:
    key = os.environ.get(settings["api_key_env"]) if settings["api_key_env"] else None
    return Client(settings["base_url"], key, max_concurrency=settings["max_concurrency"],
                  timeout_s=settings["timeout_s"], retries=settings["retries"])


class OpenAIPrepared(Identified):
    label = EngineBase.label

    """The tokenizer and identity of a served model; `load()` opens the connection pool (no weights)."""

    def __init__(self, *, spec: Any, tokenizer: Any, folder: str, settings: dict[str, Any], served: str,
                 max_top_k: int) -> None:
        self.spec, self.tokenizer, self.folder, self.settings = spec, tokenizer, folder, settings
        self.served, self.max_top_k = served, max_top_k
        self.device = settings["base_url"]

    def load(self) -> "OpenAIBackend":
        return OpenAIBackend(self)


class OpenAIBackend(EngineBase):
    """`Backend` over an OpenAI-compatible completions server (see the module docstring)."""

    name = NAME
    capabilities = CAPABILITIES

    def __init__(self, prepared: OpenAIPrepared, client: Client | None = None) -> None:
        self.prepared, self.spec, self.tokenizer = prepared, prepared.spec, prepared.tokenizer
        self.device, self.served, self.max_top_k = prepared.device, prepared.served, prepared.max_top_k
        self.version = prepared.spec.backend_version
        self.client = client or make_client(prepared.settings)
        self.stop_ids, self.bos_id, self.pad_id = served_token_ids(prepared.folder, self.tokenizer)

    def _body(self, prompt: Sequence[int], **fields: Any) -> dict:
        return {"model": self.served, "prompt": [int(t) for t in prompt], "return_tokens_as_token_ids": True,
                **fields}

    def score(self, sequences: Sequence[Sequence[int]], groups: Sequence[Hashable] | None = None) -> list[np.ndarray]:
        """out[j][i] = log p(seq_j[i+1] | seq_j[:i+1]) from the echoed prompt log-probabilities (float64)."""
        bodies = [self._body(seq, max_tokens=1, temperature=0.0, echo=True, logprobs=1) for seq in sequences]
        out = []
        for seq, answer in zip(sequences, self.client.map("completions", bodies)):
            lp = (answer["choices"][0].get("logprobs") or {})
            values = lp.get("token_logprobs") or []
            if len(values) < len(seq) or any(v is None for v in values[1:len(seq)]):
                raise Unsupported(f"the server returned no log-probabilities for the prompt tokens (echo with "
                                  f"logprobs): got {len(values)} values for {len(seq)} prompt tokens")
            tokens = lp.get("tokens") or []
            if tokens and _TOKEN_ID.match(tokens[0]) and [token_id(t) for t in tokens[:len(seq)]] != list(seq):
                raise ServerError("the server echoed other token ids than the ones sent")
            out.append(np.asarray(values[1:len(seq)], dtype=np.float64))
        return out

    def pll(self, sequences, word_ids, scheme):  # noqa: D102 - see CAPABILITIES
        raise Unsupported("--backend openai has no masked-LM pseudo-log-likelihood; use --backend hf")

    def top_k(self, prefixes: Sequence[Sequence[int]], k: int) -> TopK:
        """The `k` most probable next tokens after each prefix (normalized log-probabilities, logsumexp 0)."""
        if not 1 <= k <= self.max_top_k:
            raise Unsupported(f"the server at {self.client.base_url} returns K = {self.max_top_k} top "
                              f"log-probabilities per token; K = {k} asked (vLLM: start it with --max-logprobs {k})")
        bodies = [self._body(p, max_tokens=1, temperature=0.0, logprobs=k) for p in prefixes]
        ids = np.empty((len(prefixes), k), dtype=np.int64)
        values = np.empty((len(prefixes), k), dtype=np.float32)
        for row, answer in enumerate(self.client.map("completions", bodies)):
            top = ((answer["choices"][0].get("logprobs") or {}).get("top_logprobs") or [None])[0] or {}
            ranked = sorted(((token_id(t), float(v)) for t, v in top.items()), key=lambda x: -x[1])
            if len(ranked) < k:
                raise ServerError(f"the server returned {len(ranked)} top log-probabilities where {k} were asked")
            ids[row] = [t for t, _ in ranked[:k]]
            values[row] = [v for _, v in ranked[:k]]
        return TopK(ids, values, np.zeros(len(prefixes), dtype=np.float64))


    def sample_body(self, prompt: Sequence[int], seed: int, settings: SamplingSettings) -> dict:
        """The complete request of one sample (every sampling parameter explicit)."""
        return self._body(prompt, max_tokens=settings.max_new_tokens, min_tokens=settings.min_new_tokens,
                          temperature=settings.temperature, top_k=settings.top_k, top_p=settings.top_p, min_p=0.0,
                          repetition_penalty=1.0, presence_penalty=0.0, frequency_penalty=0.0, seed=int(seed),
                          logprobs=1, stop_token_ids=sorted(self.stop_ids), ignore_eos=False,
                          skip_special_tokens=False)

    def sample(self, prompts: Sequence[Sequence[int]], seeds: Sequence[Sequence[int]], settings: SamplingSettings
               ) -> list[list[Sample]]:
        """len(seeds[i]) samples of prompts[i], one seeded request each."""
        bodies = [self.sample_body(prompts[i], s, settings) for i, own in enumerate(seeds) for s in own]
        answers = iter(self.client.map("completions", bodies))
        return [[self._to_sample(next(answers)) for _ in own] for own in seeds]

    def _to_sample(self, answer: dict) -> Sample:
        choice = answer["choices"][0]
        lp = choice.get("logprobs") or {}
        tokens = [token_id(t) for t in lp.get("tokens") or []]
        values = [float(v) for v in lp.get("token_logprobs") or []]
        if len(values) != len(tokens):
            raise ServerError(f"the server returned {len(values)} log-probabilities for {len(tokens)} tokens")
        reason = choice.get("finish_reason")
        if reason not in ("stop", "length"):
            raise ServerError(f"a sample ended with finish_reason={reason!r}")
        if reason == "stop" and tokens and tokens[-1] in self.stop_ids:
            tokens, values = tokens[:-1], values[:-1]
        return Sample(tokens, values, reason)

    def close(self) -> None:
        self.client.close()
