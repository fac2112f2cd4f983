"""Hosted chat models through OpenAI's chat completions API (`--backend openai-chat`): OpenAI itself, or anything
that speaks `/v1/chat/completions` (vLLM's and llama.cpp's servers, Ollama) with `--base-url`. Through the official
`openai` SDK (`pip install 'biaslab[openai]'`).

`--model` is the provider's model id: no weights and no tokenizer here. The messages are sent as they are, so what
the model saw is the stored messages (`choice_requests.prompt_text`, JSON), never a local tokenization of them.

- `chat` (choice sample mode, gen): one request per sample, with its `seed` (stored), temperature, top_p and the
  token limit set explicitly; `top_k` and `min_tokens` only where the server takes vLLM's sampling extensions
  (`extensions`: probed once, or set), else a `--top-k` other than 0 (0: no top-k truncation) or a
  `--min-new-tokens` other than 0 is refused in one line before any request.
- `chat_logprobs` (choice logprobs mode): one greedy request per prompt with `logprobs` and `top_logprobs` (at most
  `MAX_TOP_LOGPROBS`, OpenAI's limit); the reply's tokens with their alternatives are stored
  (`chat_positions`), and the option probabilities are derived from the alternatives where the answer begins
  (`biaslab.runners.protocols.choice_chat`).
- An assistant prefill is sent only where the server continues an assistant message (vLLM's
  `continue_final_message`, part of its extensions); elsewhere the model must write the prefill itself and the
  answer parser reads past it (the `lead`, as for chat templates that reject a prefill).

The model key holds the backend, the model id and the snapshot the provider reports (the reply's `model`, and its
`system_fingerprint` where there is one), learned from one 1-token request when the model is prepared; a reply
from another snapshot mid-run stops the run before its chunk is stored (a rerun collects under the new snapshot's
key, so evidence of two snapshots never mixes). The base URL is not part of the key.

Requests run `max_concurrency` at a time, each bounded by `timeout_s`; the SDK retries 408, 409, 429 and 5xx replies
and connection errors `retries` times with backoff, honouring Retry-After. A request that still fails stops the
run with one line (status and the provider's message), and nothing of its chunk is stored. The API key is read from
the environment variable `api_key_env` names (default OPENAI_API_KEY when no --base-url is given; none for a local
server) and is never written anywhere: not to the warehouse, the runs table, the recorded command, logs or exports.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..errors import EngineError, MissingPackage, UsageError
from ..schema import ModelSpec
from ..schema.records import PROVIDER_DTYPE
from .base import (CHAT, CHAT_LOGPROBS, PLL, SAMPLE, SCORE, TOP_K, BackendOptions, ChatReply, EngineBase, Flag,
                   PreparedBase, SamplingSettings, engine_options)

__all__ = ["NAME", "CAPABILITIES", "WHY_NOT", "Options", "FLAGS", "installed", "validate_options", "prepare",
           "ChatPrepared", "OpenAIChatBackend", "MAX_TOP_LOGPROBS", "Estimate"]

NAME = "openai-chat"
CAPABILITIES = frozenset({CHAT, CHAT_LOGPROBS})
#: the most top log-probabilities OpenAI's chat API returns per position
MAX_TOP_LOGPROBS = 20
#: why a chat API cannot serve what some protocols need (the refusal names the reason, before any request)
WHY_NOT = {
    SCORE: "a chat API gives no log-probabilities of given text, which the prob protocol scores",
    PLL: "a chat API serves no masked LM",
    TOP_K: "exact mode needs the model's top logits at every node of the answer trie, keyed by token id; a chat API "
           f"returns at most {MAX_TOP_LOGPROBS} top log-probabilities of its own reply (use --mode logprobs, "
           "approximate, or --mode sample)",
    SAMPLE: "a chat API takes messages, not token ids",
}
#: the environment variable read for the key when no --base-url is given
DEFAULT_KEY_ENV = "OPENAI_API_KEY"
#: a key sent to servers that need none (vLLM, llama.cpp, Ollama); the SDK wants a string
NO_KEY = "EMPTY"


class Options(BaseModel):
    """The engine arguments of `--backend openai-chat` (`--engine-arg KEY=VALUE`, or the dedicated flags); anything
    else is refused in one line."""

    model_config = ConfigDict(extra="forbid")

    base_url: str | None = Field(None, description="the server's base URL (default: OpenAI's API)")
    api_key_env: str | None = Field(None, description="environment variable holding the API key (default "
                                                      "OPENAI_API_KEY without --base-url; none for a local server)")
    max_concurrency: int = Field(8, ge=1, le=256, description="requests in flight at once")
    timeout_s: float = Field(50.0, gt=0, le=3600, description="seconds one request may take (with the retries: a "
                                                             "provider that never answers ends the run within 5 min)")
    retries: int = Field(4, ge=0, le=20, description="retries of a request after 408, 409, 429, 5xx or no reply")
    extensions: bool | None = Field(None, description="the server takes vLLM's sampling extensions (top_k, "
                                                      "min_tokens, continue_final_message); default: asked once")
    top_logprobs: int = Field(MAX_TOP_LOGPROBS, ge=1, le=MAX_TOP_LOGPROBS,
                              description="top log-probabilities asked per position (logprobs mode)")
    price_in: float | None = Field(None, ge=0, le=1e6, description="USD per million input tokens (cost estimate)")
    price_out: float | None = Field(None, ge=0, le=1e6, description="USD per million output tokens")
    max_cost: float | None = Field(None, ge=0, description="refuse to start when the estimated cost is above it (USD)")

    @field_validator("base_url")
    @classmethod
    def _http(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^https?://", value):
            raise UsageError("must start with http:// or https://")
        return value.rstrip("/") if value else value

    @field_validator("api_key_env")
    @classmethod
    def _name(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value):
            raise UsageError("must be the NAME of an environment variable (letters, digits, _), not a key")
        return value


FLAGS = (
    Flag("base_url", "the server's base URL, e.g. http://127.0.0.1:8000/v1."),
    Flag("api_key_env", "name of the environment variable holding the API key (the key itself is never stored).",
         metavar="VAR"),
    Flag("max_concurrency", "requests in flight at once."),
    Flag("price_in", "USD per million input tokens, for the cost shown before the first request.", metavar="USD"),
    Flag("price_out", "USD per million output tokens, for the cost shown before the first request.",
         metavar="USD"),
    Flag("max_cost", "refuse to start when the estimated cost (USD) is above this.", metavar="USD"),
)


def installed() -> tuple[bool, str]:
    """(True, "openai 3.x") when the official SDK imports."""
    try:
        import openai
    except ImportError as exc:
        return False, f"the openai package does not import ({exc}); pip install 'biaslab[openai]'"
    return True, f"openai {openai.__version__}"


def _settings(options: BackendOptions) -> dict[str, Any]:
    return engine_options(Options, NAME, options.engine_args).model_dump()


def validate_options(options: BackendOptions) -> None:
    """Refuse what a hosted model cannot take, in one line, before anything is read or any request is sent."""
    for flag, value in (("--quant", None if options.quant in ("none", None) else options.quant),
                        ("--device", options.device), ("--revision", options.revision),
                        ("--dtype", options.dtype)):
        if value is not None:
            raise UsageError(f"--backend {NAME}: {flag} is the provider's business (the model key holds the "
                             f"snapshot the provider reports)")
    if options.model_args:
        raise UsageError(f"--backend {NAME}: --model-arg belongs to the server, not to a chat request")
    key_of(_settings(options))


def key_of(settings: dict[str, Any]) -> str:
    """The API key from the named environment variable (a local server without one: `NO_KEY`); one line naming
    the variable when it is not set. The key is only ever handed to the SDK."""
    var = settings["api_key_env"] or (DEFAULT_KEY_ENV if settings["base_url"] is None else None)
    if var is None:
        return NO_KEY
    value = os.environ.get(var)
    if not value:
        raise UsageError(f"--api-key-env {var}: the environment variable {var} is not set (or empty)")
    return value


def make_client(settings: dict[str, Any]):
    """The SDK's client: the key from the environment, the timeout and retries of the settings."""
    try:
        from openai import OpenAI
    except ImportError:
        raise MissingPackage(f"--backend {NAME} needs the openai package: pip install 'biaslab[openai]'") from None
    return OpenAI(api_key=key_of(settings), base_url=settings["base_url"], timeout=settings["timeout_s"],
                  max_retries=settings["retries"])


