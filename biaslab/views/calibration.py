"""The calibration views: `pronoun_pair_probs` (pronoun minimal pairs) and `identity_pair_probs` (WinoQueer identity
terms), DESIGN.md section 7."""

from __future__ import annotations

import ibis
import ibis.expr.types as ir

from .common import Source, json_field, option_with_label


def pronoun_pair_probs(source: Source) -> ir.Table:
    """Per model, scheme and stimulus whose options include a male and a female pronoun: the joint log-probability
    of the sentence with each (lp_male, lp_female), the gold label gold_male (1 male, 0 female, NULL where the
    dataset has none) and the normalized probability of the male sentence,
    p_male = exp(lp_male) / (exp(lp_male) + exp(lp_female)) = 1 / (1 + exp(lp_female - lp_male)).
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


def identity_pair_probs(source: Source) -> ir.Table:
    """Identity-term pairs for calibration per identity group (WinoQueer "last-cloze" subset, the paper's Table 4):
    per model, scheme and stimulus whose options are labelled 'queer' and 'nonqueer' (`biaslab.loaders.winoqueer`),
    the joint log-probability of the sentence with each term, the identity group (upstream Gender_ID_x) and its
    counterpart (Gender_ID_y), gold_queer (1 where the gold option is the queer term: every WinoQueer pair, as
    the upstream ECE_identity.py fixes every label to 1) and p_queer = 1 / (1 + exp(lp_nonqueer - lp_queer)).
    Kept apart from pronoun_pair_probs, whose p_male / gold_male columns would mislabel these pairs.
    """
    st = source("stimuli")
    st = st.filter(st.option_labels.contains("queer") & st.option_labels.contains("nonqueer"))
    st = (st.join(option_with_label(st, "queer", "queer_term"), "stimulus_id")
          .join(option_with_label(st, "nonqueer", "nonqueer_term"), "stimulus_id"))
    q = source("sequence_scores")
    j = q.join(st, "stimulus_id")
    gold_queer = ibis.cases((j.gold.isnull(), ibis.null("int32")), else_=(j.gold == j.queer_term).cast("int32"))
    pairs = j.group_by([q.model_key, q.scheme, st.dataset, q.stimulus_id, st.item_id]).agg(
        identity=json_field(j.attrs, "gender_id_x").arbitrary(),
        counterpart=json_field(j.attrs, "gender_id_y").arbitrary(),
        queer_term=j.queer_term.arbitrary(),
        nonqueer_term=j.nonqueer_term.arbitrary(),
        lp_queer=j.sum_logprob.max(where=j.option == j.queer_term),
        lp_nonqueer=j.sum_logprob.max(where=j.option == j.nonqueer_term),
        gold_queer=gold_queer.max())
    pairs = pairs.filter(pairs.lp_queer.notnull() & pairs.lp_nonqueer.notnull())
    return pairs.mutate(p_queer=1.0 / (1.0 + (pairs.lp_nonqueer - pairs.lp_queer).exp()))
