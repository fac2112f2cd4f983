"""The audit leaderboard (`biaslab.metrics.leaderboard`): each model's own value and cluster-bootstrap interval
against hand-computed values and a naive resampling loop, Spearman's rho against scipy, the comparisons equal to
`compare_observations`, Holm / BH across the whole table against statsmodels, and the page sorted in headless
Chromium."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
from scipy.stats import spearmanr
from statsmodels.stats.multitest import multipletests

from biaslab.metrics.compare.core import Measure, Observations, compare_observations
from biaslab.metrics.leaderboard import leaderboard, leaderboard_html, side_value

from report_layout import chromium, dump_dom


def _part(values, clusters, covariate=None, valid=None) -> pd.DataFrame:
    frame = pd.DataFrame({"item": [f"i{k}" for k in range(len(values))], "value": np.asarray(values, float),
                          "cluster": clusters, "covariate": np.nan if covariate is None else covariate})
    if valid is not None:
        frame["valid"] = valid
    return frame


def naive_interval(values, clusters, statistic, bootstrap, seed):
    """Percentile interval of `statistic` over resamples of whole clusters, one resample at a time, drawing the
    clusters (coded by first appearance) as `side_value` does: rng.integers(0, C, size=(B, C))."""
    codes, _ = pd.factorize(pd.Series(clusters))
    units = codes.max() + 1
    picks = np.random.default_rng(seed).integers(0, units, size=(bootstrap, units))
    stats = []
    for row in picks:
        index = np.concatenate([np.flatnonzero(codes == u) for u in row])
        stats.append(statistic(index))
    return tuple(np.quantile(stats, [0.025, 0.975]))


def test_a_mean_is_the_mean_of_the_valid_items_with_its_cluster_bootstrap_interval():
    values = [1.0, 0.0, np.nan, 1.0, 1.0, 0.0, 1.0]
    clusters = ["a", "a", "a", "b", "c", "c", "d"]
    value, low, high, n, units = side_value(Measure("m", "binary", "pair", "pair"), _part(values, clusters),
                                            bootstrap=400, rng=np.random.default_rng(7))
    assert value == pytest.approx(4 / 6) and n == 6 and units == 4  # the NaN item is left out (no valid answer)
    kept = np.array([1.0, 0.0, 1.0, 1.0, 0.0, 1.0])
    expected = naive_interval(kept, ["a", "a", "b", "c", "c", "d"], lambda i: kept[i].mean(), 400, 7)
    assert (low, high) == pytest.approx(expected, abs=1e-12)


def test_a_ratio_is_the_transform_of_the_summed_numerators_over_the_summed_denominators():
    # BBQ's s_dis = 100 (2 sum(p_biased) / sum(1 - p_unknown) - 1)
    measure = Measure("s_dis", "ratio", "example", "template", transform=lambda r: 100.0 * (2.0 * r - 1.0))
    num, den = np.array([0.9, 0.2, 0.6, 0.7]), np.array([1.0, 0.5, 0.8, 0.9])
    part = _part(num, ["t1", "t1", "t2", "t3"], covariate=den)
    value, low, high, n, units = side_value(measure, part, bootstrap=300, rng=np.random.default_rng(3))
    assert value == pytest.approx(100 * (2 * 2.4 / 3.2 - 1)) and n == 4 and units == 3
    expected = naive_interval(num, ["t1", "t1", "t2", "t3"],
                              lambda i: 100 * (2 * num[i].sum() / den[i].sum() - 1), 300, 3)
    assert (low, high) == pytest.approx(expected, abs=1e-9)


def test_a_spearman_measure_equals_scipy():
    rng = np.random.default_rng(0)
    values, covariate = rng.normal(size=30), rng.normal(size=30)
    part = _part(values, [f"u{k // 3}" for k in range(30)], covariate=covariate)
    value, low, high, n, _ = side_value(Measure("rho", "spearman", "t", "t"), part, bootstrap=50,
                                        rng=np.random.default_rng(1))
    assert value == pytest.approx(spearmanr(values, covariate).statistic, abs=1e-12)
    assert low <= value <= high and n == 30


def _observations() -> Observations:
    """Three settings (models A, B, C; D is not on the board) x 2 measures over 12 items in 6 clusters."""
    rng = np.random.default_rng(11)
    rows = []
    for setting, shift in ((0, 0.0), (1, 0.3), (2, -0.1), (3, 0.0)):
        for k in range(12):
            rows.append({"setting_id": setting, "measure": "p", "group": "(all)", "item": f"i{k}",
                         "value": float(np.clip(0.4 + shift + rng.normal(0, 0.15), 0, 1)) if k != 5 or setting != 1
                         else np.nan, "cluster": f"c{k // 2}", "covariate": np.nan, "valid": 0.9})
            rows.append({"setting_id": setting, "measure": "hit", "group": "(all)", "item": f"i{k}",
                         "value": float(rng.random() < 0.5 + shift), "cluster": f"c{k // 2}", "covariate": np.nan,
                         "valid": np.nan})
    settings = pd.DataFrame({"setting_id": [0, 1, 2, 3], "label": ["A", "B", "C", "D"],
                             "model_key": ["ka", "kb", "kc", "kd"], "model_name": ["A", "B", "C", "D"],
                             "dtype": "fp32", "backend": "hf"})
    measures = {"p": Measure("p", "mean", "item", "cluster"), "hit": Measure("hit", "binary", "item", "cluster")}
    return Observations("toy", pd.DataFrame(rows), settings, measures)


def test_the_leaderboard_compares_each_model_with_the_reference_and_adjusts_over_the_whole_table():
    obs = _observations()
    tables = leaderboard([("toy", obs), ("toy2", obs)], {"ka": "A", "kb": "B", "kc": "C"}, "ka", bootstrap=200,
                         permutations=500, seed=4)
    cells, comparisons = tables["cells"], tables["comparisons"]
    assert sorted(set(cells["row"])) == ["A", "B", "C"]  # D is not a model of the plan
    assert len(cells) == 3 * 2 * 2 and len(comparisons) == 2 * 2 * 2  # the reference has no comparison
    b = cells[(cells["row"] == "B") & (cells["measure"] == "p") & (cells["study"] == "toy")].iloc[0]
    mine = obs.values[(obs.values["setting_id"] == 1) & (obs.values["measure"] == "p")]
    assert b["value"] == pytest.approx(mine["value"].mean()) and b["n_items"] == 11 and b["n_invalid"] == 1
    assert b["valid_share"] == pytest.approx(0.9) and b["ci_low"] <= b["value"] <= b["ci_high"]
    direct = compare_observations(obs, between=["B", "A"], bootstrap=200, permutations=500, seed=4)
    for measure in ("p", "hit"):
        ours = comparisons[(comparisons["row"] == "B") & (comparisons["measure"] == measure)
                           & (comparisons["study"] == "toy")].iloc[0]
        theirs = direct[direct["measure"] == measure].iloc[0]
        for column in ("estimate", "ci_low", "ci_high", "p_value", "n_items"):
            assert ours[column] == pytest.approx(theirs[column]), column
    p = comparisons["p_value"].to_numpy(float)
    assert comparisons["p_holm"].to_numpy() == pytest.approx(multipletests(p, method="holm")[1])
    assert comparisons["p_bh"].to_numpy() == pytest.approx(multipletests(p, method="fdr_bh")[1])


def test_the_page_sorts_by_a_column_in_headless_chromium(tmp_path):
    from biaslab.metrics.html_report import write_page

    obs = _observations()
    tables = leaderboard([("toy", obs)], {"ka": "A", "kb": "B", "kc": "C"}, "ka", bootstrap=50, permutations=50)
    page = leaderboard_html(tables, title="Audit toy", db="w.duckdb", reference="A",
                            links={"toy": "studies/toy/index.html"}, view_links={"toy": "http://127.0.0.1:8000/x"})
    index = write_page(tmp_path, "Audit toy", [page])
    html = index.read_text()
    assert 'href="studies/toy/index.html"' in html and "n=11, invalid 1, valid 90%" in html
    browser = chromium()
    if browser is None:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    column = 1 + [("toy", "p"), ("toy", "hit")].index(("toy", "p"))  # the p column's head
    probe = tmp_path / "probe.html"
    probe.write_text(html.replace("</body>", "<script>window.addEventListener('load',function(){"
                                  f"document.querySelectorAll('table.leaderboard th')[{column}].click();}});"
                                  "</script></body>"), encoding="utf-8")
    dom = dump_dom(probe, tmp_path / "profile")
    assert f'data-sorted="{column}:asc"' in dom, dom[-1500:]
    order = re.findall(r"<tr><td class=\"name\">([ABC])", dom)
    values = {r: cells_value(tables, r) for r in "ABC"}
    assert order == sorted("ABC", key=values.get)


def cells_value(tables, row: str) -> float:
    cells = tables["cells"]
    return float(cells[(cells["row"] == row) & (cells["measure"] == "p")]["value"].iloc[0])


def test_settings_of_one_model_share_its_row_unless_they_fill_the_same_column():
    """A model scored (one measure) and sampled (another) is one row; two temperatures of one measure are two."""
    obs = _observations()
    values = obs.values.copy()
    # settings 0 and 1 become model A's two methods: 0 fills only "p", 1 only "hit"
    values = values[~((values["setting_id"] == 0) & (values["measure"] == "hit"))
                    & ~((values["setting_id"] == 1) & (values["measure"] == "p"))]
    settings = obs.settings.assign(model_key=["ka", "ka", "kc", "kc"], method=["prob", "gen", "x", "y"])
    tables = leaderboard([("toy", Observations("toy", values, settings, obs.measures))], {"ka": "A", "kc": "C"},
                         "ka", bootstrap=20, permutations=20)
    rows = tables["cells"].groupby("row")["measure"].apply(sorted).to_dict()
    assert rows["A"] == ["hit", "p"]  # one row, a cell in each column, none empty
    assert sorted(r for r in rows if r.startswith("C")) == ["C · C", "C · D"]  # both fill both columns: two rows
    assert tables["cells"].groupby(["row", "measure", "group"]).size().max() == 1


def test_a_measure_without_a_value_in_any_setting_makes_no_column():
    """The valid mass of scored options (no invalid answer exists) made an empty, shaded column in every audit with
    Winogender; a measure with a value for one model alone still makes its column (the others' cells say n = 0), and
    so does one without a value because no answer was valid (its cells show the valid share of 0)."""
    obs = _observations()
    nothing = obs.values[obs.values["measure"] == "p"].assign(measure="valid_mass", value=np.nan, valid=np.nan)
    some = obs.values[obs.values["measure"] == "p"].assign(measure="only_b")
    some.loc[some["setting_id"] != 1, "value"] = np.nan
    # no answer valid anywhere: no value, a valid share of 0; its column stays, showing it
    invalid = obs.values[obs.values["measure"] == "p"].assign(measure="all_invalid", value=np.nan, valid=0.0)
    measures = {**obs.measures, "valid_mass": Measure("valid_mass", "mean", "item", "cluster"),
                "only_b": Measure("only_b", "mean", "item", "cluster"),
                "all_invalid": Measure("all_invalid", "mean", "item", "cluster")}
    wider = Observations("toy", pd.concat([obs.values, nothing, some, invalid], ignore_index=True), obs.settings,
                         measures)
    cells = leaderboard([("toy", wider)], {"ka": "A", "kb": "B"}, "ka", bootstrap=20, permutations=50)["cells"]
    assert set(cells["measure"]) == {"p", "hit", "only_b", "all_invalid"}
    shown = cells[cells["measure"] == "all_invalid"]
    assert (shown["n_items"] == 0).all() and (shown["valid_share"] == 0).all() and shown["low_coverage"].all()
    only_b = cells[cells["measure"] == "only_b"].set_index("row")
    assert only_b.loc["B", "n_items"] == 11 and only_b.loc["A", "n_items"] == 0 and only_b.loc["A", "low_coverage"]