def _where(settings: dict[str, Any]) -> str:
    return settings["base_url"] or "OpenAI's API"


def failure(exc: BaseException, settings: dict[str, Any]) -> EngineError:
    """One line for a request that failed for good (after the SDK's retries): where, the status and the provider's
    message; never the key (the SDK's messages do not hold it)."""
    import openai

    where = _where(settings)
    if isinstance(exc, openai.AuthenticationError):
        var = settings["api_key_env"] or DEFAULT_KEY_ENV
        return EngineError(f"{where} refused the API key in ${var} (401): {_message(exc)}")
    if isinstance(exc, openai.APITimeoutError):
        return EngineError(f"{where} did not answer within {settings['timeout_s']:g} s ({settings['retries']} "
                           f"retries); nothing of this chunk was stored (raise --engine-arg timeout_s=...)")
    if isinstance(exc, openai.APIConnectionError):
        return EngineError(f"{where} cannot be reached ({settings['retries']} retries): {exc}")
    if isinstance(exc, openai.APIStatusError):
        return EngineError(f"{where} answered {exc.status_code} after {settings['retries']} retries: "
                           f"{_message(exc)}")
    return EngineError(f"{where}: {type(exc).__name__}: {exc}")


def _message(exc) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])[:300]
    return str(getattr(exc, "message", exc))[:300]


