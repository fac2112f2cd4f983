"""The `pronoun_pair_probs` view (calibration study) as an Ibis expression."""

from __future__ import annotations

import ibis
import ibis.expr.types as ir

from .common import Source, option_with_label


def pronoun_pair_probs(source: Source) -> ir.Table:
    """Per model, scheme and stimulus with a male and a female option: the joint log-probabilities of the two
    sentences, the gold label (1 male, 0 female, NULL without gold) and p_male = 1 / (1 + exp(lp_female - lp_male)).
    """
    st = source("stimuli")
    st = st.filter(st.option_labels.contains("male") & st.option_labels.contains("female"))
    st = (st.join(option_with_label(st, "male", "male_option"), "stimulus_id")
          .join(option_with_label(st, "female", "female_option"), "stimulus_id"))
    q = source("sequence_scores")
    j = q.join(st, "stimulus_id")
    gold_male = ibis.cases((j.gold.isnull(), ibis.null("int32")), else_=(j.gold == j.male_option).cast("int32"))
    pairs = j.group_by([q.model_key, q.scheme, st.dataset, q.stimulus_id, st.item_id]).agg(
        lp_male=j.sum_logprob.max(where=j.option == j.male_option),
        lp_female=j.sum_logprob.max(where=j.option == j.female_option),
        gold_male=gold_male.max())
    pairs = pairs.filter(pairs.lp_male.notnull() & pairs.lp_female.notnull())
    return pairs.mutate(p_male=1.0 / (1.0 + (pairs.lp_female - pairs.lp_male).exp()))
