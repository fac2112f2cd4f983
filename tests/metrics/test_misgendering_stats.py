"""Hand-computed and reference checks of biaslab.metrics.misgendering_stats (agreement, beta MoM, repetition rate,
per-instance std, Wilson interval)."""

from __future__ import annotations

import math
import warnings
from collections import Counter
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from sklearn.metrics import cohen_kappa_score, matthews_corrcoef
from statsmodels.stats.proportion import proportion_confint

from biaslab.metrics.misgendering.stats import (Agreement, BetaFit, DegenerateAgreementWarning,
                                                DegenerateBetaFitWarning, agreement, beta_method_of_moments,
                                                instance_std, repetition_rate, tokenize_words, wilson_interval)


def sk_kappa(a, b) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(cohen_kappa_score(a, b))


def sk_mcc(a, b) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(matthews_corrcoef(a, b))


def quiet_agreement(a, b) -> Agreement:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DegenerateAgreementWarning)
        return agreement(a, b)


# ----------------------------------------------------------------------------------------------------------------
# agreement
# ----------------------------------------------------------------------------------------------------------------


def test_agreement_hand_table():
    #            a: 1 1 1 0 0 0 1 0 1 1
    #            b: 1 1 0 0 0 1 1 0 0 1
    # 2x2 table:            b=1   b=0
    #              a=1   TP=4  FP=2    (a has 6 ones)
    #              a=0   FN=1  TN=3    (a has 4 zeros)
    #                    (5)   (5)
    a = np.array([1, 1, 1, 0, 0, 0, 1, 0, 1, 1])
    b = np.array([1, 1, 0, 0, 0, 1, 1, 0, 0, 1])
    p_o = Fraction(4 + 3, 10)
    p_e = Fraction(6, 10) * Fraction(5, 10) + Fraction(4, 10) * Fraction(5, 10)  # = 1/2
    kappa = (p_o - p_e) / (1 - p_e)
    assert kappa == Fraction(2, 5)
    mcc_num, mcc_den_sq = 4 * 3 - 2 * 1, (4 + 2) * (4 + 1) * (3 + 2) * (3 + 1)  # 10 / sqrt(600) = 1 / sqrt(6)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DegenerateAgreementWarning)  # nothing degenerate here
        res = agreement(a, b)
    assert (res.n, res.n11, res.n10, res.n01, res.n00) == (10, 4, 2, 1, 3)
    assert res.raw_agreement == pytest.approx(0.7, abs=1e-15)
    assert res.cohen_kappa == pytest.approx(0.4, abs=1e-15)
    assert res.mcc == pytest.approx(mcc_num / math.sqrt(mcc_den_sq), abs=1e-15)
    assert res.mcc == pytest.approx(1 / math.sqrt(6), abs=1e-15)
    assert res.warnings == () and not res.degenerate
    # the same values from scikit-learn, and with bools / swapped arguments
    assert res.cohen_kappa == pytest.approx(cohen_kappa_score(a, b), abs=1e-12)
    assert res.mcc == pytest.approx(matthews_corrcoef(b, a), abs=1e-12)
    swapped = agreement(b.astype(bool), a.astype(bool))
    assert (swapped.raw_agreement, swapped.cohen_kappa) == pytest.approx((res.raw_agreement, res.cohen_kappa))
    assert swapped.mcc == pytest.approx(res.mcc)
    assert (swapped.n10, swapped.n01) == (res.n01, res.n10)


def test_agreement_hand_perfect_disagreement_and_agreement():
    # TP=0 TN=0 FP=2 FN=2: p_o = 0, p_e = 1/2 * 1/2 + 1/2 * 1/2 = 1/2, kappa = -1/2 / 1/2 = -1, MCC = -4 / sqrt(16) = -1
    res = agreement([1, 0, 1, 0], [0, 1, 0, 1])
    assert (res.raw_agreement, res.cohen_kappa, res.mcc) == (0.0, -1.0, -1.0)
    # TP=2 TN=1: p_o = 1, p_e = 4/9 + 1/9 = 5/9, kappa = 1, MCC = 2 / sqrt(2*2*1*1) = 1
    res = agreement([1, 1, 0], [1, 1, 0])
    assert (res.raw_agreement, res.cohen_kappa, res.mcc) == (1.0, 1.0, 1.0)
    # TP=1 FP=1 FN=1 TN=2: p_o = 3/5, p_e = 2/5*2/5 + 3/5*3/5 = 13/25, kappa = (2/25)/(12/25) = 1/6,
    # MCC = (1*2 - 1*1) / sqrt(2*2*3*3) = 1/6
    res = agreement([1, 1, 0, 0, 0], [1, 0, 1, 0, 0])
    assert res.raw_agreement == pytest.approx(3 / 5, abs=1e-15)
    assert res.cohen_kappa == pytest.approx(1 / 6, abs=1e-15)
    assert res.mcc == pytest.approx(1 / 6, abs=1e-15)