def snapshot_of(reply: Any) -> str:
    """What the provider reports of the model that answered: its `model` and, where given, `system_fingerprint`."""
    model = str(getattr(reply, "model", "") or "")
    fingerprint = getattr(reply, "system_fingerprint", None)
    return f"{model}/{fingerprint}" if fingerprint else model


def _probe(client, model: str, settings: dict[str, Any], extensions: bool) -> Any:
    body: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": "Say OK."}],
                            "max_completion_tokens": 1, "temperature": 0.0, "seed": 0}
    if extensions:
        body["extra_body"] = {"top_k": 1, "min_tokens": 0}
    return client.chat.completions.create(**body)


def prepare(model: str, options: BackendOptions) -> ChatPrepared:
    """Ask the provider once (a 1-token request) what snapshot answers for `model`, and whether the server takes
    vLLM's sampling extensions when `extensions` is not set; compute the model key. No weights, no tokenizer."""
    import openai

    validate_options(options)
    settings = _settings(options)
    client = make_client(settings)
    try:
        extensions = settings["extensions"]
        try:
            reply = _probe(client, model, settings, extensions if extensions is not None else True)
            if extensions is None:
                extensions = True
        except openai.BadRequestError:
            if extensions is not None:
                raise
            extensions = False  # the server refuses the extension fields: OpenAI itself, for one
            reply = _probe(client, model, settings, False)
    except openai.NotFoundError as exc:
        raise UsageError(f"{_where(settings)} has no model {model!r}: {_message(exc)}") from None
    except openai.OpenAIError as exc:
        raise failure(exc, settings) from None
    finally:
        client.close()
    snapshot = snapshot_of(reply)
    spec = ModelSpec(name=model, source=model, revision=snapshot or None, kind="causal", dtype=PROVIDER_DTYPE,
                     tokenizer=None, bos_policy="none", backend=NAME, backend_version=None)
    return ChatPrepared(spec=spec, settings={**settings, "extensions": extensions}, snapshot=snapshot)


