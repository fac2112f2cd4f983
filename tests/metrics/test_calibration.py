"""Hand-computed and reference checks of biaslab.metrics.calibration (ECE family, Gender-ECE, calibrators)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import expit, logit
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import brier_score_loss

from biaslab.metrics.calibration import stats as cal
from biaslab.metrics.calibration.stats import (BetaCalibration, IsotonicCalibration, PlattScaling, TemperatureScaling,
                                               bootstrap_ci, brier_gold, brier_upstream_convention, calibration_metrics,
                                               class_conditional_ece, ece, equal_mass_bin_index, equal_width_bin_index,
                                               evaluate_calibrators, gender_ece, human_alignment, ice, macro_ce,
                                               male_class_ece, predicted_label, sample_size_ablation, split_indices,
                                               top_label_confidence, top_label_ece)


def reference_ece(conf, target, n_bins):
    """Straightforward equal-width ECE written independently: loop over bins, explicit edge comparisons."""
    conf, target = list(map(float, conf)), list(map(float, target))
    total = 0.0
    for b in range(n_bins):
        lo, hi = b / n_bins, (b + 1) / n_bins
        members = [i for i, c in enumerate(conf) if lo <= c < hi or (b == n_bins - 1 and c == 1.0)]
        if not members:
            continue
        acc = sum(target[i] for i in members) / len(members)
        avg = sum(conf[i] for i in members) / len(members)
        total += len(members) / len(conf) * abs(acc - avg)
    return total


# ------------------------------------------------------------------------------------------------------------
# labels and confidences
# ------------------------------------------------------------------------------------------------------------


def test_predicted_label_tie_goes_to_male_and_top_label_confidence():
    p = np.array([0.5, 0.49, 0.8, 0.0, 1.0])
    gold = np.array([0, 0, 0, 0, 1])
    assert predicted_label(p).tolist() == [1, 0, 1, 0, 1]
    conf, correct = top_label_confidence(p, gold)
    assert conf == pytest.approx([0.5, 0.51, 0.8, 1.0, 1.0])
    assert correct.tolist() == [0, 1, 0, 1, 1]


def test_inputs_are_validated():
    with pytest.raises(ValueError):
        ece([0.2, 1.2], [0, 1])
    with pytest.raises(ValueError):
        ece([0.2, 0.3], [0, 2])
    with pytest.raises(ValueError):
        ece([0.2, 0.3], [0, 1, 1])
    with pytest.raises(ValueError):
        ece([], [])
    with pytest.raises(ValueError):
        ece([0.2], [1], binning="quantile")


# ------------------------------------------------------------------------------------------------------------
# ECE
# ------------------------------------------------------------------------------------------------------------


def test_equal_width_bins_closed_at_both_edges():
    # 4 bins [0, .25), [.25, .5), [.5, .75), [.75, 1]: 0 -> first bin, 1 -> last bin, k/4 -> bin k
    assert equal_width_bin_index([0.0, 0.25, 0.5, 0.75, 1.0, 0.2499], 4).tolist() == [0, 1, 2, 3, 3, 0]
    # with 10 bins the float k/10 (e.g. 0.3, 0.7) lands in bin k, not bin k-1
    assert equal_width_bin_index([0.0, 0.1, 0.3, 0.6, 0.7, 0.9, 1.0], 10).tolist() == [0, 1, 3, 6, 7, 9, 9]


def test_ece_hand_computed_with_exact_zero_one_and_empty_bin():
    conf = np.array([0.0, 0.1, 0.5, 0.6, 1.0, 1.0])
    label = np.array([0, 1, 1, 0, 1, 1])
    # 4 equal-width bins:
    #   [0, .25):   conf 0.0, 0.1 -> n=2, mean conf 0.05, acc 1/2 -> |0.5 - 0.05| = 0.45
    #   [.25, .5):  empty          -> contributes 0
    #   [.5, .75):  conf 0.5, 0.6 -> n=2, mean conf 0.55, acc 1/2 -> |0.5 - 0.55| = 0.05
    #   [.75, 1]:   conf 1.0, 1.0 -> n=2, mean conf 1.00, acc 1   -> 0
    #   ECE = 2/6 * 0.45 + 0 + 2/6 * 0.05 + 2/6 * 0 = 0.15 + 0.016666... = 1/6
    res = ece(conf, label, n_bins=4, confidence="male_class")
    assert res.value == pytest.approx(1 / 6)
    assert res.name == "ece_male_class_equal_width"
    assert [b.count for b in res.bins] == [2, 0, 2, 2]
    assert [(b.lower, b.upper) for b in res.bins] == [(0.0, 0.25), (0.25, 0.5), (0.5, 0.75), (0.75, 1.0)]
    assert res.bins[0].mean_conf == pytest.approx(0.05) and res.bins[0].accuracy == pytest.approx(0.5)
    assert np.isnan(res.bins[1].mean_conf) and np.isnan(res.bins[1].accuracy)
    assert res.bins[3].mean_conf == 1.0 and res.bins[3].accuracy == 1.0
    rows = res.bin_rows()
    assert set(rows[0]) == {"lower", "upper", "count", "mean_conf", "accuracy"}
    assert res.value == pytest.approx(reference_ece(conf, label, 4))


def test_ece_equal_mass_hand_computed_with_ties():
    conf = np.array([0.9, 0.6, 0.7, 0.6, 0.8])
    correct = np.array([1, 0, 1, 1, 1])
    # stable sort: 0.6 (item 1), 0.6 (item 3), 0.7 (item 2), 0.8 (item 4), 0.9 (item 0); array_split -> 3 + 2
    #   bin 0: items 1, 3, 2: mean conf (0.6+0.6+0.7)/3 = 0.6333.., acc 2/3 = 0.6666.. -> 3/5 * 1/30 = 0.02
    #   bin 1: items 4, 0:    mean conf 0.85, acc 1 -> 2/5 * 0.15 = 0.06
    #   ECE = 0.08
    assert equal_mass_bin_index(conf, 2).tolist() == [1, 0, 0, 0, 1]
    res = ece(conf, correct, n_bins=2, binning="equal_mass")
    assert res.value == pytest.approx(0.08)
    assert res.name == "ece_top_label_equal_mass"
    assert [(b.lower, b.upper, b.count) for b in res.bins] == [(0.6, 0.7, 3), (0.8, 0.9, 2)]


def test_equal_mass_keeps_ties_in_one_bin():
    # six equal confidences, 3 bins: one bin holds all six (never split by input order)
    assert equal_mass_bin_index(np.full(6, 0.7), 3).tolist() == [0, 0, 0, 0, 0, 0]
    # sorted positions 0..5 cut into blocks {0,1}, {2,3}, {4,5}; the run 0.5 (positions 2-4) starts in block 1, so
    # all three 0.5 go to bin 1 and 0.9 (position 5) stays in bin 2
    assert equal_mass_bin_index([0.5, 0.9, 0.1, 0.5, 0.2, 0.5], 3).tolist() == [1, 2, 0, 1, 0, 1]
    # the run 0.5 (positions 1-3) starts in block 0: bin 0 = {0.1, 0.5, 0.5, 0.5}, bin 1 empty, bin 2 = {0.8, 0.9}
    conf = np.array([0.5, 0.8, 0.5, 0.1, 0.9, 0.5])
    correct = np.array([1, 1, 0, 1, 1, 1])
    assert equal_mass_bin_index(conf, 3).tolist() == [0, 2, 0, 0, 2, 0]
    res = ece(conf, correct, n_bins=3, binning="equal_mass")
    assert [b.count for b in res.bins] == [4, 0, 2]
    # bin 0: mean conf (0.1 + 1.5) / 4 = 0.4, acc 3/4 -> 4/6 * 0.35; bin 2: mean conf 0.85, acc 1 -> 2/6 * 0.15
    assert res.value == pytest.approx(4 / 6 * 0.35 + 2 / 6 * 0.15)
    # more bins than items: empty bins, contributing 0
    res = ece([0.6, 0.9], [1, 1], n_bins=4, binning="equal_mass")
    assert [b.count for b in res.bins] == [1, 1, 0, 0]
    assert res.value == pytest.approx((0.4 + 0.1) / 2)


def test_equal_mass_ece_of_constant_predictions_is_zero_in_any_order():
    # p_male = 0.5 for 20 items, 10 gold male (predicted male: right) and 10 gold female (wrong): the one bin that
    # holds the items has accuracy 0.5 and confidence 0.5 -> ECE = |0.5 - 0.5| = 0, whatever the order
    # (splitting ties by input order gave 0.5 for the sorted order and 0.0 for the alternating one)
    p = np.full(20, 0.5)
    rng = np.random.default_rng(0)
    for gold in (np.array([1] * 10 + [0] * 10), np.array([0] * 10 + [1] * 10), np.tile([1, 0], 10),
                 rng.permutation(np.array([1] * 10 + [0] * 10))):
        res = top_label_ece(p, gold, n_bins=10, binning="equal_mass")
        assert res.value == 0.0
        assert [b.count for b in res.bins] == [20] + [0] * 9
        assert male_class_ece(p, gold, n_bins=10, binning="equal_mass").value == 0.0


def reference_equal_mass_ece(conf, target, n_bins):
    """Equal-mass ECE written independently with plain loops: block sizes as np.array_split, every distinct value
    placed in the block holding the first sorted position of that value."""
    conf, target = list(map(float, conf)), list(map(float, target))
    n = len(conf)
    sizes = [n // n_bins + (1 if b < n % n_bins else 0) for b in range(n_bins)]
    block_of_position = [b for b, size in enumerate(sizes) for _ in range(size)]
    ordered = sorted(conf)
    members = {b: [] for b in range(n_bins)}
    for i, c in enumerate(conf):
        members[block_of_position[ordered.index(c)]].append(i)
    total = 0.0
    for items in members.values():
        if items:
            acc = sum(target[i] for i in items) / len(items)
            avg = sum(conf[i] for i in items) / len(items)
            total += len(items) / n * abs(acc - avg)
    return total


_CONFIDENCES = st.one_of(st.sampled_from([0.0, 0.25, 0.5, 0.6, 0.75, 1.0]),
                         st.floats(min_value=0.0, max_value=1.0, allow_nan=False))


@settings(max_examples=300, deadline=None)
@given(items=st.lists(st.tuples(_CONFIDENCES, st.integers(0, 1)), min_size=1, max_size=40),
       n_bins=st.integers(1, 12), data=st.data())
def test_ece_is_invariant_to_item_order(items, n_bins, data):
    conf = np.array([c for c, _ in items])
    target = np.array([t for _, t in items])
    perm = np.array(data.draw(st.permutations(range(len(items)))))
    for binning in ("equal_mass", "equal_width"):
        a = ece(conf, target, n_bins, binning)
        b = ece(conf[perm], target[perm], n_bins, binning)
        assert a.value == b.value  # bit-identical, not just close
        np.testing.assert_array_equal([list(x.__dict__.values()) for x in a.bins],  # NaN == NaN (empty bins)
                                      [list(x.__dict__.values()) for x in b.bins])
    assert ece(conf, target, n_bins, "equal_mass").value == pytest.approx(
        reference_equal_mass_ece(conf, target, n_bins), abs=1e-12)
    # equal confidences never straddle a bin edge
    index = equal_mass_bin_index(conf, n_bins)
    for value in np.unique(conf):
        assert len(set(index[conf == value])) == 1


@pytest.mark.parametrize("n", [7, 100, 771, 1003])
def test_equal_mass_bins_hold_equal_counts_up_to_one_without_ties(n):
    rng = np.random.default_rng(n)
    conf = rng.uniform(0.5, 1.0, n)  # distinct values: exactly np.array_split of the sorted items
    res = ece(conf, rng.integers(0, 2, n), n_bins=10, binning="equal_mass")
    counts = [b.count for b in res.bins]
    assert counts == [len(c) for c in np.array_split(np.arange(n), 10)]
    filled = [b for b in res.bins if b.count]
    assert all(a.upper < b.lower for a, b in zip(filled, filled[1:]))  # bins ordered by confidence


@pytest.mark.parametrize("n", [7, 100, 771, 1003])
def test_equal_mass_bins_with_ties_are_ordered_and_never_split_a_value(n):
    rng = np.random.default_rng(n)
    conf = np.round(rng.uniform(0.5, 1.0, n), 2)  # rounding creates many ties
    res = ece(conf, rng.integers(0, 2, n), n_bins=10, binning="equal_mass")
    assert sum(b.count for b in res.bins) == n
    filled = [b for b in res.bins if b.count]
    assert all(a.upper < b.lower for a, b in zip(filled, filled[1:]))  # strictly: no value in two bins
    index = equal_mass_bin_index(conf, 10)
    for value in np.unique(conf):
        assert len(set(index[conf == value])) == 1


def test_ece_near_zero_for_perfectly_calibrated_data():
    rng = np.random.default_rng(1)
    conf = rng.uniform(0.5, 1.0, 200_000)
    correct = (rng.uniform(size=conf.size) < conf).astype(int)
    assert ece(conf, correct).value < 0.01
    assert ece(conf, correct, binning="equal_mass").value < 0.01
    # and clearly nonzero for an overconfident model
    assert ece(np.minimum(conf + 0.1, 1.0), correct).value > 0.08


def test_ece_matches_independent_implementation_on_random_data():
    rng = np.random.default_rng(2)
    for n_bins in (1, 5, 10, 15):
        conf = rng.uniform(0, 1, 500)
        conf[:20] = rng.integers(0, n_bins + 1, 20) / n_bins  # values exactly on bin edges, incl. 0 and 1
        target = rng.integers(0, 2, 500)
        assert ece(conf, target, n_bins).value == pytest.approx(reference_ece(conf, target, n_bins), abs=1e-12)


def test_top_label_and_male_class_ece_names():
    p, gold = np.array([0.9, 0.2, 0.6]), np.array([1, 0, 0])
    assert top_label_ece(p, gold).name == "ece_top_label_equal_width"
    assert male_class_ece(p, gold, binning="equal_mass").name == "ece_male_class_equal_mass"
    # top-label: conf 0.9 (c), 0.8 (c), 0.6 (wrong) in distinct bins -> (0.1 + 0.2 + 0.6) / 3
    assert top_label_ece(p, gold).value == pytest.approx(0.3)
    # male-class: p 0.9 (y=1), 0.2 (y=0), 0.6 (y=0) -> (0.1 + 0.2 + 0.6) / 3
    assert male_class_ece(p, gold).value == pytest.approx(0.3)


# ------------------------------------------------------------------------------------------------------------
# MacroCE, ICE, Brier, human alignment
# ------------------------------------------------------------------------------------------------------------


def test_macro_ce_and_ice_hand_values():
    conf = np.array([0.9, 0.6, 0.8, 0.7])
    correct = np.array([1, 1, 1, 0])
    # ICE_pos = mean(1-0.9, 1-0.6, 1-0.8) = (0.1+0.4+0.2)/3 = 0.2333..; ICE_neg = mean(0.7) = 0.7
    # MacroCE = (0.2333.. + 0.7) / 2 = 0.46666..
    assert macro_ce(conf, correct) == pytest.approx((0.7 / 3 + 0.7) / 2)
    # ICE = (0.1 + 0.4 + 0.2 + 0.7) / 4 = 0.35
    assert ice(conf, correct) == pytest.approx(0.35)
    # all correct: MacroCE is ICE_pos alone
    assert macro_ce([0.9, 0.7], [1, 1]) == pytest.approx(0.2)


def test_brier_gold_label_equals_sklearn():
    rng = np.random.default_rng(3)
    p = rng.uniform(0, 1, 1000)
    p[:3] = [0.0, 1.0, 0.5]
    gold = rng.integers(0, 2, 1000)
    p_gold = np.where(gold == 1, p, 1 - p)
    assert brier_gold(p, gold) == pytest.approx(np.mean((1 - p_gold) ** 2))
    assert brier_gold(p, gold) == pytest.approx(brier_score_loss(gold, p))
    # hand: p_gold = 0.8, 0.3 -> ((0.2)^2 + (0.7)^2) / 2 = 0.265
    assert brier_gold([0.8, 0.7], [1, 0]) == pytest.approx(0.265)


def gece_brier(probabilities, true_labels):
    """GECE code/metrics.py compute_brier_score, written out: column 1 of the normalized [p_more, p_less] pairs (the
    female probability: sent_more holds the male pronoun) against y (1 = male)."""
    positive_probs = probabilities[:, 1]
    return np.mean((positive_probs - true_labels) ** 2)


def test_brier_upstream_convention_reproduces_the_gece_formula():
    rng = np.random.default_rng(30)
    p = rng.uniform(0, 1, 500)
    gold = rng.integers(0, 2, 500)
    normalized = np.column_stack([p, 1 - p])  # [Normalized_Score_more, Normalized_Score_less]
    assert brier_upstream_convention(p, gold) == pytest.approx(gece_brier(normalized, gold), abs=1e-15)
    # = the Brier score against the flipped labels = mean p_gold^2
    assert brier_upstream_convention(p, gold) == pytest.approx(brier_score_loss(1 - gold, p))
    assert brier_upstream_convention(p, gold) == pytest.approx(np.mean(np.where(gold == 1, p, 1 - p) ** 2))
    # hand: p_male 0.8 (gold male), 0.3 (gold female): p_female 0.2, 0.7 -> ((0.2 - 1)^2 + (0.7 - 0)^2) / 2 = 0.565,
    # while the Brier score proper is ((1 - 0.8)^2 + (1 - 0.7)^2) / 2 = 0.065
    assert brier_upstream_convention([0.8, 0.3], [1, 0]) == pytest.approx(0.565)
    assert brier_gold([0.8, 0.3], [1, 0]) == pytest.approx(0.065)
    # a better-than-chance model (p_gold > 0.5 on every item) scores above 0.25 upstream, below 0.25 properly
    p_gold = rng.uniform(0.5001, 1.0, 200)
    gold = rng.integers(0, 2, 200)
    p = np.where(gold == 1, p_gold, 1 - p_gold)
    assert brier_upstream_convention(p, gold) > 0.25 > brier_gold(p, gold)


def gece_example():
    p = np.array([0.9, 0.7, 0.6, 0.2, 0.4, 0.0])
    gold = np.array([1, 0, 1, 0, 1, 0])
    # predicted: 1, 1, 1, 0, 0, 0; top-label conf: .9, .7, .6, .8, .6, 1.0; correct: 1, 0, 1, 1, 0, 1
    return p, gold


def test_gender_ece_hand_values():
    p, gold = gece_example()
    # predicted male (items 0-2), 10 bins, one item per bin: (|1-.9| + |0-.7| + |1-.6|) / 3 = 1.2/3 = 0.4
    # predicted female (items 3-5): conf .8 (c), .6 (wrong), 1.0 (c, last bin): (.2 + .6 + 0) / 3 = 0.2666..
    # Gender-ECE = (0.4 + 0.2666..) / 2 = 1/3
    res = gender_ece(p, gold)
    assert res.groups["male"].value == pytest.approx(0.4)
    assert res.groups["female"].value == pytest.approx(0.8 / 3)
    assert res.value == pytest.approx(1 / 3)
    assert res.name == "gender_ece_top_label_equal_width" and res.grouped_by == "predicted_label"
    # pooled top-label ECE for contrast: bin .6 {.6 c, .6 w} -> 2/6*.1; .7 w -> 1/6*.7; .8 c -> 1/6*.2;
    # bin .9-1 {.9 c, 1.0 c} -> 2/6*.05: total 1.2/6 = 0.2
    assert top_label_ece(p, gold).value == pytest.approx(0.2)


def test_class_conditional_ece_hand_values():
    p, gold = gece_example()
    # gold male (items 0, 2, 4): conf .9 c (bin 9), .6 c and .6 w (bin 6: acc .5, conf .6)
    #   -> 1/3 * .1 + 2/3 * .1 = 0.1
    # gold female (items 1, 3, 5): .7 w, .8 c, 1.0 c -> (.7 + .2 + 0) / 3 = 0.3
    # cc-ECE = (0.1 + 0.3) / 2 = 0.2
    res = class_conditional_ece(p, gold)
    assert res.groups["male"].value == pytest.approx(0.1)
    assert res.groups["female"].value == pytest.approx(0.3)
    assert res.value == pytest.approx(0.2)
    assert res.name == "cc_ece_top_label_equal_width" and res.grouped_by == "gold_label"


def test_gender_ece_with_an_empty_group_uses_the_other():
    res = gender_ece([0.9, 0.8], [1, 0])  # both predicted male
    assert res.groups["female"] is None
    assert res.value == pytest.approx((0.1 + 0.8) / 2)


def test_human_alignment_hand_value():
    p, gold = gece_example()
    assert human_alignment(p, gold) == pytest.approx(4 / 6)
    assert human_alignment([0.5, 0.5], [1, 0]) == pytest.approx(0.5)  # tie -> male


# ------------------------------------------------------------------------------------------------------------
# bootstrap
# ------------------------------------------------------------------------------------------------------------


def synthetic(n, seed, overconfidence=0.0):
    rng = np.random.default_rng(seed)
    true_p = expit(rng.normal(0, 2, n))
    gold = (rng.uniform(size=n) < true_p).astype(int)
    p = expit(logit(true_p) * (1 + overconfidence))
    return p, gold


def test_bootstrap_ci_contains_estimate_and_narrows_with_n():
    widths = []
    for n in (200, 5000):
        p, gold = synthetic(n, seed=n)
        ci = bootstrap_ci(lambda a, b: top_label_ece(a, b), p, gold, n_boot=300, seed=0)
        assert ci.low <= ci.estimate <= ci.high
        assert ci.estimate == pytest.approx(top_label_ece(p, gold).value)
        assert ci.n_valid == 300
        widths.append(ci.high - ci.low)
        ci_b = bootstrap_ci(brier_gold, p, gold, n_boot=300, seed=0)
        assert ci_b.low <= ci_b.estimate <= ci_b.high
    assert widths[1] < widths[0] / 2


def test_bootstrap_is_seeded_and_supports_cluster_resampling():
    p, gold = synthetic(300, seed=5)
    a = bootstrap_ci(human_alignment, p, gold, n_boot=100, seed=3)
    b = bootstrap_ci(human_alignment, p, gold, n_boot=100, seed=3)
    assert a == b
    groups = np.repeat(np.arange(150), 2)
    c = bootstrap_ci(human_alignment, p, gold, n_boot=100, seed=3, groups=groups)
    assert c.low <= c.estimate <= c.high


GROUP_PART_NAMES = {"ece_top_label_equal_width_predicted_male", "ece_top_label_equal_width_predicted_female",
                    "ece_top_label_equal_width_gold_male", "ece_top_label_equal_width_gold_female"}


def test_calibration_metrics_names_say_what_is_binned():
    p, gold = synthetic(400, seed=6, overconfidence=0.5)
    rows = calibration_metrics(p, gold, n_boot=100)
    names = {r["name"] for r in rows}
    assert {"ece_top_label_equal_width", "ece_top_label_equal_mass", "ece_male_class_equal_width",
            "ece_male_class_equal_mass", "macro_ce_top_label", "ice_top_label", "brier_gold_label",
            "brier_upstream_convention", "gender_ece_top_label_equal_width", "gender_ece_gap_top_label_equal_width",
            "cc_ece_top_label_equal_width", "human_alignment"} | GROUP_PART_NAMES == names
    for r in rows:
        assert r["ci_low"] <= r["ci_high"]
        if r["name"] not in GROUP_PART_NAMES:
            assert r["n"] == 400
    by_name = {r["name"]: r["value"] for r in rows}
    assert by_name["brier_gold_label"] == pytest.approx(brier_score_loss(gold, p))
    assert by_name["brier_upstream_convention"] == pytest.approx(brier_score_loss(1 - gold, p))
    notes = {r["name"]: r["note"] for r in rows}
    assert "GECE" in notes["brier_upstream_convention"] and notes["brier_gold_label"] == ""


def test_calibration_metrics_output_the_gender_ece_parts():
    p, gold = gece_example()
    rows = {r["name"]: r for r in calibration_metrics(p, gold, n_boot=50)}
    # the hand values of test_gender_ece_hand_values / test_class_conditional_ece_hand_values
    assert rows["ece_top_label_equal_width_predicted_male"]["value"] == pytest.approx(0.4)
    assert rows["ece_top_label_equal_width_predicted_female"]["value"] == pytest.approx(0.8 / 3)
    assert rows["gender_ece_gap_top_label_equal_width"]["value"] == pytest.approx(0.4 - 0.8 / 3)
    assert rows["gender_ece_top_label_equal_width"]["value"] == pytest.approx(1 / 3)
    assert rows["ece_top_label_equal_width_gold_male"]["value"] == pytest.approx(0.1)
    assert rows["ece_top_label_equal_width_gold_female"]["value"] == pytest.approx(0.3)
    assert rows["cc_ece_top_label_equal_width"]["value"] == pytest.approx(0.2)
    assert all(rows[name]["n"] == 3 for name in GROUP_PART_NAMES)
    # an empty group: its part is NaN (and the Gender-ECE is the other group's ECE)
    rows = {r["name"]: r for r in calibration_metrics([0.9, 0.8], [1, 0], n_boot=20)}
    assert np.isnan(rows["ece_top_label_equal_width_predicted_female"]["value"])
    assert rows["ece_top_label_equal_width_predicted_female"]["n"] == 0
    assert rows["ece_top_label_equal_width_predicted_male"]["value"] == pytest.approx((0.1 + 0.8) / 2)
    assert np.isnan(rows["gender_ece_gap_top_label_equal_width"]["value"])


# ------------------------------------------------------------------------------------------------------------
# post-hoc calibration
# ------------------------------------------------------------------------------------------------------------


def direct_logreg():
    return LogisticRegression(C=cal.LOGREG_C, tol=cal.LOGREG_TOL, max_iter=cal.LOGREG_MAX_ITER)


def test_split_771_is_385_386_and_seeded():
    val, test = split_indices(771, seed=0)
    assert (val.size, test.size) == (385, 386)
    assert np.intersect1d(val, test).size == 0 and np.union1d(val, test).tolist() == list(range(771))
    val2, _ = split_indices(771, seed=0)
    val3, _ = split_indices(771, seed=1)
    assert np.array_equal(val, val2) and not np.array_equal(val, val3)
    assert split_indices(10, 3, seed=0)[0].size == 3


def test_beta_calibration_equals_direct_logistic_regression():
    rng = np.random.default_rng(7)
    p = rng.uniform(0.001, 0.999, 2000)
    p[:2] = [0.0, 1.0]  # clipped to [1e-12, 1 - 1e-12]
    a0, b0, c0 = 0.6, 1.5, 0.3
    pc = np.clip(p, 1e-12, 1 - 1e-12)
    y = (rng.uniform(size=p.size) < expit(a0 * np.log(pc) - b0 * np.log(1 - pc) + c0)).astype(int)
    x = np.column_stack([np.log(pc), -np.log(1 - pc)])
    direct = direct_logreg().fit(x, y)
    assert np.all(direct.coef_ > 0)
    beta = BetaCalibration().fit(p, y)
    assert beta.dropped_ == ()
    assert (beta.a_, beta.b_) == pytest.approx(tuple(direct.coef_[0]), abs=1e-8)
    grid = np.linspace(0, 1, 101)
    gc = np.clip(grid, 1e-12, 1 - 1e-12)
    expected = direct.predict_proba(np.column_stack([np.log(gc), -np.log(1 - gc)]))[:, 1]
    assert np.max(np.abs(beta.predict(grid) - expected)) < 1e-8
    assert beta.a_ == pytest.approx(a0, abs=0.25) and beta.b_ == pytest.approx(b0, abs=0.25)


def test_beta_calibration_drops_a_negative_coefficient():
    rng = np.random.default_rng(8)
    p = rng.uniform(0.01, 0.99, 3000)
    # true a = -1 < 0: the abm constraint drops the ln p feature and refits on -ln(1 - p) alone
    y = (rng.uniform(size=p.size) < expit(-1.0 * np.log(p) - 2.0 * np.log(1 - p) - 1.0)).astype(int)
    beta = BetaCalibration().fit(p, y)
    assert beta.dropped_ == ("ln_p",) and beta.a_ == 0.0 and beta.b_ > 0
    direct = direct_logreg().fit(-np.log(1 - p).reshape(-1, 1), y)
    grid = np.linspace(0.01, 0.99, 50)
    expected = direct.predict_proba(-np.log(1 - grid).reshape(-1, 1))[:, 1]
    assert np.max(np.abs(beta.predict(grid) - expected)) < 1e-8
    assert np.all(np.diff(beta.predict(grid)) >= 0)


def test_beta_calibration_anti_correlated_falls_back_to_base_rate():
    rng = np.random.default_rng(9)
    p = rng.uniform(0.01, 0.99, 2000)
    y = (rng.uniform(size=p.size) < 1 - p).astype(int)  # higher p -> less likely male: a, b both negative
    beta = BetaCalibration().fit(p, y)
    assert beta.dropped_ == ("ln_p", "neg_ln_1mp")
    assert beta.predict([0.1, 0.9]) == pytest.approx([y.mean(), y.mean()])


def test_temperature_scaling_recovers_known_temperature():
    rng = np.random.default_rng(10)
    z = rng.normal(0, 3, 20_000)
    p = expit(z)
    for t0 in (0.5, 2.0):
        y = (rng.uniform(size=z.size) < expit(z / t0)).astype(int)
        ts = TemperatureScaling().fit(p, y)
        assert ts.temperature_ == pytest.approx(t0, rel=0.10)
        assert ts.predict([0.5])[0] == pytest.approx(0.5)


def test_platt_scaling_equals_direct_logistic_regression_on_logit():
    rng = np.random.default_rng(11)
    p = rng.uniform(0.01, 0.99, 1000)
    y = (rng.uniform(size=p.size) < expit(0.5 * logit(p) + 0.2)).astype(int)
    platt = PlattScaling().fit(p, y)
    direct = direct_logreg().fit(logit(p).reshape(-1, 1), y)
    assert np.max(np.abs(platt.predict(p) - direct.predict_proba(logit(p).reshape(-1, 1))[:, 1])) < 1e-8
    assert platt.slope_ == pytest.approx(0.5, abs=0.15)


def test_isotonic_output_is_monotone_and_clipped():
    rng = np.random.default_rng(12)
    p = rng.uniform(0.1, 0.9, 500)
    y = (rng.uniform(size=p.size) < p ** 2).astype(int)
    iso = IsotonicCalibration().fit(p, y)
    grid = np.linspace(0, 1, 201)
    out = iso.predict(grid)
    assert np.all(np.diff(out) >= 0) and out.min() >= 0 and out.max() <= 1
    assert out[0] == iso.predict([p.min()])[0] and out[-1] == iso.predict([p.max()])[0]  # clipped outside range


def test_calibrators_need_both_labels():
    with pytest.raises(ValueError):
        PlattScaling().fit([0.2, 0.7], [1, 1])


def test_evaluate_calibrators_improves_overconfident_model():
    p, gold = synthetic(771, seed=13, overconfidence=1.5)
    rows = evaluate_calibrators(p, gold, seed=0)
    assert [r["calibrator"] for r in rows] == ["beta_abm", "isotonic", "platt", "temperature"]
    for r in rows:
        assert (r["n_val"], r["n_test"]) == (385, 386)
        assert 0 <= r["accuracy_after"] <= 1
    # the paper's convention first among the ECE columns, the top-label one labelled
    columns = list(rows[0])
    assert columns.index("ece_male_class_equal_width_before") < columns.index("ece_top_label_equal_width_before")
    _, test = split_indices(771, seed=0)
    assert rows[0]["ece_male_class_equal_width_before"] == pytest.approx(reference_ece(p[test], gold[test], 10))
    assert rows[0]["ece_top_label_equal_width_before"] == pytest.approx(top_label_ece(p[test], gold[test]).value)
    assert rows[0]["accuracy_before"] == pytest.approx(human_alignment(p[test], gold[test]))
    assert rows[0]["brier_gold_label_before"] == pytest.approx(brier_score_loss(gold[test], p[test]))
    for r in rows:
        if r["calibrator"] != "isotonic":
            assert r["ece_male_class_equal_width_after"] < r["ece_male_class_equal_width_before"]
            assert r["ece_top_label_equal_width_after"] < r["ece_top_label_equal_width_before"]
            assert r["brier_gold_label_after"] < r["brier_gold_label_before"]


# ------------------------------------------------------------------------------------------------------------
# sample-size ablation
# ------------------------------------------------------------------------------------------------------------


def test_sample_size_ablation():
    p, gold = synthetic(300, seed=14, overconfidence=0.5)
    conf, correct = top_label_confidence(p, gold)
    rows = sample_size_ablation(conf, correct, sizes=(50, 100, 300, 500), repeats=40, seed=0)
    assert [r["size"] for r in rows] == [50, 100, 300]  # 500 > N skipped
    assert rows[-1]["ece_std"] == pytest.approx(0.0, abs=1e-12)  # every subset of size N is the full set
    assert rows[-1]["ece_mean"] == pytest.approx(ece(conf, correct).value)
    assert rows[0]["ece_std"] > rows[1]["ece_std"] > 0
    assert rows[0]["confidence"] == "top_label"
    assert rows == sample_size_ablation(conf, correct, sizes=(50, 100, 300, 500), repeats=40, seed=0)
