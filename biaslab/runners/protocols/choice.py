"""The `choice` protocol: a forced-choice chat prompt (the contextual-invariance paper's, or the user's own prompt
JSON) answered in exact mode (the answer trie's top-K logits: exact probabilities of what sampling plus the answer
parser would give, docs/design.md section 6) or sample mode (seeded samples, every setting explicit).

Requests are grouped in chunks of prompts; each chunk is computed and written in one transaction, so an
interruption loses at most the chunk in flight and a rerun does only what is missing. The defaults are the paper's
(T = 0.5, top_k = 40, 6 new tokens; 200 samples per prompt in sample mode).
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import Field, model_validator

from ...engines.base import CHAT, CHAT_LOGPROBS, SAMPLE, TOP_K, SamplingSettings, WindowExceeded
from ...errors import Unsupported, UsageError
from ...schema import Stimulus, request_id
from ..answers import AnswerParser, decode
from ..prompting import PromptSpec, render, shared_prefix_ids
from ..requests import Request, sample_seed
from ..trie import DEFAULT_MIN_MASS, INVALID, UNRESOLVED, probabilities, walk
from .base import MAX_TOP_K, Progress, Protocol, Sampling, Work, arrow

#: prompts explored together in exact mode (`--prompt-batch`): their trie levels share forward passes
DEFAULT_PROMPT_BATCH = 96
#: cache slots allowed per prompt for its trie levels, beyond prompt and max_new_tokens, when sizing a batch
EXPLORE_SLOTS = 64


@dataclass(frozen=True)
class ChoiceRequest(Request):
    """One forced-choice prompt (choice protocol): the rendered chat prompt, its token ids and the chat-format
    adaptation used (`prompting.render`)."""

    options: tuple[str, ...]
    prompt_text: str
    prompt_ids: list[int]
    adaptation: str
    lead: str = ""                   # text the model must write before the answer (prefill rejected by the template)
    lead_tokens: int = 0             # generation tokens granted for it, beyond max_new_tokens
    final_marker: str | None = None  # channel formats: the final channel's header
    messages: tuple = ()             # a chat API's request: the system and user messages (no token ids)

    def parser(self, spec: PromptSpec) -> AnswerParser:
        """The answer parser of this prompt (the same in exact and sample mode)."""
        return AnswerParser(self.options, spec.closing, self.lead, self.final_marker)


def choice_requests(stimuli: Sequence[Stimulus], tokenizer, spec: PromptSpec, params: dict) -> list[ChoiceRequest]:
    """One request per stimulus: the prompt rendered with the model's chat template (`prompting.render`), its
    token ids, and its id = hash(stimulus, "choice", `params` with the chat adaptation, the prompt's version)."""
    out = []
    for s in stimuli:
        rendered = render(spec, tokenizer, s)
        ids = tokenizer(rendered.text, add_special_tokens=False)["input_ids"]
        rid = request_id(s.stimulus_id, "choice", {**params, "adaptation": rendered.adaptation}, spec.version)
        out.append(ChoiceRequest(rid, s.stimulus_id, "choice", tuple(s.options), rendered.text, list(ids),
                                 rendered.adaptation, rendered.lead, rendered.lead_tokens, rendered.final_marker))
    return out


def chat_choice_requests(stimuli: Sequence[Stimulus], spec: PromptSpec, params: dict, prefill: bool
                         ) -> list[ChoiceRequest]:
    """One request per stimulus: its messages (the prefill as an assistant message to continue where `prefill`),
    and its id = hash(stimulus, "choice", `params` with the adaptation, the prompt's version)."""
    from .choice_chat import NO_PREFILL, PREFILL_CONTINUED, chat_messages

    adaptation = PREFILL_CONTINUED if prefill else NO_PREFILL
    out = []
    for s in stimuli:
        messages = chat_messages(spec, s)
        sent = [*messages, {"role": "assistant", "content": spec.prefill}] if prefill and spec.prefill else messages
        rid = request_id(s.stimulus_id, "choice", {**params, "adaptation": adaptation}, spec.version)
        out.append(ChoiceRequest(rid, s.stimulus_id, "choice", tuple(s.options),
                                 json.dumps(sent, ensure_ascii=False), [], adaptation,
                                 lead="" if prefill else spec.prefill, messages=tuple(messages)))
    return out


def _request_rows(model_key: str, chunk: Sequence[ChoiceRequest], mode: str, spec: PromptSpec,
                  max_new_tokens: int, k_store: int | None, run_id: str | None):
    return arrow("choice_requests", {
        "request_id": [r.request_id for r in chunk], "stimulus_id": [r.stimulus_id for r in chunk],
        "protocol": [r.protocol for r in chunk], "adaptation": [r.adaptation for r in chunk],
        "prompt_text": [r.prompt_text for r in chunk], "options": [list(r.options) for r in chunk]},
        model_key=model_key, mode=mode, prompt_version=spec.version, max_new_tokens=max_new_tokens, k_store=k_store,
        run_id=run_id)


def pending_choice(wh, model_key: str, requests: Sequence[ChoiceRequest]) -> list[ChoiceRequest]:
    """Exact-mode requests of this model not yet stored in `choice_requests`."""
    done = wh.stored("choice_requests", model_key, [r.request_id for r in requests])
    return [r for r in requests if (r.request_id,) not in done]


def explorations(requests: Sequence[ChoiceRequest], groups: Sequence, rows: int, together: int,
                 combine: bool = True, first: int | None = None) -> list[list[list[ChoiceRequest]]]:
    """How `collect_exact` runs `requests`: a list of explorations (one `walk` each), each a list of encoding
    batches. Requests are ordered by group (stable); a batch holds up to `rows` requests of one group; an
    exploration holds consecutive batches of up to `together` requests in all (one batch each where `combine` is
    False), the first one up to `first` (default `together`): a small first exploration finishes its prompts within
    seconds, so progress has a rate and an ETA long before a full exploration would end."""
    order = sorted(range(len(requests)), key=lambda i: groups[i])
    batches: list[list[int]] = []
    for i in order:
        if batches and groups[batches[-1][0]] == groups[i] and len(batches[-1]) < rows:
            batches[-1].append(i)
        else:
            batches.append([i])
    walks: list[list[list[ChoiceRequest]]] = []
    for batch in batches:
        members = [requests[i] for i in batch]
        cap = min(first, together) if first is not None and len(walks) == 1 else together
        if walks and combine and sum(map(len, walks[-1])) + len(members) <= cap:
            walks[-1].append(members)
        else:
            walks.append([members])
    return walks


def spread(walks: list, seed: int = 0) -> list:
    """The explorations `walks` in the order `collect_exact` runs them: the first one first (small, so progress
    reports within seconds), the others in a fixed pseudo-random order (`random.Random(seed)`). `explorations`
    orders prompts by group, and groups by their padded suffix length, so in that order the cheap explorations come
    first and a rate measured on the first ones is too high: on the WinoPron main job (bf16) prompts/s fell from
    22 over the first 400 to 15-17 over later ones, and the ETA stayed 15-25% short for the first half of the run.
    In a random order every stretch of the run costs the same on average. Each exploration holds the same prompts
    as before, so every stored number is unchanged."""
    rest = list(walks[1:])
    random.Random(seed).shuffle(rest)
    return [*walks[:1], *rest]


def collect_exact(wh, backend, requests: Sequence[ChoiceRequest], spec: PromptSpec, *,
                  params: SamplingSettings, k_store: int, chunk_size: int, run_id: str | None,
                  min_mass: float = DEFAULT_MIN_MASS, prompt_batch: int = DEFAULT_PROMPT_BATCH,
                  on_progress: Progress = None, everything: Sequence[ChoiceRequest] | None = None) -> int:
    """Explore the answer trie of every pending request through `backend` and store nodes, edges and the exact
    probabilities (`trie.walk` over `backend.expander`).

    The template's common beginning (`shared_prefix_ids`) is declared to the backend (`share_prefix`), which may
    compute it once (the Hugging Face backend continues one cache of it, `kvcache.SharedPrefixes`, with trie levels
    as tree attention). Up to `prompt_batch` prompts are explored together: their trie levels share forward
    passes (fewer, fuller passes), and their suffixes are encoded up to `backend.encode_rows()` prompts of one
    `backend.prompt_group` per forward. The backend may lower the count to fit its cache (`explore_rows`), or
    explore each encoding batch alone (`combines_batches`: False for caches with sliding-window layers and for
    attention without tree masks). A prompt's numbers depend on its batch only through the rounding of
    differently shaped products: in fp32 by ~1e-5 in a probability, in bf16 by up to bf16's own rounding (measured
    in docs/decisions.md, "Shared-prefix cache"); `prompt_batch=1` makes them independent of the batch. Each
    written chunk holds the prompts of whole explorations, at least `chunk_size` of them where more are pending.
    Explorations run in `spread` order; the first is one encoding batch, so `on_progress`, advanced by the prompts
    of each exploration as it ends, reports within seconds. An engine without a prompt cache keeps `EngineBase`'s
    neutral answers (one group, no cap, the `StatelessExpander`).

    The explorations are formed over `everything` (all the collection's requests; default: `requests`), not over
    what is pending: a resumed run explores each exploration that holds a pending request whole, with the prompts
    it had in an uninterrupted run, and stores the pending ones. Its numbers are then those of the uninterrupted
    run, bit for bit at the same thread count (issue 46; `tests/runners/test_resume_equality.py`).
    """
    if not requests:
        return 0  # nothing pending: the model is not even loaded
    tok = backend.tokenizer
    key = backend.spec.model_key
    backend.share_prefix(shared_prefix_ids(spec, tok))
    everything = list(everything) if everything is not None else list(requests)
    pending = {r.request_id for r in requests}
    longest = max(len(r.prompt_ids) for r in everything) + params.max_new_tokens + EXPLORE_SLOTS
    together = max(1, min(prompt_batch, backend.explore_rows(longest)))
    rows = min(backend.encode_rows(), together)
    walks = spread(explorations(everything, [backend.prompt_group(r.prompt_ids) for r in everything], rows,
                                together, backend.combines_batches(), first=rows))
    walks = [parts for parts in walks if any(r.request_id in pending for b in parts for r in b)]
    added = 0
    computed: list[tuple[ChoiceRequest, object]] = []  # explored, not yet written
    for index, parts in enumerate(walks):
        batch = [r for b in parts for r in b]
        prompts = [r.prompt_ids for r in batch]
        tries = _explore(backend, prompts, [len(b) for b in parts], k_store, tok, [r.parser(spec) for r in batch],
                         params.max_new_tokens + max(r.lead_tokens for r in batch), params, min_mass)
        fresh = [(r, t) for r, t in zip(batch, tries) if r.request_id in pending]
        computed += fresh
        if on_progress:
            on_progress(len(fresh))  # whole explorations (cli/progress.py: early finishers read as a stalled run)
        if len(computed) >= chunk_size or index == len(walks) - 1:
            added += _write_tries(wh, key, computed, spec, params, k_store, run_id)
            computed = []
    return added


def _explore(backend, prompts, batches: list[int], k_store: int, tok, parsers, max_new_tokens: int,
             params: SamplingSettings, min_mass: float):
    """The tries of one exploration (`walk` over `backend.expander`). Where tree attention would pass a model's
    sliding window (`WindowExceeded`: the trie grew wider than the window leaves), the same prompts are explored
    again by cache copies (`tree=False`), which compute the same trie."""
    def run(**tree):
        expander = backend.expander(prompts, k_store, batches=batches, **tree)
        return walk(expander, tok, parsers, max_new_tokens=max_new_tokens, stop_ids=backend.stop_ids,
                    temperature=params.temperature, top_k=params.top_k, min_mass=min_mass)
    try:
        return run()
    except WindowExceeded:
        return run(tree=False)


def _trie_rows(computed: Sequence[tuple[ChoiceRequest, object]], params: SamplingSettings) -> tuple[dict, ...]:
    """(nodes, edges, probabilities) columns of explored tries: every node's top-K ids, float32 logits and
    logsumexp, every stored edge, and the exact probability of each option at the collection's settings."""
    nodes: dict[str, list] = {k: [] for k in ("request_id", "node_id", "parent_id", "token_id", "depth",
                                              "topk_ids", "topk_logits", "logsumexp")}
    edges: dict[str, list] = {k: [] for k in ("request_id", "node_id", "token_id", "outcome", "child_id")}
    probs: dict[str, list] = {k: [] for k in ("request_id", "option", "prob")}
    for req, trie in computed:
        for n in range(len(trie.node_parent)):
            for k, v in (("request_id", req.request_id), ("node_id", n), ("parent_id", trie.node_parent[n]),
                         ("token_id", trie.node_token[n]), ("depth", trie.node_depth[n]),
                         ("topk_ids", trie.topk_ids[n].astype("int32")),
                         ("topk_logits", trie.topk_logits[n]), ("logsumexp", trie.logsumexp[n])):
                nodes[k].append(v)
        for node, token, outcome, child in trie.edges:
            for k, v in (("request_id", req.request_id), ("node_id", node), ("token_id", token),
                         ("outcome", outcome), ("child_id", child)):
                edges[k].append(v)
        for option, p in probabilities(trie, req.options, params.temperature, params.top_k).items():
            probs["request_id"].append(req.request_id)
            probs["option"].append(option)
            probs["prob"].append(p)
    return nodes, edges, probs


def _write_tries(wh, key: str, computed: Sequence[tuple[ChoiceRequest, object]], spec: PromptSpec,
                 params: SamplingSettings, k_store: int, run_id: str | None) -> int:
    """One transaction: the requests of `computed` with their trie nodes, edges and exact probabilities."""
    nodes, edges, probs = _trie_rows(computed, params)
    children = {
        "choice_nodes": arrow("choice_nodes", nodes, model_key=key),
        "choice_edges": arrow("choice_edges", edges, model_key=key),
        "choice_probs": arrow("choice_probs", probs, model_key=key, temperature=params.temperature,
                              top_k=params.top_k, top_p=1.0),
    }
    parent = _request_rows(key, [req for req, _ in computed], "exact", spec, params.max_new_tokens, k_store, run_id)
    return wh.append_with_children("choice_requests", parent, children)


def pending_samples(wh, model_key: str, requests: Sequence[Request], n: int,
                    seeds: dict[tuple[str, int], int], params: SamplingSettings) -> list[tuple[Request, list[int]]]:
    """Per request, the sample indices not yet stored under these exact sampling settings."""
    done = wh.stored("samples", model_key, [r.request_id for r in requests], ("request_id", "sample_index", "seed"),
                     temperature=params.temperature, top_k=params.top_k, top_p=params.top_p,
                     max_new_tokens=params.max_new_tokens)
    out = []
    for r in requests:
        todo = [i for i in range(n) if (r.request_id, i, seeds[(r.request_id, i)]) not in done]
        if todo:
            out.append((r, todo))
    return out


def _sample_rows(tok, req: ChoiceRequest, parser: AnswerParser, indices: list[int], seeds: list[int], drawn,
                 params: SamplingSettings, key: str, run_id: str | None):
    """`samples` rows of one prompt's drawn samples, each parsed (answer, validity)."""
    rows: dict[str, list] = {k: [] for k in ("sample_index", "seed", "text", "token_ids", "token_logprobs",
                                             "finish_reason", "answer", "valid")}
    for i, s_seed, sample in zip(indices, seeds, drawn):
        text = decode(tok, sample.token_ids, keep_special=req.final_marker is not None)
        answer, option = parser.parse(text)
        for k, v in (("sample_index", i), ("seed", s_seed), ("text", text), ("token_ids", sample.token_ids),
                     ("token_logprobs", sample.logprobs), ("finish_reason", sample.finish_reason),
                     ("answer", option if option is not None else answer), ("valid", option is not None)):
            rows[k].append(v)
    return arrow("samples", rows, model_key=key, request_id=req.request_id, temperature=params.temperature,
                 top_k=params.top_k, top_p=params.top_p, max_new_tokens=params.max_new_tokens,
                 stimulus_id=req.stimulus_id, run_id=run_id)


def collect_samples(wh, backend, pending: Sequence[tuple[ChoiceRequest, list[int]]],
                    seeds: dict[tuple[str, int], int], spec: PromptSpec, *, params: SamplingSettings,
                    rows_per_batch: int, run_id: str | None, on_progress: Progress = None) -> int:
    """Draw the missing samples (`pending` from `pending_samples`, with their `seeds`) through `backend.sample`,
    `rows_per_batch` samples of one prompt per call, each prompt continuing the template's shared prefix (declared
    with `share_prefix`)."""
    if not pending:
        return 0  # nothing pending: the model is not even loaded
    tok = backend.tokenizer
    key = backend.spec.model_key
    backend.share_prefix(shared_prefix_ids(spec, tok))
    added = 0
    wh.append("choice_requests", _request_rows(key, [r for r, _ in pending], "sample", spec, params.max_new_tokens,
                                               None, run_id))
    for req, todo in pending:
        parser = req.parser(spec)
        own = params if not req.lead_tokens else SamplingSettings(
            params.temperature, params.top_k, params.top_p, params.max_new_tokens + req.lead_tokens)
        for start in range(0, len(todo), rows_per_batch):
            indices = todo[start:start + rows_per_batch]
            batch_seeds = [seeds[(req.request_id, i)] for i in indices]
            drawn = backend.sample([req.prompt_ids], [batch_seeds], own)[0]
            added += wh.append("samples", _sample_rows(tok, req, parser, indices, batch_seeds, drawn, params, key,
                                                       run_id))
        if on_progress:
            on_progress(1)
    return added


#: the fewest top tokens exact mode stores per trie node (docs/design.md section 4)
MIN_K_STORE = 64


#: a collection's valid share below which the run suggests the plain prompt
LOW_VALID = 0.5


class ChoiceSettings(Sampling):
    """The forced-choice settings (the contextual-invariance paper's are the defaults: T = 0.5, top_k = 40, 6 new
    tokens; 200 samples per prompt in sample mode)."""

    DEFAULTS = {"samples": 200, "seed": 0, "temperature": 0.5, "top_k": 40, "top_p": 1.0, "max_new_tokens": 6}

    mode: Literal["exact", "sample", "logprobs"] = "exact"
    k_store: int = Field(MIN_K_STORE, le=MAX_TOP_K)
    prompt: str = "forced_choice_v1"
    prompt_batch: int = Field(DEFAULT_PROMPT_BATCH, ge=1)

    @model_validator(mode="after")
    def _exact(self) -> ChoiceSettings:
        if self.mode == "logprobs" and self.top_p != 1.0:
            raise UsageError("--mode logprobs derives top-k / temperature sampling: use --top-p 1.0")
        if self.mode != "exact":
            return self
        if self.top_p != 1.0:
            raise UsageError("--mode exact computes top-k / temperature sampling: use --top-p 1.0 (or --mode sample)")
        if self.k_store < MIN_K_STORE:
            raise UsageError(f"--k-store must be at least {MIN_K_STORE} (docs/design.md section 4)")
        if not 1 <= self.top_k <= self.k_store:
            raise UsageError(f"--top-k must be between 1 and --k-store ({self.k_store}) in exact mode")
        return self

    def render_params(self) -> dict:
        """The rendering parameters of a request (part of its id). In exact mode the explored trie depends on the
        settings through pruning, so each (temperature, top_k, k_store) is its own request."""
        if self.mode == "exact":
            return {"mode": "exact", "max_new_tokens": self.max_new_tokens, "k_store": self.k_store,
                    "temperature": self.temperature, "top_k": self.top_k}
        if self.mode == "logprobs":  # one request per setting, as exact mode (its probabilities are of T and top_k)
            return {"mode": "logprobs", "max_new_tokens": self.max_new_tokens, "temperature": self.temperature,
                    "top_k": self.top_k}
        return {"mode": "sample", "max_new_tokens": self.max_new_tokens}


class Choice(Protocol):
    """The choice protocol (see the module docstring)."""

    name = "choice"
    settings_model = ChoiceSettings

    @property
    def table(self) -> str:  # noqa: D401  (the evidence table depends on the mode)
        return "samples" if self.settings.mode == "sample" else "choice_requests"

    def capability(self, kind: str) -> str:
        return f"choice-{self.settings.mode}"

    def needs(self, kind: str) -> frozenset[str]:
        mode = self.settings.mode
        if mode == "logprobs":
            return frozenset({CHAT_LOGPROBS})
        if mode == "sample":
            return frozenset({CHAT if self.chat else SAMPLE})
        return frozenset({TOP_K})

    def check(self) -> None:
        """The prompt: --prompt when given, else the one the dataset declares (a user dataset's), else the
        built-in forced-choice prompt."""
        declared = self.dataset.prompt() if self.dataset is not None else None
        if declared is not None and "prompt" not in self.settings.model_fields_set:
            self.spec = declared
        else:
            self.spec = PromptSpec.load(self.settings.prompt)

    def check_engine(self, prepared) -> None:
        if self.chat:
            if self.settings.mode == "sample":  # logprobs mode applies T and top-k here, on what comes back
                prepared.check_sampling(self.settings.sampling())
            return
        k, k_store = prepared.max_top_k, self.settings.k_store
        if self.settings.mode != "exact" or k is None or k_store <= k:
            return
        raise_limit = ("raise the engine's limit (an OpenAI-compatible vLLM server: restart it with "
                       f"--max-logprobs {k_store}; --backend vllm: --engine-arg max_logprobs={k_store})")
        if k < MIN_K_STORE:
            raise Unsupported(f"exact mode stores the top {MIN_K_STORE} or more tokens per step "
                              f"(docs/design.md section 4) but this engine returns at most {k} (vLLM's default "
                              f"max_logprobs is 20), so no --k-store works here: {raise_limit}, or use --mode sample")
        raise UsageError(f"--k-store {k_store} exceeds the {k} top log-probabilities this engine returns: give "
                         f"--k-store between {MIN_K_STORE} and {k} (with --top-k <= --k-store), or {raise_limit}")

    def result_notes(self, wh, model_key: str, requests: Sequence) -> list[str]:
        """The collection's valid share (exact mode): the mean over its prompts of the probability mass of answers
        that are one of the options (neither invalid nor left unresolved by the trie), what it means, and, where it
        is below `LOW_VALID` with the chat prompt, the plain prompt that small and base models answer more
        validly."""
        if self.settings.mode != "exact" or not requests:
            return []
        s = self.settings
        ids = [r.request_id for r in requests]
        rows = wh.rows("SELECT count(*), avg(valid) FROM (SELECT request_id, coalesce(sum(prob) FILTER (WHERE "
                       "option NOT IN (?, ?)), 0) AS valid FROM choice_probs WHERE model_key = ? AND temperature = ? "
                       "AND top_k = ? AND top_p = ? AND request_id IN (SELECT unnest(?)) GROUP BY request_id)",
                       [INVALID, UNRESOLVED, model_key, s.temperature, s.top_k, s.top_p, ids])
        done, share = rows[0]
        if not done:
            return []
        line = (f"valid share {share:.2f} over {done:,} prompts: on average {share:.0%} of the model's answer "
                "probability is one of the options, the rest other replies; scores are among valid answers, and "
                "`biaslab metrics` marks a share below 0.8")
        if share < LOW_VALID and s.prompt == "forced_choice_v1":
            line += (". Small and base models often answer the plain prompt far more validly (SmolLM2-135M: 0.77 "
                     "vs 0.23): --prompt forced_choice_plain_v1, a prompt version of its own, never mixed with this")
        return [line]

    def setup_notes(self, prepared) -> list[str]:
        """A line when a model without a chat template (a base model) is asked with a chat prompt: such a model
        mostly copies the format's placeholder, so its valid share is low (shown beside every score); the base-model
        prompt (`--prompt forced_choice_plain_v1`) states the same task as a text to continue."""
        from ..prompting import has_chat_template

        if self.chat or has_chat_template(prepared.tokenizer) or self.spec.version != "forced-choice-v1":
            return []
        return ["prompt: this model has no chat template, and forced-choice-v1 is a chat prompt: a base model is asked "
                "with --prompt forced_choice_plain_v1 (another prompt version, so the two are never mixed)"]

    def requests(self, stimuli: Sequence[Stimulus], prepared) -> list[ChoiceRequest]:
        self.engine = prepared.label
        if self.chat:
            params = self.settings.render_params()
            if self.settings.mode == "logprobs":  # how many alternatives come back changes the numbers
                params["top_logprobs"] = prepared.max_top_k
            return chat_choice_requests(stimuli, self.spec, params, prepared.prefill)
        return choice_requests(stimuli, prepared.tokenizer, self.spec, self.settings.render_params())

    def pending(self, wh, model_key: str, requests: Sequence[ChoiceRequest]) -> Work:
        s = self.settings
        if s.mode in ("exact", "logprobs"):
            todo = pending_choice(wh, model_key, requests)
            return Work(len(todo), todo, list(requests))
        seeds = {(r.request_id, i): sample_seed(s.seed, r.request_id, i) for r in requests for i in range(s.samples)}
        pending = pending_samples(wh, model_key, requests, s.samples, seeds, s.sampling())
        return Work(len(pending), (pending, seeds), list(requests))

    def version(self) -> str:
        """The protocol version recorded with the run (and in a shard's stamp)."""
        s = self.settings
        version = f"{self.spec.version}:{json.dumps(s.render_params(), sort_keys=True)}"
        if s.mode == "sample":
            version += f":seed={s.seed}:T={s.temperature}:k={s.top_k}:p={s.top_p}"
        return version

    def planned(self, work: Work) -> tuple[int, int, int]:
        """(requests, input characters, output tokens at most) a chat API will be sent for `work`."""
        from .choice_chat import planned_calls

        if self.settings.mode == "logprobs":
            return planned_calls([(r, 1) for r in work.items], self.settings.sampling())
        pending, _ = work.items
        return planned_calls([(r, len(todo)) for r, todo in pending], self.settings.sampling())

    def provenance(self) -> tuple[dict, dict | None]:
        s = self.settings
        generation = {"do_sample": True, "temperature": s.temperature, "top_k": s.top_k, "top_p": s.top_p,
                      "max_new_tokens": s.max_new_tokens, "repetition_penalty": 1.0, "mode": s.mode,
                      "prompt_version": self.spec.version}
        return {"protocol_version": self.version(), "engine": self.engine}, generation

    def run(self, wh, backend, work: Work, *, run_id: str, chunk_size: int, on_progress: Progress) -> int:
        return self.run_spec(wh, backend, work, self.spec, run_id=run_id, chunk_size=chunk_size,
                             on_progress=on_progress)

    def run_spec(self, wh, backend, work: Work, spec: PromptSpec, *, run_id: str, chunk_size: int,
                 on_progress: Progress) -> int:
        """Compute what `work` found pending (its items: exact, requests; sample, (pending, seeds)) asked with
        prompt `spec`; exact mode groups them as it would group all of `work.requests`."""
        s = self.settings
        items = work.items
        if s.mode == "exact":
            return collect_exact(wh, backend, items, spec, params=s.sampling(), k_store=s.k_store,
                                 chunk_size=max(1, min(chunk_size, 32)), run_id=run_id, prompt_batch=s.prompt_batch,
                                 on_progress=on_progress, everything=work.requests)
        if backend is None:
            return 0  # nothing pending: no engine was started
        key = backend.spec.model_key
        if s.mode == "logprobs":
            from .choice_chat import collect_chat_logprobs

            rows = lambda chunk: _request_rows(key, chunk, "logprobs", spec, s.max_new_tokens,  # noqa: E731
                                               backend.max_top_k, run_id)
            return collect_chat_logprobs(wh, backend, items, spec, params=s.sampling(),
                                         top_logprobs=backend.max_top_k, request_rows=rows, run_id=run_id,
                                         chunk_size=chunk_size, on_progress=on_progress)
        pending, seeds = items
        if self.chat:
            from .choice_chat import collect_chat_samples

            rows = lambda chunk: _request_rows(key, chunk, "sample", spec, s.max_new_tokens, None,  # noqa: E731
                                               run_id)
            return collect_chat_samples(wh, backend, pending, seeds, spec, params=s.sampling(), request_rows=rows,
                                        run_id=run_id, chunk_size=chunk_size, on_progress=on_progress)
        return collect_samples(wh, backend, pending, seeds, spec, params=s.sampling(), rows_per_batch=256,
                               run_id=run_id, on_progress=on_progress)


PROTOCOL = Choice

__all__ = ["INVALID", "PROTOCOL", "Choice", "ChoiceRequest", "ChoiceSettings", "choice_requests", "collect_exact",
           "collect_samples", "pending_choice", "pending_samples"]
