"""The OpenAI-compatible server backend (`--backend openai --base-url URL [--api-key-env VAR]`).

A server with the `/v1/completions` endpoint is a `Backend` through plain HTTP (httpx; no `openai` package) when it
does what `server_checks` asks before any run row (token-id prompts; per protocol: causal echoed log-probabilities,
top log-probabilities keyed by token id, seeded samples returned as ids); tested: vLLM's OpenAI-compatible server.
A server lacking something is refused in one line naming it. Prompts are sent as token-id lists (the completions
API takes a list of ints), built with the tokenizer of `--model` loaded locally (the folder or alias of the served
model), so the ids the server scores are the ids stored; nothing is re-tokenized.

- `score` (prob): `echo=true, logprobs=1, max_tokens=1`: the server returns the log-probability of every prompt
  token given the tokens before it (`token_logprobs`, the first one null); the generated token is dropped.
- `top_k` (choice exact): one new token with `logprobs=K` (greedy, so the sampled token is the top one); the K
  log-probabilities are normalized, so `TopK.logits` = z - logsumexp(z) and `TopK.logsumexp` = 0 (docs/design.md
  section 10). K is what the server returns: `verify` probes it (a request asking for `PROBE_K`, read from the
  returned count or the refusal's "max allowed: N"), and a K above it is refused in one line that says the
  server's K. `expander`: the `StatelessExpander` (each trie level re-submits prompt + path; a server with prefix
  caching makes the repeated prompt cheap).
- `sample` (choice sample, gen): one request per sample with its `seed`, temperature, top_k, top_p, min_tokens,
  min_p 0 and neutral penalties set explicitly, `logprobs=1`, the stop ids as `stop_token_ids`. The
  log-probabilities stored are what the server returns: vLLM's default `--logprobs-mode raw_logprobs` gives the
  model's own temperature-1 values (docs/design.md section 4); another mode or server may not.
- Token ids of returned tokens come from vLLM's `return_tokens_as_token_ids` ("token_id:N"); a server that returns
  only token strings cannot serve `top_k` or `sample` (one line).

Requests run `max_concurrency` at a time (`openai_http.Client`: a thread pool over one `httpx.Client`), each with
a timeout, and are retried with exponential backoff (`BACKOFF_S` * 2^attempt, at most `BACKOFF_CAP_S`, or the
server's Retry-After) on 429, 5xx (not a 500 that says the request is invalid) and connection errors, `retries`
times. A request that still fails makes the whole call
raise `ServerError`: nothing is returned, so the chunk in flight is not stored, and a rerun completes it (the
runner writes chunk by chunk). The model key holds the backend, the server's reported version (`GET /version`,
vLLM) and the served model's name (`GET /v1/models`); the base URL is not part of it.
"""

from __future__ import annotations

import os
from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..errors import UsageError
from .base import (SAMPLE, SCORE, TOP_K, BackendOptions, EngineBase, Flag, PreparedBase, Sample, SamplingSettings,
                   TopK, Unsupported, check_base_url, engine_options)
from .models import served_token_ids
from .openai_http import (BACKOFF_CAP_S, BACKOFF_S, RETRY_STATUSES, Client, ServerError,
                          error_message, token_id)
from .server_checks import PROBE_K, ServerChecks, known_ids, probe_top_k

if TYPE_CHECKING:  # numpy is imported where evidence is computed, not when the registry reads this module
    import numpy as np

__all__ = ["NAME", "CAPABILITIES", "Options", "FLAGS", "installed", "engine_settings", "validate_options", "prepare",
           "OpenAIPrepared", "OpenAIBackend", "server_identity", "make_client",
           # the HTTP side and the server checks, used through this module
           "BACKOFF_CAP_S", "BACKOFF_S", "RETRY_STATUSES", "Client", "ServerError", "error_message", "token_id",
           "PROBE_K", "ServerChecks", "known_ids", "probe_top_k"]

