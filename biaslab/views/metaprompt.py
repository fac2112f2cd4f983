"""Metaprompting (the contextual-invariance paper's Table 4): the answers of the `meta` protocol's requests."""

from __future__ import annotations

import ibis
import ibis.expr.types as ir

from .common import Source, json_field

#: the columns of `meta_answers`, in order
ANSWER_COLUMNS = ["model_key", "mode", "temperature", "top_k", "top_p", "prompt_version", "max_new_tokens",
                  "request_id", "stimulus_id", "options", "option", "prob"]


def meta_answers(source: Source) -> ir.Table:
    """One row per meta request, collection setting and answer. Exact mode: each outcome of `choice_probs` (an
    option, 'unresolved', 'invalid') with its probability; sample mode: each parsed answer (NULL for invalid
    samples) with its number of samples as `prob`. Ordered by the columns before `prob`."""
    r = source("choice_requests")
    r = r.filter(r.protocol == "meta")
    c = source("choice_probs")
    e = r.filter(r["mode"] == "exact").join(c, ["model_key", "request_id"])
    exact = e.select(model_key=e.model_key, mode=ibis.literal("exact"), temperature=e.temperature, top_k=e.top_k,
                     top_p=e.top_p, prompt_version=e.prompt_version, max_new_tokens=e.max_new_tokens,
                     request_id=e.request_id, stimulus_id=e.stimulus_id, options=e.options, option=e.option,
                     prob=e.prob)
    requests = r.filter(r["mode"] == "sample").select("model_key", "request_id", "stimulus_id", "prompt_version",
                                                       "options").distinct()
    s = source("samples")
    j = s.join(requests, ["model_key", "request_id"])
    answer = ibis.cases((j.valid, j.answer), else_=ibis.null("string"))
    sampled = j.group_by(model_key=j.model_key, mode=ibis.literal("sample"), temperature=j.temperature,
                         top_k=j.top_k, top_p=j.top_p, prompt_version=j.prompt_version,
                         max_new_tokens=j.max_new_tokens, request_id=j.request_id, stimulus_id=j.stimulus_id,
                         options=j.options, option=answer).agg(prob=j.count().cast("float64"))
    both = exact.union(sampled)
    return both.order_by([c for c in ANSWER_COLUMNS if c not in ("options", "prob")])


def meta_stimuli(source: Source) -> ir.Table:
    """The stimuli asked meta questions: stimulus_id, context, option_order, occupation, participant, template and
    the upstream antecedent (attrs.antecedent), ordered by stimulus_id."""
    st = source("stimuli")
    r = source("choice_requests")
    asked = r.filter(r.protocol == "meta").select("stimulus_id").distinct()
    st = st.join(asked, "stimulus_id")
    return st.select("stimulus_id", "context", "option_order", "occupation", "participant", "template",
                     antecedent=json_field(st.attrs, "antecedent")).order_by("stimulus_id")
