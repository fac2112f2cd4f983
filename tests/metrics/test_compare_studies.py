"""`biaslab compare` of the misgendering, calibration and negation studies (issue 43) on the synthetic two-model
warehouse of every study (`open_warehouse_evidence.build`): each side's value equals the study's own table (ECE,
Gender-ECE, correctness, the mixed model's interaction), and the tests equal statsmodels' mcnemar, the calibration
module's ECE under a naive bootstrap loop, and a contrast computed by hand."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from statsmodels.stats.contingency_tables import mcnemar

import biaslab
from biaslab.metrics.calibration.stats import ece, gender_ece
from open_warehouse_evidence import MODEL_A, MODEL_B, build


@pytest.fixture(scope="module")
def db(tmp_path_factory, data_dir):
    return build(tmp_path_factory.mktemp("compare-studies") / "w.duckdb", data_dir)


def test_calibration_ece_and_gender_ece_equal_the_study_tables(db):
    with biaslab.open(db) as wh:
        tables = biaslab.calibration(wh, bootstrap=5)
        table = biaslab.compare(wh, "calibration", between=[MODEL_A[:6], MODEL_B[:6]], bootstrap=300,
                                permutations=1000)
        pairs = wh.sql("SELECT model_key, dataset, item_id, p_male, gold_male FROM pronoun_pair_probs "
                       "WHERE gold_male IS NOT NULL").execute()
    metrics = tables["metrics"]
    for measure, name in (("ece", "ece_top_label_equal_width"), ("gender_ece", "gender_ece_top_label_equal_width")):
        for _, row in table[table["measure"] == measure].iterrows():
            for side, key in (("value_a", MODEL_A), ("value_b", MODEL_B)):
                expected = metrics[(metrics["model_key"] == key) & (metrics["dataset"] == row["group"])
                                   & (metrics["name"] == name)]["value"].iloc[0]
                assert row[side] == pytest.approx(expected, abs=1e-12), (measure, row["group"], side)
    # the bootstrap interval of the ECE difference: a naive loop over the same draws with the calibration module
    row = table[(table["measure"] == "ece") & (table["group"] == "gece-test")].iloc[0]
    wide = pairs[pairs["dataset"] == "gece-test"].pivot(index="item_id", columns="model_key",
                                                          values=["p_male", "gold_male"])
    a, b = wide["p_male"][MODEL_A].to_numpy(), wide["p_male"][MODEL_B].to_numpy()
    gold = wide["gold_male"][MODEL_A].to_numpy(int)
    rng = np.random.default_rng(0)
    boot = []
    for _ in range(300):
        i = rng.integers(0, len(a), size=len(a))
        conf_a, conf_b = np.maximum(a[i], 1 - a[i]), np.maximum(b[i], 1 - b[i])
        boot.append(ece(conf_a, ((a[i] >= 0.5) == gold[i]).astype(int), 10).value
                    - ece(conf_b, ((b[i] >= 0.5) == gold[i]).astype(int), 10).value)
    assert (row["ci_low"], row["ci_high"]) == pytest.approx(tuple(np.quantile(boot, [0.025, 0.975])), abs=1e-12)
    assert row["estimate"] == pytest.approx(row["value_a"] - row["value_b"], abs=1e-15)
    grouped = table[(table["measure"] == "gender_ece") & (table["group"] == "gece-test")].iloc[0]
    assert grouped["estimate"] == pytest.approx(gender_ece(a, gold).value - gender_ece(b, gold).value, abs=1e-12)


def test_misgendering_prob_correctness_is_mcnemar_over_stimuli(db):
    with biaslab.open(db) as wh:
        tables = biaslab.misgendering(wh)
        table = biaslab.compare(wh, "misgendering", between=[MODEL_A[:6], MODEL_B[:6]], bootstrap=200,
                                permutations=500)
        prob = wh.sql("SELECT model_key, stimulus_id, declared, correct FROM misgendering_prob").execute()
    correctness = tables["correctness"]
    for _, row in table[table["measure"] == "prob_correct"].iterrows():
        declared = row["group"].rsplit(" · ", 1)[1]
        rate = correctness[(correctness["method"] == "prob") & (correctness["model_key"] == MODEL_A)
                           & (correctness["declared"] == declared)]["correct"].iloc[0]
        assert row["value_a"] == pytest.approx(rate)
        wide = prob[prob["declared"] == declared].pivot(index="stimulus_id", columns="model_key", values="correct")
        a, b = wide[MODEL_A].astype(bool), wide[MODEL_B].astype(bool)
        expected = mcnemar([[int((a & b).sum()), int((a & ~b).sum())], [int((~a & b).sum()), int((~a & ~b).sum())]],
                           exact=True).pvalue
        assert row["p_value"] == pytest.approx(expected) and row["test"] == "mcnemar"
    assert {"gen_correct", "agreement"} <= set(table["measure"])


def test_negation_interaction_equals_the_mixed_model_on_balanced_items(db):
    with warnings.catch_warnings(), biaslab.open(db) as wh:
        warnings.simplefilter("ignore")
        tables = biaslab.negation(wh)
        table = biaslab.compare(wh, "negation", between=[MODEL_A[:6], MODEL_B[:6]], bootstrap=200,
                                permutations=500)
        within = biaslab.compare(wh, "negation", within=True, bootstrap=50, permutations=100)
    model = tables["mixed_model"]
    row = table[table["measure"] == "interaction"].iloc[0]
    for side, key in (("value_a", MODEL_A), ("value_b", MODEL_B)):
        estimate = model[(model["model_key"] == key) & (model["term"] == "context:form")
                         & ~model["fallback"]]["estimate"].iloc[0]
        assert row[side] == pytest.approx(estimate, abs=1e-6)
    sentences = tables["sentences"]
    wide = sentences.assign(cell=sentences["context"] + "/" + sentences["form"]).pivot_table(
        index=["model_key", "item"], columns="cell", values="perplexity")
    contrast = ((wide["stereo/aff"] - wide["stereo/neg"]) - (wide["nonstereo/aff"] - wide["nonstereo/neg"]))
    by_hand = contrast.loc[MODEL_A].to_numpy() - contrast.loc[MODEL_B].to_numpy()
    assert row["estimate"] == pytest.approx(by_hand.mean(), abs=1e-9) and row["n_items"] == len(by_hand)
    assert set(within["group"]) == {"negation-examples · SA vs negation-examples · SN",
                                    "negation-examples · NA vs negation-examples · NN"}
    assert isinstance(within, pd.DataFrame) and len(within) == 4  # two simple effects x two models


def test_two_sampling_settings_of_one_model_are_two_settings_of_misgendering(tmp_path, data_dir, tiny_gpt2):
    """Issue 56, item 9: gen at T = 1.0 and at T = 0.7 of one model compare as two settings (they were one, and
    compare said "one collection setting is stored"), each side's value the study's own correctness rate."""
    from biaslab.runners.collect import CollectConfig, collect

    db = tmp_path / "w.duckdb"
    for temperature in (1.0, 0.7):
        collect(CollectConfig(dataset="misgendered", protocol="gen", samples=3, temperature=temperature,
                              max_new_tokens=6, limit=6, limit_order="file", db=str(db), data_dir=str(data_dir),
                              dtype="fp32"),
                loaded=tiny_gpt2)
    with biaslab.open(db) as wh:
        table = biaslab.compare(wh, "misgendering", bootstrap=50, permutations=100)
        correctness = biaslab.misgendering(wh)["correctness"]
        with pytest.raises(biaslab.errors.UsageError, match="not paired item by item inside one setting"):
            biaslab.compare(wh, "misgendering", within=True)
    assert set(table["measure"]) == {"gen_correct"} and len(table) >= 1
    first = table.iloc[0]
    labels = sorted([first["setting_a"], first["setting_b"]])
    assert "method=gen T=0.7 " in labels[0] and "method=gen T=1 " in labels[1], labels
    # each side: the share of its continuations that do not misgender, pooled over the contexts (3 per item)
    gen = correctness[correctness["method"] == "gen"]
    for _, row in table.iterrows():
        declared = row["group"].rsplit(" · ", 1)[1]
        for side, temperature in (("value_a", "T=0.7 "), ("value_b", "T=1 ")):
            part = gen[(gen["declared"] == declared) & gen["setting"].str.startswith(temperature)]
            assert row[side] == pytest.approx((part["correct"] * part["n"]).sum() / part["n"].sum(), abs=1e-12)
    assert (table["value_a"] != table["value_b"]).any()  # the two temperatures sampled differently
