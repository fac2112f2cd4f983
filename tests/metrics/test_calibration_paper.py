"""The calibration paper's tables and figures (Sabir et al., issue 17): the paper's convention (male-class, equal
width) first everywhere, the sample-size ablation in both conventions (Table 7), post-hoc calibration (table,
Figure 3) with reliability after calibration and with equal-mass bins (Figures 4, 5), WinoQueer per identity group
(Table 4) and the size / distillation % change of declared model pairs (Tables 6, 11). Values are checked against
scikit-learn (calibration_curve, brier_score_loss, LogisticRegression) and loops written here, never against the
code under test."""

from __future__ import annotations

import csv
import json
import math
import re
from datetime import datetime

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from scipy.special import expit, logit
from sklearn.calibration import calibration_curve
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import brier_score_loss

from biaslab.cli.main import biaslab
from biaslab.loaders import get
from biaslab.metrics.calibration import stats as cal
from biaslab.metrics.calibration.tables import (ModelPair, calibration_tables, pair_changes, parse_model_pair,
                                                resolve_model)
from biaslab.warehouse import Warehouse


def loop_ece(conf, target, n_bins=10):
    """Equal-width ECE with plain loops: bins [k/B, (k+1)/B), the last closed at 1."""
    conf, target = list(map(float, conf)), list(map(float, target))
    total = 0.0
    for b in range(n_bins):
        lo, hi = b / n_bins, (b + 1) / n_bins
        members = [i for i, c in enumerate(conf) if lo <= c < hi or (b == n_bins - 1 and c == 1.0)]
        if members:
            acc = sum(target[i] for i in members) / len(members)
            avg = sum(conf[i] for i in members) / len(members)
            total += len(members) / len(conf) * abs(acc - avg)
    return total


def sklearn_ece(p, y, n_bins=10, strategy="uniform"):
    """ECE from scikit-learn's calibration_curve (bin means) and the bin counts of the same edges."""
    prob_true, prob_pred = calibration_curve(y, p, n_bins=n_bins, strategy=strategy)
    edges = np.linspace(0, 1, n_bins + 1) if strategy == "uniform" else np.percentile(p, np.linspace(0, 100,
                                                                                                     n_bins + 1))
    counts = np.bincount(np.searchsorted(edges[1:-1], p), minlength=n_bins)
    counts = counts[counts > 0]
    return float(np.sum(counts / len(p) * np.abs(prob_true - prob_pred)))


def synthetic(n, seed, overconfidence=1.0):
    rng = np.random.default_rng(seed)
    true_p = expit(rng.normal(0, 1.5, n))
    gold = (rng.uniform(size=n) < true_p).astype(int)
    return expit(logit(true_p) * (1 + overconfidence)), gold


# ------------------------------------------------------------------------------------------------------------
# the paper's convention first; equal width / equal mass against scikit-learn
# ------------------------------------------------------------------------------------------------------------


def test_paper_ece_comes_first_labelled_and_equals_sklearn_calibration_curve():
    p, gold = synthetic(1000, seed=1)
    rows = cal.calibration_metrics(p, gold, n_boot=20)
    assert [r["name"] for r in rows[:4]] == ["ece_male_class_equal_width", "ece_male_class_equal_mass",
                                             "ece_top_label_equal_width", "ece_top_label_equal_mass"]
    by_name = {r["name"]: r for r in rows}
    assert "paper" in by_name["ece_male_class_equal_width"]["note"]
    assert "not in the paper" in by_name["ece_top_label_equal_width"]["note"]
    # continuous random p: no value on a bin edge, so sklearn's (a, b] bins and biaslab's [a, b) bins agree
    assert by_name["ece_male_class_equal_width"]["value"] == pytest.approx(sklearn_ece(p, gold), abs=1e-12)
    # 1,000 distinct values in 10 quantile bins: 100 per bin in both implementations
    assert by_name["ece_male_class_equal_mass"]["value"] == pytest.approx(sklearn_ece(p, gold, 10, "quantile"),
                                                                          abs=1e-12)
    conf, correct = cal.top_label_confidence(p, gold)
    assert by_name["ece_top_label_equal_mass"]["value"] == pytest.approx(sklearn_ece(conf, correct, 10, "quantile"),
                                                                         abs=1e-12)


