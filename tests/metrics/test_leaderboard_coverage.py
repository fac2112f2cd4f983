"""Issue 66, items 2-3: every leaderboard cell carries what `biaslab metrics` carries (n used, n loaded, coverage,
valid share) and is shaded as `metrics` marks it; an interval over fewer than 10 clusters is marked; a measure has
one scale in compare and the leaderboard (CrowS-Pairs in percent)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from biaslab.metrics.compare.core import Measure, Observations, compare_observations
from biaslab.metrics.coverage import MIN_CLUSTERS, annotate, few_clusters, few_clusters_note
from biaslab.metrics.leaderboard import leaderboard, leaderboard_html


def _obs(n_items: int, clusters: int, loaded: int | None, scale: float = 1.0) -> Observations:
    rng = np.random.default_rng(5)
    rows = [{"setting_id": s, "measure": "metric", "group": "crows-pairs · (all)", "item": f"p{k}",
             "value": float(rng.random() < 0.6), "cluster": f"c{k % clusters}", "covariate": np.nan}
            for s in (0, 1) for k in range(n_items)]
    settings = pd.DataFrame({"setting_id": [0, 1], "label": ["A", "B"], "model_key": ["ka", "kb"],
                             "model_name": ["A", "B"], "dtype": "fp32", "backend": "hf"})
    frame = None if loaded is None else pd.DataFrame({"measure": ["metric"], "group": ["crows-pairs · (all)"],
                                                       "n_loaded": [loaded]})
    return Observations("crows-pairs", pd.DataFrame(rows), settings,
                        {"metric": Measure("metric", "binary", "pair", "pair", scale=scale)}, loaded=frame)


def test_a_cell_on_40_of_1508_pairs_is_marked_and_says_so():
    tables = leaderboard([("crows-pairs", _obs(40, 40, 1508))], {"ka": "A", "kb": "B"}, "ka", bootstrap=50,
                         permutations=50)
    cell = tables["cells"].iloc[0]
    assert (cell["n_items"], cell["n_loaded"]) == (40, 1508)
    assert cell["coverage"] == pytest.approx(40 / 1508) and bool(cell["low_coverage"])
    assert not cell["few_clusters"]
    page = leaderboard_html(tables, title="t", db="w", reference="A", links={}, view_links={})
    assert "n=40 of 1,508" in page and page.count('class="num low-coverage"') == 2


def test_a_cell_on_every_loaded_item_is_not_marked_and_one_without_loaded_items_says_nothing_of_coverage():
    whole = leaderboard([("crows-pairs", _obs(40, 40, 40))], {"ka": "A", "kb": "B"}, "ka", bootstrap=50,
                        permutations=50)["cells"].iloc[0]
    assert whole["coverage"] == 1.0 and not whole["low_coverage"]
    unknown = leaderboard([("crows-pairs", _obs(40, 40, None))], {"ka": "A", "kb": "B"}, "ka", bootstrap=50,
                          permutations=50)["cells"].iloc[0]
    assert np.isnan(unknown["n_loaded"]) and np.isnan(unknown["coverage"]) and not unknown["low_coverage"]


def test_an_interval_over_few_clusters_is_marked_in_the_leaderboard_and_compare():
    tables = leaderboard([("crows-pairs", _obs(40, 3, 40))], {"ka": "A", "kb": "B"}, "ka", bootstrap=50,
                         permutations=50)
    cell = tables["cells"].iloc[0]
    assert cell["n_units"] == 3 and bool(cell["few_clusters"])
    assert "3 pairs: few" in leaderboard_html(tables, title="t", db="w", reference="A", links={}, view_links={})
    from biaslab.cli.compare_cmd import display_frame

    table = compare_observations(_obs(40, 3, 40), between=["A", "B"], bootstrap=50, permutations=50)
    assert "few units (3)" in display_frame(table, within=False)["mark"].iloc[0]


def test_a_scale_multiplies_values_differences_and_intervals_not_the_test():
    plain = compare_observations(_obs(40, 40, 40), between=["A", "B"], bootstrap=50, permutations=50, seed=1)
    percent = compare_observations(_obs(40, 40, 40, scale=100.0), between=["A", "B"], bootstrap=50,
                                   permutations=50, seed=1)
    for column in ("value_a", "value_b", "estimate", "ci_low", "ci_high"):
        assert percent[column].iloc[0] == pytest.approx(100 * plain[column].iloc[0]), column
    for column in ("p_value", "effect_size", "n_items"):
        assert percent[column].iloc[0] == pytest.approx(plain[column].iloc[0]), column
    board = leaderboard([("crows-pairs", _obs(40, 40, 40, scale=100.0))], {"ka": "A", "kb": "B"}, "ka",
                        bootstrap=50, permutations=50)["cells"]
    a = _obs(40, 40, 40).values
    assert board.iloc[0]["value"] == pytest.approx(100 * a[a["setting_id"] == 0]["value"].mean())


def test_few_clusters_in_a_study_table_and_its_note():
    table = pd.DataFrame({"n_templates": [3, 9, 10, 0], "n": [30, 90, 100, 0]})
    out = annotate(table, used="n", loaded=100, clusters="n_templates")
    assert list(out["few_clusters"]) == [True, True, False, True] and MIN_CLUSTERS == 10
    assert list(few_clusters(pd.Series([12, 1]))) == [False, True]
    note = few_clusters_note({"bbq": out, "_private": out})
    assert note.startswith("few clusters (an interval over fewer than 10") and "bbq (3 rows)" in note
    assert "_private" not in note and few_clusters_note({"bbq": out.iloc[2:3]}) is None
