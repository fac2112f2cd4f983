"""Google's Gemini models through the official Gen AI SDK (`--backend gemini`, `pip install 'biaslab[gemini]'`).

`--model` is the provider's model id (e.g. gemini-2.5-flash); no weights, no tokenizer. The prompt's system text
goes in `system_instruction`, the user message as a user turn. Gemini does not continue an assistant (model)
turn, so the model writes the forced-choice prefill itself and the parser reads past it (the `lead`).

- `chat` (choice sample mode, gen): one request per sample with its `seed` (stored), temperature, topP, topK
  (omitted for `--top-k 0`: no truncation) and maxOutputTokens set explicitly; the API cannot forbid stopping
  early, so gen needs `--min-new-tokens 0` (refused in one line otherwise).
- `chat_logprobs` (choice logprobs mode): one greedy request per prompt with `responseLogprobs` and `logprobs` top
  candidates per step (`top_logprobs`, at most 20); `logprobsResult` gives each step's chosen token and its top
  candidates, stored as `chat_positions` and read as for every chat API (`runners/protocols/choice_chat.py`).

The model key holds the model id and the `modelVersion` the API reports (learned from one 1-token request); a
reply from another version stops the run before its chunk is stored. The SDK retries nothing unless told: here it
retries 408, 429 and 5xx `retries` times with exponential backoff (it does not read Retry-After), each request
bounded by `timeout_s`. The key is read from the variable `api_key_env` names (default GEMINI_API_KEY without
--base-url) and never stored.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

from pydantic import Field

from ..errors import EngineError, UsageError
from .base import CHAT, CHAT_LOGPROBS, BackendOptions, ChatReply, SamplingSettings
from .chat import (CHAT_FLAGS, WHY_NOT, ChatAsk, ChatBackend, ChatOptions, ChatPrepared,  # noqa: F401
                   Provider, check_snapshot, readable)

__all__ = ["NAME", "CAPABILITIES", "WHY_NOT", "Options", "FLAGS", "installed", "validate_options", "prepare",
           "GeminiPrepared", "GeminiBackend"]

NAME = "gemini"
CAPABILITIES = frozenset({CHAT, CHAT_LOGPROBS})
#: HTTP statuses the SDK retries (with `retries`)
RETRY_STATUSES = (408, 429, 500, 502, 503, 504)


class Options(ChatOptions):
    """The engine arguments of `--backend gemini`: those of every chat engine (`chat.ChatOptions`) and
    `api_version`; anything else is refused in one line."""

    api_version: str | None = Field(None, pattern=r"^v[0-9a-z]+$",
                                    description="the API version in the path (default: the SDK's)")


FLAGS = CHAT_FLAGS
#: the key is read from GEMINI_API_KEY when no --base-url is given; no batch API yet
PROVIDER = Provider(NAME, Options, sdk="google.genai", extra="gemini", key_env="GEMINI_API_KEY",
                    api="Google's Gemini API", batch=False)
installed = PROVIDER.installed
validate_options = PROVIDER.validate_options


def make_client(settings: dict[str, Any]):
    """The SDK's client: the key from the environment, the base URL and version, the timeout and the retries."""
    genai = PROVIDER.sdk_module()
    from google.genai import types

    retry = types.HttpRetryOptions(attempts=settings["retries"] + 1, initial_delay=1.0, max_delay=30.0,
                                   http_status_codes=list(RETRY_STATUSES))
    http = types.HttpOptions(base_url=settings["base_url"], api_version=settings["api_version"],
                             timeout=int(settings["timeout_s"] * 1000), retry_options=retry)
    return genai.Client(api_key=PROVIDER.key(settings), http_options=http)


def failure(exc: BaseException, settings: dict[str, Any]) -> EngineError:
    """One line for a request that failed for good (after the retries): where, the status and the message."""
    from google.genai import errors

    where = PROVIDER.where(settings)
    if isinstance(exc, errors.APIError):
        if exc.code in (401, 403):
            var = settings["api_key_env"] or PROVIDER.key_env
            return EngineError(f"{where} refused the API key in ${var} ({exc.code}): {exc.message}")
        return EngineError(f"{where} answered {exc.code} after {settings['retries']} retries: {exc.message}")
    name = type(exc).__name__
    if "Timeout" in name:
        return EngineError(f"{where} did not answer within {settings['timeout_s']:g} s ({settings['retries']} "
                           f"retries); nothing of this chunk was stored (raise --engine-arg timeout_s=...)")
    if "Connect" in name:
        return EngineError(f"{where} cannot be reached: {exc}")
    return EngineError(f"{where}: {name}: {exc}")


def _calls_failed(exc: BaseException) -> bool:
    """Whether `exc` is the SDK's or its HTTP client's (a request that failed), not a bug here."""
    from google.genai import errors

    module = type(exc).__module__ or ""
    return isinstance(exc, errors.APIError) or module.startswith(("httpx", "httpcore"))


def config(system: str | None, settings: SamplingSettings, seed: int | None, top_logprobs: int | None):
    """The `GenerateContentConfig` of one reply (every sampling parameter explicit; topK omitted for 0)."""
    from google.genai import types

    return types.GenerateContentConfig(
        system_instruction=system or None, temperature=settings.temperature, top_p=settings.top_p,
        top_k=settings.top_k or None, seed=None if seed is None else int(seed), candidate_count=1,
        max_output_tokens=settings.max_new_tokens, response_logprobs=bool(top_logprobs) or None,
        logprobs=top_logprobs or None)