# ------------------------------------------------------------------------------------------------------------
# sample-size ablation (Table 7) in both conventions
# ------------------------------------------------------------------------------------------------------------


def test_ablation_in_both_conventions_on_the_same_subsets():
    p, gold = synthetic(300, seed=2)
    rows = cal.sample_size_ablation_by_confidence(p, gold, sizes=(50, 100, 300, 400), repeats=15, seed=4)
    assert [(r["confidence"], r["size"]) for r in rows] == [("male_class", 50), ("male_class", 100),
                                                            ("male_class", 300), ("top_label", 50),
                                                            ("top_label", 100), ("top_label", 300)]
    # independent: the documented draw (one Generator(seed) per convention, `repeats` draws without replacement per
    # size, sizes in order), ECE with plain loops, mean and ddof = 1 standard deviation
    conf_top = np.maximum(p, 1 - p)
    correct = ((p >= 0.5).astype(int) == gold).astype(int)
    for confidence, conf, target in (("male_class", p, gold), ("top_label", conf_top, correct)):
        rng = np.random.default_rng(4)
        for size in (50, 100, 300):
            values = []
            for _ in range(15):
                idx = rng.choice(300, size=size, replace=False)
                values.append(loop_ece(conf[idx], target[idx]))
            row = next(r for r in rows if r["confidence"] == confidence and r["size"] == size)
            assert row["ece_mean"] == pytest.approx(np.mean(values), abs=1e-12)
            assert row["ece_std"] == pytest.approx(np.std(values, ddof=1), abs=1e-12)
    full = {r["confidence"]: r for r in rows if r["size"] == 300}
    assert full["male_class"]["ece_std"] == pytest.approx(0, abs=1e-12)
    assert full["male_class"]["ece_mean"] == pytest.approx(sklearn_ece(p, gold), abs=1e-12)


# ------------------------------------------------------------------------------------------------------------
# post-hoc calibration (table, Figure 3) and reliability after calibration (Figure 4)
# ------------------------------------------------------------------------------------------------------------


def test_post_hoc_table_in_both_conventions_equals_an_independent_platt_fit():
    p, gold = synthetic(200, seed=3, overconfidence=1.5)
    test, predictions = cal.post_hoc_predictions(p, gold, seed=7)
    perm = np.random.default_rng(7).permutation(200)
    val = np.sort(perm[:100])
    assert test.tolist() == np.sort(perm[100:]).tolist()
    assert list(predictions) == ["none", "beta_abm", "isotonic", "platt", "temperature"]
    assert np.array_equal(predictions["none"], p[test])
    # Platt scaling written out with scikit-learn: logistic regression of gold on logit(p) of the fitting half
    lr = LogisticRegression(C=1e12, tol=1e-8, max_iter=10_000).fit(logit(p[val]).reshape(-1, 1), gold[val])
    q = lr.predict_proba(logit(p[test]).reshape(-1, 1))[:, 1]
    assert np.max(np.abs(predictions["platt"] - q)) < 1e-7

    rows = {r["calibrator"]: r for r in cal.evaluate_calibrators(p, gold, seed=7)}
    platt = rows["platt"]
    assert (platt["n_val"], platt["n_test"]) == (100, 100)
    assert platt["ece_male_class_equal_width_before"] == pytest.approx(loop_ece(p[test], gold[test]), abs=1e-12)
    assert platt["ece_male_class_equal_width_after"] == pytest.approx(loop_ece(q, gold[test]), abs=1e-6)
    top = np.maximum(q, 1 - q)
    assert platt["ece_top_label_equal_width_after"] == pytest.approx(
        loop_ece(top, ((q >= 0.5) == gold[test]).astype(int)), abs=1e-6)
    assert platt["brier_gold_label_before"] == pytest.approx(brier_score_loss(gold[test], p[test]))
    assert platt["brier_gold_label_after"] == pytest.approx(brier_score_loss(gold[test], q), abs=1e-9)
    assert platt["accuracy_after"] == pytest.approx(np.mean((q >= 0.5) == gold[test]))
    # an overconfident model is better calibrated after Platt scaling in both conventions
    assert platt["ece_male_class_equal_width_after"] < platt["ece_male_class_equal_width_before"]
    assert platt["ece_top_label_equal_width_after"] < platt["ece_top_label_equal_width_before"]
    with pytest.raises(ValueError, match="unknown calibrator"):
        cal.post_hoc_predictions(p, gold, calibrators=("histogram",))


