"""Statistics of the misgendering meta-evaluation: agreement of two evaluation methods, a beta fit of per-instance
disagreement, repetition rate of generations, spread of correctness within an instance, Wilson intervals.

Subramonian et al. 2025, "Agree to Disagree? A Meta-Evaluation of LLM Misgendering". Pure statistics over arrays
(numpy, the standard library); no warehouse code. See docs/design.md section 7.

Conventions (decided here; the paper leaves them open):

- Agreement is computed on BINARY labels (0/1 or bool), e.g. the correctness of the probability-based and of the
  generation-based method on the same samples. The three generation outcomes of docs/design.md section 7 (correct,
  misgendered, no pronoun) are mapped to binary by the caller (the paper's automatic metric maps "no pronoun" to
  correct).
- Degenerate inputs never raise and never yield a made-up number: a statistic whose denominator is 0 is NaN and
  the result says why (``warnings`` / ``warning`` fields) and a warning is emitted (``DegenerateAgreementWarning``,
  ``DegenerateBetaFitWarning``). Malformed inputs (NaN, values out of range, unequal lengths) raise ValueError.
- Variances: the beta fit uses the unbiased sample variance (ddof = 1); the per-instance spread of correctness
  uses the population standard deviation (ddof = 0).
- The paper's +- terms (its code, `measure-disagreement.py`, one pair per instance): Cohen's kappa +- Z95 x the
  asymptotic standard error (`kappa_asymptotic_se`), MCC with the Fisher 95% interval (`fisher_interval`), raw
  agreement +- the standard error of the mean over instances (`standard_error_of_mean`). With several pairs per
  instance, `jackknife_agreement_se` resamples instances, not pairs.
"""

from __future__ import annotations

import math
import re
import warnings
from collections import Counter
from dataclasses import dataclass
from typing import TypeVar
from collections.abc import Hashable, Mapping, Sequence

import numpy as np

from ...errors import DataError, UsageError
from ..arrays import as_binary, as_probabilities

K = TypeVar("K", bound=Hashable)


class DegenerateAgreementWarning(UserWarning):
    """An agreement statistic is undefined (empty input or a constant method); it was returned as NaN."""


class DegenerateBetaFitWarning(UserWarning):
    """The beta method-of-moments fit is undefined for the input; alpha and beta were returned as NaN."""


# ----------------------------------------------------------------------------------------------------------------
# agreement of two binary methods
# ----------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Agreement:
    """Agreement of two binary label arrays a and b on the same n samples.

    The 2x2 table (b is taken as the reference, a as the prediction; all three statistics are symmetric in a, b):
    ``n11`` = TP (a = 1, b = 1), ``n00`` = TN (a = 0, b = 0), ``n10`` = FP (a = 1, b = 0), ``n01`` = FN
    (a = 0, b = 1). A statistic that is undefined is NaN and ``warnings`` says why.
    """

    n: int
    raw_agreement: float
    cohen_kappa: float
    mcc: float
    warnings: tuple[str, ...]
    n11: int = 0
    n10: int = 0
    n01: int = 0
    n00: int = 0

    @property
    def degenerate(self) -> bool:
        return bool(self.warnings)


def _constant_note(name: str, arr: np.ndarray) -> str | None:
    if arr.size and np.all(arr == arr[0]):
        return f"method {name} is constant (all {int(arr[0])})"
    return None


