"""The calibration views: `pronoun_pair_probs` (pronoun minimal pairs) and `identity_pair_probs` (WinoQueer identity
terms), docs/design.md section 7."""

from __future__ import annotations

import ibis
import ibis.expr.types as ir

from .common import Source, json_field, option_with_label


def _scored_pairs(source: Source, labels: tuple[str, str], columns: tuple[str, str]):
    """The sequence scores of the stimuli whose options include one labelled `labels[0]` and one labelled
    `labels[1]`, joined to those stimuli with the two options as `columns`: (the joined table, it grouped per model,
    scheme, dataset, stimulus and item, the gold flag: 1 where the gold option is the first, 0 where it is not,
    NULL where the stimulus has none)."""
    first, second = labels
    st = source("stimuli")
    st = st.filter(st.option_labels.contains(first) & st.option_labels.contains(second))
    st = (st.join(option_with_label(st, first, columns[0]), "stimulus_id")
          .join(option_with_label(st, second, columns[1]), "stimulus_id"))
    q = source("sequence_scores")
    j = q.join(st, "stimulus_id")
    gold = ibis.cases((j.gold.isnull(), ibis.null("int32")), else_=(j.gold == j[columns[0]]).cast("int32"))
    return j, j.group_by([q.model_key, q.scheme, st.dataset, q.stimulus_id, st.item_id]), gold


def _normalized(pairs: ir.Table, lp_first: str, lp_second: str, name: str) -> ir.Table:
    """The pairs with both log-probabilities, with `name` = the normalized probability of the first sentence,
    1 / (1 + exp(lp_second - lp_first))."""
    pairs = pairs.filter(pairs[lp_first].notnull() & pairs[lp_second].notnull())
    return pairs.mutate(**{name: 1.0 / (1.0 + (pairs[lp_second] - pairs[lp_first]).exp())})


def pronoun_pair_probs(source: Source) -> ir.Table:
    """Per model, scheme and stimulus whose options include a male and a female pronoun: the joint log-probability
    of the sentence with each (lp_male, lp_female), the gold label gold_male (1 male, 0 female, NULL where the
    dataset has none) and the normalized probability of the male sentence,
    p_male = exp(lp_male) / (exp(lp_male) + exp(lp_female)) = 1 / (1 + exp(lp_female - lp_male)).
    """
    j, groups, gold_male = _scored_pairs(source, ("male", "female"), ("male_option", "female_option"))
    pairs = groups.agg(
        lp_male=j.sum_logprob.max(where=j.option == j.male_option),
        lp_female=j.sum_logprob.max(where=j.option == j.female_option),
        gold_male=gold_male.max())
    return _normalized(pairs, "lp_male", "lp_female", "p_male")


def identity_pair_probs(source: Source) -> ir.Table:
    """Identity-term pairs for calibration per identity group (WinoQueer "last-cloze" subset, the paper's Table 4):
    per model, scheme and stimulus whose options are labelled 'queer' and 'nonqueer' (`biaslab.loaders.winoqueer`),
    the joint log-probability of the sentence with each term, the identity group (upstream Gender_ID_x) and its
    counterpart (Gender_ID_y), gold_queer (1 where the gold option is the queer term: every WinoQueer pair, as
    the upstream ECE_identity.py fixes every label to 1) and p_queer = 1 / (1 + exp(lp_nonqueer - lp_queer)).
    Kept apart from pronoun_pair_probs, whose p_male / gold_male columns would mislabel these pairs.
    """
    j, groups, gold_queer = _scored_pairs(source, ("queer", "nonqueer"), ("queer_term", "nonqueer_term"))
    pairs = groups.agg(
        identity=json_field(j.attrs, "gender_id_x").arbitrary(),
        counterpart=json_field(j.attrs, "gender_id_y").arbitrary(),
        queer_term=j.queer_term.arbitrary(),
        nonqueer_term=j.nonqueer_term.arbitrary(),
        lp_queer=j.sum_logprob.max(where=j.option == j.queer_term),
        lp_nonqueer=j.sum_logprob.max(where=j.option == j.nonqueer_term),
        gold_queer=gold_queer.max())
    return _normalized(pairs, "lp_queer", "lp_nonqueer", "p_queer")