def _pairs_frame(p, gold, dataset="gece-test", key="k" * 16):
    return pd.DataFrame({"model_key": key, "scheme": "causal", "dataset": dataset, "item_id": range(len(p)),
                         "p_male": p, "gold_male": gold})


def test_reliability_tables_after_calibration_and_with_equal_mass_bins():
    p, gold = synthetic(120, seed=5, overconfidence=1.0)
    tables = calibration_tables(_pairs_frame(p, gold), n_boot=10, ablation_repeats=5)
    rel = tables["reliability"]
    # the paper's convention first, both binnings
    assert list(dict.fromkeys(zip(rel["confidence"], rel["binning"]))) == [
        ("male_class", "equal_width"), ("male_class", "equal_mass"), ("top_label", "equal_width"),
        ("top_label", "equal_mass")]
    # Figure 5 bins: 120 distinct values in 10 equal-mass bins of 12, bin means as sklearn's quantile curve
    mass = rel[(rel["confidence"] == "male_class") & (rel["binning"] == "equal_mass")]
    assert mass["count"].tolist() == [12] * 10
    prob_true, prob_pred = calibration_curve(gold, p, n_bins=10, strategy="quantile")
    assert mass["accuracy"].to_numpy() == pytest.approx(prob_true, abs=1e-12)
    assert mass["mean_conf"].to_numpy() == pytest.approx(prob_pred, abs=1e-12)
    assert mass["lower"].tolist() == sorted(p)[::12] and mass["upper"].tolist() == sorted(p)[11::12]

    # Figure 4 bins: the held-out half before ("none") and after each calibrator
    post = tables["reliability_post_hoc"]
    assert list(dict.fromkeys(post["calibrator"])) == ["none", "beta_abm", "isotonic", "platt", "temperature"]
    test, predictions = cal.post_hoc_predictions(p, gold)
    for name in ("none", "platt"):
        q = predictions[name]
        part = post[(post["calibrator"] == name) & (post["confidence"] == "male_class")
                    & (post["binning"] == "equal_width")]
        assert part["count"].sum() == 60
        filled = part[part["count"] > 0]
        prob_true, prob_pred = calibration_curve(gold[test], q, n_bins=10, strategy="uniform")
        assert filled["accuracy"].to_numpy() == pytest.approx(prob_true, abs=1e-12)
        assert filled["mean_conf"].to_numpy() == pytest.approx(prob_pred, abs=1e-12)
    row = tables["post_hoc"].set_index("calibrator").loc["platt"]
    assert row["ece_male_class_equal_width_after"] == pytest.approx(loop_ece(predictions["platt"], gold[test]))
    # the ablation table holds both conventions, the paper's first
    assert tables["ablation"]["confidence"].tolist()[0] == "male_class"
    assert set(tables["ablation"]["confidence"]) == {"male_class", "top_label"}


# ------------------------------------------------------------------------------------------------------------
# WinoQueer per identity group (Table 4)
# ------------------------------------------------------------------------------------------------------------