NAME = "openai"
CAPABILITIES = frozenset({SCORE, TOP_K, SAMPLE})


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

    @field_validator("base_url", mode="before")
    @classmethod
    def _http(cls, value: str | None) -> str | None:
        return check_base_url(value)


#: the `runners collect` shortcut flags of `Options` fields (`--engine-arg KEY=VALUE` takes every field)
FLAGS = (
    Flag("base_url", "the server's base URL, e.g. http://127.0.0.1:8000/v1."),
    Flag("api_key_env", "name of the environment variable holding the API key (the key itself is never stored).",
         metavar="VAR"),
    Flag("max_concurrency", "requests in flight at once (default 8; chat collections keep them in flight "
                            "across chunks)."),
)


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
        raise UsageError("--backend openai needs --base-url (e.g. http://127.0.0.1:8000/v1)")
    var = out["api_key_env"]
    if var is not None and not os.environ.get(var):
        raise UsageError(f"--api-key-env {var}: the environment variable {var} is not set (or empty)")
    return out


def validate_options(options: BackendOptions) -> None:
    """Refuse what this backend cannot do, in one line, before anything is read or any server is asked."""
    if options.quant not in ("none", None):
        raise UsageError(f"--backend openai: --quant {options.quant} is chosen by the server, not here")
    if options.device not in (None,):
        raise UsageError("--backend openai: the server places the model (no --device)")
    if options.model_args:
        raise UsageError("--backend openai: --model-arg belongs to the server's own command line")
    if options.revision is not None:
        raise UsageError("--backend openai: --revision belongs to the server's own command line")
    engine_settings(options)
    if options.dtype is None:
        raise UsageError("--backend openai needs --dtype: the dtype the server runs (e.g. its --dtype), which is "
                         "part of the model key and which the server does not report")


# ---------------------------------------------------------------------------------------------------- prepare
def server_identity(client: Client, model: str, folder: str, wanted: str | None) -> tuple[str, str]:
    """(served model name, server version): GET /v1/models and GET /version (vLLM; "unknown" elsewhere)."""
    listed = client.request("GET", "models")
    ids = [m.get("id") for m in listed.get("data", []) if isinstance(m, dict)]
    if not ids:
        raise ServerError(f"GET {client.url('models')}: the server lists no model")
    if wanted is not None:
        if wanted not in ids:
            raise UsageError(f"served_model {wanted!r} is not served at {client.base_url} (it serves {', '.join(ids)})")
        served = wanted
    elif len(ids) == 1:
        served = ids[0]
    else:
        roots = {m.get("id"): m.get("root") for m in listed["data"] if isinstance(m, dict)}
        matches = [i for i in ids if i in (model, folder) or roots.get(i) in (model, folder)]
        if len(matches) != 1:
            raise UsageError(f"{client.base_url} serves {len(ids)} models ({', '.join(ids)}); name one with the "
                             f"engine argument served_model")
        served = matches[0]
    try:
        version = str(client.request("GET", "/version").get("version", "unknown"))
    except (ServerError, AttributeError):
        version = "unknown"
    return served, version


def prepare(model: str, options: BackendOptions) -> OpenAIPrepared:
    """Load the tokenizer of `model` (alias or folder of the served model) locally, ask the server what it serves,
    and compute the model key. No weights load here or anywhere; what the protocol needs is checked by
    `OpenAIPrepared.verify` (`server_checks`)."""
    from .models import read_model

    validate_options(options)
    s = engine_settings(options)
    hf = read_model(model, dtype=options.dtype or "bf16", backend=NAME)
    if hf.spec.kind == "masked":
        raise Unsupported(f"--backend openai cannot score masked LMs ({model} is one: use --backend hf)")
    client = make_client(s)
    try:
        served, version = server_identity(client, model, hf.folder, s["served_model"])
    finally:
        client.close()
    spec = hf.spec.model_copy(update={"backend": NAME, "backend_version": version, "dtype": options.dtype,
                                      "engine_args": {"served_model": served}})
    return OpenAIPrepared(spec=spec, tokenizer=hf.tokenizer, folder=hf.folder, settings=s, served=served)


