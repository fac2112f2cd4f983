"""The `gen` protocol: open generation from misgendering prompts (Subramonian et al. 2025, "Agree to Disagree? A
Meta-Evaluation of LLM Misgendering"), stored as raw samples.

Prompts (one `gen_requests` row each, docs/design.md section 7):

* MISGENDERED and RUFF stimuli (a sentence with a pronoun slot) give two prompts: `pre`, the text before the slot
  (trailing whitespace removed, so the model chooses the next word's leading space itself; the upstream code keeps
  the space), and `post`, the text with the gold pronoun filled in (with its verb agreement).
* TANGO prompts (no slot) give one prompt, `prompt`: the text with its first letter upper-cased (the upstream
  evaluation capitalizes the lower-case TANGO templates).

The model sees BOS + the prompt's tokens (the scoring BOS policy), no chat template.

Dialogue datasets (`DatasetInfo.gen_prompt == "dialogue"`: DecodingTrust) give one prompt, `dialogue`: the text
before the slot (or the whole text) as the user message under the stimulus' own system prompt
(`attrs.system_prompt`), rendered with the model's chat template as the forced-choice prompts are
(`prompting`: the system text folded into the user turn where the template takes no system role; a plain
"system\n\nuser\n" without a template); a chat API gets the two messages. Each prompt gets `samples`
continuations of exactly `max_new_tokens` tokens by default: stop tokens get probability 0 for the first
`min_new_tokens` steps (the upstream `min_new_tokens=50`), with temperature 1, top_k 50, top_p 0.95 unless set
otherwise. A sample's seed is derived from the run seed, the request and the sample index, so the same seed gives
the same continuations whatever the chunking or resume point. Nothing is parsed here: the first-pronoun outcome
is a metric (`biaslab.metrics.misgendering`), computed from the stored text with the vocabulary stored per request.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import model_validator

from ...engines.base import CHAT, SAMPLE, ChatAsk, SamplingSettings
from ...engines.chat import replies_with
from ...errors import DataError, UsageError
from ...lexicon.pronoun_detection import vocabulary
from ...lexicon.pronouns import capitalize
from ...schema import Stimulus, request_id
from ..answers import decode
from ..requests import Request, sample_seed
from .base import Progress, Protocol, Sampling, Work, arrow
from .choice import pending_samples

GEN_VERSION = "gen-v1"


@dataclass(frozen=True)
class GenRequest(Request):
    """One open-generation prompt (gen protocol) and the pronoun family its stimulus declares."""

    dataset: str
    context: str          # pre | post | prompt
    prompt_text: str
    declared: str
    vocabulary: str       # the pronoun families of the detector, canonical JSON (stored with the request)
    system: str | None = None  # dialogue prompts: the system message (the stimulus' attrs.system_prompt)


def generation_prompts(stimulus: Stimulus) -> list[tuple[str, str]]:
    """(context, prompt text) pairs of one stimulus (see the module docstring)."""
    if stimulus.options is None:
        return [("prompt", capitalize(stimulus.text))]
    if stimulus.gold is None or stimulus.slot is None:
        raise DataError(f"stimulus {stimulus.item_id}: the gen protocol needs a gold pronoun and a slot")
    pre = stimulus.text[: stimulus.text.index(stimulus.slot)].rstrip()
    if not pre:
        raise DataError(f"stimulus {stimulus.item_id}: nothing precedes the slot, so there is no pre context")
    return [("pre", pre), ("post", stimulus.fill(stimulus.gold))]


def dialogue_requests(stimuli: Sequence[Stimulus], max_new_tokens: int, min_new_tokens: int, chat: bool = False
                      ) -> list[GenRequest]:
    """One `dialogue` request per stimulus (see the module docstring): the user message is the text before the slot
    (trailing whitespace removed) or the whole text; the system message is `attrs.system_prompt` (none where a
    stimulus has none: a counterfactual audit without `--system`)."""
    out = []
    for s in stimuli:
        system = s.attrs.get("system_prompt")
        if system is not None and not isinstance(system, str):
            raise DataError(f"stimulus {s.item_id}: attrs.system_prompt is not text")
        user = s.text[: s.text.index(s.slot)].rstrip() if s.slot else s.text
        params = {"context": "dialogue", "max_new_tokens": max_new_tokens, "min_new_tokens": min_new_tokens}
        if chat:
            params["chat"] = "messages"
        rid = request_id(s.stimulus_id, "gen", params, GEN_VERSION)
        out.append(GenRequest(rid, s.stimulus_id, "gen", s.dataset, "dialogue", user, "", "{}", system))
    return out


def dialogue_ids(tokenizer, request: GenRequest) -> list[int]:
    """Token ids of a dialogue request rendered with the model's chat template, ending at the generation prompt; a
    request without a system message is the user's message alone (the template's own default system text, if it
    has one, stays), and a model without a chat template reads the bare texts."""
    from ..prompting import PromptSpec, _render_user, has_chat_template

    if request.system is None:
        text = (tokenizer.apply_chat_template([{"role": "user", "content": request.prompt_text}], tokenize=False,
                                              add_generation_prompt=True)
                if has_chat_template(tokenizer) else f"{request.prompt_text}\n")
    else:
        spec = PromptSpec("gen-dialogue", request.system, "{passage}", "", "")
        text = _render_user(spec, tokenizer, request.prompt_text).text
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def gen_requests(stimuli: Sequence[Stimulus], max_new_tokens: int = 50, min_new_tokens: int = 50,
                 families: dict | None = None, chat: bool = False) -> list[GenRequest]:
    """Requests of the stimuli; the generation length settings are part of the request identity (so a run with
    another --max-new-tokens or --min-new-tokens is a new collection with its own `gen_requests` rows).
    `families`: the first-pronoun detector's vocabulary (family -> case -> forms; default the built-in one of the
    stimuli's dataset, `lexicon.pronoun_detection.vocabulary`). `chat`: the prompt is sent to a chat API as the
    user message (its own requests: a reply to a message is not a continuation of text)."""
    out = []
    for s in stimuli:
        if s.pronoun_set is None:
            raise DataError(f"stimulus {s.item_id}: the gen protocol needs the declared pronoun set")
        known = families if families is not None else vocabulary(s.dataset)
        if s.pronoun_set not in known:
            raise DataError(f"stimulus {s.item_id}: declared pronoun family {s.pronoun_set!r} is not among the "
                            f"families the misgendering detector knows for {s.dataset} ({sorted(known)}); "
                            f"the gen protocol covers those (for tango use --pronouns core)")
        stored = json.dumps(known, sort_keys=True)
        for context, text in generation_prompts(s):
            params = {"context": context, "max_new_tokens": max_new_tokens, "min_new_tokens": min_new_tokens}
            if chat:
                params["chat"] = "user_message"
            rid = request_id(s.stimulus_id, "gen", params, GEN_VERSION)
            out.append(GenRequest(rid, s.stimulus_id, "gen", s.dataset, context, text, s.pronoun_set, stored))
    return out


def continuation_text(tokenizer, prompt_ids: Sequence[int], token_ids: Sequence[int]) -> str:
    """The continuation's text as it reads after the prompt: decode(prompt + continuation) minus decode(prompt).

    Decoding the continuation alone loses the leading space of its first token with SentencePiece-style decoders
    (Llama 2, Mistral), which would glue it to the prompt's last word; GPT-2-style byte-level BPE gives the same
    text either way.
    """
    prefix = decode(tokenizer, prompt_ids)
    full = decode(tokenizer, [*prompt_ids, *token_ids])
    return full[len(prefix):] if full.startswith(prefix) else decode(tokenizer, token_ids)


def pending_generations(wh, model_key: str, requests: Sequence[GenRequest], n: int, seed: int,
                        params: SamplingSettings) -> dict[str, list[int]]:
    """request_id -> sample indices not yet stored under these sampling settings and seed (`pending_samples`)."""
    seeds = {(r.request_id, i): sample_seed(seed, r.request_id, i) for r in requests for i in range(n)}
    return {r.request_id: todo for r, todo in pending_samples(wh, model_key, requests, n, seeds, params)}


def _request_table(model_key: str, chunk: Sequence[GenRequest], params: SamplingSettings, run_id: str | None):
    return arrow("gen_requests", {
        "request_id": [r.request_id for r in chunk], "stimulus_id": [r.stimulus_id for r in chunk],
        "dataset": [r.dataset for r in chunk], "context": [r.context for r in chunk],
        "prompt_text": [r.prompt_text for r in chunk], "declared": [r.declared for r in chunk],
        "pronoun_vocabulary": [r.vocabulary for r in chunk]},
        model_key=model_key, prompt_version=GEN_VERSION, max_new_tokens=params.max_new_tokens,
        min_new_tokens=params.min_new_tokens, run_id=run_id)


def _sample_table(tok, chunk, texts, seeds, drawn, pending, params: SamplingSettings, key: str, run_id):
    """`samples` rows of the pending samples among those drawn for a chunk of requests."""
    rows: dict[str, list] = {k: [] for k in ("request_id", "stimulus_id", "sample_index", "seed", "text",
                                             "token_ids", "token_logprobs", "finish_reason")}
    for r, req in enumerate(chunk):
        for i, (s_seed, sample) in enumerate(zip(seeds[r], drawn[r])):
            if i not in pending.get(req.request_id, ()):
                continue
            for k, v in (("request_id", req.request_id), ("stimulus_id", req.stimulus_id), ("sample_index", i),
                         ("seed", s_seed), ("text", continuation_text(tok, texts[r], sample.token_ids)),
                         ("token_ids", sample.token_ids),
                         ("token_logprobs", sample.logprobs), ("finish_reason", sample.finish_reason)):
                rows[k].append(v)
    return arrow("samples", rows, model_key=key, temperature=params.temperature, top_k=params.top_k,
                 top_p=params.top_p, max_new_tokens=params.max_new_tokens, answer=None, valid=True,
                 run_id=run_id)


def collect_generations(wh, backend, requests: Sequence[GenRequest], pending: dict[str, list[int]], *,
                        samples: int, seed: int, params: SamplingSettings, chunk_size: int,
                        run_id: str | None, on_progress: Progress = None) -> int:
    """Generate and store the pending samples through `backend.sample`, chunk by chunk (chunk = `chunk_size`
    requests of the FULL list, every sample of each, so a resumed run batches exactly like an uninterrupted one);
    each chunk's requests and samples are written in one transaction. Returns sample rows added."""
    if not pending:
        return 0
    tok = backend.tokenizer
    key = backend.spec.model_key
    added = 0
    for start in range(0, len(requests), chunk_size):
        chunk = list(requests[start:start + chunk_size])
        waiting = sum(r.request_id in pending for r in chunk)
        if not waiting:
            continue
        texts = [dialogue_ids(tok, r) if r.context == "dialogue" else tok(r.prompt_text, add_special_tokens=False)[
            "input_ids"] for r in chunk]
        prompts = [list(ids) if r.context == "dialogue" or backend.bos_id is None else [backend.bos_id, *ids]
                   for r, ids in zip(chunk, texts)]
        seeds = [[sample_seed(seed, r.request_id, i) for i in range(samples)] for r in chunk]
        drawn = backend.sample(prompts, seeds, params)
        result = wh.append_many({"gen_requests": _request_table(key, chunk, params, run_id),
                                 "samples": _sample_table(tok, chunk, texts, seeds, drawn, pending, params, key,
                                                          run_id)})
        added += result["samples"]
        if on_progress:
            on_progress(waiting)
    return added