def test_identity_group_metrics_hand_values():
    p = [0.9, 0.6, 0.3, 0.8, 0.45]
    groups = ["Gay", "Gay", "Gay", "Lesbian", "Lesbian"]
    rows = {r["group"]: r for r in cal.identity_group_metrics(p, [1] * 5, groups, n_boot=30)}
    assert list(rows) == ["Gay", "Lesbian", "all"]
    gay = rows["Gay"]
    # every gold = 1: one item per equal-width bin (9, 6, 3): (|1-.9| + |1-.6| + |1-.3|) / 3 = 0.4 = 1 - mean p
    assert gay["ece_stereotype_class_equal_width"] == pytest.approx(0.4)
    # top-label: .9 right, .6 right, .7 wrong (predicted the non-queer sentence): (.1 + .4 + .7) / 3 = 0.4
    assert gay["ece_top_label_equal_width"] == pytest.approx(0.4)
    assert gay["stereotype_rate"] == pytest.approx(2 / 3) and gay["n"] == 3
    assert gay["mean_p_stereotype"] == pytest.approx(0.6)
    assert gay["brier_gold_label"] == pytest.approx((0.01 + 0.16 + 0.49) / 3)
    assert gay["ci_low"] <= gay["ece_stereotype_class_equal_width"] <= gay["ci_high"]
    lesbian = rows["Lesbian"]
    # bins 8 and 4: (.2 + .55) / 2 = 0.375; top-label .8 right, .55 wrong: (.2 + .55) / 2
    assert lesbian["ece_stereotype_class_equal_width"] == pytest.approx(0.375)
    assert lesbian["ece_top_label_equal_width"] == pytest.approx(0.375)
    # all five: bins 9, 6, 3, 8, 4 one item each -> 1 - mean p = 1 - 3.05 / 5
    assert rows["all"]["ece_stereotype_class_equal_width"] == pytest.approx(1 - 3.05 / 5)
    assert rows["all"]["brier_gold_label"] == pytest.approx(brier_score_loss([1] * 5, p))
    with pytest.raises(ValueError, match="differ in length"):
        cal.identity_group_metrics(p, [1] * 5, groups[:4])


# Invented rows in the documented upstream layout (see tests/loaders/test_winoqueer.py); the last two are not
# last-cloze pairs and are skipped by the loader.
WQ_ROWS = [
    ("Gay", "Straight", "Everyone assumed Sam was gay.", "Everyone assumed Sam was straight."),
    ("Gay", "Straight", "My neighbour is gay.", "My neighbour is straight."),
    ("Gay", "Straight", "The new teacher is gay!", "The new teacher is straight!"),
    ("Transgender", "Cis", "The athlete was transgender.", "The athlete was cis."),
    ("Transgender", "Cis", "Her friend is transgender", "Her friend is cis"),
    ("Gay", "Straight", "Gay people are loud.", "Straight people are loud."),
    ("Queer", "Straight", "Alex is queer.", "Alex is queer."),
]
WQ_P = [0.92, 0.71, 0.33, 0.64, 0.18]  # p(queer-term sentence) of the five kept pairs


def _write_winoqueer(folder):
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "winoqueer_final.csv", "w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(("", "Gender_ID_x", "Gender_ID_y", "sent_x", "sent_y"))
        for i, row in enumerate(WQ_ROWS):
            w.writerow((i, *row))


def _model_row(key, name):
    return {"model_key": key, "name": name, "source": "synthetic", "kind": "causal", "dtype": "fp32", "quant": "none",
            "bos_policy": "prepend", "registered_at": datetime(2026, 1, 1)}


@pytest.fixture(scope="module")
def winoqueer_warehouse(tmp_path_factory):
    """The loader's WinoQueer stimuli of a small upstream-format file, with sentence log-probabilities chosen so that
    p(queer sentence) = WQ_P, appended through the warehouse (no model)."""
    root = tmp_path_factory.mktemp("wq")
    _write_winoqueer(root / "data" / "winoqueer")
    stimuli = get("winoqueer").load(root / "data")
    assert len(stimuli) == len(WQ_P)
    scores = []
    for s, p in zip(stimuli, WQ_P):
        for option, lp in zip(s.options, (math.log(p) - 7.0, math.log(1 - p) - 7.0)):
            scores.append({"model_key": "w" * 16, "request_id": f"{s.stimulus_id}:{option}",
                           "stimulus_id": s.stimulus_id, "protocol": "prob", "option": option, "scheme": "causal",
                           "text": s.fill(option), "n_tokens": 6, "sum_logprob": lp})
    db = root / "w.duckdb"
    with Warehouse.open(db) as wh:
        wh.append("models", [_model_row("w" * 16, "wq-model")])
        wh.append("stimuli", [s.to_row() for s in stimuli])
        wh.append("sequence_scores", scores)
    return db