def test_agreement_matches_sklearn_on_random_arrays():
    rng = np.random.default_rng(20250417)
    n_regular = n_degenerate = 0
    for _ in range(200):
        n = int(rng.integers(1, 40))
        pa, pb = rng.choice([0.0, 0.05, 0.3, 0.5, 0.8, 1.0], size=2)
        a = (rng.random(n) < pa).astype(int)
        # b copies a on a random share of samples so that kappa / MCC take many values, not only ~0
        b = np.where(rng.random(n) < rng.random(), a, (rng.random(n) < pb).astype(int))
        res = quiet_agreement(a, b)
        assert res.n == n
        assert res.raw_agreement == np.mean(a == b)
        assert res.n11 + res.n10 + res.n01 + res.n00 == n
        a_const, b_const = np.unique(a).size == 1, np.unique(b).size == 1
        if not (a_const or b_const):
            n_regular += 1
            assert res.warnings == ()
            assert res.cohen_kappa == pytest.approx(cohen_kappa_score(a, b), abs=1e-12)
            assert res.mcc == pytest.approx(matthews_corrcoef(a, b), abs=1e-12)
        else:
            n_degenerate += 1
            assert math.isnan(res.mcc) and res.warnings
            assert sk_mcc(a, b) == 0.0  # scikit-learn's documented replacement, where we return NaN
            if a_const and b_const and a[0] == b[0]:
                assert math.isnan(res.cohen_kappa) and math.isnan(sk_kappa(a, b))
            else:
                assert res.cohen_kappa == 0.0 == sk_kappa(a, b)
    assert n_regular >= 100 and n_degenerate >= 10  # both branches really exercised


@pytest.mark.parametrize(
    "a, b, constant, kappa",
    [
        ([1, 1, 1, 1], [1, 0, 1, 0], ["method a is constant (all 1)"], 0.0),
        ([0, 1, 1, 0], [0, 0, 0, 0], ["method b is constant (all 0)"], 0.0),
        ([1, 1, 1], [0, 0, 0], ["method a is constant (all 1)", "method b is constant (all 0)"], 0.0),
        ([1, 1, 1], [1, 1, 1], ["method a is constant (all 1)", "method b is constant (all 1)"], math.nan),
        ([0, 0], [0, 0], ["method a is constant (all 0)", "method b is constant (all 0)"], math.nan),
        ([True], [True], ["method a is constant (all 1)", "method b is constant (all 1)"], math.nan),
    ],
)
def test_agreement_degenerate_gives_nan_and_warning(a, b, constant, kappa):
    with pytest.warns(DegenerateAgreementWarning) as record:
        res = agreement(a, b)
    assert res.raw_agreement == np.mean(np.asarray(a) == np.asarray(b))
    assert math.isnan(res.mcc)
    if math.isnan(kappa):
        assert math.isnan(res.cohen_kappa)
        assert any("kappa is undefined" in w for w in res.warnings)
    else:
        assert res.cohen_kappa == kappa
        assert any("kappa is 0 by construction" in w for w in res.warnings)
    assert any("MCC is undefined" in w for w in res.warnings)
    for name in constant:
        assert all(name in w for w in res.warnings)
    emitted = [str(w.message) for w in record if issubclass(w.category, DegenerateAgreementWarning)]
    assert emitted == list(res.warnings)
    assert res.degenerate


def test_agreement_empty_and_bad_input():
    with pytest.warns(DegenerateAgreementWarning, match="empty"):
        res = agreement([], [])
    assert res.n == 0 and res.warnings and "empty" in res.warnings[0]
    assert all(math.isnan(v) for v in (res.raw_agreement, res.cohen_kappa, res.mcc))
    with pytest.raises(ValueError, match="length"):
        agreement([1, 0, 1], [1, 0])
    with pytest.raises(ValueError, match="NaN"):
        agreement([1.0, np.nan], [1, 0])
    with pytest.raises(ValueError, match="NaN"):
        agreement([1, 0], [np.nan, 0.0])
    with pytest.raises(ValueError, match="0 and 1"):
        agreement([1, 2], [1, 0])
    with pytest.raises(ValueError, match="0 and 1"):
        agreement(["x", "y"], [1, 0])