def agreement(a, b) -> Agreement:
    """Raw agreement, Cohen's kappa and the Matthews correlation of two binary label arrays of equal length n.

    - raw agreement p_o = mean(a == b) = (TP + TN) / n;
    - Cohen's kappa (Cohen 1960, "A Coefficient of Agreement for Nominal Scales") kappa = (p_o - p_e) / (1 - p_e),
      with chance agreement p_e = p_a p_b + (1 - p_a)(1 - p_b), p_a = mean(a), p_b = mean(b);
    - Matthews correlation (Matthews 1975, "Comparison of the predicted and observed secondary structure of T4
      phage lysozyme") MCC = (TP TN - FP FN) / sqrt((TP + FP)(TP + FN)(TN + FP)(TN + FN)), the phi coefficient.

    Both are computed from the integer counts of the 2x2 table (exact numerators and denominators, so a zero
    denominator is detected exactly, not up to rounding).

    Degenerate inputs (never an exception, never a made-up number):

    - n = 0: every statistic NaN;
    - a or b constant: the MCC denominator is 0, MCC = NaN;
    - a and b constant with the same value (identical constant arrays): also 1 - p_e = 0, kappa = NaN (raw agreement
      is 1). If exactly one method is constant, or both are constant with different values, 1 - p_e > 0 and kappa is
      the formula's value, which is exactly 0 (p_o = p_e); it is returned, and the warning says that this 0 is
      forced by the constant method.

    Each degenerate case adds a string to ``warnings`` naming the constant method(s) and the undefined statistic, and
    emits ``DegenerateAgreementWarning``.

    Differences from scikit-learn (checked with 1.9.1): ``matthews_corrcoef`` returns 0.0 whenever its denominator
    is 0 (one or both methods constant), where this function returns NaN. ``cohen_kappa_score`` returns NaN (with a
    warning) for identical constant arrays under its default ``replace_undefined_by=np.nan`` (a caller can ask it
    for e.g. 1.0 instead), and 0.0 when exactly one method is constant or both are constant with different values,
    as here. On non-degenerate input kappa and MCC agree with scikit-learn up to rounding.

    Raises ValueError for unequal lengths, NaN, or values other than 0/1.
    """
    a, b = as_binary(a, "a"), as_binary(b, "b")
    if a.shape != b.shape:
        raise DataError(f"a and b differ in length ({a.size} vs {b.size})")
    n = int(a.size)
    notes: list[str] = []
    if n == 0:
        notes.append("empty input (n = 0): raw agreement, Cohen's kappa and MCC are undefined (NaN)")
        _emit(notes, DegenerateAgreementWarning)
        return Agreement(0, math.nan, math.nan, math.nan, tuple(notes))

    n11, n10, n01, n00 = _two_by_two(a, b)
    raw, kappa, mcc = _agreement_statistics(n, n11, n10, n01, n00)
    notes += _constant_notes(a, b, kappa)
    if notes:
        _emit(notes, DegenerateAgreementWarning)
    return Agreement(n, float(raw), float(kappa), float(mcc), tuple(notes), n11, n10, n01, n00)


def _two_by_two(a: np.ndarray, b: np.ndarray) -> tuple[int, int, int, int]:
    """The 2x2 table of two binary arrays as python ints (exact arithmetic, no overflow for any n):
    (n11, n10, n01, n00), n_ij = the number of pairs with a = i and b = j."""
    n11 = int(np.sum((a == 1) & (b == 1)))
    n00 = int(np.sum((a == 0) & (b == 0)))
    n10 = int(np.sum((a == 1) & (b == 0)))
    n01 = int(np.sum((a == 0) & (b == 1)))
    return n11, n10, n01, n00


def _agreement_statistics(n: int, n11: int, n10: int, n01: int, n00: int) -> tuple[float, float, float]:
    """(raw agreement, Cohen's kappa, MCC) from the 2x2 table of n > 0 pairs, with exact integer numerators and
    denominators; a statistic whose denominator is 0 is NaN."""
    na1, nb1 = n11 + n10, n11 + n01  # number of ones in a, in b
    na0, nb0 = n - na1, n - nb1

    raw = (n11 + n00) / n
    # kappa = (p_o - p_e) / (1 - p_e), multiplied through by n^2
    expected = na1 * nb1 + na0 * nb0  # n^2 p_e
    kappa_den = n * n - expected
    kappa = (n * (n11 + n00) - expected) / kappa_den if kappa_den else math.nan
    mcc_den = (n11 + n10) * (n11 + n01) * (n00 + n10) * (n00 + n01)
    mcc = (n11 * n00 - n10 * n01) / math.sqrt(mcc_den) if mcc_den else math.nan
    return raw, kappa, mcc