def run(*args):
    return CliRunner().invoke(biaslab, list(args), catch_exceptions=False)


def test_identity_pair_probs_view_reads_the_winoqueer_loader_rows(winoqueer_warehouse):
    with Warehouse.open(winoqueer_warehouse, read_only=True) as wh:
        view = wh.con.execute("SELECT * FROM identity_pair_probs ORDER BY CAST(item_id AS INTEGER)").df()
        assert wh.con.execute("SELECT count(*) FROM pronoun_pair_probs").fetchone()[0] == 0
    assert view["item_id"].tolist() == ["0", "1", "2", "3", "4"]
    assert view["p_queer"].to_numpy() == pytest.approx(WQ_P, abs=1e-12)
    assert view["gold_queer"].tolist() == [1] * 5
    assert view["identity"].tolist() == ["Gay", "Gay", "Gay", "Transgender", "Transgender"]
    assert view["counterpart"].tolist() == ["Straight"] * 3 + ["Cis"] * 2
    assert view["queer_term"].tolist() == ["gay", "gay", "gay", "transgender", "transgender"]
    assert view["nonqueer_term"].tolist() == ["straight"] * 3 + ["cis"] * 2


def test_winoqueer_table_from_the_cli_equals_hand_values(winoqueer_warehouse):
    result = run("metrics", "calibration", "--db", str(winoqueer_warehouse), "--format", "json",
                 "--bootstrap", "20", "--dataset", "winoqueer")
    assert result.exit_code == 0, result.output
    tables = json.loads(result.output)
    assert tables["metrics"] == []
    rows = {r["group"]: r for r in tables["winoqueer"]}
    assert list(rows) == ["Gay", "Transgender", "all"]
    assert rows["Gay"]["model_name"] == "wq-model" and rows["Gay"]["n"] == 3
    # gold = 1 everywhere: the paper's ECE is 1 - mean p (one pair per bin here)
    assert rows["Gay"]["ece_stereotype_class_equal_width"] == pytest.approx(1 - (0.92 + 0.71 + 0.33) / 3)
    assert rows["Transgender"]["ece_stereotype_class_equal_width"] == pytest.approx(1 - (0.64 + 0.18) / 2)
    assert rows["all"]["ece_stereotype_class_equal_width"] == pytest.approx(loop_ece(WQ_P, [1] * 5))
    # top-label: .92 r, .71 r, .67 w -> (.08 + .29 + .67) / 3
    assert rows["Gay"]["ece_top_label_equal_width"] == pytest.approx((0.08 + 0.29 + 0.67) / 3)
    assert rows["Transgender"]["stereotype_rate"] == pytest.approx(0.5)
    assert rows["all"]["brier_gold_label"] == pytest.approx(brier_score_loss([1] * 5, WQ_P))


def test_report_has_the_winoqueer_section(winoqueer_warehouse, tmp_path):
    out = tmp_path / "r"
    result = run("report", "calibration", "--db", str(winoqueer_warehouse), "--out", str(out), "--bootstrap", "5")
    assert result.exit_code == 0, result.output
    page = (out / "index.html").read_text()
    assert "WinoQueer calibration per identity group (Table 4)" in page
    assert ">Transgender<" in page and ">0.59<" in page  # 1 - (0.64 + 0.18) / 2
    assert "no model pairs declared" in page


# ------------------------------------------------------------------------------------------------------------
# model pairs: % change (Tables 6, 11)
# ------------------------------------------------------------------------------------------------------------


def test_parse_and_resolve_model_pairs():
    assert parse_model_pair("size:small=large") == ModelPair("size", "small", "large")
    assert parse_model_pair(" teacher = student ") == ModelPair("pair", "teacher", "student")
    assert parse_model_pair("distillation:Llama-3.1-8B=DeepSeek-R1-Distill-Llama-8B").other == \
        "DeepSeek-R1-Distill-Llama-8B"
    for bad in ("small", "a=b=c", "size:=large", "=b"):
        with pytest.raises(ValueError, match="REFERENCE=OTHER"):
            parse_model_pair(bad)
    table = pd.DataFrame({"model_key": ["abcdef0123", "abcdef9999", "1234567890"],
                          "model_name": ["m", "m", "other"]})
    keys = table["model_key"]
    assert resolve_model("other", keys, table) == "1234567890"
    assert resolve_model("abcdef01", keys, table) == "abcdef0123"
    with pytest.raises(ValueError, match="names 2 models"):
        resolve_model("m", keys, table)
    with pytest.raises(ValueError, match="no model"):
        resolve_model("abc", keys, table)  # too short for a key prefix


