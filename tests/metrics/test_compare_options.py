"""`biaslab compare options` (issue 43) on a user spec collected with a tiny model in two settings (prob scoring and
exact forced choice): every number against a hand computation from `option_probs`, statsmodels' mcnemar and the
calibration module's ECE."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from statsmodels.stats.contingency_tables import mcnemar

import biaslab
from biaslab.cli.main import biaslab as cli
from biaslab.metrics.calibration.stats import ece
from user_specs import COMPARE_SPEC, spec_warehouse

SPEC = COMPARE_SPEC


@pytest.fixture(scope="module")
def db(tmp_path_factory, tiny_gpt2):
    return spec_warehouse(tmp_path_factory.mktemp("compare-options"), SPEC, "demo-compare", tiny_gpt2,
                          [{"protocol": "prob"}, {"protocol": "choice"}])


def _labels(table):
    prob = next(s for s in set(table["setting_a"]) | set(table["setting_b"]) if "method=prob" in s)
    exact = next(s for s in set(table["setting_a"]) | set(table["setting_b"]) if "method=choice-exact" in s)
    return prob, exact


def test_between_methods_equals_hand_computation(db):
    with biaslab.open(db) as wh:
        first = biaslab.compare(wh, "options", dataset="demo-compare", by=["context"], bootstrap=200,
                                permutations=500)
        prob, exact = _labels(first)
        table = biaslab.compare(wh, "options", dataset="demo-compare", by=["context"], between=[prob, exact],
                                bootstrap=200, permutations=500)
        probs = wh.sql("SELECT o.method, o.stimulus_id, o.option_label, o.p, o.gold_label, s.item_id, s.context "
                       "FROM option_probs o JOIN stimuli s USING (stimulus_id)").execute()
    row = table[(table["measure"] == "p") & (table["group"] == "unprimed · female")].iloc[0]
    female = probs[(probs["option_label"] == "female") & (probs["context"] == "unprimed")]
    per_item = female.groupby(["method", "item_id"])["p"].mean().unstack("method").dropna()
    assert row["value_a"] == pytest.approx(per_item["prob"].mean(), abs=1e-12)
    assert row["estimate"] == pytest.approx((per_item["prob"] - per_item["choice-exact"]).mean(), abs=1e-12)
    assert row["n_items"] == len(per_item) and row["unit"] == "item"
    assert row["n_excluded"] == 8 - len(per_item) and row["coverage"] == len(per_item) / 8
    # accuracy: McNemar over the stimuli of the unprimed context; ECE as the calibration module computes it
    scored = probs[probs["context"] == "unprimed"].sort_values(["method", "stimulus_id", "option_label"])
    undefined = scored.groupby(["method", "stimulus_id"])["p"].transform(lambda p: p.isna().any())
    scored = scored[~undefined.astype(bool)]
    best = scored.loc[scored.groupby(["method", "stimulus_id"])["p"].idxmax()]
    correct = (best["option_label"] == best["gold_label"]).to_numpy()
    best = best.assign(correct=correct).set_index(["method", "stimulus_id"])
    common = best.loc["prob"].index.intersection(best.loc["choice-exact"].index)
    a, b = best.loc["prob", "correct"].loc[common], best.loc["choice-exact", "correct"].loc[common]
    acc = table[(table["measure"] == "accuracy") & (table["group"] == "unprimed")].iloc[0]
    assert acc["n_items"] == len(common) > 0 and acc["value_a"] == pytest.approx(a.mean())
    expected = mcnemar([[int((a & b).sum()), int((a & ~b).sum())], [int((~a & b).sum()), int((~a & ~b).sum())]],
                       exact=True).pvalue
    assert acc["p_value"] == pytest.approx(expected)
    calibration = table[(table["measure"] == "ece") & (table["group"] == "unprimed")].iloc[0]
    conf = best.loc["prob", "p"].loc[common].to_numpy(float)
    assert calibration["value_a"] == pytest.approx(ece(conf, a.to_numpy(int), 10).value, abs=1e-12)


def test_within_compares_the_first_by_column(db):
    result = CliRunner().invoke(cli, ["compare", "options", "--db", str(db), "--dataset", "demo-compare", "--by",
                                      "context", "--within", "--format", "json", "--bootstrap", "50",
                                      "--permutations", "100"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    records = json.loads(result.output)
    groups = {r["group"] for r in records}
    assert groups == {"primed_f · female vs unprimed · female", "primed_f · male vs unprimed · male"}
    assert len({r["setting_a"] for r in records}) == 2  # prob and choice-exact, each its own family
    assert all(r["n_items"] + r["n_excluded"] == 8 for r in records)
    assert all(r["n_items"] == 8 for r in records if "method=prob" in r["setting_a"])  # scoring is never invalid


def test_options_needs_a_dataset_and_contextuality_takes_none(db):
    result = CliRunner().invoke(cli, ["compare", "options", "--db", str(db)])
    assert result.exit_code == 2 and "compare options needs --dataset NAME" in result.output
    result = CliRunner().invoke(cli, ["compare", "contextuality", "--db", str(db), "--dataset", "x"])
    assert result.exit_code == 2 and "compare contextuality takes no dataset" in result.output


NAMES_SPEC = """
name: names-compare
protocols: [choice, prob]
unit: name
options:
  - {label: female, forms: {nom: she}}
  - {label: male, forms: {nom: he}}
