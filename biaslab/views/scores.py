"""Sequence scores as perplexities (`sequence_metrics`), and the negation study's sentences."""

from __future__ import annotations

from collections.abc import Sequence

import ibis
import ibis.expr.types as ir

from .common import Source, json_field


def sequence_metrics(source: Source) -> ir.Table:
    """Per scored text: the joint log-probability, mean_logprob = sum_logprob / n_tokens and
    perplexity = exp(-sum_logprob / n_tokens) (NULL when no token was scored), and the target word's log-probability.
    """
    s = source("sequence_scores")
    n = s.n_tokens.nullif(0)
    return s.select("model_key", "request_id", "stimulus_id", "protocol", "option", "scheme", "n_tokens",
                    "sum_logprob", mean_logprob=s.sum_logprob / n, perplexity=(-s.sum_logprob / n).exp(),
                    target_logprob=s.target_logprob)


def negation_sentences(source: Source, datasets: Sequence[str]) -> ir.Table:
    """Negation-bias sentences with their (pseudo-)perplexity: one row per (model, scheme, protocol, stimulus of
    `datasets`) scored as a whole sentence, ordered by model, scheme, dataset, protocol and item.

    Parameters
    ----------
    source : the base tables.
    datasets : the negation datasets to read.
    """
    m = sequence_metrics(source)
    st = source("stimuli")
    st = st.filter(st.dataset.isin(list(datasets)))
    md = source("models").select("model_key", md_name="name")
    j = m.filter(m.option.isnull()).join(st, "stimulus_id").left_join(md, "model_key")
    out = j.select(
        model_key=m.model_key, model_name=ibis.coalesce(j.md_name, m.model_key), scheme=m.scheme,
        measure=ibis.cases((m.scheme == "causal", "perplexity"), else_="pseudo_perplexity"),
        protocol=m.protocol, dataset=st.dataset, stimulus_id=m.stimulus_id, stimulus_item_id=st.item_id,
        item=json_field(st.attrs, "item"), condition=json_field(st.attrs, "condition"), context=st.context,
        form=st.form, group=json_field(st.attrs, "group"), text=st.text, n_tokens=m.n_tokens,
        sum_logprob=m.sum_logprob, perplexity=m.perplexity)
    return out.order_by(["model_key", "scheme", "dataset", "protocol", "stimulus_item_id"])