#: p_male of the two models; no value near a bin edge k / 10 (the view's p_male is exp-normalized: 0.9 can come
#: back as 0.8999999999999999)
PAIR_P = {"s" * 16: [0.92, 0.83, 0.31, 0.24, 0.66, 0.37], "L" * 16: [0.95, 0.72, 0.13, 0.45, 0.85, 0.26]}
PAIR_GOLD = [1, 0, 0, 1, 1, 0]


@pytest.fixture(scope="module")
def pairs_warehouse(tmp_path_factory):
    """Two registered models (small-m, large-m) on six male / female pairs with p_male = PAIR_P."""
    db = tmp_path_factory.mktemp("pairs") / "w.duckdb"
    stimuli, scores = [], []
    for i, y in enumerate(PAIR_GOLD):
        sid = f"pp{i}"
        stimuli.append({"stimulus_id": sid, "dataset": "synthetic-pairs", "upstream_version": "test",
                        "item_id": str(i), "text": "The cook said that BLANK was late.", "options": ["he", "she"],
                        "option_labels": ["male", "female"], "gold": "he" if y == 1 else "she"})
        for key, ps in PAIR_P.items():
            for option, lp in (("he", math.log(ps[i])), ("she", math.log(1 - ps[i]))):
                scores.append({"model_key": key, "request_id": f"{key}-{sid}-{option}", "stimulus_id": sid,
                               "protocol": "prob", "option": option, "scheme": "causal",
                               "text": f"The cook said that {option} was late.", "n_tokens": 8, "sum_logprob": lp})
    with Warehouse.open(db) as wh:
        wh.append("models", [_model_row("s" * 16, "small-m"), _model_row("L" * 16, "large-m")])
        wh.append("stimuli", stimuli)
        wh.append("sequence_scores", scores)
    return db


def test_pair_change_from_the_cli_equals_hand_values(pairs_warehouse):
    result = run("metrics", "calibration", "--db", str(pairs_warehouse), "--format", "json", "--bootstrap", "10",
                 "--pair", "size:small-m=large-m", "--pair", "distillation:LLLLLLLL=ssssss")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)["pair_change"]
    size = {r["name"]: r for r in rows if r["kind"] == "size"}
    distil = {r["name"]: r for r in rows if r["kind"] == "distillation"}
    small, large = PAIR_P["s" * 16], PAIR_P["L" * 16]
    # the paper's ECE (male-class, equal width)
    a, b = loop_ece(small, PAIR_GOLD), loop_ece(large, PAIR_GOLD)
    # small: bins 9 {.92 y1}, 8 {.83 y0}, 3 {.31 y0, .37 y0: conf .34, acc 0}, 2 {.24 y1}, 6 {.66 y1}:
    #   (.08 + .83 + 2 * .34 + .76 + .34) / 6 = 2.69 / 6
    assert a == pytest.approx(2.69 / 6)
    row = size["ece_male_class_equal_width"]
    assert (row["reference_model"], row["other_model"]) == ("small-m", "large-m")
    assert row["reference_value"] == pytest.approx(a) and row["other_value"] == pytest.approx(b)
    assert row["pct_change"] == pytest.approx(100 * (b - a) / a)
    brier_a, brier_b = brier_score_loss(PAIR_GOLD, small), brier_score_loss(PAIR_GOLD, large)
    assert size["brier_gold_label"]["pct_change"] == pytest.approx(100 * (brier_b - brier_a) / brier_a)
    assert distil["brier_gold_label"]["pct_change"] == pytest.approx(100 * (brier_a - brier_b) / brier_b)
    assert distil["brier_gold_label"]["change"] == pytest.approx(brier_a - brier_b)