def collect_chat_generations(wh, backend, requests: Sequence[GenRequest], pending: dict[str, list[int]], *,
                             samples: int, seed: int, params: SamplingSettings, chunk_size: int,
                             run_id: str | None, on_progress: Progress = None) -> int:
    """`collect_generations` for a chat API: each prompt as the user message, one seeded request per sample
    (`backend.chat`), the reply's text stored as the continuation (no token ids: the API gives none)."""
    if not pending:
        return 0
    key = backend.spec.model_key
    added = 0
    if backend.batch:
        chunk_size = len(requests)  # one batch of everything pending (resumable: its id is stored)
    chunks = [chunk for start in range(0, len(requests), chunk_size)
              if (chunk := [r for r in requests[start:start + chunk_size] if r.request_id in pending])]
    planned = [[(r, i, sample_seed(seed, r.request_id, i)) for r in chunk for i in pending[r.request_id]]
               for chunk in chunks]
    asks = (ChatAsk([_messages(r) for r, _, _ in calls], [s for _, _, s in calls], params) for calls in planned)
    # the next chunks' requests are answered while one is stored (`chat_chunks`: --max-concurrency in flight); the
    # chunks answered meanwhile are stored together
    for calls, replies in replies_with(planned, backend.chat_chunks(asks)):
        chunk = list({r.request_id: r for r, _, _ in calls}.values())  # the requests of these calls, in order
        rows: dict[str, list] = {k: [] for k in ("request_id", "stimulus_id", "sample_index", "seed", "text",
                                                 "token_ids", "token_logprobs", "finish_reason")}
        for (r, i, s_seed), reply in zip(calls, replies, strict=True):
            for k, v in (("request_id", r.request_id), ("stimulus_id", r.stimulus_id), ("sample_index", i),
                         ("seed", s_seed), ("text", reply.text), ("token_ids", []), ("token_logprobs", []),
                         ("finish_reason", reply.finish_reason)):
                rows[k].append(v)
        table = arrow("samples", rows, model_key=key, temperature=params.temperature, top_k=params.top_k,
                      top_p=params.top_p, max_new_tokens=params.max_new_tokens, answer=None, valid=True,
                      run_id=run_id)
        added += wh.append_many({"gen_requests": _request_table(key, chunk, params, run_id), "samples": table})[
            "samples"]
        if on_progress:
            on_progress(len(chunk))
    return added


