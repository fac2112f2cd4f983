"""Closed-form checks of the contextuality building blocks: Bernoulli KL, plug-in MI, Contextuality-by-Default."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

import biaslab.metrics.contextuality.cbd as cbd_module
from biaslab.metrics.contextuality.cbd import MARGINAL_PRODUCT_NOTE, cbd
from biaslab.metrics.contextuality.information import KL_EPSILON, bernoulli_kl_bits, plugin_mutual_information_bits


def test_bernoulli_kl_known_values():
    assert bernoulli_kl_bits(0.5, 0.5) == pytest.approx(0.0)
    # KL(Bern(1/2) || Bern(1/4)) = 1/2 log2(2) + 1/2 log2(2/3)
    assert bernoulli_kl_bits(0.5, 0.25) == pytest.approx(0.5 + 0.5 * math.log2(2 / 3))
    assert bernoulli_kl_bits(0.9, 0.1) == pytest.approx(0.9 * math.log2(9) + 0.1 * math.log2(1 / 9))
    assert bernoulli_kl_bits(0.2, 0.7) != pytest.approx(bernoulli_kl_bits(0.7, 0.2))  # not symmetric


def test_bernoulli_kl_does_not_smooth_p():
    # 0 log 0 = 0: KL(0 || q) = log2(1 / (1 - q)), KL(1 || q) = log2(1 / q), exactly (p is never clipped;
    # clipping p to 1e-6 gave KL(0 || 0.5) = 0.999979 bits)
    assert bernoulli_kl_bits(0.0, 0.5) == 1.0
    assert bernoulli_kl_bits(1.0, 0.5) == 1.0
    assert bernoulli_kl_bits(0.0, 0.2) == pytest.approx(math.log2(1 / 0.8), rel=1e-15)
    assert bernoulli_kl_bits(1.0, 0.2) == pytest.approx(math.log2(5), rel=1e-15)
    # identical distributions: 0, also at the edges (no smoothing needed)
    assert bernoulli_kl_bits(0.0, 0.0) == 0.0 and bernoulli_kl_bits(1.0, 1.0) == 0.0
    assert bernoulli_kl_bits(np.array([0.0, 0.3, 1.0]), np.array([0.0, 0.3, 1.0])).tolist() == [0.0, 0.0, 0.0]
    # only q is smoothed: a reference q in {0, 1} gives a large finite value, log2(1 / eps) for p = 1, q = 0
    assert bernoulli_kl_bits(1.0, 0.0) == pytest.approx(math.log2(1 / KL_EPSILON), rel=1e-12)
    assert bernoulli_kl_bits(0.3, 0.0) == pytest.approx(
        0.3 * math.log2(0.3 / KL_EPSILON) + 0.7 * math.log2(0.7 / (1 - KL_EPSILON)), rel=1e-12)
    # vectorized, and a missing probability stays missing
    out = bernoulli_kl_bits(np.array([0.0, 1.0, np.nan]), np.array([0.5, 0.25, 0.5]))
    assert out[:2] == pytest.approx([1.0, 2.0]) and np.isnan(out[2])


def test_bernoulli_kl_equals_scipy():
    from scipy.special import rel_entr
    from scipy.stats import entropy

    rng = np.random.default_rng(7)
    p = np.concatenate([[0.0, 1.0, 0.0, 1.0, 0.5], rng.random(500)])
    q = np.concatenate([[0.5, 0.5, 0.9, 0.1, 0.5], rng.uniform(0.001, 0.999, 500)])
    ours = bernoulli_kl_bits(p, q)
    by_rel_entr = (rel_entr(p, q) + rel_entr(1 - p, 1 - q)) / math.log(2)
    assert ours == pytest.approx(by_rel_entr, rel=1e-12, abs=1e-15)
    by_entropy = [entropy([a, 1 - a], [b, 1 - b], base=2) for a, b in zip(p, q)]
    assert ours == pytest.approx(by_entropy, rel=1e-12, abs=1e-15)


def test_plugin_mutual_information_closed_form():
    # feature perfectly predicts a deterministic answer: I = H(Y) = 1 bit
    assert plugin_mutual_information_bits(np.array([1.0, 1.0, 0.0, 0.0]), np.array(["a", "a", "b", "b"])) == \
        pytest.approx(1.0)
    # answer independent of the feature: 0 bits
    assert plugin_mutual_information_bits(np.array([0.3, 0.3, 0.3]), np.array([1, 2, 3])) == pytest.approx(0.0)
    # two groups with p = 0.9 and 0.5: I = H(0.7) - (H(0.9) + H(0.5)) / 2
    def h(p):
        return -(p * math.log2(p) + (1 - p) * math.log2(1 - p))
    got = plugin_mutual_information_bits(np.array([0.9, 0.9, 0.5, 0.5]), np.array([0, 0, 1, 1]))
    assert got == pytest.approx(h(0.7) - (h(0.9) + h(0.5)) / 2)


def brute_force_delta(p1, p2, p2_given, p1_given):
    """Enumerate the joint distributions of both contexts directly (independent of biaslab.metrics.cbd)."""
    vals = {"f": 1, "m": -1}
    prob = {"f": lambda p: p, "m": lambda p: 1 - p}
    o1 = {(a, b): prob[a](p1) * prob[b](p2_given[a]) for a, b in itertools.product("fm", repeat=2)}
    o2 = {(a, b): prob[b](p2) * prob[a](p1_given[b]) for a, b in itertools.product("fm", repeat=2)}

    def moments(joint):
        e12 = sum(vals[a] * vals[b] * p for (a, b), p in joint.items())
        e1 = sum(vals[a] * p for (a, _), p in joint.items())
        e2 = sum(vals[b] * p for (_, b), p in joint.items())
        return e12, e1, e2

    (a12, a1, a2), (b12, b1, b2) = moments(o1), moments(o2)
    return abs(a12 - b12) - (abs(a1 - b1) + abs(a2 - b2))


def test_cbd_non_contextual_system_has_delta_at_most_zero():
    rng = np.random.default_rng(0)
    for _ in range(200):
        p1, p2 = rng.random(2)
        # answers ignore the prime: the system is a product of fixed marginals in both contexts
        result = cbd(p1, p2, {"f": p2, "m": p2}, {"f": p1, "m": p1})
        assert result.delta <= 1e-12 and not result.contextual


def test_cbd_copy_one_way_anti_copy_the_other_is_contextual_with_delta_two():
    result = cbd(0.5, 0.5, {"f": 1.0, "m": 0.0}, {"f": 0.0, "m": 1.0})
    assert result.delta == pytest.approx(2.0) and result.contextual
    assert result.e12 == (pytest.approx(1.0), pytest.approx(-1.0))


def test_cbd_matches_brute_force_enumeration_and_hand_value():
    rng = np.random.default_rng(1)
    for _ in range(200):
        p1, p2, a, b, c, d = rng.random(6)
        got = cbd(p1, p2, {"f": a, "m": b}, {"f": c, "m": d}).delta
        assert got == pytest.approx(brute_force_delta(p1, p2, {"f": a, "m": b}, {"f": c, "m": d}), abs=1e-12)
    # hand computation: p1 = 0.6, p2 = 0.4, P(q2 = f | prime f) = 0.9, (| prime m) = 0.2,
    # P(q1 = f | prime f) = 0.7, (| prime m) = 0.5
    # o1: <X1> = 0.2; P(X2 = f) = 0.6*0.9 + 0.4*0.2 = 0.62 -> <X2> = 0.24; <X1X2> = 0.6*0.8 - 0.4*(-0.6) = 0.72
    # o2: <X2> = -0.2; P(X1 = f) = 0.4*0.7 + 0.6*0.5 = 0.58 -> <X1> = 0.16; <X1X2> = 0.4*0.4 - 0.6*0 = 0.16
    # Delta C = |0.72 - 0.16| - (|0.2 - 0.16| + |0.24 + 0.2|) = 0.56 - 0.48 = 0.08
    result = cbd(0.6, 0.4, {"f": 0.9, "m": 0.2}, {"f": 0.7, "m": 0.5})
    assert result.delta == pytest.approx(0.08) and result.contextual
    printed = cbd(0.6, 0.4, {"f": 0.9, "m": 0.2}, {"f": 0.7, "m": 0.5}, variant="marginal-product")
    # <X1X2> = 0.2 * 0.24 = 0.048 in o1, 0.16 * -0.2 = -0.032 in o2: 0.08 - 0.48 = -0.40
    assert printed.delta == pytest.approx(-0.40) and not printed.contextual
    with pytest.raises(ValueError):
        cbd(0.5, 0.5, {"f": 0.5, "m": 0.5}, {"f": 0.5, "m": 0.5}, variant="other")


def test_marginal_product_inequality_on_random_values():
    # |a1 a2 - b1 b2| <= |a1 - b1| + |a2 - b2| for a_i, b_i in [-1, 1]: a1 a2 - b1 b2 = a1 (a2 - b2) + b2 (a1 - b1)
    rng = np.random.default_rng(2024)
    a1, a2, b1, b2 = rng.uniform(-1.0, 1.0, size=(4, 10_000))
    lhs = np.abs(a1 * a2 - b1 * b2)
    assert np.all(lhs <= np.abs(a1 - b1) + np.abs(a2 - b2))
    assert np.allclose(a1 * a2 - b1 * b2, a1 * (a2 - b2) + b2 * (a1 - b1), atol=1e-15)
    # including the corners of [-1, 1]^4 (equality cases)
    corners = np.array(list(itertools.product([-1.0, 0.0, 1.0], repeat=4))).T
    c1, c2, d1, d2 = corners
    assert np.all(np.abs(c1 * c2 - d1 * d2) <= np.abs(c1 - d1) + np.abs(c2 - d2))


def test_marginal_product_variant_is_never_contextual():
    # 10,000 random systems (p1, p2 and the four primed probabilities uniform in [0, 1], seeded): Delta C <= 0
    rng = np.random.default_rng(2025)
    deltas = []
    for p1, p2, a, b, c, d in rng.random((10_000, 6)):
        result = cbd(p1, p2, {"f": a, "m": b}, {"f": c, "m": d}, variant="marginal-product")
        deltas.append(result.delta)
        assert not result.contextual
    assert max(deltas) <= 0.0
    # while the joint variant of the same kind of systems is contextual for some of them
    joint = [cbd(p1, p2, {"f": a, "m": b}, {"f": c, "m": d}).contextual for p1, p2, a, b, c, d in rng.random((2000, 6))]
    assert any(joint)
    # deterministic systems (probabilities in {0, 1}): the copy / anti-copy system has Delta C = 2 jointly and
    # <= 0 with the marginal product
    for values in itertools.product([0.0, 1.0], repeat=6):
        p1, p2, a, b, c, d = values
        assert cbd(p1, p2, {"f": a, "m": b}, {"f": c, "m": d}, variant="marginal-product").delta <= 1e-12
    assert "never be contextual" in MARGINAL_PRODUCT_NOTE
    assert "can NEVER be contextual" in cbd_module.__doc__ and "Delta C <= 0" in cbd_module.__doc__


def test_plugin_mi_equals_scikit_learn_on_hard_answers():
    from sklearn.feature_selection import mutual_info_classif

    rng = np.random.default_rng(3)
    feature = rng.integers(0, 3, size=400)
    y = (rng.random(400) < np.array([0.2, 0.5, 0.9])[feature]).astype(int)
    ours = plugin_mutual_information_bits(y.astype(float), feature)
    sk = mutual_info_classif(feature.reshape(-1, 1), y, discrete_features=[True])[0] / math.log(2)
    assert ours == pytest.approx(sk, abs=1e-12)


def test_spearman_table_equals_scipy():
    import pandas as pd
    from scipy.stats import spearmanr

    from biaslab.metrics.contextuality.stats import spearman_table

    rng = np.random.default_rng(4)
    n = 50
    frame = pd.DataFrame({"model_key": "m", "mode": "exact", "temperature": 0.5, "top_k": 40, "top_p": 1.0,
                          "prompt_version": "v", "max_new_tokens": 6,
                          "context": "unprimed", "option_order": "MF", "p_f": rng.random(n),
                          "stereotype_rating": rng.random(n)})
    frame.loc[::7, "stereotype_rating"] = np.nan  # unrated templates are left out
    got = spearman_table(frame).iloc[0]
    rated = frame.dropna()
    rho, p = spearmanr(rated["p_f"], rated["stereotype_rating"])
    assert got["n"] == len(rated) and got["spearman_rho"] == pytest.approx(rho) and got["p_value"] == pytest.approx(p)


def test_bootstrap_mi_by_counts_equals_scikit_learn():
    from sklearn.feature_selection import mutual_info_classif

    from biaslab.metrics.contextuality.stats import _mi_counts_bits

    rng = np.random.default_rng(5)
    codes = rng.integers(0, 4, size=1000)
    y = (rng.random(1000) < np.array([0.1, 0.4, 0.6, 0.95])[codes]).astype(int)
    sk = mutual_info_classif(codes.reshape(-1, 1), y, discrete_features=[True])[0] / math.log(2)
    assert _mi_counts_bits(codes, y) == pytest.approx(sk, abs=1e-12)


def _cbd_rows(contextual_by_setting: dict[str, set[int]], pairs: int = 6):
    """cbd rows (joint variant) of settings that differ in model_key: pair p contextual where listed."""
    import pandas as pd

    rows = []
    for key, contextual in contextual_by_setting.items():
        for pair in range(pairs):
            rows.append({"model_key": key, "mode": "exact", "temperature": 0.5, "top_k": 40, "top_p": 1.0,
                         "prompt_version": "v", "max_new_tokens": 6, "variant": "joint", "pair_id": pair,
                         "contextual": pair in contextual})
    return pd.DataFrame(rows)


def test_model_overlap_lists_each_pair_of_different_settings_once_with_its_jaccard():
    """Issue 36: a setting compared with itself (Jaccard 1 by construction) is not a result; three settings give
    three pairs, each Jaccard |A & B| / |A | B| computed by hand."""
    from biaslab.metrics.contextuality.stats import model_overlap

    table = model_overlap(_cbd_rows({"a": {0, 1, 2}, "b": {1, 2, 3, 4}, "c": set()}))
    got = {(r.setting_a.split()[0], r.setting_b.split()[0]): (r.both, r.jaccard) for r in table.itertuples()}
    assert set(got) == {("a", "b"), ("a", "c"), ("b", "c")}
    assert got[("a", "b")] == (2, 2 / 5) and got[("a", "c")] == (0, 0.0) and got[("b", "c")] == (0, 0.0)
    assert "empty_because" not in table.attrs


def test_model_overlap_of_one_setting_is_empty_and_says_why():
    from biaslab.metrics.contextuality.stats import model_overlap

    table = model_overlap(_cbd_rows({"a": {0, 1}}))
    assert table.empty and "jaccard" in table.columns
    assert table.attrs["empty_because"].startswith("1 collection setting; a comparison needs at least 2")
