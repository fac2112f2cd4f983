"""What every hosted chat engine shares (`openai_chat`, `gemini`, `anthropic`): the settings each takes
(`ChatOptions`), the refusal of what a chat API cannot serve (`WHY_NOT`), the API key read from a named environment
variable and never stored, the cost estimate shown before the first request (`Estimate`), the prepared model
(`ChatPrepared`: no tokenizer, no weights), the concurrent calls that stop at the first failure (`call_all`) and the
batch APIs' common flow (`run_batched`).

A chat engine's backend offers `chat(messages, seeds, settings, *, prefill=None, top_logprobs=None)`: one
`base.ChatReply` per (messages, seed), in order, each from the snapshot the run began with; a request that fails
for good, a malformed reply or another snapshot raises `EngineError` in one line and returns nothing, so the
caller stores nothing of the chunk.
"""

from __future__ import annotations

import importlib
import os
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..errors import EngineError, MissingPackage, UsageError
from ..schema import ModelSpec
from ..schema.records import PROVIDER_DTYPE
from .base import (CHAT_LOGPROBS, PLL, SAMPLE, SCORE, TOP_K, BackendOptions, ChatAsk, EngineBase, Flag,  # noqa: F401
                   PreparedBase, SamplingSettings, check_base_url, engine_options)

#: the most top log-probabilities a chat API returns per position (OpenAI's limit; Gemini's is the server's)
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
#: a key sent to servers that need none (vLLM, llama.cpp, Ollama, a test's stub); the SDKs want a string
NO_KEY = "EMPTY"


class ChatOptions(BaseModel):
    """The engine arguments every chat engine takes (`--engine-arg KEY=VALUE`, or the dedicated flags); anything
    else is refused in one line."""

    model_config = ConfigDict(extra="forbid")

    base_url: str | None = Field(None, description="the server's base URL (default: the provider's API)")
    api_key_env: str | None = Field(None, description="environment variable holding the API key (default: the "
                                                      "provider's usual one without --base-url; none with it)")
    max_concurrency: int = Field(8, ge=1, le=256, description="requests in flight at once")
    timeout_s: float = Field(50.0, gt=0, le=3600, description="seconds one request may take (with the retries: a "
                                                             "provider that never answers ends the run within 5 min)")
    retries: int = Field(4, ge=0, le=20, description="retries of a request after 408, 429, 5xx or no reply")
    top_logprobs: int = Field(MAX_TOP_LOGPROBS, ge=1, le=MAX_TOP_LOGPROBS,
                              description="top log-probabilities asked per position (logprobs mode)")
    price_in: float | None = Field(None, ge=0, le=1e6, description="USD per million input tokens (cost estimate)")
    price_out: float | None = Field(None, ge=0, le=1e6, description="USD per million output tokens")
    max_cost: float | None = Field(None, ge=0, description="refuse to start when the estimated cost is above it (USD)")
    batch: bool = Field(False, description="send the requests as one batch of the provider's batch API (cheaper, "
                                           "slower); its id is stored, so a rerun fetches instead of resubmitting")
    batch_wait_s: float = Field(3600.0, ge=0, le=7 * 86400, description="seconds to wait for a batch before "
                                                                         "stopping (rerun to fetch it later)")
    batch_poll_s: float = Field(10.0, gt=0, le=3600, description="seconds between two looks at a running batch")

    @field_validator("base_url", mode="before")
    @classmethod
    def _http(cls, value: str | None) -> str | None:
        return check_base_url(value)


#: the shortcut flags of `ChatOptions` fields
CHAT_FLAGS = (
    Flag("base_url", "the server's base URL, e.g. http://127.0.0.1:8000/v1."),
    Flag("api_key_env", "name of the environment variable holding the API key (the key itself is never stored).",
         metavar="VAR"),
    Flag("max_concurrency", "requests in flight at once (default 8; chat collections keep them in flight "
                            "across chunks)."),
    Flag("price_in", "USD per million input tokens, for the cost shown before the first request.", metavar="USD"),
    Flag("price_out", "USD per million output tokens, for the cost shown before the first request.",
         metavar="USD"),
    Flag("max_cost", "refuse to start when the estimated cost (USD) is above this.", metavar="USD"),
    Flag("batch", "send the requests through the provider's batch API (openai-chat, anthropic): cheaper, slower; "
                  "the batch id is stored and a rerun fetches its results instead of submitting again."),
)