def _constant_notes(a: np.ndarray, b: np.ndarray, kappa: float) -> list[str]:
    """The notes on a constant method (a, b or both): MCC undefined, and kappa undefined (NaN `kappa`) or 0 by
    construction; empty when neither is constant."""
    notes = []
    const_a, const_b = _constant_note("a", a), _constant_note("b", b)
    constant = [c for c in (const_a, const_b) if c]
    if constant:
        which = " and ".join(constant)
        notes.append(f"{which}: the MCC denominator is 0, MCC is undefined (NaN)")
        if math.isnan(kappa):
            notes.append(f"{which}: 1 - p_e = 0, Cohen's kappa is undefined (NaN)")
        else:
            notes.append(f"{which}: Cohen's kappa is 0 by construction (p_o = p_e)")
    return notes


def _emit(notes: Sequence[str], category: type[Warning]) -> None:
    for note in notes:
        warnings.warn(note, category, stacklevel=3)


# ----------------------------------------------------------------------------------------------------------------
# the paper's +- terms: uncertainty of an agreement statistic over the dataset's instances
# ----------------------------------------------------------------------------------------------------------------

#: two-sided 95% normal quantile, scipy.stats.norm.ppf(0.975) (the paper's code uses 95% intervals throughout)
Z95 = 1.959963984540054


def kappa_asymptotic_se(table) -> tuple[float, float]:
    """(Cohen's kappa, its asymptotic standard error) from a k x k contingency table of counts (rows: rater 1,
    columns: rater 2), the large-sample variance of Fleiss, Cohen & Everitt (1969, "Large sample standard errors of
    kappa and weighted kappa"), the `std_kappa` of statsmodels' `cohens_kappa`:

        p_ij = n_ij / n,  p_i. = row share,  p_.j = column share,  p_o = sum_i p_ii,  p_e = sum_i p_i. p_.i,
        var = [ sum_i p_ii (1 - (p_i. + p_.i)(1 - kappa))^2 + (1 - kappa)^2 sum_{i != j} p_ij (p_.i + p_j.)^2
                - (kappa - p_e (1 - kappa))^2 ] / ((1 - p_e)^2 n).

    The paper's code (Subramonian et al. 2025, `measure-disagreement.py`) prints kappa +- (kappa_upp - kappa_low) / 2
    of statsmodels, i.e. +- Z95 * this standard error. NaN for n = 0 or 1 - p_e = 0. Raises ValueError for a table
    that is not square, or has negative or non-finite counts.
    """
    table = np.asarray(table, dtype=float)
    if table.ndim != 2 or table.shape[0] != table.shape[1]:
        raise DataError(f"kappa_asymptotic_se needs a square k x k table, got shape {table.shape}")
    if not np.all(np.isfinite(table)) or np.any(table < 0):
        raise DataError("kappa_asymptotic_se: counts must be finite and non-negative")
    n = float(table.sum())
    if n == 0:
        return math.nan, math.nan
    p = table / n
    rows, cols = p.sum(axis=1), p.sum(axis=0)
    p_o, p_e = float(np.trace(p)), float(rows @ cols)
    if not 1.0 - p_e > 1e-15:
        return math.nan, math.nan
    kappa = (p_o - p_e) / (1.0 - p_e)
    term_a = float(np.sum(np.diag(p) * (1.0 - (rows + cols) * (1.0 - kappa)) ** 2))
    off = p * (cols[:, None] + rows[None, :]) ** 2  # [i, j] -> p_ij (p_.i + p_j.)^2
    np.fill_diagonal(off, 0.0)
    term_b = (1.0 - kappa) ** 2 * float(off.sum())
    term_c = (kappa - p_e * (1.0 - kappa)) ** 2
    var = (term_a + term_b - term_c) / ((1.0 - p_e) ** 2 * n)
    return float(kappa), float(math.sqrt(var)) if var > 0 else 0.0