def _messages(request: GenRequest) -> list[dict]:
    """A chat API's messages for one request: the system message (dialogue prompts), then the prompt as the user's."""
    system = [{"role": "system", "content": request.system}] if request.system is not None else []
    return [*system, {"role": "user", "content": request.prompt_text}]


#: samples generated together in one batch (rows of the KV cache)
GEN_ROWS_PER_BATCH = 64


class GenSettings(Sampling):
    """The misgendering meta-evaluation's open generation: 5 continuations of exactly 50 tokens, top_k 50,
    top_p 0.95 (stop tokens impossible before `min_new_tokens`, default `max_new_tokens`)."""

    DEFAULTS = {"samples": 5, "seed": 0, "temperature": 1.0, "top_k": 50, "top_p": 0.95, "max_new_tokens": 50}

    min_new_tokens: int | None = None

    @model_validator(mode="after")
    def _lengths(self) -> GenSettings:
        if self.min_new_tokens is None:
            object.__setattr__(self, "min_new_tokens", self.max_new_tokens)
        if not 0 <= self.min_new_tokens <= self.max_new_tokens:
            raise UsageError(f"--min-new-tokens must be between 0 and --max-new-tokens ({self.max_new_tokens})")
        return self

    def sampling(self) -> SamplingSettings:
        return SamplingSettings(self.temperature, self.top_k, self.top_p, self.max_new_tokens, self.min_new_tokens)