def refuse_local_options(name: str, options: BackendOptions) -> None:
    """One line for what a hosted model cannot take: quantization, device, revision, dtype, model arguments."""
    for flag, value in (("--quant", None if options.quant in ("none", None) else options.quant),
                        ("--device", options.device), ("--revision", options.revision),
                        ("--dtype", options.dtype)):
        if value is not None:
            raise UsageError(f"--backend {name}: {flag} is the provider's business (the model key holds the "
                             f"snapshot the provider reports)")
    if options.model_args:
        raise UsageError(f"--backend {name}: --model-arg belongs to the server, not to a chat request")


#: an environment variable name as --api-key-env takes it: upper-case letters, digits and _ (a key, which has
#: lower-case letters, is refused without being echoed)
ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]{0,127}")


def check_key_env(options: BackendOptions) -> None:
    """Refuse an --api-key-env that is not an upper-case variable name, without echoing it (it may be the key
    itself, pasted by mistake)."""
    value = dict(options.engine_args).get("api_key_env")
    if value is not None and not (isinstance(value, str) and ENV_NAME.fullmatch(value)):
        raise UsageError("--api-key-env takes the NAME of an environment variable (upper-case letters, digits, _), "
                         "not a key; the value given is not shown")


def key_from(settings: dict[str, Any], default_env: str) -> tuple[str, str | None]:
    """(the API key, the variable it was read from) for `settings`: the variable `api_key_env` names, else
    `default_env` for the provider's own API (no `base_url`), else `NO_KEY` for a local server; one line naming the
    variable when it is not set. The key is only ever handed to the provider's SDK."""
    var = settings["api_key_env"] or (default_env if settings["base_url"] is None else None)
    if var is None:
        return NO_KEY, None
    value = os.environ.get(var)
    if not value:
        raise UsageError(f"--api-key-env {var}: the environment variable {var} is not set (or empty)")
    return value, var


