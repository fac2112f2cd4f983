"""Hosted chat models through OpenAI's chat completions API (`--backend openai-chat`): OpenAI itself, or anything
that speaks `/v1/chat/completions` (vLLM's and llama.cpp's servers, Ollama) with `--base-url`. Through the official
`openai` SDK (`pip install 'biaslab[openai]'`).

`--model` is the provider's model id: no weights and no tokenizer here. The messages are sent as they are, so what
the model saw is the stored messages (`choice_requests.prompt_text`, JSON), never a local tokenization of them.

- `chat` (choice sample mode, gen): one request per sample, with its `seed` (stored), temperature, top_p and the
  token limit set explicitly; `top_k` and `min_tokens` only where the server takes vLLM's sampling extensions
  (`extensions`: a --base-url server whose `GET /version` says it is vLLM, or set), else a sample-mode or gen
  `--top-k` other than 0 (0: no top-k truncation) or a `--min-new-tokens` other than 0 is refused in one line
  before any request.
- `chat_logprobs` (choice logprobs mode): one greedy request per prompt with `logprobs` and `top_logprobs` (at most
  `MAX_TOP_LOGPROBS`, OpenAI's limit); the reply's tokens with their alternatives are stored
  (`chat_positions`), and the option probabilities are derived from the alternatives where the answer begins
  (`biaslab.runners.protocols.choice_chat`).
- An assistant prefill is sent only where the server continues an assistant message (vLLM's
  `continue_final_message`, part of its extensions); elsewhere the model must write the prefill itself and the
  answer parser reads past it (the `lead`, as for chat templates that reject a prefill).

The model key holds the backend, the model id, the snapshot the provider reports (the reply's `model`, e.g.
gpt-4o-2024-08-06; not the `system_fingerprint`, which OpenAI changes from time to time) and, for a vLLM server,
its version; the snapshot is learned from one 1-token request when the model is prepared, and a reply naming
another model mid-run stops the run before its chunk is stored (a rerun collects under the new snapshot's key, so
evidence of two snapshots never mixes). The base URL is not part of the key.

Requests run `max_concurrency` at a time, each bounded by `timeout_s`; the SDK retries 408, 409, 429 and 5xx replies
and connection errors `retries` times with backoff, honouring Retry-After. A request that still fails stops the
run with one line (status and the provider's message), and nothing of its chunk is stored. The API key is read from
the environment variable `api_key_env` names (default OPENAI_API_KEY when no --base-url is given; none for a local
server) and is never written anywhere: not to the warehouse, the runs table, the recorded command, logs or exports.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

from pydantic import Field

from ..errors import EngineError, UsageError
from .base import CHAT, CHAT_LOGPROBS, BackendOptions, ChatReply, SamplingSettings
from .chat import (CHAT_FLAGS, MAX_TOP_LOGPROBS, WHY_NOT, ChatAsk, ChatBackend, ChatOptions,  # noqa: F401
                   ChatPrepared, Estimate, Provider, check_snapshot, first_reply, flat_body, readable, run_batched,
                   sdk_failure)

__all__ = ["NAME", "CAPABILITIES", "WHY_NOT", "Options", "FLAGS", "installed", "validate_options", "prepare",
           "ChatPrepared", "OpenAIChatPrepared", "OpenAIChatBackend", "MAX_TOP_LOGPROBS", "Estimate"]

NAME = "openai-chat"
CAPABILITIES = frozenset({CHAT, CHAT_LOGPROBS})
#: OpenAI's own API, given explicitly (the SDK would otherwise read OPENAI_BASE_URL, recorded nowhere)
OPENAI_URL = "https://api.openai.com/v1"


class Options(ChatOptions):
    """The engine arguments of `--backend openai-chat` (`--engine-arg KEY=VALUE`, or the dedicated flags): those of
    every chat engine (`chat.ChatOptions`) and `extensions`; anything else is refused in one line."""

    extensions: bool | None = Field(None, description="the server takes vLLM's sampling extensions (top_k, "
                                                      "min_tokens, continue_final_message); default: when the "
                                                      "server says it is vLLM (GET /version)")


FLAGS = CHAT_FLAGS
#: the key is read from OPENAI_API_KEY when no --base-url is given; the extra brings httpx too (`GET /version` of
#: a --base-url server)
PROVIDER = Provider(NAME, Options, sdk="openai", extra="openai", key_env="OPENAI_API_KEY", api="OpenAI's API",
                    also=("httpx",))
installed = PROVIDER.installed
validate_options = PROVIDER.validate_options


def make_client(settings: dict[str, Any]):
    """The SDK's client: the key from the environment, the timeout and retries of the settings."""
    return PROVIDER.sdk_module().OpenAI(api_key=PROVIDER.key(settings), base_url=settings["base_url"] or OPENAI_URL,
                                        timeout=settings["timeout_s"], max_retries=settings["retries"])


