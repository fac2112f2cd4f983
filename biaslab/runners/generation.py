"""The `gen` protocol: open generation from misgendering prompts (Subramonian et al. 2025, "Agree to Disagree? A
Meta-Evaluation of LLM Misgendering"), stored as raw samples.

Prompts (one `gen_requests` row each, DESIGN.md section 7):

* MISGENDERED and RUFF stimuli (a sentence with a pronoun slot) give two prompts: `pre`, the text before the slot
  (trailing whitespace removed, so the model chooses the next word's leading space itself; the upstream code keeps
  the space), and `post`, the text with the gold pronoun filled in (with its verb agreement).
* TANGO prompts (no slot) give one prompt, `prompt`: the text with its first letter upper-cased (the upstream
  evaluation capitalizes the lower-case TANGO templates).

The model sees BOS + the prompt's tokens (the scoring BOS policy), no chat template. Each prompt gets `samples`
continuations of exactly `max_new_tokens` tokens by default: stop tokens get probability 0 for the first
`min_new_tokens` steps (the upstream `min_new_tokens=50`), with temperature 1, top_k 50, top_p 0.95 unless set
otherwise. A sample's seed is derived from the run seed, the request and the sample index, so the same seed gives
the same continuations whatever the chunking or resume point. Nothing is parsed here: the first-pronoun outcome
is a metric (`biaslab.metrics.misgendering`), computed from the stored text with the vocabulary stored per request.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pyarrow as pa

from ..lexicon.pronoun_detection import vocabulary
from ..lexicon.pronouns import capitalize
from ..schema import Stimulus, request_id
from ..warehouse import Warehouse
from .answers import decode
from ..engines.base import SamplingSettings
from .choice_collect import pending_samples
from .requests import Request
from ..engines.hf.sampling import SamplingParams, sample_seed

GEN_VERSION = "gen-v1"


@dataclass(frozen=True)
class GenRequest(Request):
    """One open-generation prompt (gen protocol) and the pronoun family its stimulus declares."""

    dataset: str
    context: str          # pre | post | prompt
    prompt_text: str
    declared: str


def generation_prompts(stimulus: Stimulus) -> list[tuple[str, str]]:
    """(context, prompt text) pairs of one stimulus (see the module docstring)."""
    if stimulus.options is None:
        return [("prompt", capitalize(stimulus.text))]
    if stimulus.gold is None or stimulus.slot is None:
        raise ValueError(f"stimulus {stimulus.item_id}: the gen protocol needs a gold pronoun and a slot")
    pre = stimulus.text[: stimulus.text.index(stimulus.slot)].rstrip()
    if not pre:
        raise ValueError(f"stimulus {stimulus.item_id}: nothing precedes the slot, so there is no pre context")
    return [("pre", pre), ("post", stimulus.fill(stimulus.gold))]


def gen_requests(stimuli: Sequence[Stimulus], max_new_tokens: int = 50,
                 min_new_tokens: int = 50) -> list[GenRequest]:
    """Requests of the stimuli; the generation length settings are part of the request identity (so a run with
    another --max-new-tokens or --min-new-tokens is a new collection with its own `gen_requests` rows)."""
    out = []
    for s in stimuli:
        if s.pronoun_set is None:
            raise ValueError(f"stimulus {s.item_id}: the gen protocol needs the declared pronoun set")
        families = vocabulary(s.dataset)
        if s.pronoun_set not in families:
            raise ValueError(f"stimulus {s.item_id}: declared pronoun family {s.pronoun_set!r} is not among the "
                             f"families the misgendering detector knows for {s.dataset} ({sorted(families)}); "
                             f"the gen protocol covers those (for tango use --pronouns core)")
        for context, text in generation_prompts(s):
            rid = request_id(s.stimulus_id, "gen", {"context": context, "max_new_tokens": max_new_tokens,
                                                   "min_new_tokens": min_new_tokens}, GEN_VERSION)
            out.append(GenRequest(rid, s.stimulus_id, "gen", s.dataset, context, text, s.pronoun_set))
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


def pending_generations(wh: Warehouse, model_key: str, requests: Sequence[GenRequest], n: int, seed: int,
                        params: SamplingParams) -> dict[str, list[int]]:
    """request_id -> sample indices not yet stored under these sampling settings and seed (`pending_samples`)."""
    seeds = {(r.request_id, i): sample_seed(seed, r.request_id, i) for r in requests for i in range(n)}
    return {r.request_id: todo for r, todo in pending_samples(wh, model_key, requests, n, seeds, params)}


def _request_table(model_key: str, chunk: Sequence[GenRequest], params: SamplingParams, min_new_tokens: int,
                   run_id: str | None) -> pa.Table:
    n = len(chunk)
    vocabularies = {d: json.dumps(vocabulary(d), sort_keys=True) for d in {r.dataset for r in chunk}}
    return pa.table({
        "model_key": [model_key] * n, "request_id": [r.request_id for r in chunk],
        "stimulus_id": [r.stimulus_id for r in chunk], "dataset": [r.dataset for r in chunk],
        "context": [r.context for r in chunk], "prompt_version": [GEN_VERSION] * n,
        "prompt_text": [r.prompt_text for r in chunk], "declared": [r.declared for r in chunk],
        "pronoun_vocabulary": [vocabularies[r.dataset] for r in chunk],
        "max_new_tokens": pa.array([params.max_new_tokens] * n, pa.int32()),
        "min_new_tokens": pa.array([min_new_tokens] * n, pa.int32()),
        "run_id": pa.array([run_id] * n, pa.string()),
    })


def collect_generations(wh: Warehouse, backend, requests: Sequence[GenRequest], pending: dict[str, list[int]], *,
                        samples: int, seed: int, params: SamplingParams, min_new_tokens: int, chunk_size: int,
                        run_id: str | None, on_progress: Callable[[int], None] | None = None) -> int:
    """Generate and store the pending samples through `backend.sample`, chunk by chunk (chunk = `chunk_size`
    requests of the FULL list, every sample of each, so a resumed run batches exactly like an uninterrupted one);
    each chunk's requests and samples are written in one transaction. Returns sample rows added."""
    if not pending:
        return 0
    tok = backend.tokenizer
    key = backend.spec.model_key
    settings = SamplingSettings(params.temperature, params.top_k, params.top_p, params.max_new_tokens,
                                min_new_tokens)
    added = 0
    for start in range(0, len(requests), chunk_size):
        chunk = list(requests[start:start + chunk_size])
        waiting = sum(r.request_id in pending for r in chunk)
        if not waiting:
            continue
        texts = [tok(r.prompt_text, add_special_tokens=False)["input_ids"] for r in chunk]
        prompts = [[backend.bos_id, *ids] if backend.bos_id is not None else list(ids) for ids in texts]
        seeds = [[sample_seed(seed, r.request_id, i) for i in range(samples)] for r in chunk]
        drawn = backend.sample(prompts, seeds, settings)
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
        n = len(rows["request_id"])
        table = pa.table({
            "model_key": [key] * n, **rows,
            "token_ids": pa.array(rows["token_ids"], pa.list_(pa.int32())),
            "token_logprobs": pa.array(rows["token_logprobs"], pa.list_(pa.float64())),
            "temperature": [params.temperature] * n, "top_k": [params.top_k] * n, "top_p": [params.top_p] * n,
            "max_new_tokens": [params.max_new_tokens] * n, "answer": pa.array([None] * n, pa.string()),
            "valid": [True] * n, "run_id": pa.array([run_id] * n, pa.string()),
        })
        result = wh.append_many({"gen_requests": _request_table(key, chunk, params, min_new_tokens, run_id),
                                 "samples": table})
        added += result["samples"]
        if on_progress:
            on_progress(waiting)
    return added


__all__ = ["GEN_VERSION", "GenRequest", "collect_generations", "continuation_text", "gen_requests",
           "generation_prompts", "pending_generations"]