@dataclass(frozen=True)
class Provider:
    """What one chat engine's module-level interface needs of its provider, so that `installed`,
    `validate_options`, the settings and the client's SDK are written once (each engine module binds them to its
    own `Provider`).

    Attributes
    ----------
    name : the engine's name (`--backend`).
    options : its `Options` (a `ChatOptions`).
    sdk : the SDK's module to import (e.g. "anthropic", "google.genai").
    extra : the pip extra that installs it (`pip install 'biaslab[EXTRA]'`).
    key_env : the variable read for the key when no --base-url is given.
    api : how its own API is named in messages ("Anthropic's API").
    also : further modules its extra installs and the engine imports (openai-chat: httpx).
    batch : whether it offers `--batch` (a provider batch API); refused in one line otherwise.
    """

    name: str
    options: type[ChatOptions]
    sdk: str
    extra: str
    key_env: str
    api: str
    also: tuple[str, ...] = ()
    batch: bool = True

    def installed(self) -> tuple[bool, str]:
        """(True, "SDK VERSION") when the SDK (and `also`) import, else (False, what to install)."""
        try:
            module = importlib.import_module(self.sdk)
            for name in self.also:
                importlib.import_module(name)
        except ImportError as exc:
            return False, f"the {self.extra} extra does not import ({exc}); pip install 'biaslab[{self.extra}]'"
        return True, f"{self.sdk.replace('.', '-')} {getattr(module, '__version__', 'unknown')}"

    def sdk_module(self) -> Any:
        """The SDK's module; `MissingPackage` (one line, what to install) when it does not import."""
        try:
            return importlib.import_module(self.sdk)
        except ImportError:
            raise MissingPackage(f"--backend {self.name} needs the {self.sdk.replace('.', '-')} package: pip install "
                                 f"'biaslab[{self.extra}]'") from None

    def settings(self, options: BackendOptions) -> dict[str, Any]:
        """The engine arguments checked by `options` (one line for the first problem), as a dict."""
        return engine_options(self.options, self.name, options.engine_args).model_dump()

    def where(self, settings: dict[str, Any]) -> str:
        """The server's base URL, else the provider's API, as messages name it."""
        return settings["base_url"] or self.api

    def key(self, settings: dict[str, Any]) -> str:
        """The API key of `settings` (`key_from`; the provider's variable by default)."""
        return key_from(settings, self.key_env)[0]

    def validate_options(self, options: BackendOptions) -> None:
        """Refuse what a hosted model cannot take, in one line, before anything is read or any request is sent."""
        refuse_local_options(self.name, options)
        check_key_env(options)
        settings = self.settings(options)
        if settings["batch"] and not self.batch:
            raise UsageError(f"--backend {self.name}: --batch is not supported yet (openai-chat and anthropic "
                             f"have it)")
        key_from(settings, self.key_env)

    def spec(self, model: str, snapshot: str | None, version: str | None = None) -> ModelSpec:
        """The model key's spec of a hosted model: its id, the snapshot the provider reported (the revision), no
        weights, no tokenizer."""
        return ModelSpec(name=model, source=model, revision=snapshot, kind="causal", dtype=PROVIDER_DTYPE,
                         tokenizer=None, bos_policy="none", backend=self.name, backend_version=version)


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
    opens the client (`backend(self)`). Subclasses say whether the API continues a prefill and which sampling
    settings it can apply (`prefill`, `check_sampling`).

    Nothing is sent to the provider while preparing: the snapshot that answers (part of the model key) is learned
    by one 1-token request (`settle`, `probe`) only after the user agreed to the cost. Until then the runner
    `assume`s the snapshot this warehouse last saw of the model (`spec_at`), so that pending work and its cost are
    computed, and a rerun with nothing pending sends nothing (issue 56, item 3)."""

    label = "chat-api"
    chat = True
    tokenizer = None
    billed = True

    def __init__(self, *, settings: dict[str, Any], where: str, backend: Callable[[ChatPrepared], Any],
                 make_spec: Callable[[str | None], Any], probe: Callable[[], str]) -> None:
        self.settings, self.where = settings, where
        self.device = where
        self.max_top_k = settings["top_logprobs"]
        self._backend, self._make_spec, self._probe = backend, make_spec, probe
        self.snapshot: str | None = None
        self.spec = make_spec(None)
        #: True until the provider has said which snapshot answers (`settle`)
        self.deferred = True

    def spec_at(self, revision: str | None) -> Any:
        """The model's spec were the provider to answer with the snapshot stored as `revision`."""
        return self._make_spec(revision)

    def assume(self, revision: str | None) -> None:
        """Take the snapshot stored as `revision` (the one a warehouse last saw) as the model's identity until the
        provider is asked (None: none seen; nothing of this model can be stored then)."""
        if self.deferred:
            self.snapshot, self.spec = revision, self._make_spec(revision)

    def settle(self) -> None:
        """Ask the provider once (a 1-token request) which snapshot answers now; the model key from then on."""
        if self.deferred:
            self.snapshot = self._probe()
            self.spec, self.deferred = self._make_spec(self.snapshot), False

    def keep_assumed(self) -> None:
        """Take the assumed snapshot (`assume`) as the model's identity without asking the provider: a rerun that
        only fetches batches submitted under it sends nothing, not even the probe of `settle` (the batch replies
        are still checked against it, `check_snapshot`)."""
        if self.deferred and self.snapshot is not None:
            self.deferred = False

    @property
    def prefill(self) -> bool:
        """Whether an assistant prefill is continued by the API."""
        return False

    @property
    def batch(self) -> bool:
        """Whether the requests go through the provider's batch API (`--batch`; `Provider.batch` refuses it where
        there is none)."""
        return bool(self.settings["batch"])

    def check_sampling(self, settings: SamplingSettings) -> None:
        """Refuse (one line, before any request) a setting the API cannot apply: by default a minimum length
        (`--min-new-tokens`), which no provider's own API can enforce."""
        if settings.min_new_tokens:
            raise UsageError(f"{self.where} cannot forbid stopping early: pass --min-new-tokens 0")

    def estimate(self, requests: int, input_chars: int, output_tokens: int) -> Estimate:
        return Estimate(requests, input_chars, output_tokens, self.settings)

    def load(self):
        self.settle()
        return self._backend(self)


