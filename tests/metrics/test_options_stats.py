"""Hand-computed and reference checks of biaslab.metrics.options.stats (item means, bootstrap, paired contrasts, KL,
Spearman, calibration)."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from scipy.stats import entropy, permutation_test, spearmanr
from sklearn.calibration import calibration_curve

from biaslab.metrics.options.stats import (GROUP_MEAN_COLUMNS, KEY, calibration, group_means, item_means,
                                           kl_to_reference, paired_contrast, reliability, sign_flip_p_value, spearman,
                                           stimulus_scores)

COLLECTION = {"model_key": "m1", "method": "choice-exact", "setting": "T=0"}


def probs_frame(rows, **defaults) -> pd.DataFrame:
    """Option-probability rows with the collection columns filled in (gold_label None, valid_mass NaN unless given)."""
    base = {**COLLECTION, "gold_label": None, "valid_mass": np.nan, **defaults}
    return pd.DataFrame([{**base, **row} for row in rows])


def random_items(n, seed=0, model="m1", label="A", start=0) -> pd.DataFrame:
    """n items of one group with uniform random p (item ids i<start>.. i<start + n - 1>)."""
    p = np.random.default_rng(seed).uniform(size=n)
    return pd.DataFrame({**{k: [v] * n for k, v in COLLECTION.items()}, "model_key": model,
                         "item_id": [f"i{start + k:04d}" for k in range(n)], "option_label": label, "p": p,
                         "valid_mass": 1.0, "stimuli": 1})


# ------------------------------------------------------------------------------------------------------------
# item_means / group_means
# ------------------------------------------------------------------------------------------------------------


def tiny_probs() -> pd.DataFrame:
    return probs_frame([
        # item i1: two stimuli (e.g. two option orders)
        {"stimulus_id": "s1", "item_id": "i1", "option_label": "A", "p": 0.2, "valid_mass": 0.8},
        {"stimulus_id": "s1", "item_id": "i1", "option_label": "B", "p": 0.8, "valid_mass": 0.8},
        {"stimulus_id": "s2", "item_id": "i1", "option_label": "A", "p": 0.6, "valid_mass": 1.0},
        {"stimulus_id": "s2", "item_id": "i1", "option_label": "B", "p": 0.4, "valid_mass": 1.0},
        # item i2: nothing valid in s3, s4 answered
        {"stimulus_id": "s3", "item_id": "i2", "option_label": "A", "p": np.nan, "valid_mass": 0.0},
        {"stimulus_id": "s3", "item_id": "i2", "option_label": "B", "p": np.nan, "valid_mass": 0.0},
        {"stimulus_id": "s4", "item_id": "i2", "option_label": "A", "p": 0.9, "valid_mass": 1.0},
        {"stimulus_id": "s4", "item_id": "i2", "option_label": "B", "p": 0.1, "valid_mass": 1.0},
        # item i3: only an invalid stimulus
        {"stimulus_id": "s5", "item_id": "i3", "option_label": "A", "p": np.nan, "valid_mass": 0.0},
        {"stimulus_id": "s5", "item_id": "i3", "option_label": "B", "p": np.nan, "valid_mass": 0.0},
    ], context="none")


def test_item_means_hand_computed():
    items = item_means(tiny_probs(), ["context"])
    assert list(items.columns) == KEY + ["context", "item_id", "option_label", "p", "valid_mass", "stimuli"]
    a = items[items.option_label == "A"].set_index("item_id")
    assert a.loc["i1", "p"] == pytest.approx(0.4)
    assert a.loc["i2", "p"] == pytest.approx(0.9)  # the NaN stimulus is ignored
    assert np.isnan(a.loc["i3", "p"])
    assert a["valid_mass"].tolist() == pytest.approx([0.9, 0.5, 0.0])
    assert a["stimuli"].tolist() == [2, 2, 1]
    b = items[items.option_label == "B"].set_index("item_id")
    assert b.loc["i1", "p"] == pytest.approx(0.6)


def test_item_means_averages_named_numeric_columns():
    probs = tiny_probs().assign(length=[3, 3, 5, 5, 7, 7, 9, 9, 1, 1])
    items = item_means(probs, "context", numeric=["length"])
    assert items[items.option_label == "A"]["length"].tolist() == pytest.approx([4.0, 8.0, 1.0])


def test_group_means_hand_computed():
    means = group_means(item_means(tiny_probs(), ["context"]), ["context"], bootstrap=200)
    assert list(means.columns) == KEY + ["context", "option_label"] + GROUP_MEAN_COLUMNS
    a = means.set_index("option_label").loc["A"]
    assert a["items"] == 2  # i3 has no valid p
    assert a["mean_p"] == pytest.approx((0.4 + 0.9) / 2)
    assert a["invalid_mass"] == pytest.approx(1 - (0.9 + 0.5 + 0.0) / 3)
    assert a["ci_low"] <= a["mean_p"] <= a["ci_high"]
    # two items: resampled means lie in {0.4, 0.65, 0.9}
    assert 0.4 <= a["ci_low"] and a["ci_high"] <= 0.9
    b = means.set_index("option_label").loc["B"]
    assert b["mean_p"] == pytest.approx(0.35)


def test_group_means_invalid_mass_nan_for_prob_and_ci_nan_below_two_items():
    probs = probs_frame([{"stimulus_id": "s1", "item_id": "i1", "option_label": "A", "p": 0.3},
                         {"stimulus_id": "s1", "item_id": "i1", "option_label": "B", "p": 0.7}], method="prob")
    means = group_means(item_means(probs, []), [])
    assert means["items"].tolist() == [1, 1]
    assert means["mean_p"].tolist() == pytest.approx([0.3, 0.7])
    assert means[["ci_low", "ci_high", "invalid_mass"]].isna().all().all()


def test_group_means_bootstrap_ci_properties():
    items = random_items(30)
    first = group_means(items, [], bootstrap=2000, seed=3).iloc[0]
    assert first["ci_low"] < first["mean_p"] < first["ci_high"]
    again = group_means(items.sample(frac=1.0, random_state=1), [], bootstrap=2000, seed=3).iloc[0]
    assert (again["ci_low"], again["ci_high"]) == (first["ci_low"], first["ci_high"])  # reproducible, order-free
    other_seed = group_means(items, [], bootstrap=2000, seed=4).iloc[0]
    assert (other_seed["ci_low"], other_seed["ci_high"]) != (first["ci_low"], first["ci_high"])
    # the same values duplicated 4x (as distinct items): same mean, interval about half as wide
    four = pd.concat([items.assign(item_id=items.item_id + f"_{k}") for k in range(4)], ignore_index=True)
    dup = group_means(four, [], bootstrap=2000, seed=3).iloc[0]
    assert dup["mean_p"] == pytest.approx(first["mean_p"])
    width, dup_width = first["ci_high"] - first["ci_low"], dup["ci_high"] - dup["ci_low"]
    assert 0.35 * width < dup_width < 0.65 * width
    # about 2 * 1.96 * sd / sqrt(n)
    assert width == pytest.approx(2 * 1.96 * items.p.std(ddof=0) / np.sqrt(30), rel=0.2)


def test_group_means_ci_unchanged_when_another_model_is_added():
    items = random_items(25)
    alone = group_means(items, [], seed=7)
    both = group_means(pd.concat([random_items(40, seed=9, model="m0"), items], ignore_index=True), [], seed=7)
    assert len(both) == 2
    pd.testing.assert_frame_equal(both[both.model_key == "m1"].reset_index(drop=True), alone)


def test_group_means_complementary_labels_get_mirror_intervals():
    a = random_items(20)
    means = group_means(pd.concat([a, a.assign(option_label="B", p=1 - a.p)]), [], seed=1).set_index("option_label")
    assert means.loc["B", "ci_low"] == pytest.approx(1 - means.loc["A", "ci_high"])
    assert means.loc["B", "ci_high"] == pytest.approx(1 - means.loc["A", "ci_low"])


# ------------------------------------------------------------------------------------------------------------
# sign_flip_p_value
# ------------------------------------------------------------------------------------------------------------


def scipy_exact_p(x, y) -> float:
    res = permutation_test((x, y), lambda x, y: np.mean(x - y), permutation_type="samples", n_resamples=np.inf,
                           alternative="two-sided")
    return float(res.pvalue)


@pytest.mark.parametrize("n, shift", [(8, 0.0), (8, 0.5), (12, 0.0), (12, 0.4)])
def test_sign_flip_exact_matches_scipy_permutation_test(n, shift):
    rng = np.random.default_rng(n)
    x, y = rng.normal(size=n) + shift, rng.normal(size=n)
    assert sign_flip_p_value(x - y) == pytest.approx(scipy_exact_p(x, y), abs=1e-12)


def test_sign_flip_monte_carlo_close_to_exact():
    rng = np.random.default_rng(14)
    d = rng.normal(size=14) + 0.3
    exact = sign_flip_p_value(d)
    assert 0.01 < exact < 0.99
    forced = sign_flip_p_value(d, exact_max=-1, rng=np.random.default_rng(5))
    assert forced != exact  # the Monte Carlo branch ran: (1 + count) / 10001
    assert forced == pytest.approx(exact, abs=0.02)
    assert sign_flip_p_value(d, exact_max=-1, rng=5) == sign_flip_p_value(d, exact_max=-1, rng=5)


def test_sign_flip_hand_computed_and_edge_cases():
    # d = (1, 1, 1): |mean| = 1 reached only by the all-plus and all-minus sign vectors: 2 / 8
    assert sign_flip_p_value([1.0, 1.0, 1.0]) == pytest.approx(0.25)
    assert sign_flip_p_value([0.0, 0.0]) == 1.0
    assert np.isnan(sign_flip_p_value([]))
    with pytest.raises(ValueError):
        sign_flip_p_value([0.1, np.nan])


# ------------------------------------------------------------------------------------------------------------
# paired_contrast
# ------------------------------------------------------------------------------------------------------------


def contrast_items() -> pd.DataFrame:
    rows = []
    primed = {"i1": 0.9, "i2": 0.7, "i3": 0.6, "i4": 0.8}
    unprimed = {"i1": 0.5, "i2": 0.6, "i3": 0.7, "i5": 0.1}  # i4, i5 miss one side
    for context, values in (("primed_f", primed), ("unprimed", unprimed)):
        for item, p in values.items():
            rows += [{**COLLECTION, "context": context, "item_id": item, "option_label": "F", "p": p},
                     {**COLLECTION, "context": context, "item_id": item, "option_label": "M", "p": 1 - p}]
    rows.append({**COLLECTION, "context": "primed_m", "item_id": "i1", "option_label": "F", "p": 0.0})
    return pd.DataFrame(rows)


def test_paired_contrast_hand_computed_and_drops_unpaired_items():
    out = paired_contrast(contrast_items(), "context", "primed_f", "unprimed", [], bootstrap=500)
    assert list(out.columns) == KEY + ["context", "option_label", "pairs", "unpaired", "mean_diff", "ci_low",
                                       "ci_high", "p_value"]
    f = out.set_index("option_label").loc["F"]
    d = np.array([0.9 - 0.5, 0.7 - 0.6, 0.6 - 0.7])
    assert f["context"] == "primed_f - unprimed"
    assert (f["pairs"], f["unpaired"]) == (3, 2)  # i4 and i5 have one side only: left out, and counted
    assert f["mean_diff"] == pytest.approx(d.mean())
    assert f["p_value"] == pytest.approx(sign_flip_p_value(d))
    # |sum| >= 0.4 for signs (+,+,+), (+,+,-), (+,-,-) and their mirrors, not for (+,-,+) and its mirror: 6 / 8
    assert f["p_value"] == pytest.approx(6 / 8)
    assert f["ci_low"] <= f["mean_diff"] <= f["ci_high"]
    m = out.set_index("option_label").loc["M"]
    assert m["mean_diff"] == pytest.approx(-d.mean())


def test_paired_contrast_without_pairs_is_nan():
    items = contrast_items()
    items = items[~((items.context == "unprimed") & items.item_id.isin(["i1", "i2", "i3"]))]
    out = paired_contrast(items, "context", "primed_f", "unprimed", [])
    assert out["pairs"].tolist() == [0, 0]
    assert out[["mean_diff", "ci_low", "ci_high", "p_value"]].isna().all().all()


def test_paired_contrast_per_group_and_reproducible():
    items = pd.concat([contrast_items().assign(task="t1"),
                       contrast_items().assign(task="t2", p=lambda f: f.p.where(f.context != "primed_f", 1.0))])
    first = paired_contrast(items, "context", "primed_f", "unprimed", "task", seed=2)
    assert first.groupby("task")["pairs"].first().tolist() == [3, 3]
    t2 = first[(first.task == "t2") & (first.option_label == "F")].iloc[0]
    assert t2["mean_diff"] == pytest.approx(np.mean([0.5, 0.4, 0.3]))
    pd.testing.assert_frame_equal(first, paired_contrast(items, "context", "primed_f", "unprimed", "task", seed=2))
    with pytest.raises(ValueError):
        paired_contrast(items, "context", "primed_f", "unprimed", ["context"])


# ------------------------------------------------------------------------------------------------------------
# kl_to_reference
# ------------------------------------------------------------------------------------------------------------


def means_frame(table: dict) -> pd.DataFrame:
    """group_means-like rows from {(task, context): {label: mean_p}}."""
    rows = [{**COLLECTION, "task": task, "context": context, "option_label": label, "items": 5, "mean_p": p,
             "ci_low": np.nan, "ci_high": np.nan, "invalid_mass": 0.1}
            for (task, context), dist in table.items() for label, p in dist.items()]
    return pd.DataFrame(rows)


def test_kl_to_reference_matches_scipy_entropy():
    ref, primed = [0.5, 0.3, 0.1], [0.2, 0.2, 0.5]  # not summing to 1: renormalized
    means = means_frame({("t1", "none"): dict(zip("ABC", ref)), ("t1", "primed"): dict(zip("ABC", primed)),
                         ("t2", "primed"): {"A": 0.5, "B": 0.5}})
    out = kl_to_reference(means, "context", "none")
    assert list(out.columns) == KEY + ["task", "context", "kl", "reference"]
    t1 = out[out.task == "t1"].set_index("context")["kl"]
    assert t1["none"] == 0.0
    assert t1["primed"] == pytest.approx(entropy(primed, ref), abs=1e-12)
    assert t1["primed"] != pytest.approx(entropy(ref, primed))
    assert out["reference"].eq("none").all()
    assert np.isnan(out[out.task == "t2"]["kl"].iloc[0])  # t2 has no reference group


def test_kl_to_reference_infinite_and_missing_labels():
    means = means_frame({("t1", "none"): {"A": 1.0, "B": 0.0}, ("t1", "primed"): {"A": 0.5, "B": 0.5},
                         ("t1", "sure"): {"A": 0.8}})
    kl = kl_to_reference(means, "context", "none").set_index("context")["kl"]
    assert kl["primed"] == np.inf
    assert kl["sure"] == pytest.approx(0.0)  # B absent -> P(B) = 0, P(A) renormalized to 1
    reverse = kl_to_reference(means, "context", "primed").set_index("context")["kl"]
    assert reverse["none"] == pytest.approx(entropy([1.0, 0.0], [0.5, 0.5]))


# ------------------------------------------------------------------------------------------------------------
# spearman
# ------------------------------------------------------------------------------------------------------------


def test_spearman_matches_pandas_and_scipy():
    rng = np.random.default_rng(0)
    n = 15
    length = rng.integers(1, 8, size=n).astype(float)  # ties included
    p = np.clip(0.05 * length + rng.normal(scale=0.1, size=n), 0, 1)
    items = pd.DataFrame({**{k: [v] * n for k, v in COLLECTION.items()}, "item_id": [f"i{k}" for k in range(n)],
                          "option_label": "A", "p": p, "length": length})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = spearman(items, "length", [])
    assert list(out.columns) == KEY + ["option_label", "unit", "n", "rho", "ci_low", "ci_high", "p_value"]
    row = out.iloc[0]
    assert row["n"] == n
    assert row["rho"] == pytest.approx(pd.Series(length).corr(pd.Series(p), method="spearman"), abs=1e-12)
    assert row["p_value"] == pytest.approx(spearmanr(length, p).pvalue, abs=1e-12)
    assert abs(row["rho"]) > 0.3


def test_spearman_averages_within_item_and_handles_degenerate_groups():
    probs = probs_frame([
        {"stimulus_id": f"s{k}{j}", "item_id": f"i{k}", "option_label": "A", "p": p, "length": length, "task": task}
        for k, (task, p, lengths) in enumerate([("t1", 0.1, (1, 3)), ("t1", 0.5, (4, 4)), ("t1", 0.3, (5, 1)),
                                                ("t1", np.nan, (9, 9)), ("t2", 0.2, (2, 2)), ("t2", 0.4, (2, 2)),
                                                ("t2", 0.6, (2, 2)), ("t3", 0.1, (1, 1)), ("t3", 0.2, (2, 2))])
        for j, length in enumerate(lengths)])
    items = item_means(probs, "task", numeric=["length"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = spearman(items, "length", "task").set_index("task")
    # t1: item lengths (2, 4, 3) against p (0.1, 0.5, 0.3); the NaN item is left out
    assert out.loc["t1", "n"] == 3
    assert out.loc["t1", "rho"] == pytest.approx(1.0)
    assert out.loc["t2", "n"] == 3 and np.isnan(out.loc["t2", "rho"]) and np.isnan(out.loc["t2", "p_value"])
    assert out.loc["t3", "n"] == 2 and np.isnan(out.loc["t3", "rho"])


# ------------------------------------------------------------------------------------------------------------
# calibration
# ------------------------------------------------------------------------------------------------------------


def gold_probs() -> pd.DataFrame:
    dists = [("s1", {"A": 0.9, "B": 0.1}, "A"), ("s2", {"A": 0.8, "B": 0.2}, "B"), ("s3", {"A": 0.3, "B": 0.7}, "B"),
             ("s4", {"A": 0.5, "B": 0.5}, "B"), ("s5", {"A": 0.4, "B": 0.3, "C": 0.3}, "C"),
             ("s6", {"A": 0.45, "B": 0.1, "C": 0.45}, "A"),
             ("s7", {"A": 0.9, "B": 0.1}, None), ("s8", {"A": np.nan, "B": np.nan}, "A")]
    return probs_frame([{"stimulus_id": stim, "item_id": stim, "option_label": label, "p": p, "gold_label": gold}
                        for stim, dist, gold in dists for label, p in reversed(list(dist.items()))])


def test_stimulus_scores_ties_go_to_first_sorted_label():
    scores = stimulus_scores(gold_probs(), []).set_index("stimulus_id")
    assert scores.index.tolist() == ["s1", "s2", "s3", "s4", "s5", "s6"]  # no gold (s7) and nothing valid (s8) out
    assert scores["predicted"].tolist() == ["A", "A", "B", "A", "A", "A"]
    assert scores["confidence"].tolist() == pytest.approx([0.9, 0.8, 0.7, 0.5, 0.4, 0.45])
    assert scores["correct"].tolist() == [True, False, True, False, False, True]


def test_calibration_two_bins_hand_computed():
    out = calibration(gold_probs(), [], n_bins=2)
    assert list(out.columns) == KEY + ["stimuli", "accuracy", "ece", "brier"]
    row = out.iloc[0]
    assert row["stimuli"] == 6
    assert row["accuracy"] == pytest.approx(0.5)
    # bin [0, .5): conf 0.4, 0.45 (acc 1/2) -> |0.5 - 0.425|; bin [.5, 1]: conf 0.9, 0.8, 0.7, 0.5 (acc 2/4) -> 0.225
    assert row["ece"] == pytest.approx((2 * 0.075 + 4 * 0.225) / 6)
    briers = [0.01 + 0.01, 0.64 + 0.64, 0.09 + 0.09, 0.25 + 0.25, 0.16 + 0.09 + 0.49, 0.3025 + 0.01 + 0.2025]
    assert row["brier"] == pytest.approx(np.mean(briers))
    bins = reliability(gold_probs(), [], n_bins=2)
    assert list(bins.columns) == KEY + ["bin", "lower", "upper", "count", "confidence", "accuracy"]
    assert bins["count"].tolist() == [2, 4]
    assert bins["lower"].tolist() == [0.0, 0.5] and bins["upper"].tolist() == [0.5, 1.0]
    assert bins["confidence"].tolist() == pytest.approx([0.425, 0.725])
    assert bins["accuracy"].tolist() == pytest.approx([0.5, 0.5])


def test_brier_counts_a_gold_label_outside_the_options():
    probs = probs_frame([{"stimulus_id": "s1", "item_id": "i1", "option_label": "A", "p": 0.6, "gold_label": "Z"},
                         {"stimulus_id": "s1", "item_id": "i1", "option_label": "B", "p": 0.4, "gold_label": "Z"}])
    row = calibration(probs, []).iloc[0]
    assert row["brier"] == pytest.approx(0.36 + 0.16 + 1.0)
    assert row["accuracy"] == 0.0


def test_calibration_matches_sklearn_calibration_curve_per_group():
    rng = np.random.default_rng(1)
    rows = []
    for task in ("t1", "t2"):
        for k in range(300):
            dist = rng.dirichlet([1.0, 1.0, 1.0])
            gold = "ABC"[rng.choice(3, p=dist)]
            rows += [{"stimulus_id": f"{task}{k}", "item_id": f"{task}{k}", "option_label": label, "p": p,
                      "gold_label": gold, "task": task} for label, p in zip("ABC", dist)]
    probs = probs_frame(rows)
    summary = calibration(probs, "task").set_index("task")
    bins = reliability(probs, "task")
    scores = stimulus_scores(probs, "task")
    for task in ("t1", "t2"):
        s = scores[scores.task == task]
        prob_true, prob_pred = calibration_curve(s["correct"].astype(int), s["confidence"], n_bins=10)
        got = bins[(bins.task == task) & (bins["count"] > 0)]
        assert got["accuracy"].to_numpy() == pytest.approx(prob_true, abs=1e-12)
        assert got["confidence"].to_numpy() == pytest.approx(prob_pred, abs=1e-12)
        counts = got["count"].to_numpy()
        assert counts.sum() == 300 == summary.loc[task, "stimuli"]
        assert summary.loc[task, "ece"] == pytest.approx(np.sum(counts / 300 * np.abs(prob_true - prob_pred)))
        assert summary.loc[task, "accuracy"] == pytest.approx(s["correct"].mean())