def fisher_interval(r: float, n: int, z: float = Z95) -> tuple[float, float]:
    """95% interval of a Pearson correlation r over n pairs by Fisher's z transform (Fisher 1915):
    tanh(atanh(r) -/+ z / sqrt(n - 3)), the interval of `scipy.stats.pearsonr(...).confidence_interval()`, which the
    paper's code prints for MCC (on 0/1 data Pearson's r is the phi coefficient = MCC). NaN for NaN r or n <= 3;
    r = +-1 gives the degenerate interval (r, r)."""
    if not np.isfinite(r) or n <= 3:
        return math.nan, math.nan
    if abs(r) >= 1.0:
        return float(r), float(r)
    centre, half = math.atanh(r), z / math.sqrt(n - 3)
    return math.tanh(centre - half), math.tanh(centre + half)


def standard_error_of_mean(x) -> float:
    """sqrt(sum_i (x_i - mean)^2 / (n - 1)) / sqrt(n), `scipy.stats.sem` (ddof = 1), which the paper's code puts
    after "+-" for raw agreement (mean over instances of a 0/1 agreement). NaN for n < 2."""
    x = np.asarray(x, dtype=float).reshape(-1)
    if x.size < 2:
        return math.nan
    return float(np.std(x, ddof=1) / math.sqrt(x.size))


def jackknife_agreement_se(counts) -> tuple[float, float]:
    """Delete-one-instance jackknife standard errors of (Cohen's kappa, MCC) of two binary methods, when an
    instance contributes several pairs (e.g. all 5 continuations of a prompt), so that pairs of one instance are not
    treated as independent.

    `counts` is an m x 4 array, one row per instance: its pairs' (n11, n10, n01, n00) (a = 1 & b = 1, a = 1 & b = 0,
    a = 0 & b = 1, a = 0 & b = 0). theta_(i) is the statistic of all pairs but instance i's, and

        SE = sqrt((m - 1) / m * sum_i (theta_(i) - mean_i theta_(i))^2)    (Efron & Stein 1981; Quenouille 1956).

    NaN when m < 2 or any leave-one-out statistic is undefined (a method constant without instance i).
    """
    counts = np.asarray(counts, dtype=float).reshape(-1, 4)
    m = counts.shape[0]
    if m < 2:
        return math.nan, math.nan
    rest = counts.sum(axis=0)[None, :] - counts
    n11, n10, n01, n00 = rest.T
    n = rest.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        a1, b1 = n11 + n10, n11 + n01
        expected = a1 * b1 + (n - a1) * (n - b1)
        kappa = (n * (n11 + n00) - expected) / (n * n - expected)
        mcc = (n11 * n00 - n10 * n01) / np.sqrt(a1 * b1 * (n - a1) * (n - b1))
    out = []
    for theta in (kappa, mcc):
        if not np.all(np.isfinite(theta)):
            out.append(math.nan)
        else:
            out.append(float(math.sqrt((m - 1) / m * np.sum((theta - theta.mean()) ** 2))))
    return out[0], out[1]


# ----------------------------------------------------------------------------------------------------------------
# beta distribution by the method of moments
# ----------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BetaFit:
    """Method-of-moments beta fit; ``alpha`` / ``beta`` are NaN (and ``warning`` says why) when undefined."""

    alpha: float
    beta: float
    mean: float
    var: float
    n: int
    warning: str | None = None