class ChatBackend(EngineBase):
    """What every chat backend holds: its prepared model's identity and settings, no tokenizer, and the SDK's client
    (`connect(settings)`, each engine's own; a test may pass its own `client`)."""

    tokenizer = None
    #: the SDK's client of the settings: each engine's own `make_client`
    connect: Callable[[dict[str, Any]], Any]

    def __init__(self, prepared: ChatPrepared, client: Any = None) -> None:
        self.prepared, self.spec, self.settings = prepared, prepared.spec, prepared.settings
        self.device, self.snapshot, self.version = prepared.device, prepared.snapshot, None
        self.max_top_k = prepared.max_top_k if CHAT_LOGPROBS in self.capabilities else None
        self.batch = prepared.batch
        #: batch mode: the warehouse's record of submitted batches (`runners.batches.BatchJournal`), set by the
        #: runner before the first `chat`; the reason each request of the last ended batch got no reply
        self.journal: Any = None
        self.batch_errors: dict[str, str] = {}
        self.client = client or self.connect(self.settings)

    def calls(self, ask: ChatAsk) -> list[Callable[[], Any]]:
        """One call per request of `ask`, each returning its checked `ChatReply` (each engine's own)."""
        raise NotImplementedError

    def batched(self, ask: ChatAsk) -> list:
        """The replies to `ask` through the provider's batch API (`run_batched`; engines with a batch API)."""
        raise EngineError(f"--backend {self.name} has no batch API")

    def chat(self, messages: Sequence[Sequence[dict]], seeds: Sequence[int | None], settings: SamplingSettings, *,
             prefill: str | None = None, top_logprobs: int | None = None) -> list:
        """One reply per (messages[i], seeds[i]), `max_concurrency` requests at a time, in order (or one provider
        batch with `--batch`). A request that fails for good, a malformed reply or a reply from another snapshot
        raises `EngineError` (one line): none of the replies is returned, so the caller stores nothing of them."""
        ask = ChatAsk(messages, seeds, settings, prefill, top_logprobs)
        if self.batch:
            return self.batched(ask)
        return call_all(_call, self.calls(ask), self.settings["max_concurrency"])

    def chat_chunks(self, asks: Iterable[ChatAsk]) -> Iterator[list[list]]:
        """The replies of the chunks in `asks`, in order, as groups: each group is the replies of one chunk or more
        (the first as soon as all of its replies are in, with the next chunks already answered while the caller
        stored the last group: `call_chunks(gather=True)`), with up to `max_concurrency` requests in flight across
        chunk boundaries. The caller stores a group in one transaction (`replies_with`). With `--batch`, each chunk
        is one provider batch and one group."""
        if self.batch:
            for ask in asks:
                yield [self.batched(ask)]
            return
        yield from call_chunks((self.calls(ask) for ask in asks), self.settings["max_concurrency"], gather=True)

    def close(self) -> None:
        close = getattr(self.client, "close", None)
        if close is not None:
            close()


def provider_message(exc: Any) -> str:
    """The provider's own message of a failed request (`error.message` of its JSON body, else the SDK's text), at
    most 300 characters."""
    body = getattr(exc, "body", None)
    inner = body.get("error", body) if isinstance(body, dict) else None
    if isinstance(inner, dict) and inner.get("message"):
        return str(inner["message"])[:300]
    return str(getattr(exc, "message", exc))[:300]


