"""Bootstrap and jackknife of the calibration metrics, all resamples at once, and the BCa interval.

A resample of N items is a vector of multiplicities w (w_i = how often item i was drawn; sum w = N'), so every
metric of `calibration_metrics` is a function of weighted sums over items:

* ECE (Naeini et al. 2015) = sum_b |sum_{i in b} w_i (t_i - c_i)| / sum_i w_i, with c the confidence and t the
  target (correctness for top-label, the gold label for male-class). Equal-width bins depend on c_i alone; equal-mass
  bins on the resample: item i's bin is the block of position #{drawn j : c_j < c_i} among N' positions cut into B
  blocks by ``np.array_split`` (the rule of `stats.equal_mass_bin_index`, ties kept together).
* ICE, Brier, human alignment: weighted means of per-item values; MacroCE (Si et al. 2022): the mean of the weighted
  means over correct and over incorrect items (those present).
* Gender-ECE / cc-ECE parts: the ECE over the items whose predicted / gold label is the group's, NaN when the
  resample has none; Gender-ECE and cc-ECE the mean of the parts present; the gap |part_male - part_female|.

Replicates computed this way equal the per-resample loop over the metric functions (`stats.bootstrap_ci`) up to
floating-point summation order (tests/metrics/test_calibration_resampled.py), about 100x faster.

The interval. ECE is biased upward in small samples (binning noise only adds error: a perfectly calibrated model
has a positive ECE on any finite sample), and a resample repeats items, so replicates are biased upward once more:
the percentile interval [q_(alpha/2), q_(1-alpha/2)] of the replicates can lie wholly above the estimate (and never
holds a true ECE of 0). The bootstrap principle (theta* - theta_hat behaves as theta_hat - theta; Efron & Tibshirani
1993, section 13.4; Davison & Hinkley 1997, eq. 5.6, the "basic" interval) gives the interval for the true value
[2 theta_hat - q_(1-alpha/2), 2 theta_hat - q_(alpha/2)], clipped to the metric's range [0, 1], around the
bias-corrected estimate 2 theta_hat - mean(theta*) (= theta_hat - bootstrap bias). The BCa interval was tried and
rejected: ECE is not smooth, its jackknife acceleration is erratic, and on simulated calibrated data it mended 1 of
17 percentile intervals that missed the estimate (docs/decisions.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

#: the two binnings of the ECE family (named so in every metric)
EQUAL_WIDTH, EQUAL_MASS = "equal_width", "equal_mass"


def equal_width_index(conf: np.ndarray, n_bins: int) -> np.ndarray:
    """Bin b of each confidence for bins [b/B, (b+1)/B), the last bin closed at 1 (0 -> bin 0, 1 -> bin B-1)."""
    edges = np.arange(n_bins + 1) / n_bins
    return np.clip(np.searchsorted(edges, conf, side="right") - 1, 0, n_bins - 1)


def multiplicities(rng: np.random.Generator, n: int, n_boot: int, members: list[np.ndarray] | None) -> np.ndarray:
    """(n_boot, n) multiplicities of the bootstrap resamples, drawn exactly as `stats._resample_indices` draws its
    indices one resample after another (the same seed gives the same resamples)."""
    weights = np.zeros((n_boot, n))
    for b in range(n_boot):
        if members is None:
            idx = rng.integers(0, n, size=n)
        else:
            chosen = rng.integers(0, len(members), size=len(members))
            idx = np.concatenate([members[g] for g in chosen])
        weights[b] = np.bincount(idx, minlength=n)
    return weights


def _bins_equal_mass(conf: np.ndarray, weights: np.ndarray, n_bins: int) -> np.ndarray:
    """Equal-mass bin of each item in each resample (see the module docstring); items not drawn get any bin (their
    weight is zero)."""
    order = np.argsort(conf, kind="stable")
    c, w = conf[order], weights[:, order]
    below = np.cumsum(w, axis=1) - w  # drawn items before position i in the sorted order
    first = np.searchsorted(c, c, side="left")  # the first item of each run of equal confidences
    below = below[:, first]  # items strictly below c_i
    total = w.sum(axis=1, keepdims=True)
    size, extra = np.floor_divide(total, n_bins), np.mod(total, n_bins)
    big = extra * (size + 1)  # positions held by the first `extra` (larger) blocks
    with np.errstate(divide="ignore", invalid="ignore"):
        block = np.where(below < big, below // (size + 1), extra + (below - big) // np.maximum(size, 1))
    bins = np.empty_like(block)
    bins[:, order] = block
    return np.clip(bins, 0, n_bins - 1).astype(np.int64)


def weighted_ece(conf: np.ndarray, target: np.ndarray, weights: np.ndarray, n_bins: int, binning: str,
                 mask: np.ndarray | None = None) -> np.ndarray:
    """ECE of each resample (row of `weights`), over the items of `mask` only when given; NaN where a resample has
    no such item."""
    if mask is not None:
        conf, target, weights = conf[mask], target[mask], weights[:, mask]
    rows = weights.shape[0]
    if conf.size == 0:
        return np.full(rows, np.nan)
    if binning == EQUAL_WIDTH:
        bins = np.broadcast_to(equal_width_index(conf, n_bins), weights.shape)
    else:
        bins = _bins_equal_mass(conf, weights, n_bins)
    flat = (np.arange(rows)[:, None] * n_bins + bins).ravel()
    sums = np.bincount(flat, weights=(weights * (target - conf)).ravel(), minlength=rows * n_bins)
    total = weights.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, np.abs(sums.reshape(rows, n_bins)).sum(axis=1) / total, np.nan)


def _mean(values: np.ndarray, weights: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    if mask is not None:
        values, weights = values[mask], weights[:, mask]
    total = weights.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, weights @ values / total, np.nan)


def _nanmean_rows(*columns: np.ndarray) -> np.ndarray:
    stacked = np.column_stack(columns)
    present = np.isfinite(stacked)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(present.any(axis=1), np.where(present, stacked, 0).sum(axis=1) / present.sum(axis=1), np.nan)


def metric_replicates(p: np.ndarray, gold: np.ndarray, weights: np.ndarray, n_bins: int,
                      group_part: Callable[[str, str], str]) -> dict[str, np.ndarray]:
    """Every metric of `stats.calibration_metrics` on each resample (row of `weights`), by the metric's name.

    Parameters
    ----------
    p, gold : p_male and the gold label (1 = male) of the N items.
    weights : (R, N) multiplicities (`multiplicities`).
    n_bins : bins of every ECE.
    group_part : `stats.group_part_name` (the names of the Gender-ECE / cc-ECE parts).

    Returns
    -------
    dict metric name -> (R,) values.
    """
    pred = (p >= 0.5).astype(int)
    conf = np.where(pred == 1, p, 1.0 - p)
    correct = (pred == gold).astype(float)
    label = gold.astype(float)
    out = {
        "ece_male_class_equal_width": weighted_ece(p, label, weights, n_bins, EQUAL_WIDTH),
        "ece_male_class_equal_mass": weighted_ece(p, label, weights, n_bins, EQUAL_MASS),
        "ece_top_label_equal_width": weighted_ece(conf, correct, weights, n_bins, EQUAL_WIDTH),
        "ece_top_label_equal_mass": weighted_ece(conf, correct, weights, n_bins, EQUAL_MASS),
        "macro_ce_top_label": _nanmean_rows(_mean(1.0 - conf, weights, correct == 1),
                                            _mean(conf, weights, correct == 0)),
        "ice_top_label": _mean(np.abs(correct - conf), weights),
        "brier_gold_label": _mean((1.0 - np.where(gold == 1, p, 1.0 - p)) ** 2, weights),
        "brier_upstream_convention": _mean((1.0 - p - gold) ** 2, weights),
        "human_alignment": _mean((pred == gold).astype(float), weights),
    }
    for grouped_by, group_label in (("predicted", pred), ("gold", gold)):
        for gender, value in (("male", 1), ("female", 0)):
            out[group_part(grouped_by, gender)] = weighted_ece(conf, correct, weights, n_bins, EQUAL_WIDTH,
                                                               group_label == value)
    male, female = out[group_part("predicted", "male")], out[group_part("predicted", "female")]
    out["gender_ece_top_label_equal_width"] = _nanmean_rows(male, female)
    out["gender_ece_gap_top_label_equal_width"] = np.abs(male - female)
    out["cc_ece_top_label_equal_width"] = _nanmean_rows(out[group_part("gold", "male")],
                                                        out[group_part("gold", "female")])
    return out


@dataclass(frozen=True)
class Interval:
    """A bootstrap interval for the true value: [low, high] at level 1 - alpha (the basic interval, clipped to the
    metric's range), the bias-corrected estimate, the bootstrap estimate of bias (mean replicate - estimate), the
    percentile interval of the same replicates, and the number of finite replicates used."""

    low: float
    high: float
    corrected: float
    bias: float
    percentile_low: float
    percentile_high: float
    n_valid: int


def corrected_interval(estimate: float, replicates: np.ndarray, alpha: float = 0.05,
                       bounds: tuple[float, float] = (0.0, 1.0)) -> Interval:
    """The bias-corrected (basic) bootstrap interval of `estimate` (see the module docstring).

    Parameters
    ----------
    estimate : the statistic on all items (theta_hat).
    replicates : its value on each bootstrap resample (non-finite ones are left out).
    alpha : 1 - the level.
    bounds : the metric's range; the interval and the corrected estimate are clipped to it.

    Returns
    -------
    Interval: low = max(lo, 2 theta_hat - q_(1-alpha/2)), high = min(hi, 2 theta_hat - q_(alpha/2)),
    corrected = clip(2 theta_hat - mean(theta*)), bias = mean(theta*) - theta_hat, and the percentile interval
    [q_(alpha/2), q_(1-alpha/2)]; all NaN when no replicate is finite.
    """
    finite = replicates[np.isfinite(replicates)]
    if finite.size == 0 or not np.isfinite(estimate):
        return Interval(np.nan, np.nan, np.nan, np.nan, np.nan, np.nan, 0)
    q_low, q_high = np.percentile(finite, [100 * alpha / 2, 100 * (1 - alpha / 2)])
    lo, hi = bounds
    mean = float(finite.mean())
    return Interval(float(np.clip(2 * estimate - q_high, lo, hi)), float(np.clip(2 * estimate - q_low, lo, hi)),
                    float(np.clip(2 * estimate - mean, lo, hi)), mean - estimate, float(q_low), float(q_high),
                    int(finite.size))