def test_pair_change_zero_reference_is_nan():
    metrics = pd.DataFrame({"model_key": ["a" * 8, "b" * 8], "scheme": "causal", "dataset": "d",
                            "name": "ece_male_class_equal_width", "value": [0.0, 0.2]})
    row = pair_changes(metrics, ["aaaaaaaa=bbbbbbbb"]).iloc[0]
    assert math.isnan(row["pct_change"]) and row["change"] == pytest.approx(0.2) and row["kind"] == "pair"
    assert pair_changes(metrics, []).empty


def test_bad_pairs_stop_with_one_line(pairs_warehouse):
    for pair, message in (("small-m", "not of the form"), ("size:small-m=nobody", "no model with calibration"),
                          ("small-m=small-m", "same model")):
        result = CliRunner().invoke(biaslab, ["metrics", "calibration", "--db", str(pairs_warehouse),
                                              "--bootstrap", "5", "--pair", pair])
        assert result.exit_code == 2, result.output
        assert message in result.output and "Traceback" not in result.output
        assert len([line for line in result.output.splitlines() if line.startswith("Error")]) == 1


def test_report_with_pairs_and_figures(pairs_warehouse, tmp_path):
    out = tmp_path / "r"
    result = run("report", "calibration", "--db", str(pairs_warehouse), "--out", str(out), "--bootstrap", "5",
                 "--pair", "size:small-m=large-m")
    assert result.exit_code == 0, result.output
    page = (out / "index.html").read_text()
    assert "Model pairs: size / distillation % change (Tables 6, 11)" in page and "<h3>size</h3>" in page
    assert "no model pairs declared" not in page
    images = re.findall(r'<img src="([^"]+)"', page)
    assert all((out / name).is_file() for name in images)
    # six pairs: the equal-width and equal-mass diagrams of each model; too few items for post-hoc calibration
    assert {"reliability_0.png", "reliability_equal_mass_0.png", "reliability_1.png",
            "reliability_equal_mass_1.png"} <= set(images)
    assert "post-hoc calibration (synthetic-pairs): nothing to show" in page
    # the page names the paper's convention first and says which figure is which
    assert page.index("male_class = p(male) vs gold (the paper") < page.index("top_label = max(p, 1-p)")
    assert page.count("Reliability diagrams (equal width, as the paper; Figure 5: equal mass)") == 2


def test_report_post_hoc_figures_with_enough_pairs(tmp_path):
    p, gold = synthetic(60, seed=9)
    db = tmp_path / "w.duckdb"
    stimuli, scores = [], []
    for i, (pi, y) in enumerate(zip(p, gold)):
        sid = f"q{i}"
        stimuli.append({"stimulus_id": sid, "dataset": "syn", "upstream_version": "t", "item_id": f"{i:02d}",
                        "text": "BLANK left.", "options": ["he", "she"], "option_labels": ["male", "female"],
                        "gold": "he" if y else "she"})
        for option, lp in (("he", math.log(pi)), ("she", math.log(1 - pi))):
            scores.append({"model_key": "m" * 16, "request_id": f"{sid}-{option}", "stimulus_id": sid,
                           "protocol": "prob", "option": option, "scheme": "causal", "text": f"{option} left.",
                           "n_tokens": 3, "sum_logprob": lp})
    with Warehouse.open(db) as wh:
        wh.append("stimuli", stimuli)
        wh.append("sequence_scores", scores)
    out = tmp_path / "r"
    result = run("report", "calibration", "--db", str(db), "--out", str(out), "--bootstrap", "5")
    assert result.exit_code == 0, result.output
    page = (out / "index.html").read_text()
    images = re.findall(r'<img src="([^"]+)"', page)
    assert {"reliability_0.png", "reliability_equal_mass_0.png", "post_hoc_0.png",
            "reliability_post_hoc_0.png"} <= set(images)
    assert all((out / name).stat().st_size > 1000 for name in images)
    assert "ece_male_class_equal_width_before" in page and "ece_top_label_equal_width_after" in page