def sdk_failure(exc: BaseException, sdk: Any, where: str, settings: dict[str, Any], refused: str) -> EngineError:
    """One line for a request that failed for good after the SDK's retries, for the SDKs that share their error
    classes (`openai`, `anthropic`: AuthenticationError, APITimeoutError, APIConnectionError, APIStatusError):
    where, the status and the provider's message; never the key (the SDKs' messages do not hold it). `refused`
    names what a 401 refused (e.g. "the API key in $OPENAI_API_KEY")."""
    retries = settings["retries"]
    if isinstance(exc, sdk.AuthenticationError):
        return EngineError(f"{where} refused {refused} (401): {provider_message(exc)}")
    if isinstance(exc, sdk.APITimeoutError):
        return EngineError(f"{where} did not answer within {settings['timeout_s']:g} s, {retries + 1} times; "
                           f"nothing of this chunk was stored (a provider that never answers may be down: lower "
                           f"--engine-arg timeout_s or retries to give up sooner; raise timeout_s only for one that "
                           f"answers slowly)")
    if isinstance(exc, sdk.APIConnectionError):
        return EngineError(f"{where} cannot be reached ({retries} retries): {exc}")
    if isinstance(exc, sdk.APIStatusError):
        retried = exc.status_code in (408, 409, 429) or exc.status_code >= 500
        after = f" after {retries} retries" if retried else ""
        return EngineError(f"{where} answered {exc.status_code}{after}: {provider_message(exc)}")
    return EngineError(f"{where}: {type(exc).__name__}: {exc}")


def readable(call: Callable[[], Any], settings: dict[str, Any], where: str) -> Any:
    """`call()` (one SDK request), sent again up to `retries` times when the reply's JSON cannot be read (a 200 reply
    cut off in transit: every SDK raises `json.JSONDecodeError`); after that, one line (`EngineError`)."""
    import json

    for _ in range(settings["retries"] + 1):
        try:
            return call()
        except json.JSONDecodeError as exc:
            last = exc
    raise EngineError(f"{where} sent a malformed reply {settings['retries'] + 1} time(s): its JSON cannot be read "
                      f"({last.msg} at character {last.pos}); nothing of this chunk was stored")


def first_reply(provider: Provider, settings: dict[str, Any], model: str, client: Any,
                ask: Callable[[Any], Any], failure: Callable[[BaseException, dict[str, Any]], EngineError]) -> Any:
    """The reply to the one 1-token request `ask(client)` that learns which snapshot answers for `model`, the client
    closed after it, for the SDKs that share their error classes (`openai`, `anthropic`): the SDK's NotFoundError
    is one line naming the model; any other failed request is `failure(exc, settings)`, one line."""
    sdk = provider.sdk_module()
    try:
        return readable(partial(ask, client), settings, provider.where(settings))
    except sdk.NotFoundError as exc:
        raise UsageError(f"{provider.where(settings)} has no model {model!r}: {provider_message(exc)}") from None
    except sdk.APIError as exc:
        raise failure(exc, settings) from None
    finally:
        client.close()


class Stop:
    """Set by the first call that fails (or by Ctrl-C): every call that has not started yet returns without sending
    (`guarded`). Cancelling the pool's queue alone leaves a race: a worker that has just finished the failing call
    may take the next one before the caller cancels it (one more billed request after a fatal failure)."""

    def __init__(self) -> None:
        import threading

        self.event = threading.Event()

    def guarded(self, call: Callable[[], Any]) -> Callable[[], Any]:
        """`call`, skipped once the run has stopped (it raises `Skipped`), and stopping the run when it fails."""
        def run():
            if self.event.is_set():
                raise Skipped()
            try:
                return call()
            except BaseException:
                self.event.set()
                raise
        return run


class Skipped(EngineError):
    """A call not sent because the run had already stopped (never reaches the user: the first failure is raised)."""