orders: [[female, male], [male, female]]
fillers:
  name: [{value: Mary, rating: 0.9}, {value: Robin, rating: 0.5}, {value: John, rating: 0.1},
         {value: Emma, rating: 0.95}, {value: Alex, rating: 0.45}]
templates:
  - {id: late, text: "{name} said that {pronoun} was late.", case: nom}
  - {id: home, text: "{name} went home because {pronoun} was tired.", case: nom}
"""


@pytest.fixture(scope="module")
def names_db(tmp_path_factory, tiny_gpt2):
    return spec_warehouse(tmp_path_factory.mktemp("compare-names"), NAMES_SPEC, "names-compare", tiny_gpt2,
                          [{"protocol": "prob"}, {"protocol": "choice"}])


def test_the_declared_unit_is_resampled_and_permuted_whole(names_db):
    """`unit: name`: the 10 items (2 templates x 5 names) belong to 5 units. The permutation p is the exact share of
    the sign assignments per name (2^names), by hand; with --unit item_id it is the share of those per item."""
    import itertools

    import numpy as np

    with biaslab.open(names_db) as wh:
        prob, exact = _labels(biaslab.compare(wh, "options", dataset="names-compare", bootstrap=50, permutations=50))
        by_name = biaslab.compare(wh, "options", dataset="names-compare", between=[prob, exact], bootstrap=200,
                                  permutations=5000)
        by_item = biaslab.compare(wh, "options", dataset="names-compare", between=[prob, exact], bootstrap=200,
                                  permutations=5000, unit="item_id")
        probs = wh.sql("SELECT o.method, o.option_label, o.p, s.item_id, s.attrs->>'name' AS name FROM option_probs o "
                       "JOIN stimuli s USING (stimulus_id) WHERE s.dataset = 'names-compare'").execute()
    female = probs[probs["option_label"] == "female"]
    per_item = female.groupby(["method", "item_id"])["p"].mean().unstack("method").dropna()
    d = (per_item["prob"] - per_item["choice-exact"]).to_numpy()
    names = female.drop_duplicates("item_id").set_index("item_id")["name"].loc[per_item.index].to_numpy()

    def exact_p(units: np.ndarray) -> float:
        codes = {u: i for i, u in enumerate(sorted(set(units)))}
        index = np.array([codes[u] for u in units])
        observed = abs(d.mean())
        signs = np.array(list(itertools.product([1.0, -1.0], repeat=len(codes))))
        stats = np.abs((signs[:, index] * d).mean(axis=1))
        return float((stats >= observed - 1e-9 * max(1.0, observed)).mean())

    row = by_name[(by_name["measure"] == "p") & (by_name["group"] == "all · female")].iloc[0]
    # items where the tiny model's forced choice has no valid answer are left out (counted in n_excluded)
    assert (row["unit"], row["n_units"], row["n_items"]) == ("name", len(set(names)), len(d))
    assert len(set(names)) >= 3 and len(d) > len(set(names)) and row["n_items"] + row["n_excluded"] == 10
    assert row["estimate"] == pytest.approx(d.mean(), abs=1e-12)
    assert row["p_value"] == pytest.approx(exact_p(names), abs=1e-12)
    item_row = by_item[(by_item["measure"] == "p") & (by_item["group"] == "all · female")].iloc[0]
    assert (item_row["unit"], item_row["n_units"]) == ("item", len(d))
    assert item_row["p_value"] == pytest.approx(exact_p(per_item.index.to_numpy()), abs=1e-12)


def test_a_unit_that_splits_an_item_is_refused(names_db):
    result = CliRunner().invoke(cli, ["compare", "options", "--db", str(names_db), "--dataset", "names-compare",
                                      "--unit", "option_order"])
    assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
    assert "unit 'option_order' of dataset names-compare: item" in result.output and "has several values" in \
        result.output
