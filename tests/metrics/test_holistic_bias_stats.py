"""HolisticBias's likelihood bias (`metrics.holistic_bias.stats`) against the upstream measurement code's outputs on
the same perplexities (fixture: `fixtures/holistic_bias/README.md`), to 1e-12, and against hand-computed values."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.stats as sps

from biaslab.loaders import holistic_bias as hb
from biaslab.metrics.holistic_bias import stats

FIXTURE = Path(__file__).parent / "fixtures" / "holistic_bias" / "upstream_outputs.json.gz"
AXES = ("nonce", "socioeconomic_class")


def fixture_ppl(text: str) -> float:
    return 10 + int(hashlib.sha256(text.encode()).hexdigest()[:6], 16) % 4000 / 100


@pytest.fixture(scope="module")
def upstream() -> dict[str, pd.DataFrame]:
    with gzip.open(FIXTURE, "rt") as f:
        texts = json.load(f)
    return {name: pd.read_csv(io.StringIO(text), keep_default_na=False) for name, text in texts.items()}


@pytest.fixture(scope="module")
def ppl(data_dir) -> pd.DataFrame:
    folder = data_dir / hb.FOLDER
    if not folder.is_dir():
        pytest.skip(f"no {folder}")
    rows = [{"axis": r[1], "template": r[12], "descriptor": r[3], "noun": r[6], "ppl": fixture_ppl(r[0])}
            for r in hb.sentences(folder) if hb.likelihood_subset(r) and r[1] in AXES]
    return pd.DataFrame(rows)


def test_pairs_equal_upstreams_u_and_p(ppl, upstream):
    mine = stats.pairs(ppl)
    theirs = upstream["significances__all.csv"]
    assert len(mine) == len(theirs) == 26 * (28 + 276)
    key = ["axis", "template", "descriptor_0", "descriptor_1"]
    joined = mine.merge(theirs, on=key, suffixes=("", "_up"), validate="one_to_one")
    assert len(joined) == len(theirs)
    assert np.allclose(joined["mann_whitney_u"], joined["mann_whitney_u_up"], rtol=0, atol=1e-12)
    assert np.allclose(joined["p_value"], joined["p_value_up"], rtol=0, atol=1e-12)
    assert (joined["significant_difference"] == joined["significant_difference_up"]).all()
    assert set(mine["n_0"]) == set(mine["n_1"]) == {32}


@pytest.mark.parametrize("name, by", [("significances__by_axis.csv", ["axis"]),
                                      ("significances__by_axis_and_template.csv", ["axis", "template"]),
                                      ("significances__by_template.csv", ["template"]),
                                      ("significances__by_axis_and_descriptor_pair.csv",
                                       ["axis", "descriptor_0", "descriptor_1"])])
def test_grouped_shares_equal_upstreams(ppl, upstream, name, by):
    mine = stats.grouped(stats.pairs(ppl), by)
    theirs = upstream[name]
    joined = mine.merge(theirs, on=by, validate="one_to_one")
    assert len(joined) == len(theirs) == len(mine)
    assert np.abs(joined["likelihood_bias"] - joined["significant_difference"]).max() <= 1e-12


def test_medians_and_sentiment_equal_upstreams(ppl, upstream):
    medians = stats.medians(ppl).merge(upstream["median_perplexities.csv"], on=["axis", "descriptor", "template"],
                                       suffixes=("", "_up"), validate="one_to_one")
    assert len(medians) == len(upstream["median_perplexities.csv"]) == 26 * (8 + 24)
    assert np.abs(medians["median_ppl"] - medians["median_ppl_up"]).max() <= 1e-12
    mine = stats.sentiment(ppl)
    theirs = upstream["frac_samples_below_median_ppl.csv"]
    joined = mine.merge(theirs, on=["axis", "descriptor"], suffixes=("", "_up"), validate="one_to_one")
    assert len(joined) == len(theirs) == 32
    for column in [*stats.SENTIMENT_TEMPLATES, "love_hate_diff"]:
        assert np.abs(joined[column] - joined[f"{column}_up"]).max() <= 1e-12


def test_by_axis_interval_over_templates_by_hand(ppl):
    table = stats.pairs(ppl)
    out = stats.by_axis(table, ppl).set_index("axis")
    nonce = table[table["axis"] == "nonce"]
    shares = nonce.groupby("template")["significant_difference"].mean().to_numpy()
    half = sps.t.ppf(0.975, 25) * shares.std(ddof=1) / np.sqrt(26)
    row = out.loc["nonce"]
    assert row["likelihood_bias"] == pytest.approx(shares.mean(), abs=1e-15)  # same pairs in every template
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((max(0, shares.mean() - half), shares.mean() + half))
    assert (row["templates"], row["pairs"], row["descriptors"], row["sentences"]) == (26, 26 * 28, 8, 26 * 8 * 32)


def test_a_tiny_table_by_hand():
    # two descriptors, one template: a = 1..4, b = 5..8: U of a is 0; at these sizes without ties scipy's "auto" is
    # the exact distribution: each extreme is 1 of the C(8, 4) = 70 orderings, two-sided p = 2 / 70
    ppl = pd.DataFrame({"axis": "x", "template": "t", "descriptor": ["a"] * 4 + ["b"] * 4,
                        "ppl": [1.0, 2, 3, 4, 5, 6, 7, 8]})
    [row] = stats.pairs(ppl).to_dict("records")
    assert row["mann_whitney_u"] == 0.0
    assert row["p_value"] == pytest.approx(2 / 70, rel=1e-12)
    assert row["significant_difference"] == 1
    # 32 per side (the subset's size) is asymptotic: the normal approximation with continuity correction
    big = pd.DataFrame({"axis": "x", "template": "t", "descriptor": ["a"] * 32 + ["b"] * 32,
                        "ppl": np.r_[np.arange(32.0), np.arange(32.0) + 20]})
    [row] = stats.pairs(big).to_dict("records")
    u = sum((a > b) + 0.5 * (a == b) for a in range(32) for b in range(20, 52))
    mu = 32 * 32 / 2  # the variance with the tie correction (the overlap 20..31 appears in both samples)
    values = np.r_[np.arange(32.0), np.arange(32.0) + 20]
    _, counts = np.unique(values, return_counts=True)
    sigma = np.sqrt(32 * 32 / 12 * (65 - (counts ** 3 - counts).sum() / (64 * 63)))
    z = (abs(u - mu) - 0.5) / sigma
    assert row["mann_whitney_u"] == u
    assert row["p_value"] == pytest.approx(2 * sps.norm.sf(z), rel=1e-12)
    axis = stats.by_axis(stats.pairs(ppl), ppl).iloc[0]
    assert axis["templates"] == 1 and np.isnan(axis["ci_low"])
