"""The paired statistics of `biaslab compare` (biaslab.metrics.compare.paired) against independent
implementations: statsmodels' multipletests and mcnemar, scipy's spearmanr, naive bootstrap and permutation loops
that draw the same random numbers one resample at a time, and full enumeration."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy.stats import spearmanr
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.multitest import multipletests

from biaslab.metrics.compare.paired import (Paired, benjamini_hochberg, binary_difference, holm, mcnemar_exact,
                                            mean_difference, spearman_rows, statistic_difference)


def test_holm_and_bh_equal_statsmodels():
    rng = np.random.default_rng(3)
    for m in (1, 2, 7, 40):
        p = rng.uniform(0, 0.2, m) ** 2
        p[rng.random(m) < 0.2] = p[0]  # ties
        for ours, method in ((holm, "holm"), (benjamini_hochberg, "fdr_bh")):
            assert np.allclose(ours(p), multipletests(p, method=method)[1], rtol=0, atol=1e-15)
    # by hand: p = (0.01, 0.04, 0.03): Holm 0.03, 0.06, 0.06; BH 0.03, 0.04, 0.04
    assert np.allclose(holm(np.array([0.01, 0.04, 0.03])), [0.03, 0.06, 0.06])
    assert np.allclose(benjamini_hochberg(np.array([0.01, 0.04, 0.03])), [0.03, 0.04, 0.04])
    # NaN stays NaN and does not count in m
    with_nan = holm(np.array([0.01, np.nan, 0.03]))
    assert np.isnan(with_nan[1]) and np.allclose(with_nan[[0, 2]], [0.02, 0.03])


def test_mcnemar_equals_statsmodels_exact():
    rng = np.random.default_rng(5)
    for _ in range(20):
        a = rng.random(60) < 0.5
        b = np.where(rng.random(60) < 0.7, a, rng.random(60) < 0.3)
        n10, n01, p = mcnemar_exact(a, b)
        table = [[int((a & b).sum()), n10], [n01, int((~a & ~b).sum())]]
        assert p == pytest.approx(mcnemar(table, exact=True).pvalue, rel=1e-12)
    assert mcnemar_exact(np.array([1, 0]), np.array([1, 0])) == (0, 0, 1.0)


def _clustered(rng, units: int, size: int, shift: float):
    cluster = np.repeat(np.arange(units), size)
    base = rng.normal(0, 1, units)[cluster]
    a = base + rng.normal(shift, 0.5, units * size)
    b = base + rng.normal(0, 0.5, units * size)
    return Paired(a, b, cluster)


def test_mean_difference_against_naive_loops():
    rng = np.random.default_rng(11)
    pairs = _clustered(rng, units=30, size=3, shift=0.2)
    result = mean_difference(pairs, bootstrap=400, permutations=300, rng=np.random.default_rng(9))
    d = pairs.a - pairs.b
    assert result.estimate == pytest.approx(pairs.a.mean() - pairs.b.mean(), abs=1e-12)
    assert result.effect_size == pytest.approx(d.mean() / d.std(ddof=1))
    # the same random numbers, one resample at a time: units drawn with replacement, then labels swapped per unit
    naive = np.random.default_rng(9)
    boot = []
    for _ in range(400):
        drawn = naive.integers(0, 30, size=30)
        boot.append(np.concatenate([d[pairs.cluster == u] for u in drawn]).mean())
    assert (result.ci_low, result.ci_high) == pytest.approx(tuple(np.quantile(boot, [0.025, 0.975])), abs=1e-12)
    extreme = 0
    for _ in range(300):
        swap = naive.random(30) < 0.5
        flipped = np.where(swap[pairs.cluster], -d, d).mean()
        extreme += abs(flipped) >= abs(d.mean()) - 1e-9
    assert result.p_value == pytest.approx((1 + extreme) / 301, abs=1e-12)


def test_exact_permutation_enumerates_every_assignment():
    rng = np.random.default_rng(2)
    pairs = _clustered(rng, units=6, size=2, shift=0.4)
    result = mean_difference(pairs, bootstrap=10, permutations=5000, rng=np.random.default_rng(0))
    d = pairs.a - pairs.b
    sums = np.bincount(pairs.cluster, weights=d)
    stats = [abs(np.dot(signs, sums)) / len(d) for signs in itertools.product((-1, 1), repeat=6)]
    assert result.p_value == pytest.approx(np.mean(np.array(stats) >= abs(d.mean()) - 1e-12), abs=1e-12)


def test_binary_difference_reports_mcnemar_and_cohens_g():
    a = np.array([1, 1, 1, 1, 0, 0, 1, 0, 1, 1], dtype=float)
    b = np.array([0, 0, 0, 1, 0, 1, 1, 0, 0, 1], dtype=float)
    result = binary_difference(Paired(a, b, np.arange(10)), bootstrap=50, rng=np.random.default_rng(1))
    # n10 = 4, n01 = 1
    assert result.estimate == pytest.approx(0.3)
    assert result.p_value == pytest.approx(mcnemar([[3, 4], [1, 2]], exact=True).pvalue)
    assert result.effect_size == pytest.approx(4 / 5 - 0.5)
    assert result.test == "mcnemar"


def test_spearman_rows_equals_scipy_with_ties():
    rng = np.random.default_rng(4)
    x = np.round(rng.random((5, 17)), 1)
    z = np.round(rng.random(17), 1)
    rho = spearman_rows(x, z)
    for row, value in zip(x, rho):
        assert value == pytest.approx(spearmanr(row, z).statistic, abs=1e-12)


def test_statistic_difference_against_naive_loops():
    rng = np.random.default_rng(8)
    units, size = 25, 2
    cluster = np.repeat(np.arange(units), size)
    z = rng.random(units * size)
    a = z + rng.normal(0, 0.3, units * size)
    b = z + rng.normal(0, 0.8, units * size)
    pairs = Paired(a, b, cluster, z)
    result = statistic_difference(pairs, spearman_rows, bootstrap=200, permutations=150,
                                  rng=np.random.default_rng(6), effect="cohen_q")
    rho_a, rho_b = spearmanr(a, z).statistic, spearmanr(b, z).statistic
    assert result.estimate == pytest.approx(rho_a - rho_b, abs=1e-12)
    assert result.effect_size == pytest.approx(np.arctanh(rho_a) - np.arctanh(rho_b), abs=1e-12)
    naive = np.random.default_rng(6)
    members = [np.flatnonzero(cluster == u) for u in range(units)]
    boot = []
    for _ in range(200):
        picked = np.concatenate([members[u] for u in naive.integers(0, units, size=units)])
        boot.append(spearmanr(a[picked], z[picked]).statistic - spearmanr(b[picked], z[picked]).statistic)
    assert (result.ci_low, result.ci_high) == pytest.approx(tuple(np.quantile(boot, [0.025, 0.975])), abs=1e-12)
    extreme = 0
    for _ in range(150):
        swap = (naive.random(units) < 0.5)[cluster]
        t = spearmanr(np.where(swap, b, a), z).statistic - spearmanr(np.where(swap, a, b), z).statistic
        extreme += abs(t) >= abs(rho_a - rho_b) - 1e-9
    assert result.p_value == pytest.approx((1 + extreme) / 151, abs=1e-12)


def test_statistic_difference_with_units_of_different_sizes():
    """Units of unequal size resample one at a time: the same draws as the naive loop."""
    rng = np.random.default_rng(12)
    cluster = np.array([0, 0, 0, 1, 2, 2, 3, 4, 4, 4, 5, 6])
    a, b = rng.random(12), rng.random(12)

    def mean_rows(values, covariate):
        return values.mean(axis=1)

    result = statistic_difference(Paired(a, b, cluster), mean_rows, bootstrap=100, permutations=100,
                                  rng=np.random.default_rng(1))
    naive = np.random.default_rng(1)
    members = [np.flatnonzero(cluster == u) for u in range(7)]
    boot = []
    for _ in range(100):
        picked = np.concatenate([members[u] for u in naive.integers(0, 7, size=7)])
        boot.append(a[picked].mean() - b[picked].mean())
    assert (result.ci_low, result.ci_high) == pytest.approx(tuple(np.quantile(boot, [0.025, 0.975])), abs=1e-12)
    assert result.estimate == pytest.approx(a.mean() - b.mean())
