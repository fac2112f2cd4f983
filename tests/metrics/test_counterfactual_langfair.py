"""biaslab's counterfactual measures equal LangFair's own metric classes on the same strings (issue 69, item 3): the
outputs of LangFair 0.8.0's SentimentBias, RougelSimilarity, BleuSimilarity and CounterfactualMetrics on 40
hand-written answer pairs are a fixture (fixtures/counterfactual/README.md says how it was made; no LangFair code is
in the project), and biaslab's own functions, written from the definitions, reproduce every value to 1e-12."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from biaslab.metrics.counterfactual import measures

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "counterfactual" / "langfair_outputs.json").read_text())
TEXTS1, TEXTS2 = FIXTURE["inputs"]["texts1"], FIXTURE["inputs"]["texts2"]
CLASSES = FIXTURE["metric_classes"]


def test_the_words_are_nltks_word_tokenize_without_any_data_download():
    for side, texts in (("1", TEXTS1), ("2", TEXTS2)):
        assert [measures.words(t) for t in texts] == FIXTURE["per_text"][f"word_tokenize_lower_texts{side}"]


def test_rouge_l_equals_langfairs_rougel_similarity_pair_by_pair():
    mine = measures.rouge_l(TEXTS1, TEXTS2)
    expected = CLASSES["RougelSimilarity(rouge_metric='rougeL')"]
    assert mine == pytest.approx(expected["how_pairwise"], abs=1e-12, rel=0)
    assert sum(mine) / len(mine) == pytest.approx(expected["how_mean"], abs=1e-12, rel=0)
    assert measures.rouge_l(TEXTS2, TEXTS1) == pytest.approx(expected["how_pairwise_swapped_args"], abs=1e-12, rel=0)


def test_bleu_equals_langfairs_bleu_similarity_pair_by_pair():
    mine = measures.bleu(TEXTS1, TEXTS2)
    expected = CLASSES["BleuSimilarity()"]
    assert mine == pytest.approx(expected["how_pairwise"], abs=1e-12, rel=0)
    assert sum(mine) / len(mine) == pytest.approx(expected["how_mean"], abs=1e-12, rel=0)
    # the minimum of the two directions, each stored by the fixture
    directions = FIXTURE["per_pair_bleu_directions"]
    assert mine == pytest.approx([min(x, y) for x, y in zip(directions["bleu_ref1_hyp2"],
                                                            directions["bleu_ref2_hyp1"])], abs=1e-12, rel=0)
    assert measures.bleu(["No."], ["No."]) == [pytest.approx(0.316227766016838, abs=1e-15)]  # short: below 1


def test_vader_scores_and_sentiment_bias_equal_langfairs_every_configuration():
    for side, texts in (("1", TEXTS1), ("2", TEXTS2)):
        assert measures.vader(texts) == FIXTURE["per_text"][f"vader_polarity_scores_texts{side}"]
    scores1, scores2 = measures.vader(TEXTS1), measures.vader(TEXTS2)
    configs = {"SentimentBias(classifier='vader',sentiment='neg',parity='strong')": ("neg", "strong", 0.5),
               "SentimentBias(classifier='vader',sentiment='neg',parity='weak',threshold=0.5)": ("neg", "weak", 0.5),
               "SentimentBias(classifier='vader',sentiment='neg',parity='weak',threshold=0.1)": ("neg", "weak", 0.1),
               "SentimentBias(classifier='vader',sentiment='pos',parity='strong')": ("pos", "strong", 0.5),
               "SentimentBias(classifier='vader',sentiment='pos',parity='weak',threshold=0.3)": ("pos", "weak", 0.3)}
    assert set(configs) == {k for k in CLASSES if k.startswith("SentimentBias")}
    for name, (field, parity, threshold) in configs.items():
        a, b = [s[field] for s in scores1], [s[field] for s in scores2]
        assert measures.sentiment_bias(a, b, parity, threshold) == pytest.approx(CLASSES[name]["how_mean"], abs=1e-12)
        per_prompt = [measures.sentiment_bias(a[i:i + 5], b[i:i + 5], parity, threshold) for i in range(0, 40, 5)]
        assert per_prompt == pytest.approx(CLASSES[name]["per_prompt_how_mean"], abs=1e-12)


def test_counterfactual_metrics_without_neutralizing_equals_biaslabs_three_measures():
    out = FIXTURE["CounterfactualMetrics"]["neutralize_tokens=False,how=mean,attribute=gender"]["metrics"]
    neg1, neg2 = [s["neg"] for s in measures.vader(TEXTS1)], [s["neg"] for s in measures.vader(TEXTS2)]
    assert measures.sentiment_bias(neg1, neg2) == pytest.approx(out["Sentiment Bias"], abs=1e-12)
    assert sum(measures.rouge_l(TEXTS1, TEXTS2)) / 40 == pytest.approx(out["RougeL Similarity"], abs=1e-12)
    assert sum(measures.bleu(TEXTS1, TEXTS2)) / 40 == pytest.approx(out["Bleu Similarity"], abs=1e-12)