def failure(exc: BaseException, settings: dict[str, Any]) -> EngineError:
    """One line for a request that failed for good (after the SDK's retries): `chat.sdk_failure`."""
    import openai

    var = settings["api_key_env"] or (PROVIDER.key_env if settings["base_url"] is None else None)
    refused = f"the API key in ${var}" if var else "the request without a key (give --api-key-env)"
    return sdk_failure(exc, openai, PROVIDER.where(settings), settings, refused)


def snapshot_of(reply: Any) -> str:
    """What the provider reports of the model that answered: its `model` (a dated snapshot such as
    gpt-4o-2024-08-06). The `system_fingerprint` is not part of it: OpenAI changes it from time to time and may
    serve several at once, which would split one model's evidence over keys run after run."""
    return str(getattr(reply, "model", "") or "")


def server_version(settings: dict[str, Any]) -> str | None:
    """vLLM's version when the server at `base_url` is vLLM (`GET /version` answers {"version": ...}), else None
    (OpenAI's API, llama.cpp, Ollama, gateways: no vLLM extensions assumed). Only a --base-url server is asked."""
    if settings["base_url"] is None:
        return None
    import httpx

    root = settings["base_url"].removesuffix("/v1")
    try:
        answer = httpx.get(f"{root}/version", timeout=min(settings["timeout_s"], 10.0))
        version = answer.json().get("version") if answer.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
    return str(version) if isinstance(version, str) and version else None


def prepare(model: str, options: BackendOptions) -> OpenAIChatPrepared:
    """The model's settings, checked, and (unless `extensions` is set) whether a --base-url server is vLLM
    (`GET /version`, free: it decides the request format), whose sampling extensions are then used and whose version
    joins the model key. No completion is sent: the snapshot that answers for `model` (the key's revision) is asked
    once, by a 1-token request, when the runner settles it (`ChatPrepared.settle`). No weights, no tokenizer."""
    validate_options(options)
    settings = PROVIDER.settings(options)
    version = server_version(settings)
    extensions = settings["extensions"] if settings["extensions"] is not None else version is not None

    def probe() -> str:
        reply = first_reply(PROVIDER, settings, model, make_client(settings),
                            lambda client: client.chat.completions.create(
                                model=model, messages=[{"role": "user", "content": "Say OK."}],
                                max_completion_tokens=1, temperature=0.0, seed=0), failure)
        return snapshot_of(reply)

    return OpenAIChatPrepared(settings={**settings, "extensions": extensions}, where=PROVIDER.where(settings),
                              backend=OpenAIChatBackend, probe=probe,
                              make_spec=lambda snapshot: PROVIDER.spec(model, snapshot or None, version))


class OpenAIChatPrepared(ChatPrepared):
    """The prepared model of `--backend openai-chat`: the prefill is continued, and top_k and min_tokens applied,
    only where the server takes vLLM's extensions."""

    @property
    def prefill(self) -> bool:
        return bool(self.settings["extensions"])

    def check_sampling(self, settings: SamplingSettings) -> None:
        if self.settings["extensions"]:
            return
        if settings.top_k != 0:
            raise UsageError(f"{self.where} takes no top_k (OpenAI's API has none): pass --top-k 0 (no top-k "
                             f"truncation, stored as 0), or --engine-arg extensions=true for a server that takes "
                             f"vLLM's extensions")
        super().check_sampling(settings)


