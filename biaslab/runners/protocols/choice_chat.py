"""The choice protocol asked of a chat API (`--backend openai-chat`): the prompt as messages, answered in sample mode
(seeded replies, parsed as in-process samples are) or in logprobs mode (approximate option probabilities from the
top log-probabilities of the first answer token).

Messages: the prompt file's system text as the system message, its user template filled as the user message; the
prefill is sent as an assistant message to continue where the server can (vLLM's continue_final_message: adaptation
``chat_api+prefill_continued``), else the model must write it itself and the parser reads past it (``lead``;
adaptation ``chat_api+no_prefill``). `choice_requests.prompt_text` holds the messages sent, as JSON.

Logprobs mode (docs/design.md section 6). One greedy request per prompt asks the top `K_r` log-probabilities
(`top_logprobs`, at most 20) at every generated position; the answer begins at the first position whose token
completes the lead (the prefill), and there each returned alternative `a` with log-probability `l_a` is read by the
parser as the start of the reply (`AnswerParser.first_token`): an option (consistent with it alone), invalid, or
unresolved (several options, or nothing of the answer yet). At the protocol's temperature T and top-k k:

    w_a = exp((l_a - l_max) / T) over the alternatives kept (the k most probable when k <= K_r, else all K_r),
    U   = the largest tempered weight the tokens NOT returned can have: none when k <= K_r; else, with R = 1 - sum_a
          exp(l_a) their mass at T = 1 and p_min the smallest returned probability, at most m = min(k - K_r, R /
          p_min) tokens of probability <= p_min: U = m exp((log p_min - l_max) / T) for T <= 1; for T > 1 a
          spread-out remainder can weigh without bound when k is 0 (no truncation): U = inf,
    p(o) = sum_{a -> o} w_a / (sum_a w_a + U),  p(unresolved) = (sum_{a -> unresolved} w_a + U) / (...),
    p(invalid) = sum_{a -> invalid} w_a / (...).

Where the model writes the lead itself, these are multiplied by the probability, at T and k, of the greedy path
up to the answer position (each earlier token's share of its position, U included; `token_share`); the paths that
leave it, and a reply whose greedy path never completes the lead, count as 'unresolved'. So an option's value is
the probability that the reply follows the greedy lead and its first answer token is consistent with that option
alone (a prefix of it, or all of it): an approximation (a consistent first token may still end invalid), labelled
as such. The outcomes sum to 1. Stored as `choice_probs` of a request of mode 'logprobs' (never pooled with exact
mode), with the reply's positions in `chat_positions`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ...engines.base import ChatAsk, ChatReply, SamplingSettings
from ...engines.chat import replies_with
from ...schema import Stimulus
from ..answers import AnswerParser
from ..prompting import PromptSpec, for_stimulus, user_message
from ..trie import INVALID, UNRESOLVED
from .base import Progress, arrow

#: how the messages carry the prefill (the `adaptation` of a chat request, part of its id)
PREFILL_CONTINUED, NO_PREFILL = "chat_api+prefill_continued", "chat_api+no_prefill"
#: the most replies asked at once (each chunk written in one transaction; --chunk-size lowers it)
CHAT_CHUNK = 64


def chat_messages(spec: PromptSpec, stimulus: Stimulus) -> list[dict]:
    """The system and user messages of a forced-choice prompt (no prefill)."""
    user = user_message(spec, stimulus)
    return [{"role": "system", "content": for_stimulus(spec, stimulus).system}, {"role": "user", "content": user}]


def sent_prefill(req, spec: PromptSpec) -> str | None:
    """The prefill continued by the server for this request, or None (the model writes it: `lead`)."""
    return spec.prefill if req.adaptation == PREFILL_CONTINUED and spec.prefill else None


# ------------------------------------------------------------------------------------------------- sample mode
def lead_allowance(req) -> int:
    """Tokens granted beyond max_new_tokens for a prefill the model must write itself (no tokenizer here: one per
    character, an upper bound)."""
    return len(req.lead)


def collect_chat_samples(wh, backend, pending, seeds: dict, spec: PromptSpec, *, params: SamplingSettings,
                         request_rows, run_id: str | None, chunk_size: int = CHAT_CHUNK,
                         on_progress: Progress = None) -> int:
    """Ask the pending samples (`pending`: (request, missing sample indices)) one seeded request each,
    `CHAT_CHUNK` at a time; each chunk's samples are parsed (`ChoiceRequest.parser`, the in-process engines'
    parser) and written in one transaction. `request_rows(requests)`: the `choice_requests` rows."""
    if not pending:
        return 0
    key = backend.spec.model_key
    wh.append("choice_requests", request_rows([r for r, _ in pending]))
    calls = [(req, i) for req, todo in pending for i in todo]
    done_per_request = {req.request_id: len(todo) for req, todo in pending}
    added = 0
    step = max(1, min(chunk_size, CHAT_CHUNK))  # --chunk-size: the most an interruption loses
    if backend.batch:
        step = len(calls)  # one batch of everything pending (a batch is resumable: its id is stored)
    chunks = [calls[start:start + step] for start in range(0, len(calls), step)]

    def ask(chunk) -> ChatAsk:
        first = chunk[0][0]
        own = SamplingSettings(params.temperature, params.top_k, params.top_p,
                               params.max_new_tokens + lead_allowance(first), params.min_new_tokens)
        return ChatAsk([list(req.messages) for req, _ in chunk], [seeds[(req.request_id, i)] for req, i in chunk],
                       own, sent_prefill(first, spec))

    # the next chunks' requests are answered while one is stored (`chat_chunks`: --max-concurrency in flight); the
    # chunks answered meanwhile are stored together
    for chunk, replies in replies_with(chunks, backend.chat_chunks(ask(c) for c in chunks)):
        added += wh.append("samples", _sample_rows(chunk, replies, seeds, spec, params, key, run_id))
        if on_progress:
            finished = 0
            for req, _ in chunk:
                done_per_request[req.request_id] -= 1
                finished += done_per_request[req.request_id] == 0
            if finished:
                on_progress(finished)
    return added


def _sample_rows(chunk, replies: Sequence[ChatReply], seeds: dict, spec: PromptSpec, params: SamplingSettings,
                 key: str, run_id: str | None):
    """`samples` rows of a chunk's replies, each parsed (answer, validity); no token ids (a chat API gives none)."""
    rows: dict[str, list] = {k: [] for k in ("request_id", "stimulus_id", "sample_index", "seed", "text",
                                             "token_ids", "token_logprobs", "finish_reason", "answer", "valid")}
    for (req, i), reply in zip(chunk, replies, strict=True):
        answer, option = req.parser(spec).parse(reply.text)
        for k, v in (("request_id", req.request_id), ("stimulus_id", req.stimulus_id), ("sample_index", i),
                     ("seed", seeds[(req.request_id, i)]), ("text", reply.text), ("token_ids", []),
                     ("token_logprobs", []), ("finish_reason", reply.finish_reason),
                     ("answer", option if option is not None else answer), ("valid", option is not None)):
            rows[k].append(v)
    return arrow("samples", rows, model_key=key, temperature=params.temperature, top_k=params.top_k,
                 top_p=params.top_p, max_new_tokens=params.max_new_tokens, run_id=run_id)