def beta_method_of_moments(x) -> BetaFit:
    """Beta(alpha, beta) fitted by the method of moments to values in [0, 1] (e.g. per-instance disagreement
    probabilities; Subramonian et al. 2025):

        m = mean(x),  v = sum_i (x_i - m)^2 / (n - 1),  c = m (1 - m) / v - 1,  alpha = m c,  beta = (1 - m) c.

    The variance is the unbiased sample variance (ddof = 1); the paper does not say which it uses. The fit is
    defined only when 0 < m < 1 and 0 < v < m (1 - m) (strictly, with a relative margin of 1e-9 so that
    v = m (1 - m) up to rounding does not give alpha, beta ~ 1e-16). Otherwise alpha = beta = NaN, ``warning``
    explains why
    (fewer than 2 values, all values 0, all values 1, all values identical, variance too large) and a
    ``DegenerateBetaFitWarning`` is emitted. Note that with ddof = 1 the variance can exceed m (1 - m): values that
    are all 0 or 1 (and not all equal) give v = m (1 - m) n / (n - 1) > m (1 - m), a U shape a beta law cannot
    reach with these moments.

    ``mean`` is NaN for n = 0, ``var`` NaN for n < 2. Raises ValueError for NaN / infinite values or values outside
    [0, 1].
    """
    x = as_probabilities(x, "x")
    n = int(x.size)
    mean = float(np.mean(x)) if n else math.nan
    var = float(np.var(x, ddof=1)) if n >= 2 else math.nan
    reason = None
    if n == 0:
        reason = "empty input: the beta fit is undefined"
    elif n == 1:
        reason = "a single value: the sample variance (ddof = 1) is undefined, so is the beta fit"
    elif np.all(x == 0.0):
        reason = "all values are 0 (mean 0): the beta fit needs 0 < mean < 1"
    elif np.all(x == 1.0):
        reason = "all values are 1 (mean 1): the beta fit needs 0 < mean < 1"
    elif np.all(x == x[0]):
        reason = f"all values are identical ({float(x[0])!r}), variance 0: the beta fit needs a positive variance"
    elif not var > 0.0:
        reason = f"sample variance {var!r} is not positive (underflow): the beta fit needs a positive variance"
    elif not var < mean * (1.0 - mean) * (1.0 - 1e-9):  # equality up to rounding: alpha, beta ~ 0
        reason = (f"sample variance {var:.6g} >= mean (1 - mean) = {mean * (1.0 - mean):.6g}: too large for a beta "
                  "distribution (values concentrated at 0 and 1)")
    if reason is not None:
        warnings.warn(reason, DegenerateBetaFitWarning, stacklevel=2)
        return BetaFit(math.nan, math.nan, mean, var, n, reason)
    common = mean * (1.0 - mean) / var - 1.0
    return BetaFit(float(mean * common), float((1.0 - mean) * common), mean, var, n, None)


# ----------------------------------------------------------------------------------------------------------------
# repetition rate of a generation
# ----------------------------------------------------------------------------------------------------------------

#: A word is a maximal run of Unicode word characters (letters, digits, underscore), possibly joined by internal
#: apostrophes (' or U+2019), so "they're", "xe's" and "don't" are one token each; every other non-space character
#: (punctuation, symbols) is a token of its own.
TOKEN_PATTERN = re.compile(r"\w+(?:['\u2019]\w+)*|[^\w\s]")


def tokenize_words(text: str) -> list[str]:
    """Lowercased tokens of ``text`` (str.lower, then TOKEN_PATTERN): words with internal apostrophes kept whole,
    each punctuation mark / symbol a separate token, whitespace dropped.

    ``"They're here, aren't they?"`` -> ``["they're", "here", ",", "aren't", "they", "?"]``.
    """
    return TOKEN_PATTERN.findall(text.lower())


