"""Calibration of binary pronoun predictions: the ECE family, Gender-ECE, Brier, post-hoc calibrators.

Pure statistics over arrays (numpy, scipy, scikit-learn); no warehouse code. See docs/design.md section 7.

Inputs, for N binary items:

- ``p_male``: the model's normalized probability of the male pronoun, in [0, 1];
- ``gold``: the human bias label y of GECE / GenderLex, 1 = male, 0 = female;
- optionally ``groups``: an item-group id per item (for a cluster bootstrap).

Conventions (decided here):

- Predicted label = 1 (male) if ``p_male >= 0.5`` else 0 (female). A tie at exactly 0.5 goes to MALE.
- Two confidences can be binned, and every metric name / result says which:

  * ``"top_label"``: confidence max(p, 1 - p) of the predicted label, scored against correctness (pred == gold);
  * ``"male_class"``: the male-class probability p_male, scored against the gold label (class-1 calibration).

- Equal-width bins are [0, 1/B), [1/B, 2/B), ..., [(B-1)/B, 1]: every bin is closed on the left, the last bin is
  also closed on the right, so a confidence of exactly 0 falls in the first bin and exactly 1 in the last. Edges
  are the correctly rounded quotients k / B (so a confidence equal to the float k / B lands in bin k).
- Equal-mass (adaptive) bins: the N confidences sorted ascending are cut into B consecutive blocks of sorted
  positions whose sizes differ by at most one (``np.array_split``: the first N mod B blocks hold one more), and a
  confidence VALUE belongs to the block of its lowest sorted position. So equal confidences never straddle a bin
  edge: a run of ties that would cross a block edge goes wholly into the block where the run starts (the bins are
  right-closed quantile bins on the distinct values). With distinct confidences the bins hold N / B items (+-1);
  with ties a bin can hold more, and a bin emptied by a run of ties is empty (contributes 0). The bins, and hence
  every ECE, depend only on the multiset of (confidence, target) pairs, never on the input order (e.g. 20 items
  of confidence 0.5, 10 right and 10 wrong, give ECE |0.5 - 0.5| = 0 in any order).
- Every ECE accumulates its per-bin sums in one canonical item order (sorted by confidence, then target), so a
  permutation of the items gives a bit-identical value.
- Empty bins contribute 0 to an ECE. Averages over groups (Gender-ECE, cc-ECE, MacroCE) are taken over the
  NON-EMPTY groups only (e.g. a model that predicts male for every item has Gender-ECE = ECE of its male group);
  each result keeps the per-group values and counts so that this is visible.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from collections.abc import Callable, Sequence

import numpy as np
from scipy.optimize import minimize_scalar
from scipy.special import expit, logit
from sklearn.isotonic import IsotonicRegression
from sklearn.linear_model import LogisticRegression

from ...errors import DataError, UsageError
from ..arrays import as_binary, as_probabilities
from .resampled import (EQUAL_MASS, EQUAL_WIDTH, corrected_interval, equal_width_index, metric_replicates,
                        multiplicities, weighted_ece)

TOP_LABEL = "top_label"
MALE_CLASS = "male_class"
#: WinoQueer's class-1 probability: p of the stereotyped (queer-term) sentence of a pair, against gold = stereotype.
STEREOTYPE_CLASS = "stereotype_class"
CONFIDENCES = (TOP_LABEL, MALE_CLASS, STEREOTYPE_CLASS)
BINNINGS = (EQUAL_WIDTH, EQUAL_MASS)
#: The paper's convention (Sabir et al., GECE `ece_score` and `ReliabilityDiagram`): the male-class probability
#: binned against the gold label in equal-width bins. Every table that bins a confidence shows it first; the
#: top-label convention (Guo et al. 2017) follows, labelled.
PAPER_CONFIDENCE = MALE_CLASS
PAPER_BINNING = EQUAL_WIDTH
#: Confidences in the order tables show them: the paper's first.
CONFIDENCE_ORDER = (MALE_CLASS, TOP_LABEL)

#: Probabilities are clipped to [PROB_EPS, 1 - PROB_EPS] before ln p, ln(1 - p) or logit(p) (post-hoc calibrators).
PROB_EPS = 1e-12
#: scikit-learn's LogisticRegression is L2-penalized; C = 1e12 makes the penalty negligible, i.e. the fits below
#: are effectively unregularized maximum likelihood. The tolerance is tightened so coefficients are accurate.
LOGREG_C = 1e12
LOGREG_TOL = 1e-8
LOGREG_MAX_ITER = 10_000


# ----------------------------------------------------------------------------------------------------------------
# confidences
# ----------------------------------------------------------------------------------------------------------------


def _pair(p, y, p_name: str = "p", y_name: str = "y") -> tuple[np.ndarray, np.ndarray]:
    """Checked (probability, binary) arrays of equal length."""
    p, y = as_probabilities(p, p_name), as_binary(y, y_name)
    if p.shape != y.shape:
        raise DataError(f"{p_name} and {y_name} differ in length ({p.size} vs {y.size})")
    return p, y


def predicted_label(p_male) -> np.ndarray:
    """Predicted label: 1 (male) if p_male >= 0.5 else 0 (female); a tie at exactly 0.5 goes to male."""
    return (as_probabilities(p_male, "p_male") >= 0.5).astype(int)


def top_label_confidence(p_male, gold) -> tuple[np.ndarray, np.ndarray]:
    """Top-label confidence and correctness: conf_i = max(p_i, 1 - p_i), correct_i = [pred_i == gold_i].

    Guo et al. 2017 ("On Calibration of Modern Neural Networks") top-label calibration for the binary case.
    """
    p, gold = _pair(p_male, gold, "p_male", "gold")
    pred = predicted_label(p)
    conf = np.where(pred == 1, p, 1.0 - p)
    return conf, (pred == gold).astype(int)


def male_class_confidence(p_male, gold) -> tuple[np.ndarray, np.ndarray]:
    """Male-class (class-1) confidence: conf_i = p_male_i, scored against the label [gold_i == 1]."""
    return _pair(p_male, gold, "p_male", "gold")


def confidence_and_target(p_male, gold, confidence: str = TOP_LABEL) -> tuple[np.ndarray, np.ndarray]:
    """(conf, target) for ``confidence`` in {"top_label", "male_class", "stereotype_class"} (see the two functions
    above; "stereotype_class" is the class-1 probability of a WinoQueer pair, handled as "male_class")."""
    if confidence == TOP_LABEL:
        return top_label_confidence(p_male, gold)
    if confidence in (MALE_CLASS, STEREOTYPE_CLASS):
        return male_class_confidence(p_male, gold)
    raise UsageError(f"confidence must be one of {CONFIDENCES}, got {confidence!r}")


# ----------------------------------------------------------------------------------------------------------------
# ECE and reliability bins
# ----------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CalibrationBin:
    """One reliability-diagram bin. Equal width: the bin edges; equal mass: min / max confidence in the bin.

    ``mean_conf`` and ``accuracy`` (mean target: correctness for top-label, share of gold male for male-class) are
    NaN for an empty bin (as are ``lower`` / ``upper`` of an empty equal-mass bin).
    """

    lower: float
    upper: float
    count: int
    mean_conf: float
    accuracy: float


@dataclass(frozen=True)
class ECEResult:
    """An ECE value with its binning, the confidence it bins, and the per-bin table for reliability diagrams."""

    value: float
    confidence: str
    binning: str
    n_bins: int
    n: int
    bins: tuple[CalibrationBin, ...]

    @property
    def name(self) -> str:
        return f"ece_{self.confidence}_{self.binning}"

    def bin_rows(self) -> list[dict]:
        """Per-bin rows (lower, upper, count, mean_conf, accuracy) for a reliability diagram."""
        return [asdict(b) for b in self.bins]

    def __float__(self) -> float:
        return float(self.value)


def equal_width_bin_index(conf, n_bins: int = 10) -> np.ndarray:
    """Bin b of each confidence for bins [b/B, (b+1)/B), the last bin closed at 1 (0 -> bin 0, 1 -> bin B-1)."""
    return equal_width_index(as_probabilities(conf, "conf"), n_bins)


def equal_mass_bin_index(conf, n_bins: int = 10) -> np.ndarray:
    """Bin of each item for equal-mass (adaptive) bins, ties kept together.

    Rule: sort the N confidences ascending and cut the sorted positions 0..N-1 into B consecutive blocks with
    ``np.array_split`` (sizes differ by at most one, the first N mod B blocks one larger). An item's bin is the block
    that holds the LOWEST sorted position of its confidence value, i.e. block(#{j : conf_j < conf_i}). Equal
    confidences therefore always share a bin (a run of ties crossing a block edge goes wholly into the block where
    the run starts, possibly leaving later blocks empty), and the bins depend only on the values, never on the
    order of the items. With distinct confidences this is exactly array_split of the sorted items.
    """
    conf = as_probabilities(conf, "conf")
    if n_bins < 1:
        raise UsageError("n_bins must be >= 1")
    n = conf.size
    sizes = np.full(n_bins, n // n_bins)
    sizes[: n % n_bins] += 1
    block_of_position = np.repeat(np.arange(n_bins), sizes)
    lowest_position = np.searchsorted(np.sort(conf), conf, side="left")  # items strictly below conf_i
    return block_of_position[lowest_position]


def _bin_index(conf: np.ndarray, n_bins: int, binning: str) -> np.ndarray:
    if n_bins < 1:
        raise UsageError("n_bins must be >= 1")
    if binning == EQUAL_WIDTH:
        return equal_width_bin_index(conf, n_bins)
    if binning == EQUAL_MASS:
        return equal_mass_bin_index(conf, n_bins)
    raise UsageError(f"binning must be one of {BINNINGS}, got {binning!r}")


def _bin_edges(conf: np.ndarray, index: np.ndarray, n_bins: int, binning: str) -> tuple[np.ndarray, np.ndarray]:
    """(lower, upper) per bin: the fixed edges for equal width, min / max confidence for equal mass."""
    if binning == EQUAL_WIDTH:
        edges = np.arange(n_bins + 1) / n_bins
        return edges[:-1], edges[1:]
    lower = np.full(n_bins, np.nan)
    upper = np.full(n_bins, np.nan)
    np.fmin.at(lower, index, conf)
    np.fmax.at(upper, index, conf)
    return lower, upper


def ece(conf, correct_or_label, n_bins: int = 10, binning: str = EQUAL_WIDTH,
        confidence: str = TOP_LABEL) -> ECEResult:
    """Expected calibration error ECE = sum_b |B_b| / N * |acc_b - conf_b| (Naeini et al. 2015, AAAI "Obtaining
    Well Calibrated Probabilities Using Bayesian Binning"; Guo et al. 2017).

    acc_b is the mean of ``correct_or_label`` in bin b (correctness for top-label confidence, the gold label for
    male-class probability), conf_b the mean confidence. ``binning`` is "equal_width" or "equal_mass" (see the
    module docstring for the bin rules); empty bins contribute 0. ``confidence`` only labels the result: pass
    "male_class" when binning p_male against gold. Raises ValueError for N = 0.
    """
    if confidence not in CONFIDENCES:
        raise UsageError(f"confidence must be one of {CONFIDENCES}, got {confidence!r}")
    conf, target = _pair(conf, correct_or_label, "conf", "correct_or_label")
    if conf.size == 0:
        raise DataError("ECE of zero items is undefined")
    order = np.lexsort((target, conf))  # canonical order: sums (and the value) do not depend on the input order
    conf, target = conf[order], target[order]
    index = _bin_index(conf, n_bins, binning)
    count = np.bincount(index, minlength=n_bins)
    sum_conf = np.bincount(index, weights=conf, minlength=n_bins)
    sum_target = np.bincount(index, weights=target.astype(float), minlength=n_bins)
    value = float(np.abs(sum_target - sum_conf).sum() / conf.size)  # = sum_b |B_b|/N * |acc_b - conf_b|
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_conf, accuracy = sum_conf / count, sum_target / count
    lower, upper = _bin_edges(conf, index, n_bins, binning)
    bins = tuple(CalibrationBin(float(lower[b]), float(upper[b]), int(count[b]), float(mean_conf[b]),
                                float(accuracy[b])) for b in range(n_bins))
    return ECEResult(value, confidence, binning, n_bins, int(conf.size), bins)


def top_label_ece(p_male, gold, n_bins: int = 10, binning: str = EQUAL_WIDTH) -> ECEResult:
    """ECE of the top-label confidence max(p, 1-p) against correctness (name ``ece_top_label_<binning>``)."""
    conf, correct = top_label_confidence(p_male, gold)
    return ece(conf, correct, n_bins, binning, TOP_LABEL)


def male_class_ece(p_male, gold, n_bins: int = 10, binning: str = EQUAL_WIDTH) -> ECEResult:
    """ECE of the male-class probability p_male against gold (name ``ece_male_class_<binning>``)."""
    conf, label = male_class_confidence(p_male, gold)
    return ece(conf, label, n_bins, binning, MALE_CLASS)


# ----------------------------------------------------------------------------------------------------------------
# instance-level metrics
# ----------------------------------------------------------------------------------------------------------------


def ice(conf, correct) -> float:
    """Instance-level calibration error ICE = 1/N sum_i |correct_i - conf_i| (Si et al. 2022, "Re-Examining
    Calibration: The Case of Question Answering")."""
    conf, correct = _pair(conf, correct, "conf", "correct")
    if conf.size == 0:
        raise DataError("ICE of zero items is undefined")
    return float(np.mean(np.abs(correct - conf)))


def macro_ce(conf, correct) -> float:
    """MacroCE = 0.5 * (ICE_pos + ICE_neg) (Si et al. 2022, "Re-Examining Calibration: The Case of Question
    Answering"), with ICE_pos = mean over correct items of (1 - conf_i) and ICE_neg = mean over incorrect items of
    conf_i. If one of the two sets is empty, MacroCE is the ICE of the other (mean over non-empty parts)."""
    conf, correct = _pair(conf, correct, "conf", "correct")
    if conf.size == 0:
        raise DataError("MacroCE of zero items is undefined")
    parts = []
    if np.any(correct == 1):
        parts.append(np.mean(1.0 - conf[correct == 1]))
    if np.any(correct == 0):
        parts.append(np.mean(conf[correct == 0]))
    return float(np.mean(parts))


def brier_gold(p_male, gold) -> float:
    """Brier score with the probability of the gold label: 1/N sum_i (1 - p_gold_i)^2, p_gold = p_male if gold = 1
    else 1 - p_male (Brier 1950; docs/design.md section 7). Equals sklearn's brier_score_loss(gold, p_male)."""
    p, gold = _pair(p_male, gold, "p_male", "gold")
    if p.size == 0:
        raise DataError("Brier score of zero items is undefined")
    p_gold = np.where(gold == 1, p, 1.0 - p)
    return float(np.mean((1.0 - p_gold) ** 2))


def brier_upstream_convention(p_male, gold) -> float:
    """The Brier score as the GECE code computes it, for comparison with the paper only (NOT a proper score).

    GECE ``code/metrics.py`` ``compute_brier_score`` takes the normalized pairs [p_male, p_female] and scores column
    1, the FEMALE probability, against the label y (1 = male): 1/N sum_i (p_female_i - y_i)^2. Since
    (p_female - y)^2 = p_gold^2 for either label, the value is mean_i p_gold_i^2 = sklearn's
    brier_score_loss(1 - gold, p_male) (the Brier score against the flipped labels), and a model that puts more than
    0.5 on the gold pronoun everywhere scores above 0.25 (worse than a constant 0.5). The Brier score proper is
    ``brier_gold``."""
    p, gold = _pair(p_male, gold, "p_male", "gold")
    if p.size == 0:
        raise DataError("Brier score of zero items is undefined")
    p_female = 1.0 - p
    return float(np.mean((p_female - gold) ** 2))


def human_alignment(p_male, gold) -> float:
    """Share of items whose predicted label (p_male >= 0.5 -> male) equals the human bias label y."""
    p, gold = _pair(p_male, gold, "p_male", "gold")
    if p.size == 0:
        raise DataError("human alignment of zero items is undefined")
    return float(np.mean(predicted_label(p) == gold))


# ----------------------------------------------------------------------------------------------------------------
# grouped ECEs: Gender-ECE (by predicted label) and class-conditional ECE (by gold label)
# ----------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GroupedECEResult:
    """Unweighted mean of per-group top-label ECEs; ``groups`` maps "male" / "female" to the group's ECEResult
    (None when the group is empty; the mean is then over the non-empty groups)."""

    value: float
    metric: str  # "gender_ece" or "cc_ece"
    grouped_by: str  # "predicted_label" or "gold_label"
    confidence: str
    binning: str
    n_bins: int
    groups: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.metric}_{self.confidence}_{self.binning}"

    def __float__(self) -> float:
        return float(self.value)


def _grouped_top_label_ece(p_male, gold, group_label: np.ndarray, metric: str, grouped_by: str, n_bins: int,
                           binning: str) -> GroupedECEResult:
    """mean over non-empty g in {male, female} of ECE_top_label(items with group_label == g)."""
    conf, correct = top_label_confidence(p_male, gold)
    groups: dict = {}
    for label, key in ((1, "male"), (0, "female")):
        mask = group_label == label
        groups[key] = ece(conf[mask], correct[mask], n_bins, binning, TOP_LABEL) if mask.any() else None
    values = [g.value for g in groups.values() if g is not None]
    if not values:
        raise DataError("grouped ECE of zero items is undefined")
    return GroupedECEResult(float(np.mean(values)), metric, grouped_by, TOP_LABEL, binning, n_bins, groups)


def gender_ece(p_male, gold, n_bins: int = 10, binning: str = EQUAL_WIDTH) -> GroupedECEResult:
    """Gender-ECE = 0.5 * (ECE(items predicted male) + ECE(items predicted female)), top-label confidence in each
    group ("mean of the ECEs of the items predicted male and predicted female", the Gender-ECE / GECE paper)."""
    p, gold = _pair(p_male, gold, "p_male", "gold")
    return _grouped_top_label_ece(p, gold, predicted_label(p), "gender_ece", "predicted_label", n_bins, binning)


def class_conditional_ece(p_male, gold, n_bins: int = 10, binning: str = EQUAL_WIDTH) -> GroupedECEResult:
    """cc-ECE = 0.5 * (ECE(items with gold male) + ECE(items with gold female)), top-label confidence in each group.

    Class-conditional ECE as decided in docs/design.md section 7: Gender-ECE's construction grouped by the GOLD label
    instead of the predicted one (related to, but not the same as, the class-wise ECE of Kull et al. 2019, which
    bins each class's probability over all items)."""
    p, gold = _pair(p_male, gold, "p_male", "gold")
    return _grouped_top_label_ece(p, gold, gold, "cc_ece", "gold_label", n_bins, binning)


# ----------------------------------------------------------------------------------------------------------------
# bootstrap
# ----------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BootstrapCI:
    """Point estimate on all items and the percentile interval [low, high] at level 1 - alpha."""

    estimate: float
    low: float
    high: float
    alpha: float
    n_boot: int
    n_valid: int  # resamples whose statistic was finite (the percentiles use only these)


def _scalar(value) -> float:
    return float(getattr(value, "value", value))


def _group_members(groups) -> list[np.ndarray] | None:
    """Item indices of each distinct group id (None when there are no groups)."""
    if groups is None:
        return None
    _, inverse = np.unique(np.asarray(groups), return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    return np.split(order, np.cumsum(np.bincount(inverse))[:-1])


def _resample_indices(rng: np.random.Generator, n: int, members: list[np.ndarray] | None) -> np.ndarray:
    """n item indices with replacement, or (cluster bootstrap) as many groups with replacement, all their items."""
    if members is None:
        return rng.integers(0, n, size=n)
    chosen = rng.integers(0, len(members), size=len(members))
    return np.concatenate([members[g] for g in chosen])


def bootstrap_ci(metric_fn: Callable, *arrays, n_boot: int = 1000, seed: int = 0, alpha: float = 0.05,
                 groups=None) -> BootstrapCI:
    """Percentile bootstrap interval (Efron & Tibshirani 1993): resample the N items with replacement ``n_boot``
    times (seeded numpy Generator), recompute ``metric_fn(*arrays_resampled)`` and take the alpha/2 and
    1 - alpha/2 percentiles. ``metric_fn`` may return a float or a result with ``.value``. With ``groups`` (one id
    per item) whole groups are resampled instead (cluster bootstrap), e.g. to keep paired items together."""
    arrays = [np.asarray(a) for a in arrays]
    if not arrays:
        raise UsageError("bootstrap_ci needs at least one array")
    n = len(arrays[0])
    if any(len(a) != n for a in arrays) or (groups is not None and len(groups) != n):
        raise DataError("all arrays (and groups) must have the same length")
    members = _group_members(groups)
    rng = np.random.default_rng(seed)
    stats = np.empty(n_boot)
    for i in range(n_boot):
        idx = _resample_indices(rng, n, members)
        stats[i] = _scalar(metric_fn(*(a[idx] for a in arrays)))
    finite = stats[np.isfinite(stats)]
    low, high = (np.percentile(finite, [100 * alpha / 2, 100 * (1 - alpha / 2)]) if finite.size
                 else (np.nan, np.nan))
    return BootstrapCI(_scalar(metric_fn(*arrays)), float(low), float(high), alpha, n_boot, int(finite.size))


#: Notes attached to metric rows whose definition differs from, or only exists for comparison with, a paper's code.
METRIC_NOTES = {
    "ece_male_class_equal_width": "the paper's ECE (GECE ece_score, 'Bias ECE'): p(male) against the gold label, "
                                  "equal-width bins",
    "ece_top_label_equal_width": "top-label ECE (Guo et al. 2017): max(p, 1-p) against correctness; not in the paper",
    "brier_upstream_convention": "GECE code's Brier: p(female) scored against y = 1 for male (= mean p_gold^2, "
                                 "above 0.25 for any better-than-chance model); for comparison with the paper only, "
                                 "the Brier score is brier_gold_label",
}
#: Per-group parts of Gender-ECE (items grouped by predicted label) and cc-ECE (grouped by gold label).
GROUP_PARTS = (
    ("gender_ece", "predicted", "male"), ("gender_ece", "predicted", "female"),
    ("cc_ece", "gold", "male"), ("cc_ece", "gold", "female"),
)


def group_part_name(grouped_by: str, gender: str) -> str:
    """Name of one group's top-label ECE (equal width), e.g. ece_top_label_equal_width_predicted_male (a part of
    Gender-ECE) or ece_top_label_equal_width_gold_female (a part of cc-ECE: ECE by gold gender)."""
    return f"ece_{TOP_LABEL}_{EQUAL_WIDTH}_{grouped_by}_{gender}"


def _group_ece(pp, gg, grouped_by: str, gender: str, n_bins: int) -> float:
    """Top-label ECE (equal width) of the items whose predicted / gold label is ``gender``: the same value as
    gender_ece(...).groups[gender] / class_conditional_ece(...).groups[gender]; NaN when the group is empty."""
    conf, correct = top_label_confidence(pp, gg)
    label = predicted_label(pp) if grouped_by == "predicted" else as_binary(gg, "gold")
    mask = label == (1 if gender == "male" else 0)
    return ece(conf[mask], correct[mask], n_bins, EQUAL_WIDTH, TOP_LABEL).value if mask.any() else np.nan


def _group_part_fn(grouped_by: str, gender: str, n_bins: int) -> Callable:
    """p, gold -> the ECE of one group of Gender-ECE (grouped_by "predicted") or cc-ECE ("gold")."""
    return lambda pp, gg: _group_ece(pp, gg, grouped_by, gender, n_bins)


def _gender_gap(pp, gg, n_bins: int) -> float:
    """|ECE(predicted male) - ECE(predicted female)| (GECE's "Calibration Bias Gap"); NaN when a group is empty."""
    return abs(_group_ece(pp, gg, "predicted", "male", n_bins) - _group_ece(pp, gg, "predicted", "female", n_bins))


def calibration_metrics(p_male, gold, n_bins: int = 10, n_boot: int = 1000, seed: int = 0, alpha: float = 0.05,
                        groups=None) -> list[dict]:
    """All point metrics with bootstrap intervals, one dict per metric: name, confidence, binning, value, ci_low,
    ci_high, n (items the metric is computed on), note. Names say what is binned:
    ece_{male_class,top_label}_{equal_width,equal_mass} (the paper's ECE, ece_male_class_equal_width, first; its
    note and ece_top_label_equal_width's say which is the paper's), macro_ce_top_label, ice_top_label, brier_gold_label,
    brier_upstream_convention (the GECE code's convention, for comparison only: see brier_upstream_convention),
    gender_ece_top_label_equal_width with its parts ece_top_label_equal_width_predicted_{male,female} and their gap
    gender_ece_gap_top_label_equal_width, cc_ece_top_label_equal_width with its parts (ECE by gold gender)
    ece_top_label_equal_width_gold_{male,female}, human_alignment (confidence "predicted_label").

    A part's value is NaN when its group is empty (and then left out of the Gender-ECE / cc-ECE mean); bootstrap
    resamples in which a group is empty are left out of that part's interval.

    ci_low / ci_high are the bias-corrected (basic) bootstrap interval for the true value (`resampled.
    corrected_interval`) from ``n_boot`` resamples of the items (of whole groups with ``groups``), around
    value_bias_corrected = value - bootstrap_bias (bootstrap_bias = mean replicate - value); percentile_low /
    percentile_high are the plain percentile interval of the same resamples. ECE is biased upward in small samples,
    so its percentile interval can miss the estimate (and a true ECE of 0) altogether."""
    p, gold = _pair(p_male, gold, "p_male", "gold")
    n = int(p.size)
    if groups is not None and len(groups) != n:
        raise DataError("groups must have one id per item")
    weights = multiplicities(np.random.default_rng(seed), n, n_boot, _group_members(groups))
    boot = metric_replicates(p, gold, weights, n_bins, group_part_name)
    rows = []
    for name, confidence, binning, fn, count in _metric_specs(p, gold, n_bins):
        estimate = _scalar(fn(p, gold))
        ci = corrected_interval(estimate, boot[name], alpha)
        rows.append({"name": name, "confidence": confidence, "binning": binning, "value": estimate,
                     "value_bias_corrected": ci.corrected, "ci_low": ci.low, "ci_high": ci.high, "n": count,
                     "bootstrap_bias": ci.bias, "percentile_low": ci.percentile_low,
                     "percentile_high": ci.percentile_high, "note": METRIC_NOTES.get(name, "")})
    return rows


def _metric_specs(p: np.ndarray, gold: np.ndarray, n_bins: int) -> list[tuple]:
    """(name, confidence, binning, function of (p, gold), items it is computed on) of every metric of
    `calibration_metrics`, in the order of its rows."""
    n = int(p.size)
    pred = predicted_label(p)
    group_size = {"predicted": {"male": int(np.sum(pred == 1)), "female": int(np.sum(pred == 0))},
                  "gold": {"male": int(np.sum(gold == 1)), "female": int(np.sum(gold == 0))}}

    def tl(fn):
        return lambda pp, gg: fn(*top_label_confidence(pp, gg))

    return [  # the paper's convention (male-class, equal width) first
        (f"ece_{MALE_CLASS}_{EQUAL_WIDTH}", MALE_CLASS, EQUAL_WIDTH, lambda pp, gg: male_class_ece(pp, gg, n_bins), n),
        (f"ece_{MALE_CLASS}_{EQUAL_MASS}", MALE_CLASS, EQUAL_MASS,
         lambda pp, gg: male_class_ece(pp, gg, n_bins, EQUAL_MASS), n),
        (f"ece_{TOP_LABEL}_{EQUAL_WIDTH}", TOP_LABEL, EQUAL_WIDTH, lambda pp, gg: top_label_ece(pp, gg, n_bins), n),
        (f"ece_{TOP_LABEL}_{EQUAL_MASS}", TOP_LABEL, EQUAL_MASS,
         lambda pp, gg: top_label_ece(pp, gg, n_bins, EQUAL_MASS), n),
        (f"macro_ce_{TOP_LABEL}", TOP_LABEL, None, tl(macro_ce), n),
        (f"ice_{TOP_LABEL}", TOP_LABEL, None, tl(ice), n),
        ("brier_gold_label", "gold_label", None, brier_gold, n),
        ("brier_upstream_convention", "female_vs_male_label", None, brier_upstream_convention, n),
        (f"gender_ece_{TOP_LABEL}_{EQUAL_WIDTH}", TOP_LABEL, EQUAL_WIDTH,
         lambda pp, gg: gender_ece(pp, gg, n_bins), n),
        *((group_part_name(by, gender), TOP_LABEL, EQUAL_WIDTH, _group_part_fn(by, gender, n_bins),
           group_size[by][gender]) for metric, by, gender in GROUP_PARTS if metric == "gender_ece"),
        (f"gender_ece_gap_{TOP_LABEL}_{EQUAL_WIDTH}", TOP_LABEL, EQUAL_WIDTH,
         lambda pp, gg: _gender_gap(pp, gg, n_bins), n),
        (f"cc_ece_{TOP_LABEL}_{EQUAL_WIDTH}", TOP_LABEL, EQUAL_WIDTH,
         lambda pp, gg: class_conditional_ece(pp, gg, n_bins), n),
        *((group_part_name(by, gender), TOP_LABEL, EQUAL_WIDTH, _group_part_fn(by, gender, n_bins),
           group_size[by][gender]) for metric, by, gender in GROUP_PARTS if metric == "cc_ece"),
        ("human_alignment", "predicted_label", None, human_alignment, n),
    ]


# ----------------------------------------------------------------------------------------------------------------
# post-hoc calibration of the male-class probability
# ----------------------------------------------------------------------------------------------------------------


def split_indices(n: int, n_val: int | None = None, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Seeded validation / held-out split of range(n): a permutation from np.random.default_rng(seed), the first
    n_val (default n // 2, so 771 -> 385 / 386 as in the paper) for fitting, the rest for evaluation; both sorted."""
    n_val = n // 2 if n_val is None else n_val
    if not 0 < n_val < n:
        raise UsageError(f"need 0 < n_val < n, got n_val={n_val}, n={n}")
    perm = np.random.default_rng(seed).permutation(n)
    return np.sort(perm[:n_val]), np.sort(perm[n_val:])


def _logreg() -> LogisticRegression:
    """Effectively unregularized logistic regression (C = LOGREG_C = 1e12, lbfgs, tol 1e-8)."""
    return LogisticRegression(C=LOGREG_C, tol=LOGREG_TOL, max_iter=LOGREG_MAX_ITER)


def _fit_inputs(p, y) -> tuple[np.ndarray, np.ndarray]:
    p, y = _pair(p, y, "p", "y")
    if np.unique(y).size < 2:
        raise DataError("calibration needs both labels (0 and 1) in the fitting data")
    return p, y


def beta_features(p) -> np.ndarray:
    """Beta-calibration features [ln p, -ln(1 - p)], p clipped to [1e-12, 1 - 1e-12]."""
    p = np.clip(as_probabilities(p), PROB_EPS, 1 - PROB_EPS)
    return np.column_stack([np.log(p), -np.log1p(-p)])


class BetaCalibration:
    """Beta calibration, abm variant (Kull, Silva Filho & Flach 2017, "Beyond sigmoids: How to obtain well-calibrated
    probabilities from binary classifiers with beta calibration"; AISTATS 2017 "Beta calibration"):

        mu(p) = sigmoid(a ln p - b ln(1 - p) + c),  a, b >= 0,

    fitted as an effectively unregularized logistic regression (C = 1e12) on the features [ln p, -ln(1 - p)].
    The constraint a, b >= 0 (monotone map) is enforced as in the betacal package: if a < 0 refit with the ln p
    feature dropped (a = 0), else if b < 0 refit with -ln(1 - p) dropped (b = 0). Beyond betacal: if the refitted
    remaining coefficient is still negative, it is dropped too and the map is the constant base rate
    sigmoid(c) = mean(y). ``a_``, ``b_``, ``c_`` hold the final parameters, ``dropped_`` the dropped features.
    """

    def fit(self, p, y) -> BetaCalibration:
        p, y = _fit_inputs(p, y)
        x = beta_features(p)
        keep = [0, 1]
        coef, intercept = self._fit_lr(x, y, keep)
        if coef[0] < 0 or coef[1] < 0:
            keep = [1] if coef[0] < 0 else [0]
            coef, intercept = self._fit_lr(x, y, keep)
            if coef[keep[0]] < 0:
                keep = []
                intercept = float(logit(np.mean(y)))
                coef = np.zeros(2)
        self.a_, self.b_, self.c_ = float(coef[0]), float(coef[1]), float(intercept)
        self.dropped_ = tuple(name for j, name in enumerate(("ln_p", "neg_ln_1mp")) if j not in keep)
        return self

    @staticmethod
    def _fit_lr(x: np.ndarray, y: np.ndarray, keep: list[int]) -> tuple[np.ndarray, float]:
        """Logistic regression on the kept columns; returns the full 2-vector of coefficients (0 if dropped)."""
        lr = _logreg().fit(x[:, keep], y)
        coef = np.zeros(2)
        coef[keep] = lr.coef_[0]
        return coef, float(lr.intercept_[0])

    def predict(self, p) -> np.ndarray:
        """Calibrated male-class probability sigmoid(a ln p + b (-ln(1 - p)) + c)."""
        return expit(beta_features(p) @ np.array([self.a_, self.b_]) + self.c_)


class PlattScaling:
    """Platt scaling (Platt 1999, "Probabilistic Outputs for Support Vector Machines"): mu(p) = sigmoid(A logit(p)
    + B), an effectively unregularized logistic regression (C = 1e12) on logit(p), p clipped to [1e-12, 1 - 1e-12].
    Platt's smoothed targets (N+ + 1) / (N+ + 2) are not used: plain 0/1 labels."""

    def fit(self, p, y) -> PlattScaling:
        p, y = _fit_inputs(p, y)
        lr = _logreg().fit(self._feature(p), y)
        self.slope_, self.intercept_ = float(lr.coef_[0, 0]), float(lr.intercept_[0])
        return self

    @staticmethod
    def _feature(p) -> np.ndarray:
        return logit(np.clip(as_probabilities(p), PROB_EPS, 1 - PROB_EPS)).reshape(-1, 1)

    def predict(self, p) -> np.ndarray:
        return expit(self.slope_ * self._feature(p)[:, 0] + self.intercept_)


class TemperatureScaling:
    """Temperature scaling (Guo et al. 2017, "On Calibration of Modern Neural Networks") for a binary probability:
    mu(p) = sigmoid(logit(p) / T) with one scalar T > 0 minimizing the mean negative log-likelihood

        NLL(T) = mean_i [ y_i ln(1 + e^{-z_i/T}) + (1 - y_i) ln(1 + e^{z_i/T}) ],  z_i = logit(p_i),

    found by scipy.optimize.minimize_scalar over log T (bounded method, log T in [ln 1e-3, ln 1e3]).
    p is clipped to [1e-12, 1 - 1e-12] before the logit."""

    LOG_T_BOUNDS = (float(np.log(1e-3)), float(np.log(1e3)))

    def fit(self, p, y) -> TemperatureScaling:
        p, y = _fit_inputs(p, y)
        z = self._logit(p)

        def nll(log_t: float) -> float:
            s = z / np.exp(log_t)
            return float(np.mean(y * np.logaddexp(0.0, -s) + (1 - y) * np.logaddexp(0.0, s)))

        res = minimize_scalar(nll, bounds=self.LOG_T_BOUNDS, method="bounded", options={"xatol": 1e-10})
        self.temperature_ = float(np.exp(res.x))
        return self

    @staticmethod
    def _logit(p) -> np.ndarray:
        return logit(np.clip(as_probabilities(p), PROB_EPS, 1 - PROB_EPS))

    def predict(self, p) -> np.ndarray:
        return expit(self._logit(p) / self.temperature_)


class IsotonicCalibration:
    """Isotonic regression (Zadrozny & Elkan 2002, "Transforming Classifier Scores into Accurate Multiclass
    Probability Estimates"): the non-decreasing step map minimizing squared error, sklearn IsotonicRegression with
    out_of_bounds="clip" and outputs in [0, 1]."""

    def fit(self, p, y) -> IsotonicCalibration:
        p, y = _fit_inputs(p, y)
        self.model_ = IsotonicRegression(y_min=0.0, y_max=1.0, increasing=True, out_of_bounds="clip").fit(p, y)
        return self

    def predict(self, p) -> np.ndarray:
        return np.asarray(self.model_.predict(as_probabilities(p)), dtype=float)


CALIBRATORS: dict[str, type] = {
    "beta_abm": BetaCalibration,
    "isotonic": IsotonicCalibration,
    "platt": PlattScaling,
    "temperature": TemperatureScaling,
}


#: The calibrator name of the uncalibrated held-out probabilities in `post_hoc_predictions` / reliability tables.
UNCALIBRATED = "none"


def post_hoc_predictions(p_male, gold, n_val: int | None = None, seed: int = 0,
                         calibrators: Sequence[str] = tuple(CALIBRATORS)) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Fit each calibrator of the male-class probability on the seeded validation split and predict the held-out items.

    Parameters
    ----------
    p_male, gold : the N items (p(male) in [0, 1]; gold 1 = male, 0 = female).
    n_val : items used for fitting (default N // 2, `split_indices`).
    seed : seed of the split.
    calibrators : names in CALIBRATORS (beta_abm, isotonic, platt, temperature).

    Returns
    -------
    (test, predictions): the sorted held-out indices and, per name, the calibrated p(male) of those items in the same
    order; ``predictions["none"]`` (UNCALIBRATED) is p_male[test] itself, first.
    """
    p, gold = _pair(p_male, gold, "p_male", "gold")
    unknown = [name for name in calibrators if name not in CALIBRATORS]
    if unknown:
        raise UsageError(f"unknown calibrator(s) {unknown}; choose from {sorted(CALIBRATORS)}")
    val, test = split_indices(p.size, n_val, seed)
    predictions = {UNCALIBRATED: p[test]}
    for name in calibrators:
        predictions[name] = CALIBRATORS[name]().fit(p[val], gold[val]).predict(p[test])
    return test, predictions


def post_hoc_rows(gold_test, predictions: dict[str, np.ndarray], n_val: int, seed: int = 0,
                  n_bins: int = 10) -> list[dict]:
    """The paper's post-hoc calibration table (Sabir et al.) from `post_hoc_predictions`.

    One dict per calibrator with, before (the uncalibrated p(male) of the held-out items) and after calibration:
    the paper's ECE ``ece_male_class_equal_width_{before,after}`` (p(male) against gold, equal width), the top-label
    ECE ``ece_top_label_equal_width_{before,after}`` (Guo et al. 2017; labelled, not in the paper),
    ``accuracy_{before,after}`` (human alignment of the predicted label, p >= 0.5 -> male) and
    ``brier_gold_label_{before,after}`` (mean (1 - p_gold)^2).

    Parameters
    ----------
    gold_test : gold labels of the held-out items.
    predictions : {"none": p_male of the held-out items, calibrator: calibrated p_male, ...}.
    n_val, seed : recorded in the rows (the split that produced the predictions).
    n_bins : equal-width bins of the ECEs.
    """
    gold_test = as_binary(gold_test, "gold")
    before = predictions[UNCALIBRATED]

    def scores(q) -> dict:
        return {"ece_male_class_equal_width": male_class_ece(q, gold_test, n_bins).value,
                "ece_top_label_equal_width": top_label_ece(q, gold_test, n_bins).value,
                "accuracy": human_alignment(q, gold_test), "brier_gold_label": brier_gold(q, gold_test)}

    base = scores(before)
    rows = []
    for name, q in predictions.items():
        if name == UNCALIBRATED:
            continue
        after = scores(q)
        row = {"calibrator": name, "n_bins": n_bins, "n_val": int(n_val), "n_test": int(gold_test.size), "seed": seed}
        for metric in base:
            row[f"{metric}_before"], row[f"{metric}_after"] = base[metric], after[metric]
        rows.append(row)
    return rows


def evaluate_calibrators(p_male, gold, n_val: int | None = None, seed: int = 0, n_bins: int = 10,
                         calibrators: Sequence[str] = tuple(CALIBRATORS)) -> list[dict]:
    """Fit each calibrator of the male-class probability on the seeded validation split (split_indices) and compare
    on the held-out items before / after (`post_hoc_rows`: the paper's male-class ECE first, then the top-label ECE,
    accuracy and gold-label Brier). One dict per calibrator."""
    test, predictions = post_hoc_predictions(p_male, gold, n_val, seed, calibrators)
    gold = as_binary(gold, "gold")
    return post_hoc_rows(gold[test], predictions, len(gold) - test.size, seed, n_bins)


# ----------------------------------------------------------------------------------------------------------------
# sample-size ablation
# ----------------------------------------------------------------------------------------------------------------


def sample_size_ablation(conf, correct, sizes: Sequence[int] = (50, 100, 150, 250, 500), repeats: int = 100,
                         seed: int = 0, n_bins: int = 10, binning: str = EQUAL_WIDTH,
                         confidence: str = TOP_LABEL) -> list[dict]:
    """For each size n <= N: draw ``repeats`` subsets of n items without replacement (one seeded Generator for the
    whole ablation) and report the mean and sample standard deviation (ddof = 1) of the ECE over the subsets.
    Sizes larger than N are skipped. ``conf`` / ``correct`` are the arrays the ECE bins; ``confidence`` names them
    (top-label by default, "male_class" for p_male against gold)."""
    conf, correct = _pair(conf, correct, "conf", "correct")
    rng = np.random.default_rng(seed)
    rows = []
    for size in sizes:
        if size > conf.size or size < 1:
            continue
        values = np.array([ece(conf[idx], correct[idx], n_bins, binning, confidence).value
                           for idx in (rng.choice(conf.size, size=size, replace=False) for _ in range(repeats))])
        rows.append({"size": int(size), "repeats": int(repeats), "confidence": confidence, "binning": binning,
                     "n_bins": n_bins,
                     "ece_mean": float(values.mean()),
                     "ece_std": float(values.std(ddof=1)) if repeats > 1 else 0.0})
    return rows


def sample_size_ablation_by_confidence(p_male, gold, confidences: Sequence[str] = CONFIDENCE_ORDER,
                                       sizes: Sequence[int] = (50, 100, 150, 250, 500), repeats: int = 100,
                                       seed: int = 0, n_bins: int = 10, binning: str = EQUAL_WIDTH) -> list[dict]:
    """The sample-size ablation (the paper's Table 7) in each convention, the paper's (male-class) first.

    For each confidence, `sample_size_ablation` of its (conf, target) arrays with the same seed, so every convention
    is computed on the very same ``repeats`` subsets of each size.

    Parameters
    ----------
    p_male, gold : the N items.
    confidences : "male_class" (the paper's) and / or "top_label".
    sizes, repeats, seed, n_bins, binning : as `sample_size_ablation`.

    Returns
    -------
    Rows of `sample_size_ablation`, grouped by confidence in the order given.
    """
    rows = []
    for confidence in confidences:
        conf, target = confidence_and_target(p_male, gold, confidence)
        rows += sample_size_ablation(conf, target, sizes, repeats, seed, n_bins, binning, confidence)
    return rows


# ----------------------------------------------------------------------------------------------------------------
# identity groups (WinoQueer)
# ----------------------------------------------------------------------------------------------------------------

#: The group label of the row pooling every identity group.
ALL_GROUPS = "all"


def identity_group_metrics(p_stereotype, gold, groups, n_bins: int = 10, n_boot: int = 1000, seed: int = 0,
                           alpha: float = 0.05) -> list[dict]:
    """Calibration per identity group (WinoQueer, the paper's Table 4), one row per group and one pooled row "all".

    WinoQueer pairs have no human label: gold = 1 names the stereotyped (queer-term) sentence, as the upstream
    ``code/ECE_identity.py`` fixes every label to 1. The paper's ECE there bins the normalized probability of that
    sentence, p_stereotype, against gold in equal-width bins: ``ece_stereotype_class_equal_width`` (with every gold
    = 1 it equals 1 - mean p_stereotype). Also: the equal-mass variant, the top-label ECEs (confidence
    max(p, 1 - p) against correctness of the predicted sentence, p >= 0.5 -> stereotyped; labelled, not in the
    paper), the Brier score of the gold sentence mean (1 - p_gold)^2, the mean p_stereotype and the share of pairs
    whose predicted sentence is the stereotyped one (``stereotype_rate``).

    Parameters
    ----------
    p_stereotype : probability of the gold-1 (stereotyped) sentence, normalized over the pair.
    gold : 1 where the stereotyped sentence is the gold one (every WinoQueer pair), 0 otherwise.
    groups : the identity group of each pair (WinoQueer `Gender_ID_x`).
    n_bins : bins of every ECE.
    n_boot, seed, alpha : bias-corrected bootstrap interval of ``ece_stereotype_class_equal_width`` (ci_low, ci_high,
        bootstrap_bias; `resampled.corrected_interval`).

    Returns
    -------
    Rows (group, n, mean_p_stereotype, stereotype_rate, ece_stereotype_class_equal_width, ci_low, ci_high,
    bootstrap_bias, ece_stereotype_class_equal_mass, ece_top_label_equal_width, ece_top_label_equal_mass,
    brier_gold_label), the
    groups in sorted order, then "all".
    """
    p, gold = _pair(p_stereotype, gold, "p_stereotype", "gold")
    groups = np.asarray(groups, dtype=object).reshape(-1)
    if groups.shape != p.shape:
        raise DataError(f"groups and p_stereotype differ in length ({groups.size} vs {p.size})")
    if p.size == 0:
        raise DataError("identity-group calibration of zero items is undefined")

    def paper_ece(pp, gg):
        return ece(pp, gg, n_bins, EQUAL_WIDTH, STEREOTYPE_CLASS)

    names = sorted({str(g) for g in groups})
    rows = []
    for name in [*names, ALL_GROUPS]:
        mask = np.ones(p.size, bool) if name == ALL_GROUPS else np.array([str(g) == name for g in groups])
        pp, gg = p[mask], gold[mask]
        estimate = paper_ece(pp, gg).value
        replicates = weighted_ece(pp, gg.astype(float), multiplicities(np.random.default_rng(seed), pp.size, n_boot,
                                                                        None), n_bins, EQUAL_WIDTH)
        ci = corrected_interval(estimate, replicates, alpha)
        rows.append({"group": name, "n": int(mask.sum()), "mean_p_stereotype": float(pp.mean()),
                     "stereotype_rate": float(np.mean(predicted_label(pp) == 1)),
                     "ece_stereotype_class_equal_width": estimate, "ci_low": ci.low, "ci_high": ci.high,
                     "bootstrap_bias": ci.bias,
                     "ece_stereotype_class_equal_mass": ece(pp, gg, n_bins, EQUAL_MASS, STEREOTYPE_CLASS).value,
                     "ece_top_label_equal_width": top_label_ece(pp, gg, n_bins).value,
                     "ece_top_label_equal_mass": top_label_ece(pp, gg, n_bins, EQUAL_MASS).value,
                     "brier_gold_label": brier_gold(pp, gg)})
    return rows
