"""Anthropic's Claude models through the official SDK's Messages API (`--backend anthropic`,
`pip install 'biaslab[anthropic]'`).

`--model` is the provider's model id; no weights, no tokenizer. The prompt's system text goes in `system`, the
user message as a user turn, and the forced-choice prefill as a final assistant message, which the API continues
(adaptation ``chat_api+prefill_continued``).

- `chat` (choice sample mode, gen): one request per sample; temperature, top_p and top_k are sent in the request
  body (the installed SDK no longer names them, so they go as extra body fields; an API that refuses one answers
  400, reported in one line). The Messages API takes no seed: the per-sample seed is stored to identify the sample
  (a rerun completes missing indices and never duplicates), but replies are not reproducible. It cannot forbid
  stopping early, so gen needs `--min-new-tokens 0`.
- No log-probabilities: logprobs mode, prob and exact mode are refused in one line with the reason.

The model key holds the model id and the `model` the reply reports; a reply naming another model stops the run
before its chunk is stored. The SDK retries 408, 409, 429 and 5xx `retries` times with backoff and honours
Retry-After; each request is bounded by `timeout_s`. The key is read from the variable `api_key_env` names
(default ANTHROPIC_API_KEY without --base-url) and never stored; the base URL is given to the SDK explicitly (it
would otherwise read ANTHROPIC_BASE_URL, recorded nowhere).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

from ..errors import EngineError
from .base import CHAT, CHAT_LOGPROBS, BackendOptions, ChatReply, SamplingSettings
from .chat import (CHAT_FLAGS, WHY_NOT, ChatAsk, ChatBackend, ChatOptions, ChatPrepared, Provider, check_snapshot,
                   first_reply, flat_body, readable, run_batched, sdk_failure)

__all__ = ["NAME", "CAPABILITIES", "WHY_NOT", "Options", "FLAGS", "installed", "validate_options", "prepare",
           "AnthropicPrepared", "AnthropicBackend"]

NAME = "anthropic"
CAPABILITIES = frozenset({CHAT})
WHY_NOT = {**WHY_NOT, CHAT_LOGPROBS: "Anthropic's Messages API returns no log-probabilities (use --mode sample)"}
#: Anthropic's own API, given explicitly
ANTHROPIC_URL = "https://api.anthropic.com"
#: stop_reason -> the finish_reason stored (others are stored as they come)
FINISH = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length", "refusal": "refused"}


class Options(ChatOptions):
    """The engine arguments of `--backend anthropic`: those of every chat engine (`chat.ChatOptions`; its
    `top_logprobs` unused); anything else is refused in one line."""


FLAGS = CHAT_FLAGS
#: the key is read from ANTHROPIC_API_KEY when no --base-url is given
PROVIDER = Provider(NAME, Options, sdk="anthropic", extra="anthropic", key_env="ANTHROPIC_API_KEY",
                    api="Anthropic's API")
installed = PROVIDER.installed
validate_options = PROVIDER.validate_options


def make_client(settings: dict[str, Any]):
    """The SDK's client: the key from the environment, the base URL, the timeout and the retries."""
    return PROVIDER.sdk_module().Anthropic(api_key=PROVIDER.key(settings),
                                           base_url=settings["base_url"] or ANTHROPIC_URL,
                                           timeout=settings["timeout_s"], max_retries=settings["retries"])


def failure(exc: BaseException, settings: dict[str, Any]) -> EngineError:
    """One line for a request that failed for good (after the SDK's retries): `chat.sdk_failure`."""
    import anthropic

    return sdk_failure(exc, anthropic, PROVIDER.where(settings), settings, "the API key")


def request(model: str, messages: Sequence[dict], settings: SamplingSettings, prefill: str | None) -> dict:
    """The complete Messages API request of one reply: system text apart, the prefill as a final assistant
    message, the sampling settings in the body (top_k omitted for 0: no truncation)."""
    system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
    turns = [{"role": m["role"], "content": m["content"]} for m in messages if m["role"] != "system"]
    if prefill:
        turns.append({"role": "assistant", "content": prefill})
    sampling: dict[str, Any] = {"temperature": settings.temperature, "top_p": settings.top_p}
    if settings.top_k:
        sampling["top_k"] = settings.top_k
    body: dict[str, Any] = {"model": model, "max_tokens": settings.max_new_tokens, "messages": turns,
                            "extra_body": sampling}
    if system:
        body["system"] = system
    return body