def repetition_rate(tokens: Sequence[str], max_n: int = 4) -> float:
    """Repetition rate (Bertoldi, Cettolo & Federico; Bertoldi et al. 2014, "Online adaptation to post-edits for
    phrase-based statistical machine translation"; Cettolo, Bertoldi & Federico 2014, "The Repetition Rate of Text
    as a Predictor of the Effectiveness of Machine Translation Adaptation"):

        r_n = (number of distinct n-grams occurring more than once) / (number of distinct n-grams),
        RR  = (prod_{n=1..max_n} r_n)^(1 / max_n).

    Choices (documented here):

    - computed per text (one generation) on the tokens the caller gives (e.g. ``tokenize_words``); the original
      statistic is over a whole document with a sliding window of 1000 words, which is not applied here;
    - an n for which the text has no n-gram at all (fewer than n tokens) is skipped and the geometric mean is taken
      over the remaining n (a 2-token text: RR = (r_1 r_2)^(1/2)); with no n-gram of any order (empty input) RR is
      NaN;
    - any r_n = 0 makes RR = 0 (e.g. all tokens distinct: r_1 = 0, and then every r_n = 0). In particular a text
      of L <= max_n tokens always has RR = 0: its only L-gram occurs once, so r_L = 0 (the skip rule above therefore
      only decides that the empty text is NaN rather than 0/0; it never turns a short text into a positive RR).

    Raises TypeError for a plain string (pass its tokens) and ValueError for max_n < 1.
    """
    if isinstance(tokens, str):
        raise TypeError("repetition_rate takes a sequence of tokens, not a string; use tokenize_words(text)")
    if max_n < 1:
        raise UsageError(f"max_n must be >= 1, got {max_n}")
    tokens = list(tokens)
    rates = []
    for order in range(min(max_n, len(tokens)), 0, -1):  # longest first: r_n = 0 there settles RR = 0 at once
        counts = Counter(zip(*(tokens[i:] for i in range(order))))  # n-grams, counted in C
        rate = (len(counts) - list(counts.values()).count(1)) / len(counts)
        if rate == 0.0:
            return 0.0
        rates.append(rate)
    if not rates:
        return math.nan
    return float(math.prod(rates) ** (1.0 / len(rates)))


# ----------------------------------------------------------------------------------------------------------------
# spread of correctness within an instance
# ----------------------------------------------------------------------------------------------------------------


def instance_std(values_by_instance: Mapping[K, Sequence[float]]) -> dict[K, float]:
    """Per instance, the population standard deviation (ddof = 0) of its values, sqrt(1/k sum_j (x_j - mean)^2),
    e.g. the correctness (0/1) of the k = 5 generations of one instance (Subramonian et al. 2025 measure the spread
    of correctness across the generations of an instance). ddof = 0 because the k generations are the whole
    population of interest for the instance; a 0/1 instance with share p correct has std sqrt(p (1 - p)).

    Keys keep the input order. Raises ValueError naming the instance when it has no values or a NaN / infinite one.
    """
    out: dict[K, float] = {}
    for key, values in values_by_instance.items():
        arr = np.asarray(values, dtype=float).reshape(-1)
        if arr.size == 0:
            raise DataError(f"instance {key!r} has no values")
        if not np.all(np.isfinite(arr)):
            raise DataError(f"instance {key!r} has NaN or infinite values")
        out[key] = float(np.std(arr, ddof=0))
    return out


# ----------------------------------------------------------------------------------------------------------------
# Wilson score interval
# ----------------------------------------------------------------------------------------------------------------


def wilson_interval(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion k / n (Wilson 1927, "Probable Inference, the Law of
    Succession, and Statistical Inference"):

        (p + z^2 / (2n) -/+ z sqrt(p (1 - p) / n + z^2 / (4 n^2))) / (1 + z^2 / n),  p = k / n.

    The same formula as the sample-mode interval of the SQL view ``biaslab/sql/views/contextuality.sql`` (which
    uses z = 1.959964; the default here is z = 1.96). n = 0 gives (NaN, NaN), as the view gives NULL. The bounds
    are clipped to [0, 1] against rounding. Raises ValueError unless k, n are integers with 0 <= k <= n, z > 0.
    """
    if isinstance(k, bool) or isinstance(n, bool) or int(k) != k or int(n) != n:
        raise UsageError(f"k and n must be integers, got k={k!r}, n={n!r}")
    k, n = int(k), int(n)
    if n < 0 or not 0 <= k <= max(n, 0):
        raise UsageError(f"need 0 <= k <= n, got k={k}, n={n}")
    if not z > 0:
        raise UsageError(f"z must be positive, got {z!r}")
    if n == 0:
        return math.nan, math.nan
    p = k / n
    z2 = z * z
    centre = p + z2 / (2 * n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    scale = 1 + z2 / n
    return max(0.0, (centre - half) / scale), min(1.0, (centre + half) / scale)