class Estimate:
    """What a collection will send, before the first request: requests, estimated input and output tokens (input:
    characters / 4, output: the token limit, both upper-bound-minded), and the cost where prices are given."""

    CHARS_PER_TOKEN = 4

    def __init__(self, requests: int, input_chars: int, output_tokens: int, settings: dict[str, Any]) -> None:
        self.requests, self.output_tokens = requests, output_tokens
        self.input_tokens = -(-input_chars // self.CHARS_PER_TOKEN)
        prices = settings.get("price_in"), settings.get("price_out")
        self.cost = None if None in prices else (self.input_tokens * prices[0] + output_tokens * prices[1]) / 1e6
        self.max_cost = settings.get("max_cost")

    def line(self) -> str:
        cost = f"estimated cost ${self.cost:.4f}" if self.cost is not None else \
            "cost unknown (give --price-in and --price-out, USD per million tokens)"
        return (f"{self.requests} requests, about {self.input_tokens} input and at most {self.output_tokens} output "
                f"tokens; {cost}")

    def refused(self) -> str | None:
        """Why the collection may not start (`max_cost`), or None."""
        if self.max_cost is None:
            return None
        if self.cost is None:
            return f"--max-cost {self.max_cost:g} needs --price-in and --price-out to estimate the cost"
        if self.cost > self.max_cost:
            return f"the estimated cost ${self.cost:.4f} is above --max-cost {self.max_cost:g}; nothing was sent"
        return None


class ChatPrepared(PreparedBase):
    """A hosted model's identity and settings (no tokenizer: `tokenizer` is None and `chat` is True); `load()`
    opens the client."""

    label = "chat-api"
    chat = True
    tokenizer = None

    def __init__(self, *, spec: ModelSpec, settings: dict[str, Any], snapshot: str) -> None:
        self.spec, self.settings, self.snapshot = spec, settings, snapshot
        self.device = _where(settings)
        self.max_top_k = settings["top_logprobs"]

    @property
    def prefill(self) -> bool:
        """Whether an assistant prefill can be continued (vLLM's continue_final_message)."""
        return bool(self.settings["extensions"])

    def check_sampling(self, settings: SamplingSettings) -> None:
        """Refuse (one line, before any request) a setting the API cannot apply."""
        if self.settings["extensions"]:
            return
        if settings.top_k != 0:
            raise UsageError(f"{_where(self.settings)} takes no top_k (OpenAI's API has none): pass --top-k 0 (no "
                             f"top-k truncation, stored as 0), or --engine-arg extensions=true for a server that "
                             f"takes vLLM's extensions")
        if settings.min_new_tokens:
            raise UsageError(f"{_where(self.settings)} cannot forbid stopping early: pass --min-new-tokens 0")

    def estimate(self, requests: int, input_chars: int, output_tokens: int) -> Estimate:
        return Estimate(requests, input_chars, output_tokens, self.settings)

    def load(self) -> OpenAIChatBackend:
        return OpenAIChatBackend(self)


class OpenAIChatBackend(EngineBase):
    """The chat backend (see the module docstring): `chat` returns one `ChatReply` per (messages, seed)."""

    name = NAME
    capabilities = CAPABILITIES
    tokenizer = None

    def __init__(self, prepared: ChatPrepared, client: Any = None) -> None:
        self.prepared, self.spec, self.settings = prepared, prepared.spec, prepared.settings
        self.device, self.snapshot, self.version = prepared.device, prepared.snapshot, None
        self.max_top_k = prepared.max_top_k
        self.client = client or make_client(self.settings)

    def body(self, messages: Sequence[dict], seed: int | None, settings: SamplingSettings, *,
             prefill: str | None = None, top_logprobs: int | None = None) -> dict[str, Any]:
        """The complete request of one reply (every sampling parameter explicit)."""
        sent = [dict(m) for m in messages]
        body: dict[str, Any] = {"model": self.spec.name, "temperature": settings.temperature,
                                "top_p": settings.top_p, "max_completion_tokens": settings.max_new_tokens, "n": 1,
                                "frequency_penalty": 0.0, "presence_penalty": 0.0}
        if seed is not None:
            body["seed"] = int(seed)
        if top_logprobs:
            body["logprobs"], body["top_logprobs"] = True, int(top_logprobs)
        extra: dict[str, Any] = {}
        if self.settings["extensions"]:
            extra.update(top_k=settings.top_k if settings.top_k else -1, min_tokens=settings.min_new_tokens,
                         repetition_penalty=1.0, min_p=0.0)
        if prefill:
            sent.append({"role": "assistant", "content": prefill})
            extra.update(add_generation_prompt=False, continue_final_message=True)
        body["messages"] = sent
        if extra:
            body["extra_body"] = extra
        return body

    def chat(self, messages: Sequence[Sequence[dict]], seeds: Sequence[int | None], settings: SamplingSettings, *,
             prefill: str | None = None, top_logprobs: int | None = None) -> list[ChatReply]:
        """One reply per (messages[i], seeds[i]), `max_concurrency` requests at a time, in order. A request that
        fails for good, a malformed reply, or a reply from another snapshot raises `EngineError` (one line): none
        of the replies is returned, so the caller stores nothing of them."""
        bodies = [self.body(m, s, settings, prefill=prefill, top_logprobs=top_logprobs)
                  for m, s in zip(messages, seeds, strict=True)]
        workers = min(self.settings["max_concurrency"], max(1, len(bodies)))
        pool = ThreadPoolExecutor(workers)
        try:
            futures = [pool.submit(self._one, body) for body in bodies]
            return [future.result() for future in futures]
        finally:  # on a failure, requests not sent yet are never sent (a billed API: nothing more is spent)
            pool.shutdown(wait=True, cancel_futures=True)

    def _one(self, body: dict[str, Any]) -> ChatReply:
        import openai

        try:
            reply = self.client.chat.completions.create(**body)
        except openai.OpenAIError as exc:
            raise failure(exc, self.settings) from None
        return self.reply(reply, bool(body.get("logprobs")))

    def reply(self, reply: Any, logprobs: bool) -> ChatReply:
        """A `ChatReply` of the SDK's response, checked: one choice with a message, the snapshot the run began
        with, and the log-probabilities asked for."""
        where = _where(self.settings)
        snapshot = snapshot_of(reply)
        if snapshot != self.snapshot:
            raise EngineError(f"{where} answered with snapshot {snapshot!r} where this run began with "
                              f"{self.snapshot!r}; nothing of this chunk was stored: rerun to collect under the new "
                              f"snapshot (its own model key)")
        choices = getattr(reply, "choices", None) or []
        message = getattr(choices[0], "message", None) if choices else None
        if message is None:
            raise EngineError(f"{where} sent a reply without a message (malformed reply)")
        reason = str(getattr(choices[0], "finish_reason", None) or "unknown")
        text = getattr(message, "content", None)
        if text is None:
            refusal = getattr(message, "refusal", None)
            text, reason = ("", "refused" if refusal else reason)
        positions = None
        if logprobs:
            content = getattr(getattr(choices[0], "logprobs", None), "content", None)
            if content is None:
                raise EngineError(f"{where} returned no log-probabilities where they were asked (logprobs mode "
                                  f"needs a server that returns top_logprobs)")
            positions = [(str(t.token), float(t.logprob), [(str(a.token), float(a.logprob))
                                                           for a in (t.top_logprobs or [])]) for t in content]
        return ChatReply(str(text), reason, snapshot, positions)

    def close(self) -> None:
        self.client.close()