# ----------------------------------------------------------------------------------------------- logprobs mode
def answer_start(parser: AnswerParser, positions: Sequence[tuple[str, float, list]]) -> int | None:
    """The position whose alternatives decide the answer: the first token that carries answer text after the
    completed lead (the token completing the lead, where it carries some; else the next one). None when the reply
    departs from the lead or never gets past it."""
    before = ""
    for index, (token, _, _) in enumerate(positions):
        text = before + token
        state, rest = parser._strip(text)  # noqa: SLF001 - the parser's own lead matching, shared
        if state == "wrong":
            return None
        if state == "done":
            if rest.strip():
                return index
            return index + 1 if index + 1 < len(positions) else None
        before = text
    return None


def unreturned_weight(logprobs: Sequence[float], temperature: float, top_k: int) -> float:
    """U of the module docstring: the largest tempered weight (relative to the most probable returned token) that
    the tokens not returned can add to a top-`top_k` sampler at `temperature` (0 for no truncation)."""
    returned = len(logprobs)
    if top_k and top_k <= returned:
        return 0.0
    rest = max(0.0, 1.0 - sum(math.exp(v) for v in logprobs))
    if rest <= 0.0:
        return 0.0
    lmax, lmin = max(logprobs), min(logprobs)
    p_min = math.exp(lmin)
    count = (top_k - returned) if top_k else math.inf
    if temperature <= 1.0:
        return min(count, rest / p_min) * math.exp((lmin - lmax) / temperature)
    if math.isinf(count):
        return math.inf
    share = min(p_min, rest / count)  # concave: spread evenly, each at most p_min
    return min(count, rest / share) * math.exp((math.log(share) - lmax) / temperature)


def position_probabilities(parser: AnswerParser, before: str, alternatives: Sequence[tuple[str, float]],
                           options: Sequence[str], temperature: float, top_k: int) -> dict[str, float]:
    """p(option), p(unresolved), p(invalid) at one answer position (the module docstring's formula): `before` is
    the reply's text before the position, `alternatives` the returned (text, log-probability) pairs."""
    ranked = sorted(alternatives, key=lambda a: -a[1])
    kept = ranked[:top_k] if top_k and top_k <= len(ranked) else ranked
    out = {o: 0.0 for o in options} | {UNRESOLVED: 0.0, INVALID: 0.0}
    if not kept:
        return out | {UNRESOLVED: 1.0}
    lmax = kept[0][1]
    weights = [(parser.first_token(before + text), math.exp((lp - lmax) / temperature)) for text, lp in kept]
    spare = unreturned_weight([lp for _, lp in ranked], temperature, top_k)
    if math.isinf(spare):
        return out | {UNRESOLVED: 1.0}
    total = sum(w for _, w in weights) + spare
    for outcome, w in weights:
        out[outcome] += w / total
    out[UNRESOLVED] += spare / total
    return out