def contents(messages: Sequence[dict]) -> tuple[str | None, list[dict]]:
    """(system text, the turns) of chat messages: system -> system_instruction, user -> "user", assistant ->
    "model"."""
    system = "\n\n".join(m["content"] for m in messages if m["role"] == "system") or None
    turns = [{"role": "model" if m["role"] == "assistant" else "user", "parts": [{"text": m["content"]}]}
             for m in messages if m["role"] != "system"]
    return system, turns


def prepare(model: str, options: BackendOptions) -> GeminiPrepared:
    """The model's settings, checked; nothing is sent: the model version that answers for `model` (the key's
    revision) is asked once, by a 1-token request, when the runner settles it (`ChatPrepared.settle`)."""
    validate_options(options)
    settings = PROVIDER.settings(options)
    return GeminiPrepared(settings=settings, where=PROVIDER.where(settings), backend=GeminiBackend,
                          make_spec=partial(PROVIDER.spec, model), probe=partial(_probe, model, settings))


def _probe(model: str, settings: dict[str, Any]) -> str:
    """The model version that answers for `model` (one 1-token request)."""
    from google.genai import errors

    client = make_client(settings)
    try:
        reply = readable(partial(client.models.generate_content, model=model, contents="Say OK.",
                                 config=config(None, SamplingSettings(0.0, 0, 1.0, 1), 0, None)), settings,
                         PROVIDER.where(settings))
    except errors.APIError as exc:
        if exc.code == 404:
            raise UsageError(f"{PROVIDER.where(settings)} has no model {model!r}: {exc.message}") from None
        raise failure(exc, settings) from None
    except Exception as exc:  # the HTTP client's own (refused connection, timeout): one line
        if not _calls_failed(exc):
            raise
        raise failure(exc, settings) from None
    return str(getattr(reply, "model_version", None) or model)


class GeminiPrepared(ChatPrepared):
    """The prepared model of `--backend gemini`: no prefill; top_k applied; no minimum length."""


class GeminiBackend(ChatBackend):
    """The Gemini chat backend (see the module docstring)."""

    name = NAME
    capabilities = CAPABILITIES
    connect = staticmethod(make_client)

    def calls(self, ask: ChatAsk) -> list:
        """One call per (messages[i], seeds[i]), each returning its checked reply; `EngineError` (one line) for a
        request that fails for good, a malformed reply or another model version."""
        if ask.prefill:
            raise EngineError(f"--backend {NAME} does not continue a prefill")  # GeminiPrepared.prefill is False
        return [partial(self._one, m, s, ask.settings, ask.top_logprobs)
                for m, s in zip(ask.messages, ask.seeds, strict=True)]

    def _one(self, messages: Sequence[dict], seed: int | None, settings: SamplingSettings,
             top_logprobs: int | None) -> ChatReply:
        system, turns = contents(messages)
        try:
            reply = readable(partial(self.client.models.generate_content, model=self.spec.name, contents=turns,
                                     config=config(system, settings, seed, top_logprobs)), self.settings,
                             PROVIDER.where(self.settings))
        except Exception as exc:
            if not _calls_failed(exc):
                raise
            raise failure(exc, self.settings) from None
        return self.reply(reply, bool(top_logprobs))

    def reply(self, reply: Any, logprobs: bool) -> ChatReply:
        """A `ChatReply` of the SDK's response, checked: the model version the run began with, one candidate (or a
        blocked prompt: stored as refused), and the log-probabilities asked for."""
        where = PROVIDER.where(self.settings)
        snapshot = str(getattr(reply, "model_version", None) or self.spec.name)
        check_snapshot(where, snapshot, self.snapshot)
        candidates = getattr(reply, "candidates", None) or []
        if not candidates:
            blocked = getattr(getattr(reply, "prompt_feedback", None), "block_reason", None)
            if blocked is None:
                raise EngineError(f"{where} sent a reply without a candidate (malformed reply)")
            return ChatReply("", "refused", snapshot, [] if logprobs else None)
        first = candidates[0]
        parts = getattr(getattr(first, "content", None), "parts", None) or []
        text = "".join(getattr(p, "text", None) or "" for p in parts)
        reason = getattr(first, "finish_reason", None)
        reason = str(getattr(reason, "value", reason) or "unknown").lower()
        positions = None
        if logprobs:
            result = getattr(first, "logprobs_result", None)
            chosen = getattr(result, "chosen_candidates", None)
            if chosen is None:
                raise EngineError(f"{where} returned no log-probabilities where they were asked (logprobs mode needs "
                                  f"a model that returns logprobsResult)")
            tops = getattr(result, "top_candidates", None) or []
            positions = []
            for step, token in enumerate(chosen):
                alternatives = tops[step].candidates if step < len(tops) and tops[step].candidates else []
                positions.append((str(token.token), float(token.log_probability),
                                  [(str(a.token), float(a.log_probability)) for a in alternatives]))
        return ChatReply(text, reason, snapshot, positions)
