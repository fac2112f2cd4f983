"""`biaslab compare` never hides invalid answers (issue 58): a row is marked where either side's valid share is below
--min-coverage, exactly where `biaslab metrics` marks the same score; the valid shares are shown and equal a hand
computation from `option_probs`; two settings whose valid shares differ widely are named in one line; the rows are
the same whichever setting is A."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

import biaslab
from biaslab.cli.main import biaslab as cli
from biaslab.metrics.compare.core import Measure, Observations, compare_observations, valid_share_gap
from biaslab.metrics.studies import options
from user_specs import COMPARE_SPEC, spec_warehouse

SPEC = COMPARE_SPEC.replace("demo-compare", "demo-validity")


@pytest.fixture(scope="module")
def db(tmp_path_factory, tiny_gpt2):
    # a tiny random model asked to choose: almost none of its answers is valid (valid mass about 1e-6)
    return spec_warehouse(tmp_path_factory.mktemp("compare-validity"), SPEC, "demo-validity", tiny_gpt2,
                          [{"protocol": "prob"}, {"protocol": "choice"}])


def _settings(table):
    labels = set(table["setting_a"]) | set(table["setting_b"])
    return (next(s for s in labels if "method=prob" in s), next(s for s in labels if "method=choice-exact" in s))


def test_valid_shares_equal_the_hand_computation_and_mark_the_rows_metrics_marks(db):
    with biaslab.open(db) as wh:
        first = biaslab.compare(wh, "options", dataset="demo-validity", by=["context"], bootstrap=50,
                                permutations=50)
        prob, exact = _settings(first)
        table = biaslab.compare(wh, "options", dataset="demo-validity", by=["context"], between=[prob, exact],
                                bootstrap=50, permutations=50, min_coverage=0.05)
        probs = wh.sql("SELECT o.method, o.stimulus_id, o.valid_mass, s.item_id, s.context FROM option_probs o "
                       "JOIN stimuli s USING (stimulus_id)").execute()
        marked = options(wh, "demo-validity", by=["context"], min_coverage=0.05)["means"]
    exact_rows = probs[probs["method"] == "choice-exact"].drop_duplicates("stimulus_id")
    per_item = exact_rows.groupby(["context", "item_id"])["valid_mass"].mean()
    assert 0 <= per_item.max() < 0.05  # the premise: the tiny model rarely answers validly
    for context in ("unprimed", "primed_f"):
        row = table[(table["measure"] == "p") & (table["group"] == f"{context} · female")].iloc[0]
        assert np.isnan(row["valid_share_a"])  # scored answers have no invalid mass
        assert row["valid_share_b"] == pytest.approx(per_item.loc[context].mean(), abs=1e-15)
        assert bool(row["low_coverage"])
        metric = marked[(marked["method"] == "choice-exact") & (marked["context"] == context)
                        & (marked["option_label"] == "female")].iloc[0]
        assert row["valid_share_b"] == pytest.approx(metric["valid_share"], abs=1e-15)
        assert bool(metric["low_coverage"]) == bool(row["low_coverage"])
    assert table["low_coverage"].all()


def test_rows_do_not_depend_on_which_setting_is_a(db):
    with biaslab.open(db) as wh:
        prob, exact = _settings(biaslab.compare(wh, "options", dataset="demo-validity", by=["context"],
                                                bootstrap=20, permutations=20))
        ab = biaslab.compare(wh, "options", dataset="demo-validity", by=["context"], between=[prob, exact],
                             bootstrap=20, permutations=20)
        ba = biaslab.compare(wh, "options", dataset="demo-validity", by=["context"], between=[exact, prob],
                             bootstrap=20, permutations=20)
    key = ["measure", "group"]
    assert sorted(map(tuple, ab[key].to_numpy())) == sorted(map(tuple, ba[key].to_numpy()))
    merged = ab.merge(ba, on=key, suffixes=("", "_r"))
    assert np.allclose(merged["valid_share_a"], merged["valid_share_b_r"], equal_nan=True)
    assert np.allclose(merged["estimate"], -merged["estimate_r"], equal_nan=True)
    assert (merged["low_coverage"] == merged["low_coverage_r"]).all()


def test_the_terminal_table_shows_the_shares_the_mark_and_the_gap_line(db):
    with biaslab.open(db) as wh:
        prob, exact = _settings(biaslab.compare(wh, "options", dataset="demo-validity", by=["context"],
                                                bootstrap=20, permutations=20))
    args = ["compare", "options", "--db", str(db), "--dataset", "demo-validity", "--by", "context", "--between",
            prob, exact, "--bootstrap", "20", "--permutations", "20", "--min-coverage", "0.05"]
    result = CliRunner().invoke(cli, args, env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    assert "valid A / B" in result.output and "low valid share" in result.output
    assert "valid share = a side's mean share of valid answers" in " ".join(result.output.split())
    data = json.loads(CliRunner().invoke(cli, [*args, "--format", "json"]).output)
    assert {"valid_share_a", "valid_share_b"} <= set(data[0])


def _observations(valid_b: float) -> Observations:
    """Two settings, one measure, eight items; setting A lacks group "g2" entirely; B's items have valid share
    `valid_b` (A's: 0.9)."""
    rows = []
    for setting, valid in (("0", 0.9), ("1", valid_b)):
        for item in range(8):
            groups = ("g1",) if setting == "0" else ("g1", "g2")
            for group in groups:
                rows.append({"setting_id": setting, "measure": "m", "group": group, "item": f"i{item}",
                             "cluster": f"i{item}", "value": item / 10 + (0.1 if setting == "1" else 0.0),
                             "covariate": np.nan, "valid": valid})
    settings = pd.DataFrame({"setting_id": ["0", "1"], "label": ["A", "B"], "model_name": ["a", "b"],
                             "model_key": ["ka", "kb"], "dtype": ["fp32", "fp32"], "backend": ["hf", "hf"]})
    return Observations("toy", pd.DataFrame(rows), settings, {"m": Measure("m", "mean", "item", "item")})


def test_core_marks_by_either_sides_valid_share_and_names_a_wide_gap():
    table = compare_observations(_observations(0.3), between=["A", "B"], bootstrap=20, permutations=20,
                                 min_coverage=0.5)
    g1 = table[table["group"] == "g1"].iloc[0]
    assert g1["coverage"] == 1.0 and g1["valid_share_a"] == pytest.approx(0.9)
    assert g1["valid_share_b"] == pytest.approx(0.3) and bool(g1["low_coverage"])
    assert set(table["group"]) == {"g1", "g2"}  # g2: only B has it, still a row (as with B first)
    swapped = compare_observations(_observations(0.3), between=["B", "A"], bootstrap=20, permutations=20,
                                   min_coverage=0.5)
    assert set(swapped["group"]) == {"g1", "g2"}
    line = valid_share_gap(table)
    assert line.startswith("valid shares differ by more than 2x on 1 of 2 rows (e.g. m · g1: A 0.9 vs B 0.3)")
    fine = compare_observations(_observations(0.6), between=["A", "B"], bootstrap=20, permutations=20,
                                min_coverage=0.5)
    assert not bool(fine[fine["group"] == "g1"].iloc[0]["low_coverage"]) and valid_share_gap(fine) == ""
