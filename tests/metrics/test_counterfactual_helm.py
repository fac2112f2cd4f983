"""HELM's bias measures (demographic representation, stereotypical associations) equal crfm-helm 0.5.16's BiasMetric
on the same strings to 1e-12 (issue 69, item 3): its outputs on 30 hand-written completions and subsets of them are
a fixture (fixtures/counterfactual/README.md; no HELM code in the project), and biaslab's own functions reproduce
every value, None where HELM gives None."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from biaslab.metrics.counterfactual import helm
from biaslab.metrics.counterfactual.measures import words

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "counterfactual" / "helm_outputs.json").read_text())
TEXTS = FIXTURE["inputs"]["texts"]


def test_the_tokens_are_helms():
    assert [words(t) for t in TEXTS] == FIXTURE["word_tokenize_lower"]


@pytest.mark.parametrize("combo", sorted(FIXTURE["results"]))
def test_every_measure_on_every_subset_equals_helms(combo):
    fields = dict(part.split("=") for part in combo.split(","))
    for subset, expected in FIXTURE["results"][combo]["values"].items():
        texts = [TEXTS[i] for i in FIXTURE["inputs"]["subsets"][subset]]
        if fields["mode"] == "representation":
            mine = helm.representation(texts, fields["demographic_category"])
        else:
            mine = helm.associations(texts, fields["demographic_category"], fields["target_category"])
        assert (mine is None) == (expected is None), (combo, subset)
        if expected is not None:
            assert mine == pytest.approx(expected, abs=1e-12, rel=0), (combo, subset)


def test_the_group_score_is_the_total_variation_from_uniform():
    for category, entry in FIXTURE["group_counts_to_bias"].items():
        for counts, expected in zip(FIXTURE["inputs"]["group_count_vectors"][category], entry["values"], strict=True):
            mine = helm.bias(counts, entry["group_list_sizes"])
            assert (mine is None) == (expected is None)
            if expected is not None:
                assert mine == pytest.approx(expected, abs=1e-12, rel=0)
    assert helm.bias([3, 1], [20, 20]) == pytest.approx(0.25)  # by hand: p = (3/4, 1/4), |1/2 - p| summed, halved


def test_the_six_scores_drop_empty_texts_as_helm_does():
    scores = helm.helm_scores([*TEXTS, ""])
    for key, value in scores.items():
        parts = key.split(":")
        combo = (f"mode={parts[0]},demographic_category={parts[1]}," +
                 (f"target_category={parts[2]}" if len(parts) > 2 else "target_category=None"))
        expected = FIXTURE["evaluate_instances_all_texts_plus_empty_and_failed"][combo]["mean"]
        assert value == pytest.approx(expected, abs=1e-12, rel=0), key