# ----------------------------------------------------------------------------------------------------------------
# beta method of moments
# ----------------------------------------------------------------------------------------------------------------


def test_beta_mom_hand():
    # x = 0.2, 0.4, 0.6: m = 0.4, v = (0.04 + 0 + 0.04) / 2 = 0.04, c = 0.24 / 0.04 - 1 = 5 -> alpha 2, beta 3
    fit = beta_method_of_moments(np.array([0.2, 0.4, 0.6]))
    assert isinstance(fit, BetaFit) and fit.warning is None and fit.n == 3
    assert (fit.mean, fit.var) == pytest.approx((0.4, 0.04), abs=1e-15)
    assert (fit.alpha, fit.beta) == pytest.approx((2.0, 3.0), rel=1e-12)
    # x = 0.1, 0.3: m = 0.2, v = 0.02 / 1, c = 0.16 / 0.02 - 1 = 7 -> alpha 1.4, beta 5.6
    # (ddof = 0 would give v = 0.01, c = 15, alpha 3.0, beta 12.0)
    fit = beta_method_of_moments([0.1, 0.3])
    assert (fit.alpha, fit.beta) == pytest.approx((1.4, 5.6), rel=1e-12)
    # values exactly 0 and 1 are allowed when the moments fit: 0, 0.5, 0.5, 1 -> m = 0.5, v = 0.5 / 3 = 1/6,
    # c = 0.25 * 6 - 1 = 0.5 -> alpha = beta = 0.25
    fit = beta_method_of_moments([0.0, 0.5, 0.5, 1.0])
    assert (fit.alpha, fit.beta) == pytest.approx((0.25, 0.25), rel=1e-12)


def test_beta_mom_moments_match_scipy_distribution():
    rng = np.random.default_rng(7)
    for _ in range(20):
        x = rng.beta(rng.uniform(0.3, 6), rng.uniform(0.3, 6), size=int(rng.integers(5, 200)))
        fit = beta_method_of_moments(x)
        dist = stats.beta(fit.alpha, fit.beta)
        assert dist.mean() == pytest.approx(np.mean(x), rel=1e-10)
        assert dist.var() == pytest.approx(np.var(x, ddof=1), rel=1e-10)


@pytest.mark.parametrize("alpha, beta", [(2.0, 5.0), (0.5, 0.5), (5.0, 1.5), (0.3, 3.0)])
def test_beta_mom_recovers_parameters(alpha, beta):
    x = stats.beta.rvs(alpha, beta, size=20_000, random_state=np.random.default_rng(12345))
    fit = beta_method_of_moments(x)
    assert fit.warning is None
    assert fit.alpha == pytest.approx(alpha, rel=0.05)
    assert fit.beta == pytest.approx(beta, rel=0.05)
    # the fitted scipy distribution has exactly the sample mean and the ddof = 1 sample variance
    assert stats.beta(fit.alpha, fit.beta).mean() == pytest.approx(np.mean(x), rel=1e-10)
    assert stats.beta(fit.alpha, fit.beta).var() == pytest.approx(np.var(x, ddof=1), rel=1e-10)


@pytest.mark.parametrize(
    "x, reason",
    [
        ([], "empty"),
        ([0.3], "single value"),
        ([0.0, 0.0, 0.0], "all values are 0"),
        ([1.0, 1.0], "all values are 1"),
        ([0.3, 0.3, 0.3], "identical"),
        ([0.1] * 7, "identical"),  # float mean of identical values need not equal them exactly
        ([0.0, 1.0], "too large"),  # v = 1/2 > m(1 - m) = 1/4
        ([0.0, 0.0, 1.0, 1.0, 1.0], "too large"),  # only 0 / 1: v = m(1-m) n / (n-1)
        ([0.0, 0.9, 1.0], "too large"),
    ],
)
def test_beta_mom_degenerate(x, reason):
    with pytest.warns(DegenerateBetaFitWarning, match=reason):
        fit = beta_method_of_moments(x)
    assert math.isnan(fit.alpha) and math.isnan(fit.beta)
    assert reason in fit.warning
    assert fit.n == len(x)
    if len(x) >= 1:
        assert fit.mean == pytest.approx(np.mean(x))
    if len(x) >= 2:
        assert fit.var == pytest.approx(np.var(x, ddof=1))


