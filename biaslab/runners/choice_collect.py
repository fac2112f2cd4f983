"""The `choice` protocol: forced-choice prompts answered in exact mode (trie of top-K logits) or sample mode.

Requests are grouped in chunks of prompts; each chunk is computed and written in one transaction, so an
interruption loses at most the chunk in flight and a rerun does only what is missing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ..schema import Stimulus, request_id
from ..warehouse import Warehouse
from .answers import AnswerParser, decode
from ..engines.base import SamplingSettings, StatelessExpander
from ..engines.hf.backend import SHARED_PREFIX_MAX_TOKENS, SUFFIX_BUCKET, stop_token_ids  # noqa: F401  (re-exported)
from .trie import DEFAULT_MIN_MASS, INVALID, probabilities, walk
from .prompting import PromptSpec, render, shared_prefix_ids
from .requests import Request
from ..engines.hf.sampling import SamplingParams

#: prompts explored together in exact mode (`--prompt-batch`): their trie levels share forward passes
DEFAULT_PROMPT_BATCH = 96
#: at most this many prompts (of one `prompt_group`) have their suffixes encoded in one forward pass
ENCODE_ROWS = 16
#: cache slots allowed per prompt for its trie levels, beyond prompt and max_new_tokens, when sizing a batch
EXPLORE_SLOTS = 64
#: how prompts are computed, recorded in each run's parameters (`runs.params.engine`): the template's shared prefix
#: computed once and continued (`kvcache.SharedPrefixes`, suffixes `ENCODE_ROWS` per pass into one preallocated
#: cache), exact-mode trie levels as tree attention (`exact._TreeLevels`) shared by the prompts explored together.
#: Stored numbers equal the earlier one-prompt-per-forward engine within the dtype's rounding.
ENGINE = f"shared-prefix-v1(bucket={SUFFIX_BUCKET},encode={ENCODE_ROWS})+tree-levels-v3"


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

    def parser(self, spec: PromptSpec) -> AnswerParser:
        """The answer parser of this prompt (the same in exact and sample mode)."""
        return AnswerParser(self.options, spec.closing, self.lead, self.final_marker)


def choice_requests(stimuli: Sequence[Stimulus], tokenizer, spec: PromptSpec, params: dict) -> list[ChoiceRequest]:
    out = []
    for s in stimuli:
        rendered = render(spec, tokenizer, s)
        ids = tokenizer(rendered.text, add_special_tokens=False)["input_ids"]
        rid = request_id(s.stimulus_id, "choice", {**params, "adaptation": rendered.adaptation}, spec.version)
        out.append(ChoiceRequest(rid, s.stimulus_id, "choice", tuple(s.options), rendered.text, list(ids),
                                 rendered.adaptation, rendered.lead, rendered.lead_tokens, rendered.final_marker))
    return out


def _request_rows(model_key: str, chunk: Sequence[ChoiceRequest], mode: str, spec: PromptSpec,
                  max_new_tokens: int, k_store: int | None, run_id: str | None) -> pa.Table:
    return pa.table({
        "model_key": [model_key] * len(chunk), "request_id": [r.request_id for r in chunk],
        "stimulus_id": [r.stimulus_id for r in chunk], "protocol": [r.protocol for r in chunk],
        "mode": [mode] * len(chunk), "prompt_version": [spec.version] * len(chunk),
        "adaptation": [r.adaptation for r in chunk], "prompt_text": [r.prompt_text for r in chunk],
        "options": [list(r.options) for r in chunk], "max_new_tokens": [max_new_tokens] * len(chunk),
        "k_store": pa.array([k_store] * len(chunk), pa.int32()), "run_id": pa.array([run_id] * len(chunk), pa.string()),
    })


def pending_choice(wh: Warehouse, model_key: str, requests: Sequence[ChoiceRequest]) -> list[ChoiceRequest]:
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


def collect_exact(wh: Warehouse, backend, requests: Sequence[ChoiceRequest], spec: PromptSpec, *,
                  params: SamplingParams, k_store: int, chunk_size: int, run_id: str | None,
                  min_mass: float = DEFAULT_MIN_MASS, prompt_batch: int = DEFAULT_PROMPT_BATCH,
                  on_progress: Callable[[int], None] | None = None) -> int:
    """Explore the answer trie of every pending request through `backend` and store nodes, edges and the exact
    probabilities (`exact.walk` over `backend.expander`).

    The template's common beginning (`shared_prefix_ids`) is declared to the backend (`share_prefix`), which may
    compute it once (the Hugging Face backend continues one cache of it, `kvcache.SharedPrefixes`, with trie levels
    as tree attention). Up to `prompt_batch` prompts are explored together: their trie levels share forward
    passes (fewer, fuller passes), and their suffixes are encoded up to `ENCODE_ROWS` prompts of one
    `backend.prompt_group` per forward. The backend may lower the count to fit its cache (`explore_rows`), or
    explore each encoding batch alone (`combines_batches`: False for caches with sliding-window layers and for
    attention without tree masks). A prompt's numbers depend on its batch only through the rounding of
    differently shaped products: in fp32 by ~1e-5 in a probability, in bf16 by up to bf16's own rounding (measured
    in docs/decisions.md, "Shared-prefix cache"); `prompt_batch=1` makes them independent of the batch. Each
    written chunk holds the prompts of whole explorations, at least `chunk_size` of them where more are pending;
    the first exploration is one encoding batch, so `on_progress`, advanced as prompts' tries complete, reports
    within seconds. Backends without `share_prefix` / `prompt_group` / `expander` get one group and the
    `StatelessExpander`.
    """
    if not requests:
        return 0  # nothing pending: the model is not even loaded
    tok = backend.tokenizer
    key = backend.spec.model_key
    if hasattr(backend, "share_prefix"):
        backend.share_prefix(shared_prefix_ids(spec, tok))
    grouping = getattr(backend, "prompt_group", None)
    together = prompt_batch
    if hasattr(backend, "explore_rows"):
        longest = max(len(r.prompt_ids) for r in requests) + params.max_new_tokens + EXPLORE_SLOTS
        together = max(1, min(together, backend.explore_rows(longest)))
    rows = min(ENCODE_ROWS, together)
    walks = explorations(requests, [grouping(r.prompt_ids) if grouping else 0 for r in requests], rows, together,
                         backend.combines_batches() if hasattr(backend, "combines_batches") else True, first=rows)
    added = 0
    computed: list[tuple[ChoiceRequest, object]] = []  # explored, not yet written
    for index, parts in enumerate(walks):
        batch = [r for b in parts for r in b]
        prompts = [r.prompt_ids for r in batch]
        expander = (backend.expander(prompts, k_store, batches=[len(b) for b in parts])
                    if hasattr(backend, "expander") else StatelessExpander(backend, prompts, k_store))
        tries = walk(expander, tok, [r.parser(spec) for r in batch],
                     max_new_tokens=params.max_new_tokens + max(r.lead_tokens for r in batch),
                     stop_ids=backend.stop_ids,
                     temperature=params.temperature, top_k=params.top_k, min_mass=min_mass, on_finished=on_progress)
        computed += zip(batch, tries)
        if len(computed) >= chunk_size or index == len(walks) - 1:
            added += _write_tries(wh, key, computed, spec, params, k_store, run_id)
            computed = []
    return added


def _write_tries(wh: Warehouse, key: str, computed: Sequence[tuple[ChoiceRequest, object]], spec: PromptSpec,
                 params: SamplingParams, k_store: int, run_id: str | None) -> int:
    """One transaction: the requests of `computed` with their trie nodes, edges and exact probabilities."""
    chunk = [req for req, _ in computed]
    tries = [trie for _, trie in computed]
    nodes: dict[str, list] = {k: [] for k in ("request_id", "node_id", "parent_id", "token_id", "depth",
                                              "topk_ids", "topk_logits", "logsumexp")}
    edges: dict[str, list] = {k: [] for k in ("request_id", "node_id", "token_id", "outcome", "child_id")}
    probs: dict[str, list] = {k: [] for k in ("request_id", "option", "prob")}
    for req, trie in zip(chunk, tries):
        for n in range(len(trie.node_parent)):
            for k, v in (("request_id", req.request_id), ("node_id", n), ("parent_id", trie.node_parent[n]),
                         ("token_id", trie.node_token[n]), ("depth", trie.node_depth[n]),
                         ("topk_ids", trie.topk_ids[n].astype(np.int32)),
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
    children = {
        "choice_nodes": _with_key(pa.table({
            **{k: nodes[k] for k in ("request_id", "node_id", "parent_id", "token_id", "depth", "logsumexp")},
            "topk_ids": pa.array(nodes["topk_ids"], pa.list_(pa.int32())),
            "topk_logits": pa.array(nodes["topk_logits"], pa.list_(pa.float32())),
        }), key),
        "choice_edges": _with_key(pa.table({**edges, "child_id": pa.array(edges["child_id"], pa.int32())}), key),
        "choice_probs": _with_key(pa.table({
            **probs, "temperature": [params.temperature] * len(probs["prob"]),
            "top_k": [params.top_k] * len(probs["prob"]), "top_p": [1.0] * len(probs["prob"])}), key),
    }
    parent = _request_rows(key, chunk, "exact", spec, params.max_new_tokens, k_store, run_id)
    return wh.append_with_children("choice_requests", parent, children)


def _with_key(table: pa.Table, model_key: str) -> pa.Table:
    return table.add_column(0, "model_key", pa.array([model_key] * table.num_rows, pa.string()))


def pending_samples(wh: Warehouse, model_key: str, requests: Sequence[Request], n: int,
                    seeds: dict[tuple[str, int], int], params: SamplingParams) -> list[tuple[Request, list[int]]]:
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


def collect_samples(wh: Warehouse, backend, pending: Sequence[tuple[ChoiceRequest, list[int]]],
                    seeds: dict[tuple[str, int], int], spec: PromptSpec, *, params: SamplingParams,
                    rows_per_batch: int, run_id: str | None,
                    on_progress: Callable[[int], None] | None = None) -> int:
    """Draw the missing samples (`pending` from `pending_samples`, with their `seeds`) through `backend.sample`,
    `rows_per_batch` samples of one prompt per call, each prompt continuing the template's shared prefix (declared
    with `share_prefix` where the backend offers it)."""
    if not pending:
        return 0  # nothing pending: the model is not even loaded
    tok = backend.tokenizer
    key = backend.spec.model_key
    if hasattr(backend, "share_prefix"):
        backend.share_prefix(shared_prefix_ids(spec, tok))
    settings = SamplingSettings(params.temperature, params.top_k, params.top_p, params.max_new_tokens)
    added = 0
    wh.append("choice_requests", _request_rows(key, [r for r, _ in pending], "sample", spec, params.max_new_tokens,
                                               None, run_id))
    for req, todo in pending:
        parser = req.parser(spec)
        own = settings if not req.lead_tokens else SamplingSettings(
            params.temperature, params.top_k, params.top_p, params.max_new_tokens + req.lead_tokens)
        for start in range(0, len(todo), rows_per_batch):
            indices = todo[start:start + rows_per_batch]
            batch_seeds = [seeds[(req.request_id, i)] for i in indices]
            drawn = backend.sample([req.prompt_ids], [batch_seeds], own)[0]
            rows: dict[str, list] = {k: [] for k in ("sample_index", "seed", "text", "token_ids", "token_logprobs",
                                                     "finish_reason", "answer", "valid")}
            for i, s_seed, sample in zip(indices, batch_seeds, drawn):
                text = decode(tok, sample.token_ids, keep_special=req.final_marker is not None)
                answer, option = parser.parse(text)
                for k, v in (("sample_index", i), ("seed", s_seed), ("text", text), ("token_ids", sample.token_ids),
                             ("token_logprobs", sample.logprobs), ("finish_reason", sample.finish_reason),
                             ("answer", option if option is not None else answer), ("valid", option is not None)):
                    rows[k].append(v)
            n = len(indices)
            table = pa.table({
                "model_key": [key] * n, "request_id": [req.request_id] * n, **rows,
                "token_ids": pa.array(rows["token_ids"], pa.list_(pa.int32())),
                "token_logprobs": pa.array(rows["token_logprobs"], pa.list_(pa.float64())),
                "temperature": [params.temperature] * n, "top_k": [params.top_k] * n, "top_p": [params.top_p] * n,
                "max_new_tokens": [params.max_new_tokens] * n, "stimulus_id": [req.stimulus_id] * n,
                "run_id": pa.array([run_id] * n, pa.string()),
            })
            added += wh.append("samples", table)
        if on_progress:
            on_progress(1)
    return added


__all__ = ["INVALID", "ChoiceRequest", "choice_requests", "collect_exact", "collect_samples", "pending_choice",
           "pending_samples", "stop_token_ids"]