def prepare(model: str, options: BackendOptions) -> AnthropicPrepared:
    """The model's settings, checked; nothing is sent: the model that answers for `model` (the key's revision) is
    asked once, by a 1-token request, when the runner settles it (`ChatPrepared.settle`)."""
    validate_options(options)
    settings = PROVIDER.settings(options)

    def probe() -> str:
        reply = first_reply(PROVIDER, settings, model, make_client(settings), lambda client: client.messages.create(
            model=model, max_tokens=1, messages=[{"role": "user", "content": "Say OK."}]), failure)
        return str(getattr(reply, "model", None) or model)

    return AnthropicPrepared(settings=settings, where=PROVIDER.where(settings), backend=AnthropicBackend,
                             make_spec=partial(PROVIDER.spec, model), probe=probe)


class AnthropicPrepared(ChatPrepared):
    """The prepared model of `--backend anthropic`: the prefill is continued; no minimum length."""

    @property
    def prefill(self) -> bool:
        return True


class AnthropicBackend(ChatBackend):
    """The Anthropic chat backend (see the module docstring)."""

    name = NAME
    capabilities = CAPABILITIES
    connect = staticmethod(make_client)

    def calls(self, ask: ChatAsk) -> list:
        """One call per request (the seeds identify samples; the API takes none), each returning its checked reply;
        `EngineError` (one line) for a failure, a malformed reply or another model."""
        if ask.top_logprobs:
            raise EngineError(f"--backend {NAME} returns no log-probabilities")  # refused before by WHY_NOT
        return [partial(self._one, request(self.spec.name, m, ask.settings, ask.prefill)) for m in ask.messages]

    def batched(self, ask: ChatAsk) -> list[ChatReply]:
        """One request per sample through the Message Batches API: the sample's seed goes into the batch's custom
        ids (not sent)."""
        bodies = [request(self.spec.name, m, ask.settings, ask.prefill) for m in ask.messages]
        return run_batched(self, [{**b, "metadata_seed": int(s)} if s is not None else b
                                  for b, s in zip(bodies, ask.seeds, strict=True)])

    def submit_batch(self, requests: Sequence[tuple[str, dict]]) -> str:
        """Create a message batch of the requests; its id."""
        import anthropic

        batch_requests = [{"custom_id": cid, "params": {k: v for k, v in flat_body(body).items()
                                                        if k != "metadata_seed"}} for cid, body in requests]
        try:
            batch = self.client.messages.batches.create(requests=batch_requests)
        except anthropic.AnthropicError as exc:
            raise failure(exc, self.settings) from None
        return str(batch.id)

    def poll_batch(self, batch_id: str) -> tuple[str, int, bool]:
        """(processing status, requests done, ended) of a message batch."""
        import anthropic

        try:
            batch = self.client.messages.batches.retrieve(batch_id)
        except anthropic.AnthropicError as exc:
            raise failure(exc, self.settings) from None
        counts = batch.request_counts
        done = counts.succeeded + counts.errored + counts.canceled + counts.expired
        return str(batch.processing_status), int(done), batch.processing_status == "ended"

    def batch_replies(self, batch_id: str) -> dict[str, ChatReply]:
        """custom id -> reply of an ended batch (its results); errors kept in `batch_errors`."""
        import anthropic

        out: dict[str, ChatReply] = {}
        self.batch_errors = {}
        try:
            for entry in self.client.messages.batches.results(batch_id):
                if entry.result.type == "succeeded":
                    out[str(entry.custom_id)] = self.reply(entry.result.message)
                else:
                    error = getattr(getattr(entry.result, "error", None), "error", None)
                    self.batch_errors[str(entry.custom_id)] = str(getattr(error, "message", entry.result.type))
        except anthropic.AnthropicError as exc:
            raise failure(exc, self.settings) from None
        return out

    def _one(self, body: dict) -> ChatReply:
        import anthropic

        try:
            reply = readable(partial(self.client.messages.create, **body), self.settings, PROVIDER.where(self.settings))
        except anthropic.AnthropicError as exc:
            raise failure(exc, self.settings) from None
        return self.reply(reply)

    def reply(self, reply: Any) -> ChatReply:
        """A `ChatReply` of the SDK's message, checked: the model the run began with and a list of content blocks."""
        where = PROVIDER.where(self.settings)
        snapshot = str(getattr(reply, "model", None) or self.spec.name)
        check_snapshot(where, snapshot, self.snapshot)
        blocks = getattr(reply, "content", None)
        if blocks is None:
            raise EngineError(f"{where} sent a reply without content (malformed reply)")
        text = "".join(getattr(b, "text", "") or "" for b in blocks if getattr(b, "type", None) == "text")
        reason = str(getattr(reply, "stop_reason", None) or "unknown")
        return ChatReply(text, FINISH.get(reason, reason), snapshot, None)