def call_all(one: Callable[[Any], Any], items: Sequence[Any], workers: int) -> list:
    """`one(item)` for every item, `workers` at a time, results in order. At the first failure (or Ctrl-C) no call
    starts any more (`Stop`; a billed API: nothing more is spent) and it is raised at once; calls in flight finish in
    their threads, their replies unused."""
    from concurrent.futures import FIRST_EXCEPTION, wait

    stop = Stop()
    pool = ThreadPoolExecutor(max(1, min(workers, len(items))))
    futures = [pool.submit(stop.guarded(partial(one, item))) for item in items]
    try:
        done, _ = wait(futures, return_when=FIRST_EXCEPTION)
        failed = next((f for f in futures if f in done and f.exception() is not None
                       and not isinstance(f.exception(), Skipped)), None)
        if failed is not None:
            raise failed.exception()
        return [future.result() for future in futures]
    finally:
        stop.event.set()
        pool.shutdown(wait=False, cancel_futures=True)


def _call(call: Callable[[], Any]) -> Any:
    return call()


def call_chunks(chunks: Iterable[Sequence[Callable[[], Any]]], workers: int, gather: bool = False) -> Iterator[list]:
    """The results of each chunk of calls, in order, each chunk as soon as all of its calls have returned, with up to
    `workers` calls running across chunk boundaries: while the caller stores one chunk, the next chunks' calls run
    (at least two chunks and 2 x `workers` calls are submitted ahead). At the first failure no call starts any more
    (`Stop`; a billed API: nothing more is spent); the chunks before the failing one whose calls had all started are
    still yielded, then the failure is raised. Ctrl-C stops what has not started; calls in flight finish in their
    threads, their replies unused.

    With `gather`, each item yielded is a list of chunks' results: the first chunk waited for, then every following
    chunk whose calls have all returned without failure by then (answered while the caller stored the last item),
    so a caller storing each item in one transaction stores less often when storing is slower than the replies (4
    chunks and 4 x `workers` calls are submitted ahead: never more than `workers` run at once)."""
    from collections import deque
    from concurrent.futures import FIRST_EXCEPTION, wait

    stop = Stop()
    pool = ThreadPoolExecutor(max(1, workers))
    source = iter(chunks)
    window: deque[list] = deque()  # the futures of each chunk submitted and not yielded yet

    ahead = 4 if gather else 2  # gathered: enough queued that chunks complete while the caller stores

    def submit_more() -> None:
        while not stop.event.is_set() and (len(window) < ahead or sum(map(len, window)) < ahead * workers):
            calls = next(source, None)
            if calls is None:
                return
            window.append([pool.submit(stop.guarded(call)) for call in calls])

    try:
        submit_more()
        while window:
            futures = window[0]
            done, _ = wait(futures, return_when=FIRST_EXCEPTION)
            failed = next((f for f in futures if f in done and not f.cancelled() and f.exception() is not None), None)
            if failed is not None:
                raise first_failure(window, failed.exception())
            window.popleft()
            results = [future.result() for future in futures]
            if gather:
                results = [results]
                while window and all(f.done() and not f.cancelled() and f.exception() is None for f in window[0]):
                    results.append([future.result() for future in window.popleft()])
            submit_more()  # before the caller stores this chunk, so the workers stay busy meanwhile
            yield results
    finally:
        stop.event.set()
        for futures in window:
            for future in futures:
                future.cancel()
        pool.shutdown(wait=False, cancel_futures=True)


def replies_with(chunks: Iterable[Sequence], groups: Iterable[list[list]]) -> Iterator[tuple[list, list]]:
    """Per group of `chat_chunks` (the replies of one chunk or more): the chunks' items joined, in order, and their
    replies joined, item by item."""
    source = iter(chunks)
    for group in groups:
        items: list = []
        replies: list = []
        for chunk_replies in group:
            items.extend(next(source))
            replies.extend(chunk_replies)
        yield items, replies


def first_failure(window, found: BaseException) -> BaseException:
    """The failure to raise: the real one where `found` is a call skipped after it (`Skipped`) in the same run."""
    if not isinstance(found, Skipped):
        return found
    for futures in window:
        for future in futures:
            if future.done() and not future.cancelled():
                error = future.exception()
                if error is not None and not isinstance(error, Skipped):
                    return error
    return found