def make_client(settings: dict[str, Any], retries: int | None = None) -> Client:
    key = os.environ.get(settings["api_key_env"]) if settings["api_key_env"] else None
    return Client(settings["base_url"], key, max_concurrency=settings["max_concurrency"],
                  timeout_s=settings["timeout_s"], retries=settings["retries"] if retries is None else retries)


class OpenAIPrepared(PreparedBase):
    """The tokenizer and identity of a served model; `verify(needs)` asks the server what the protocol needs
    (`server_checks`; the server's K for `top_k` is known from then on); `load()` opens the connection pool (no
    weights)."""

    label = EngineBase.label

    def __init__(self, *, spec: Any, tokenizer: Any, folder: str, settings: dict[str, Any], served: str,
                 max_top_k: int | None = None) -> None:
        self.spec, self.tokenizer, self.folder, self.settings = spec, tokenizer, folder, settings
        self.served, self.max_top_k = served, max_top_k
        self.device = settings["base_url"]
        self.verified: frozenset[str] = frozenset()

    def verify(self, needs: frozenset[str]) -> None:
        """Run the server checks of `needs` not run yet (one line naming what the server lacks)."""
        todo = frozenset(needs) - self.verified
        if not todo:
            return
        from .models import bos_token_id

        client = make_client(self.settings, retries=min(1, self.settings["retries"]))
        try:
            checks = ServerChecks(client, self.served, known_ids(self.tokenizer, bos_token_id(self.tokenizer)[0]))
            k = checks.run(todo)
        finally:
            client.close()
        if k is not None:
            self.max_top_k = k
        self.verified |= todo

    def load(self) -> OpenAIBackend:
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

    def verify(self, needs: frozenset[str]) -> None:
        """The server checks of `needs` (`OpenAIPrepared.verify`); the server's K from then on."""
        self.prepared.verify(needs)
        self.max_top_k = self.prepared.max_top_k

    def _body(self, prompt: Sequence[int], **fields: Any) -> dict:
        return {"model": self.served, "prompt": [int(t) for t in prompt], "return_tokens_as_token_ids": True,
                **fields}

    def score(self, sequences: Sequence[Sequence[int]], groups: Sequence[Hashable] | None = None) -> list[np.ndarray]:
        """out[j][i] = log p(seq_j[i+1] | seq_j[:i+1]) from the echoed prompt log-probabilities (float64)."""
        import numpy as np

        bodies = [self._body(seq, max_tokens=1, temperature=0.0, echo=True, logprobs=1) for seq in sequences]
        out = []
        for seq, answer in zip(sequences, self.client.map("completions", bodies)):
            lp = (answer["choices"][0].get("logprobs") or {})
            values = lp.get("token_logprobs") or []
            if len(values) < len(seq) or any(v is None for v in values[1:len(seq)]):
                raise Unsupported(f"the server returned no log-probabilities for the prompt tokens (echo with "
                                  f"logprobs): got {len(values)} values for {len(seq)} prompt tokens")
            tokens = lp.get("tokens") or []
            if tokens and tokens[0].startswith("token_id:") and [token_id(t) for t in tokens[:len(seq)]] != list(seq):
                raise ServerError("the server echoed other token ids than the ones sent")
            out.append(np.asarray(values[1:len(seq)], dtype=np.float64))
        return out

    def pll(self, sequences, word_ids, scheme):  # noqa: D102 - see CAPABILITIES
        raise Unsupported("--backend openai has no masked-LM pseudo-log-likelihood; use --backend hf")

    def top_k(self, prefixes: Sequence[Sequence[int]], k: int) -> TopK:
        """The `k` most probable next tokens after each prefix (normalized log-probabilities, logsumexp 0)."""
        import numpy as np

        if self.max_top_k is None:  # not verified yet (a backend used directly, not through collect)
            self.verify(frozenset({TOP_K}))
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
