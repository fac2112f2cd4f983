"""The calibration bootstrap with all resamples at once (metrics/calibration/resampled.py, issue 36 item 6): each
replicate equals the metric functions run on the same resample one at a time; the bias-corrected interval against
its closed form, and on a case where the plain percentile interval misses the estimate."""

from __future__ import annotations

import numpy as np
import pytest

from biaslab.metrics.calibration import stats
from biaslab.metrics.calibration.resampled import (corrected_interval, metric_replicates, multiplicities,
                                                   weighted_ece)


def _loop_metrics(pp: np.ndarray, gg: np.ndarray, n_bins: int) -> dict[str, float]:
    """The metrics of one resample, from the public functions of stats (the obviously correct way)."""
    def part(grouped_by, gender):
        label = stats.predicted_label(pp) if grouped_by == "predicted" else gg
        mask = label == (1 if gender == "male" else 0)
        if not mask.any():
            return np.nan
        conf, correct = stats.top_label_confidence(pp, gg)
        return stats.ece(conf[mask], correct[mask], n_bins, stats.EQUAL_WIDTH).value

    conf, correct = stats.top_label_confidence(pp, gg)
    out = {
        "ece_male_class_equal_width": stats.male_class_ece(pp, gg, n_bins).value,
        "ece_male_class_equal_mass": stats.male_class_ece(pp, gg, n_bins, stats.EQUAL_MASS).value,
        "ece_top_label_equal_width": stats.top_label_ece(pp, gg, n_bins).value,
        "ece_top_label_equal_mass": stats.top_label_ece(pp, gg, n_bins, stats.EQUAL_MASS).value,
        "macro_ce_top_label": stats.macro_ce(conf, correct),
        "ice_top_label": stats.ice(conf, correct),
        "brier_gold_label": stats.brier_gold(pp, gg),
        "brier_upstream_convention": stats.brier_upstream_convention(pp, gg),
        "human_alignment": stats.human_alignment(pp, gg),
        "gender_ece_top_label_equal_width": stats.gender_ece(pp, gg, n_bins).value,
        "cc_ece_top_label_equal_width": stats.class_conditional_ece(pp, gg, n_bins).value,
    }
    for by in ("predicted", "gold"):
        for gender in ("male", "female"):
            out[stats.group_part_name(by, gender)] = part(by, gender)
    out["gender_ece_gap_top_label_equal_width"] = abs(out[stats.group_part_name("predicted", "male")]
                                                      - out[stats.group_part_name("predicted", "female")])
    return out


def _data(seed: int, n: int):
    rng = np.random.default_rng(seed)
    p = np.round(rng.uniform(0, 1, n), 2)  # rounded: ties, and values exactly 0.5
    p[:3] = [0.5, 0.5, 1.0]
    gold = (rng.uniform(0, 1, n) < p).astype(int)
    return p, gold


@pytest.mark.parametrize("seed, n, n_bins, grouped", [(0, 30, 10, False), (1, 17, 4, False), (2, 40, 10, True),
                                                      (3, 8, 15, False)])
def test_every_replicate_equals_the_metric_functions_on_the_same_resample(seed, n, n_bins, grouped):
    p, gold = _data(seed, n)
    groups = np.arange(n) // 2 if grouped else None
    members = stats._group_members(groups)
    n_boot = 60
    weights = multiplicities(np.random.default_rng(seed), n, n_boot, members)
    fast = metric_replicates(p, gold, weights, n_bins, stats.group_part_name)
    rng = np.random.default_rng(seed)
    for b in range(n_boot):
        idx = stats._resample_indices(rng, n, members)
        assert np.array_equal(np.bincount(idx, minlength=n), weights[b])  # the very same resample
        slow = _loop_metrics(p[idx], gold[idx], n_bins)
        assert set(slow) == set(fast)
        for name, value in slow.items():
            assert fast[name][b] == pytest.approx(value, rel=1e-12, abs=1e-12, nan_ok=True), (name, b)


def test_weighted_ece_with_weights_equals_repeating_items():
    p, gold = _data(5, 25)
    weights = np.array([np.arange(25) % 3, np.ones(25), np.r_[np.zeros(24), 25]])
    for row in weights:
        repeated = np.repeat(np.arange(25), row.astype(int))
        for binning in (stats.EQUAL_WIDTH, stats.EQUAL_MASS):
            got = weighted_ece(p, gold.astype(float), row[None, :], 10, binning)[0]
            assert got == pytest.approx(stats.ece(p[repeated], gold[repeated], 10, binning).value, abs=1e-12)


def test_corrected_interval_closed_form():
    replicates = np.array([0.30, 0.20, 0.25, 0.40, 0.35, np.nan])
    ci = corrected_interval(0.2, replicates, alpha=0.5)
    finite = replicates[:5]
    q_low, q_high = np.percentile(finite, [25, 75])
    assert (ci.percentile_low, ci.percentile_high) == (q_low, q_high)
    assert ci.low == pytest.approx(max(0.0, 0.4 - q_high)) and ci.high == pytest.approx(0.4 - q_low)
    assert ci.bias == pytest.approx(finite.mean() - 0.2) and ci.corrected == pytest.approx(0.4 - finite.mean())
    assert ci.n_valid == 5
    assert np.isnan(corrected_interval(0.2, np.array([np.nan])).low)


def test_a_percentile_interval_that_misses_the_estimate_is_corrected():
    """A calibrated model (gold ~ Bernoulli(p), so the population ECE is 0) on 40 items: ECE's replicates lie above
    the estimate, the percentile interval misses it and can never hold the true 0; the bias-corrected interval holds
    the bias-corrected estimate, and holds the true 0 more often."""
    missed, corrected_holds, pct_covers, basic_covers = 0, 0, 0, 0
    for seed in range(40):
        rng = np.random.default_rng(seed)
        p = rng.uniform(0, 1, 40)
        gold = (rng.uniform(0, 1, 40) < p).astype(int)
        row = {r["name"]: r for r in stats.calibration_metrics(p, gold, n_boot=400, seed=seed)}
        for name in ("ece_male_class_equal_width", "ece_top_label_equal_width", "ece_top_label_equal_mass"):
            r = row[name]
            missed += not (r["percentile_low"] <= r["value"] <= r["percentile_high"])
            corrected_holds += r["ci_low"] <= r["value_bias_corrected"] <= r["ci_high"]
            pct_covers += r["percentile_low"] <= 0.0
            basic_covers += r["ci_low"] <= 0.0
            assert r["bootstrap_bias"] == pytest.approx(r["value"] - r["value_bias_corrected"], abs=1e-12) or \
                r["value_bias_corrected"] == 0.0
    assert missed >= 1  # the defect the issue saw happens on data like this
    assert corrected_holds == 120
    assert pct_covers == 0 and basic_covers > 10