def check_snapshot(where: str, got: str, expected: str) -> None:
    """One line when a reply comes from another snapshot than the run began with (nothing of its chunk stored)."""
    if got != expected:
        raise EngineError(f"{where} answered with snapshot {got!r} where this run began with {expected!r}; nothing "
                          f"of this chunk was stored: rerun to collect under the new snapshot (its own model key)")


# ------------------------------------------------------------------------------------------------------- batches
class BatchPending(EngineError):
    """A submitted batch has not ended within `batch_wait_s`: nothing of it is stored yet; a rerun fetches it."""


class BatchIncomplete(BatchPending):
    """A batch ended without a reply to some of its requests: nothing of its chunk is stored; the run is pending, as
    a rerun fetches the replies the batch holds and submits only the requests without one again (asked first)."""


def custom_id(body: dict) -> str:
    """A request's id inside a batch: a hash of its complete body (messages, settings, seed), so the same request
    has the same id in every run."""
    import hashlib
    import json

    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()[:48]


def flat_body(body: dict) -> dict:
    """`body` with its SDK-only `extra_body` fields merged in (what the wire carries, as a batch line needs it)."""
    out = {k: v for k, v in body.items() if k != "extra_body"}
    out.update(body.get("extra_body") or {})
    return out


def run_batched(engine: Any, bodies: list[dict]) -> list:
    """The replies to `bodies` through the provider's batch API, in order (`engine`: a batch-capable chat backend
    with `journal` set by the runner, and `submit_batch`, `poll_batch`, `batch_replies`).

    Batches recorded for these requests (a previous run's) are fetched first; the rest are submitted as one new
    batch, recorded at once; then each is waited for, up to `batch_wait_s` (`BatchPending` past it: run again to
    fetch). A request whose batch ended without a reply for it is submitted again; one still missing after that
    raises `EngineError` in one line."""
    journal = engine.journal
    if journal is None:
        raise EngineError("batch mode needs the runner's journal (the warehouse records each batch)")
    ids = [custom_id(b) for b in bodies]
    wanted = dict(zip(ids, bodies, strict=True))
    got: dict[str, Any] = {}
    for batch_id, held in journal.open_batches(ids):
        got.update({c: r for c, r in wait_batch(engine, batch_id, len(held)).items() if c in wanted})
    missing = [c for c in dict.fromkeys(ids) if c not in got]
    if missing:
        journal.submitting(len(missing))  # a rerun that meant only to fetch asks before sending more
        batch_id = engine.submit_batch([(c, wanted[c]) for c in missing])
        journal.record(batch_id, missing)
        got.update({c: r for c, r in wait_batch(engine, batch_id, len(missing)).items() if c in wanted})
        still = [c for c in missing if c not in got]
        if still:
            why = engine.batch_errors.get(still[0], "no reply")
            raise BatchIncomplete(f"{len(still)} request(s) of batch {batch_id} got no reply (the first: {why}); "
                                  f"nothing of this chunk was stored: run the same command again to fetch the "
                                  f"{len(missing) - len(still)} replies the batch holds and to send the other "
                                  f"{len(still)} again (asked first)")
    return [got[c] for c in ids]


def wait_batch(engine: Any, batch_id: str, size: int) -> dict[str, Any]:
    """custom id -> reply of a batch once it has ended (`engine.poll_batch` every `batch_poll_s`); `BatchPending`
    after `batch_wait_s`."""
    import time

    settings = engine.settings
    started = time.monotonic()
    while True:
        state, done, ended = engine.poll_batch(batch_id)
        if ended:
            return engine.batch_replies(batch_id)
        if time.monotonic() - started >= settings["batch_wait_s"]:
            raise BatchPending(f"batch {batch_id} is {state} ({done} of {size} requests done) after "
                               f"{settings['batch_wait_s']:g} s; nothing of it is stored yet: run the same command "
                               f"again to fetch its results (it is not submitted again)")
        engine.journal.waiting(batch_id, state, done, size)
        time.sleep(settings["batch_poll_s"])
