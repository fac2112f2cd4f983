"""Misgendering meta-evaluation (Subramonian et al. 2025; docs/design.md section 7): the probability-based method
(`misgendering_prob_options`, `misgendering_prob`) and the generation-based one (`gen_samples`)."""

from __future__ import annotations

import ibis
import ibis.expr.types as ir

from .common import Source, json_field, option_labels

_SOURCE = {"source_request_id": ("request_id", "string"), "source_sample_index": ("sample_index", "int32"),
           "source_seed": ("seed", "int64"), "source_temperature": ("temperature", "float64"),
           "source_top_k": ("top_k", "int32"), "source_top_p": ("top_p", "float64"),
           "source_max_new_tokens": ("max_new_tokens", "int32"), "source_min_new_tokens": ("min_new_tokens", "int32")}


def _declared(source: Source) -> ir.Table:
    """Stimuli with a declared pronoun set and options: the misgendering datasets' stimuli (their loaders are the
    only built-in ones that declare a set; `biaslab.metrics.registry` names them) and a user dataset's whose spec
    names the gold option's family (`pronouns` with a `gold` per template), so prob and gen agree or disagree on
    a user's study as on the paper's (issue 44, item 6)."""
    st = source("stimuli")
    return st.filter(st.pronoun_set.notnull() & st.options.notnull())


def misgendering_prob_options(source: Source) -> ir.Table:
    """One row per scored option of a MISGENDERED / RUFF / TANGO-template stimulus: perplexity =
    exp(-sum log p / n) over the option's whole sequence (BOS + text, every token scored), and for TANGO templates
    the generation they were built from (source_*)."""
    q = source("sequence_scores")
    st = _declared(source)
    labels = option_labels(st)
    j = q.filter(q.protocol == "prob").join(st, "stimulus_id").left_join(
        labels, [q.stimulus_id == labels.stimulus_id, q.option == labels.option])
    index = st.options.index(q.option)
    return j.select(
        q.model_key, q.stimulus_id, q.scheme, st.dataset, st.item_id, declared=st.pronoun_set,
        grammatical_case=st.grammatical_case, gold=st.gold, option=q.option,
        option_index=ibis.cases((index >= 0, index + 1), else_=ibis.null("int64")),
        option_label=labels.option_label, n_options=st.options.length(), n_tokens=q.n_tokens,
        sum_logprob=q.sum_logprob, perplexity=(-q.sum_logprob / q.n_tokens).exp(),
        template_of=json_field(st.attrs, "template_of"),
        **{name: json_field(st.attrs, key).cast(dtype) for name, (key, dtype) in _SOURCE.items()})


_KEYS = ["model_key", "stimulus_id", "scheme"]
_ANY = ["dataset", "item_id", "declared", "grammatical_case", "gold", "template_of", *_SOURCE]


def misgendering_prob(source: Source) -> ir.Table:
    """Per stimulus, model and scheme with every option scored: the paper's prediction (lowest perplexity,
    pred_perplexity with its label pred_label) and the joint-probability prediction (highest sum log p, pred_joint);
    ties go to the earlier option; correct / correct_joint = the prediction is gold. Stimuli with an option missing
    are left out."""
    o = misgendering_prob_options(source)
    ranked = o.mutate(
        by_ppl=ibis.row_number().over(group_by=_KEYS, order_by=[o.perplexity, o.option_index]),
        by_joint=ibis.row_number().over(group_by=_KEYS, order_by=[o.sum_logprob.desc(), o.option_index]))
    grouped = o.group_by(_KEYS).agg(n_scored=o.count(), n_options=o.n_options.max(),
                                    **{c: o[c].max() for c in _ANY})
    grouped = grouped.filter(grouped.n_scored == grouped.n_options)
    ppl = ranked.filter(ranked.by_ppl == 0).select(*_KEYS, pred_perplexity="option", pred_label="option_label")
    joint = ranked.filter(ranked.by_joint == 0).select(*_KEYS, pred_joint="option")
    j = grouped.join(ppl, _KEYS).join(joint, _KEYS)
    return j.select(*_KEYS, "dataset", "item_id", "declared", "grammatical_case", "gold", "pred_perplexity",
                    "pred_joint", "pred_label", correct=j.pred_perplexity == j.gold,
                    correct_joint=j.pred_joint == j.gold, template_of=j.template_of,
                    **{c: j[c] for c in _SOURCE})


def sample_id(samples: ir.Table) -> ir.StringValue:
    """The stable id of a stored sample (annotation sheets name samples by it): the first 16 hex characters of
    sha256 of "model_key:request_id:sample_index:seed:temperature:top_k:top_p:max_new_tokens" (numbers as DuckDB
    writes them as text)."""
    parts = [samples.model_key, samples.request_id, *(samples[c].cast("string") for c in (
        "sample_index", "seed", "temperature", "top_k", "top_p", "max_new_tokens"))]
    return ibis.literal(":").join(parts).hexdigest("sha256").substr(0, 16)


def gen_samples(source: Source, with_sample_id: bool = True) -> ir.Table:
    """Every stored continuation of a gen prompt with its request's fields and its `sample_id` (`with_sample_id`
    False leaves it out, for engines without sha256, e.g. DataFusion through Ibis)."""
    s = source("samples")
    g = source("gen_requests")
    j = s.join(g, ["model_key", "request_id"])
    first = {"sample_id": sample_id(s)} if with_sample_id else {}
    return j.select(**first, model_key=s.model_key, request_id=s.request_id, stimulus_id=g.stimulus_id,
                    dataset=g.dataset, context=g.context, declared=g.declared, prompt_text=g.prompt_text,
                    pronoun_vocabulary=g.pronoun_vocabulary, sample_index=s.sample_index,
                    seed=s.seed, temperature=s.temperature, top_k=s.top_k, top_p=s.top_p,
                    max_new_tokens=s.max_new_tokens, min_new_tokens=g.min_new_tokens, text=s.text,
                    finish_reason=s.finish_reason, n_tokens=s.token_ids.length())