class OpenAIChatBackend(ChatBackend):
    """The chat backend (see the module docstring): `chat` returns one `ChatReply` per (messages, seed)."""

    name = NAME
    capabilities = CAPABILITIES
    connect = staticmethod(make_client)

    def __init__(self, prepared: OpenAIChatPrepared, client: Any = None) -> None:
        super().__init__(prepared, client)
        #: custom id -> whether log-probabilities were asked, of the batch this process submitted
        self._batch_logprobs: dict[str, bool] = {}

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

    def calls(self, ask: ChatAsk) -> list:
        """One call per (messages[i], seeds[i]), each returning its checked reply; `EngineError` (one line) for a
        request that fails for good, a malformed reply, or a reply from another snapshot."""
        return [partial(self._one, body) for body in self._bodies(ask)]

    def batched(self, ask: ChatAsk) -> list[ChatReply]:
        """The replies through OpenAI's Batch API (`run_batched`; the runner sets `journal`)."""
        return run_batched(self, self._bodies(ask))

    def _bodies(self, ask: ChatAsk) -> list[dict[str, Any]]:
        return [self.body(m, s, ask.settings, prefill=ask.prefill, top_logprobs=ask.top_logprobs)
                for m, s in zip(ask.messages, ask.seeds, strict=True)]

    def submit_batch(self, requests: Sequence[tuple[str, dict]]) -> str:
        """Upload the requests as a JSONL file and create a batch over /v1/chat/completions; its id."""
        import json

        import openai

        lines = [json.dumps({"custom_id": cid, "method": "POST", "url": "/v1/chat/completions",
                             "body": flat_body(body)}) for cid, body in requests]
        self._batch_logprobs = {cid: bool(body.get("logprobs")) for cid, body in requests}
        try:
            uploaded = self.client.files.create(file=("biaslab-batch.jsonl", "\n".join(lines).encode()),
                                                purpose="batch")
            batch = self.client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                               completion_window="24h")
        except openai.OpenAIError as exc:
            raise failure(exc, self.settings) from None
        return str(batch.id)

    def poll_batch(self, batch_id: str) -> tuple[str, int, bool]:
        """(status, requests done, ended) of a batch."""
        import openai

        try:
            batch = self.client.batches.retrieve(batch_id)
        except openai.OpenAIError as exc:
            raise failure(exc, self.settings) from None
        counts = getattr(batch, "request_counts", None)
        done = int(getattr(counts, "completed", 0) or 0) + int(getattr(counts, "failed", 0) or 0)
        return str(batch.status), done, batch.status in ("completed", "failed", "expired", "cancelled")

    def batch_replies(self, batch_id: str) -> dict[str, ChatReply]:
        """custom id -> reply of an ended batch (its output file); errors kept in `batch_errors`."""
        import json

        import openai
        from openai.types.chat import ChatCompletion

        try:
            batch = self.client.batches.retrieve(batch_id)
            output = self.client.files.content(batch.output_file_id).text if batch.output_file_id else ""
            errors = self.client.files.content(batch.error_file_id).text if batch.error_file_id else ""
        except openai.OpenAIError as exc:
            raise failure(exc, self.settings) from None
        logprobs = self._batch_logprobs
        out: dict[str, ChatReply] = {}
        self.batch_errors = {}
        for line in [*output.splitlines(), *errors.splitlines()]:
            if not line.strip():
                continue
            entry = json.loads(line)
            cid, response = str(entry.get("custom_id")), entry.get("response") or {}
            if response.get("status_code") == 200:
                completion = ChatCompletion.model_validate(response.get("body"))
                asked = logprobs.get(cid, bool(getattr(completion.choices[0], "logprobs", None))
                                     if completion.choices else False)
                out[cid] = self.reply(completion, asked)
            else:
                error = entry.get("error") or (response.get("body") or {}).get("error") or {}
                self.batch_errors[cid] = str(error.get("message", error))[:200]
        return out

    def _one(self, body: dict[str, Any]) -> ChatReply:
        import openai

        try:
            reply = readable(partial(self.client.chat.completions.create, **body), self.settings,
                             PROVIDER.where(self.settings))
        except openai.OpenAIError as exc:
            raise failure(exc, self.settings) from None
        return self.reply(reply, bool(body.get("logprobs")))

    def reply(self, reply: Any, logprobs: bool) -> ChatReply:
        """A `ChatReply` of the SDK's response, checked: one choice with a message, the snapshot the run began
        with, and the log-probabilities asked for."""
        where = PROVIDER.where(self.settings)
        snapshot = snapshot_of(reply)
        check_snapshot(where, snapshot, self.snapshot)
        choices = getattr(reply, "choices", None) or []
        message = getattr(choices[0], "message", None) if choices else None
        if message is None:
            raise EngineError(f"{where} sent a reply without a message (malformed reply)")
        reason = str(getattr(choices[0], "finish_reason", None) or "unknown")
        text = getattr(message, "content", None)
        positions = None
        if text is None:  # a refusal (or nothing): stored as such; in logprobs mode all its mass is unresolved
            refusal = getattr(message, "refusal", None)
            return ChatReply("", "refused" if refusal else reason, snapshot, [] if logprobs else None)
        if logprobs:
            content = getattr(getattr(choices[0], "logprobs", None), "content", None)
            if content is None:
                raise EngineError(f"{where} returned no log-probabilities where they were asked (logprobs mode "
                                  f"needs a server that returns top_logprobs)")
            positions = [(str(t.token), float(t.logprob), [(str(a.token), float(a.logprob))
                                                           for a in (t.top_logprobs or [])]) for t in content]
        return ChatReply(str(text), reason, snapshot, positions)