def test_beta_mom_bad_input():
    for bad in ([0.2, 1.1], [-0.1, 0.5], [0.2, np.nan], [np.inf]):
        with pytest.raises(ValueError):
            beta_method_of_moments(bad)


# ----------------------------------------------------------------------------------------------------------------
# repetition rate
# ----------------------------------------------------------------------------------------------------------------


def reference_repetition_rate(tokens, max_n=4):
    """Independent version: n-grams via zip of shifted lists, Counter of counts, geometric mean via logs."""
    log_sum, used = 0.0, 0
    for n in range(1, max_n + 1):
        grams = Counter(zip(*(tokens[i:] for i in range(n))))
        if len(grams) == 0:
            continue
        repeated = len([g for g, c in grams.items() if c >= 2])
        used += 1
        if repeated == 0:
            return 0.0
        log_sum += math.log(repeated / len(grams))
    return math.exp(log_sum / used) if used else float("nan")


@pytest.mark.parametrize(
    "text, max_n, expected",
    [
        # a b a b a b: 1-grams a:3 b:3 -> 2/2; 2-grams ab:3 ba:2 -> 2/2; 3-grams aba:2 bab:2 -> 2/2;
        # 4-grams abab:2 baba:1 -> 1/2; RR = (1/2)^(1/4)
        ("a b a b a b", 4, 0.5 ** 0.25),
        ("a b a b a b", 2, 1.0),
        # a b c d a b c d: r1 = 4/4, r2 = 3/4 (da once), r3 = 2/4, r4 = 1/4 -> RR = (3/32)^(1/4)
        ("a b c d a b c d", 4, (3 / 32) ** 0.25),
        # a b c a b c, max_n 3: r1 = 3/3, r2 = 2/3 (ca once), r3 = 1/3 -> (2/9)^(1/3)
        ("a b c a b c", 3, (2 / 9) ** (1 / 3)),
        # the cat sat on the mat: r1 = 1/5 (only "the" twice), every bigram once -> r2 = 0 -> RR = 0
        ("the cat sat on the mat", 4, 0.0),
        ("a b c d e f", 4, 0.0),  # all distinct: r1 = 0
        # 3 tokens < max_n: 4-grams skipped, but the single 3-gram occurs once -> r3 = 0 -> RR = 0
        ("a a a", 4, 0.0),
        # a a a, max_n 2: r1 = 1/1, r2 = (aa:2) 1/1 -> 1
        ("a a a", 2, 1.0),
    ],
)
def test_repetition_rate_hand(text, max_n, expected):
    tokens = text.split()
    assert repetition_rate(tokens, max_n) == pytest.approx(expected, abs=1e-15)
    assert reference_repetition_rate(tokens, max_n) == pytest.approx(expected, abs=1e-15)


def test_repetition_rate_matches_reference_on_random_tokens():
    rng = np.random.default_rng(3)
    vocab = ["he", "she", "they", "xe", "is", "a", "nurse", ".", ","]
    positive = 0
    for _ in range(300):
        size = int(rng.integers(0, 60))
        vocab_size = int(rng.integers(1, len(vocab) + 1))
        tokens = [vocab[i] for i in rng.integers(0, vocab_size, size=size)]
        max_n = int(rng.integers(1, 6))
        got, want = repetition_rate(tokens, max_n), reference_repetition_rate(tokens, max_n)
        if size == 0:
            assert math.isnan(got) and math.isnan(want)
        else:
            assert got == pytest.approx(want, rel=1e-12, abs=1e-15)
            positive += got > 0
    assert positive >= 50  # the comparison is not only over zeros


def test_repetition_rate_edge_cases():
    assert math.isnan(repetition_rate([]))
    assert repetition_rate(["a"]) == 0.0  # one unigram, seen once
    assert repetition_rate(("x", "x")) == 0.0  # r1 = 1 but the single bigram occurs once
    with pytest.raises(TypeError):
        repetition_rate("a b a b")
    with pytest.raises(ValueError):
        repetition_rate(["a"], max_n=0)


def test_tokenize_words():
    assert tokenize_words("They're here, aren't they?") == ["they're", "here", ",", "aren't", "they", "?"]
    assert tokenize_words("Xe said: XYR book  is 2nd!") == ["xe", "said", ":", "xyr", "book", "is", "2nd", "!"]
    assert tokenize_words("xe\u2019s  ...") == ["xe\u2019s", ".", ".", "."]
    assert tokenize_words("'quoted'") == ["'", "quoted", "'"]
    assert tokenize_words("   ") == []
    text = "Alex said xe would come. Xe came, and xe was happy; xe was happy."
    tokens = tokenize_words(text)
    assert tokens.count("xe") == 4 and tokens.count(".") == 2
    assert repetition_rate(tokens) == pytest.approx(reference_repetition_rate(tokens))