def token_share(token: str, logprob: float, alternatives: Sequence[tuple[str, float]], temperature: float,
                top_k: int) -> float:
    """The probability, at `temperature` and `top_k`, that the sampler picks the greedy path's `token` at its
    position: its weight over the kept alternatives' plus the unreturned tokens' bound U (0 when it falls outside
    the kept top-k)."""
    ranked = sorted(alternatives, key=lambda a: -a[1])
    if not any(text == token for text, _ in ranked):
        ranked = sorted([*ranked, (token, logprob)], key=lambda a: -a[1])
    kept = ranked[:top_k] if top_k and top_k <= len(ranked) else ranked
    if not any(text == token for text, _ in kept):
        return 0.0
    lmax = kept[0][1]
    spare = unreturned_weight([lp for _, lp in ranked], temperature, top_k)
    if math.isinf(spare):
        return 0.0
    total = sum(math.exp((lp - lmax) / temperature) for _, lp in kept) + spare
    return math.exp((logprob - lmax) / temperature) / total


def reply_probabilities(parser: AnswerParser, reply: ChatReply, options: Sequence[str], temperature: float,
                        top_k: int) -> tuple[dict[str, float], int | None]:
    """(outcome probabilities, the answer's position or None) of one logprobs-mode reply: the answer position's
    probabilities (`position_probabilities`) times the probability of the greedy path up to it (`token_share` of
    each earlier token); the rest, the paths that leave the greedy one before the answer, is unresolved."""
    positions = reply.positions or []
    at = answer_start(parser, positions)
    if at is None:
        return {o: 0.0 for o in options} | {UNRESOLVED: 1.0, INVALID: 0.0}, None
    before = "".join(token for token, _, _ in positions[:at])
    found = position_probabilities(parser, before, positions[at][2], options, temperature, top_k)
    path = math.prod(token_share(token, lp, alts, temperature, top_k) for token, lp, alts in positions[:at])
    out = {outcome: p * path for outcome, p in found.items()}
    out[UNRESOLVED] = max(0.0, 1.0 - sum(p for o, p in out.items() if o != UNRESOLVED))
    return out, at


def collect_chat_logprobs(wh, backend, requests, spec: PromptSpec, *, params: SamplingSettings, top_logprobs: int,
                          request_rows, run_id: str | None, chunk_size: int = CHAT_CHUNK,
                          on_progress: Progress = None) -> int:
    """One greedy request with top log-probabilities per pending request, `CHAT_CHUNK` at a time; each chunk's
    requests, positions and probabilities are written in one transaction. Returns requests added."""
    if not requests:
        return 0
    key = backend.spec.model_key
    greedy = SamplingSettings(0.0, params.top_k, 1.0, params.max_new_tokens + lead_allowance(requests[0]))
    added = 0
    step = len(requests) if backend.batch else max(1, min(chunk_size, CHAT_CHUNK))
    chunks = [list(requests[start:start + step]) for start in range(0, len(requests), step)]
    asks = (ChatAsk([list(r.messages) for r in chunk], [0] * len(chunk), greedy, sent_prefill(chunk[0], spec),
                    top_logprobs) for chunk in chunks)
    for chunk, replies in replies_with(chunks, backend.chat_chunks(asks)):  # requests in flight across chunks
        positions: dict[str, list] = {k: [] for k in ("request_id", "position", "token", "logprob", "top_tokens",
                                                      "top_logprobs", "answer_start")}
        probs: dict[str, list] = {k: [] for k in ("request_id", "option", "prob")}
        for req, reply in zip(chunk, replies, strict=True):
            found, at = reply_probabilities(req.parser(spec), reply, req.options, params.temperature, params.top_k)
            for index, (token, lp, alts) in enumerate(reply.positions or []):
                for k, v in (("request_id", req.request_id), ("position", index), ("token", token),
                             ("logprob", lp), ("top_tokens", [a for a, _ in alts]),
                             ("top_logprobs", [b for _, b in alts]), ("answer_start", index == at)):
                    positions[k].append(v)
            for option, p in found.items():
                probs["request_id"].append(req.request_id)
                probs["option"].append(option)
                probs["prob"].append(p)
        children = {"chat_positions": arrow("chat_positions", positions, model_key=key),
                    "choice_probs": arrow("choice_probs", probs, model_key=key,
                                          temperature=params.temperature, top_k=params.top_k, top_p=1.0)}
        added += wh.append_with_children("choice_requests", request_rows(chunk), children)
        if on_progress:
            on_progress(len(chunk))
    return added


def planned_calls(requests_and_counts, params: SamplingSettings) -> tuple[int, int, int]:
    """(requests, input characters, output tokens at most) of the calls a collection will send: one per
    (request, count of calls) pair given."""
    calls = chars = out = 0
    for req, count in requests_and_counts:
        calls += count
        chars += count * sum(len(m["content"]) for m in req.messages)
        out += count * (params.max_new_tokens + lead_allowance(req))
    return calls, chars, out