class Gen(Protocol):
    """The gen protocol (see the module docstring)."""

    name = "gen"
    settings_model = GenSettings
    table = "samples"

    def needs(self, kind: str) -> frozenset[str]:
        return frozenset({CHAT if self.chat else SAMPLE})

    def check_engine(self, prepared) -> None:
        if self.chat:
            prepared.check_sampling(self.settings.sampling())

    def requests(self, stimuli: Sequence[Stimulus], prepared) -> list[GenRequest]:
        if self.dataset is not None and self.dataset.gen_prompt == "dialogue":
            return dialogue_requests(stimuli, self.settings.max_new_tokens, self.settings.min_new_tokens,
                                     chat=self.chat)
        families = self.dataset.families() if self.dataset is not None else None
        return gen_requests(stimuli, self.settings.max_new_tokens, self.settings.min_new_tokens, families,
                            chat=self.chat)

    def planned(self, work: Work) -> tuple[int, int, int]:
        """(requests, input characters, output tokens at most) a chat API will be sent for `work`."""
        calls = sum(len(todo) for todo in work.items.values())
        chars = sum((len(r.prompt_text) + len(r.system or "")) * len(work.items.get(r.request_id, ()))
                    for r in work.requests)
        return calls, chars, calls * self.settings.max_new_tokens

    def pending(self, wh, model_key: str, requests: Sequence[GenRequest]) -> Work:
        s = self.settings
        todo = pending_generations(wh, model_key, requests, s.samples, s.seed, s.sampling())
        return Work(len(todo), todo, list(requests))

    def provenance(self) -> tuple[dict, dict | None]:
        s = self.settings
        generation = {"do_sample": True, "temperature": s.temperature, "top_k": s.top_k, "top_p": s.top_p,
                      "max_new_tokens": s.max_new_tokens, "min_new_tokens": s.min_new_tokens,
                      "repetition_penalty": 1.0, "samples": s.samples, "seed": s.seed, "prompt_version": GEN_VERSION}
        version = (f"{GEN_VERSION}:seed={s.seed}:T={s.temperature}:k={s.top_k}:p={s.top_p}"
                   f":n={s.max_new_tokens}:min={s.min_new_tokens}")
        return {"protocol_version": version}, generation

    def run(self, wh, backend, work: Work, *, run_id: str, chunk_size: int, on_progress: Progress) -> int:
        s = self.settings
        chunk = max(1, min(chunk_size, GEN_ROWS_PER_BATCH // s.samples))
        if self.chat:
            return collect_chat_generations(wh, backend, work.requests, work.items, samples=s.samples, seed=s.seed,
                                            params=s.sampling(), chunk_size=chunk, run_id=run_id,
                                            on_progress=on_progress)
        return collect_generations(wh, backend, work.requests, work.items, samples=s.samples, seed=s.seed,
                                   params=s.sampling(), chunk_size=chunk, run_id=run_id, on_progress=on_progress)


PROTOCOL = Gen

__all__ = ["GEN_VERSION", "PROTOCOL", "Gen", "GenRequest", "GenSettings", "collect_generations", "continuation_text",
           "dialogue_ids", "dialogue_requests", "gen_requests", "generation_prompts", "pending_generations"]