# ----------------------------------------------------------------------------------------------------------------
# per-instance standard deviation
# ----------------------------------------------------------------------------------------------------------------


def test_instance_std_hand_and_numpy():
    data = {"i1": [1, 1, 1, 1, 1], "i2": [1, 0, 1, 0, 1], "i3": [0, 0, 0, 0, 1], ("i", 4): [0.5, 1.5]}
    got = instance_std(data)
    assert list(got) == list(data)
    # 0/1 with share p correct: sqrt(p (1 - p)); 3/5 -> sqrt(6)/5, 1/5 -> 2/5; {0.5, 1.5}: 0.5
    assert got == pytest.approx({"i1": 0.0, "i2": math.sqrt(6) / 5, "i3": 0.4, ("i", 4): 0.5}, abs=1e-15)

    rng = np.random.default_rng(11)
    groups = {g: rng.integers(0, 2, size=int(rng.integers(1, 8))).tolist() for g in range(100)}
    groups.update({f"f{g}": rng.random(int(rng.integers(1, 8))).tolist() for g in range(20)})
    got = instance_std(groups)
    long = pd.DataFrame([(g, v) for g, values in groups.items() for v in values], columns=["instance", "correct"])
    by_pandas = long.groupby("instance", sort=False)["correct"].std(ddof=0)
    assert len(by_pandas) == len(got) == 120
    for g, values in groups.items():
        assert got[g] == pytest.approx(np.std(values, ddof=0), abs=1e-15)
        assert got[g] == pytest.approx(by_pandas[g], abs=1e-12)
    assert any(got[g] != pytest.approx(np.std(v, ddof=1)) for g, v in groups.items() if len(v) > 1)  # ddof matters


def test_instance_std_bad_input():
    with pytest.raises(ValueError, match="'b'"):
        instance_std({"a": [1, 0], "b": []})
    with pytest.raises(ValueError, match="'a'"):
        instance_std({"a": [1, np.nan]})
    assert instance_std({}) == {}


# ----------------------------------------------------------------------------------------------------------------
# Wilson interval
# ----------------------------------------------------------------------------------------------------------------


def test_wilson_hand_and_statsmodels():
    # k = 0, n = 10, z = 2: centre (0 + 4/20) / (1 + 4/10) = 1/7, half 2 sqrt(4/400) / 1.4 = 1/7 -> [0, 2/7]
    low, high = wilson_interval(0, 10, z=2.0)
    assert low == pytest.approx(0.0, abs=1e-15) and high == pytest.approx(2 / 7, abs=1e-15)
    # k = 5, n = 10, z = 2: centre 1/2, half 2 sqrt(1/40 + 1/100) / 1.4 = sqrt(0.035) / 0.7
    low, high = wilson_interval(5, 10, z=2.0)
    assert (low, high) == pytest.approx((0.5 - math.sqrt(0.035) / 0.7, 0.5 + math.sqrt(0.035) / 0.7), abs=1e-15)
    for k, n in [(0, 1), (1, 1), (3, 10), (17, 40), (199, 200), (500, 1000)]:
        for alpha in (0.05, 0.1):
            z = float(stats.norm.ppf(1 - alpha / 2))
            assert wilson_interval(k, n, z) == pytest.approx(proportion_confint(k, n, alpha, method="wilson"),
                                                             abs=1e-12)
    assert all(math.isnan(v) for v in wilson_interval(0, 0))
    for bad in [(3, 2), (-1, 5), (1.5, 3), (1, -1)]:
        with pytest.raises(ValueError):
            wilson_interval(*bad)
    with pytest.raises(ValueError):
        wilson_interval(1, 2, z=0.0)


def test_beta_variance_equal_to_its_bound_up_to_rounding_is_degenerate():
    """x = (0, 2/3): m = 1/3, v = 2/9 = m (1 - m) exactly in theory; rounding must not give alpha ~ 1e-16."""
    import warnings as _warnings

    with _warnings.catch_warnings():
        _warnings.simplefilter("ignore")
        fit = beta_method_of_moments([0.0, 2.0 / 3.0])
    assert np.isnan(fit.alpha) and np.isnan(fit.beta) and "too large" in fit.warning
