"""Information-theoretic quantities for binary answers: Bernoulli KL divergence, plug-in mutual information, and
scikit-learn's k-NN mutual information estimator for one continuous feature, computed in one dimension."""

from __future__ import annotations

import numpy as np

from ...errors import DataError

#: Smoothing of the REFERENCE probability q only: q is clipped to [KL_EPSILON, 1 - KL_EPSILON] before the KL
#: divergence, so that a reference q in {0, 1} (an unprimed answer that is always or never feminine) gives a large
#: finite value (at most log2(1 / KL_EPSILON) = 19.93 bits) instead of infinity. The first argument p is never
#: smoothed (0 log 0 = 0, so KL(0 || 0.5) = 1 bit exactly), and q is left as it is where q == p (identical
#: distributions need no smoothing: KL(0 || 0) = KL(1 || 1) = 0).
KL_EPSILON = 1e-6


def _plogp_over_q(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """p log2(p / q) with the convention 0 log 0 = 0 (and 0 log(0 / 0) = 0)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(p > 0, p * np.log2(np.where(p > 0, p, 1.0) / np.where(p > 0, q, 1.0)), 0.0)


def bernoulli_kl_bits(p, q, eps: float = KL_EPSILON):
    """KL(Bern(p) || Bern(q)) in bits: p log2(p/q) + (1-p) log2((1-p)/(1-q)), with 0 log 0 = 0.

    Only q is smoothed: clipped to [eps, 1 - eps] unless q == p (see KL_EPSILON). p is used as given, so
    KL(0 || q) = -log2(1 - q) and KL(1 || q) = -log2(q) exactly for q in [eps, 1 - eps]. Used for KL(context ||
    unprimed) of p(feminine) (Gautam et al. 2024, contextual invariance). For q in [eps, 1 - eps] this equals
    (scipy.special.rel_entr(p, q) + rel_entr(1 - p, 1 - q)) / ln 2. NaN in p or q gives NaN.
    """
    p = np.asarray(p, dtype=float)
    if np.any((p < 0) | (p > 1)):  # NaN passes (and gives NaN)
        raise DataError("p must lie in [0, 1]")
    q = np.asarray(q, dtype=float)
    q = np.where(q == p, q, np.clip(q, eps, 1 - eps))
    out = _plogp_over_q(p, q) + _plogp_over_q(1 - p, 1 - q)
    out = np.where(np.isnan(p) | np.isnan(q), np.nan, out)  # a missing probability stays missing
    return out if out.ndim else float(out)


def entropy_bits(p) -> np.ndarray:
    """Binary entropy H(p) in bits (0 at p in {0, 1})."""
    p = np.asarray(p, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        h = -(p * np.log2(p) + (1 - p) * np.log2(1 - p))
    return np.nan_to_num(h, nan=0.0)


def plugin_mutual_information_bits(p_y: np.ndarray, feature: np.ndarray) -> float:
    """Exact plug-in I(Y; F) in bits for a binary answer Y and a discrete feature F.

    Each stimulus i contributes weight 1/N with P(Y = 1 | i) = p_y[i]; then P(Y = 1 | F = f) is the mean of p_y over
    the stimuli with F = f and I(Y; F) = H(Y) - sum_f P(f) H(Y | F = f).
    """
    p_y = np.asarray(p_y, dtype=float)
    feature = np.asarray(feature)
    overall = entropy_bits(p_y.mean())
    conditional = 0.0
    for value in np.unique(feature):
        mask = feature == value
        conditional += mask.mean() * entropy_bits(p_y[mask].mean())
    return float(overall - conditional)


def mi_table_bits(table: np.ndarray) -> float:
    """Plug-in mutual information in bits of a contingency table [feature value, answer] of counts."""
    table = np.asarray(table, dtype=float)
    joint = table / table.sum()
    px, py = joint.sum(1, keepdims=True), joint.sum(0, keepdims=True)
    nz = joint > 0
    return float((joint[nz] * np.log2(joint[nz] / (px @ py)[nz])).sum())


def knn_mi_classif_bits(x, y, seed: int, n_neighbors: int = 3) -> float:
    """I(X; Y) in bits for one continuous feature X and a discrete target Y: the value of scikit-learn's
    `mutual_info_classif(x.reshape(-1, 1), y, discrete_features=[False], n_neighbors=3, random_state=seed)[0]`
    divided by log(2), computed in one dimension by sorting instead of k-d trees (many times faster on the
    bootstrap's repeated calls).

    It runs scikit-learn's steps in the same order with the same floating-point operations: scale by the standard
    deviation, add its 1e-10 noise from `RandomState(seed)`, then Ross's estimator (2014): per point, the distance
    r to its k-th nearest neighbour with the same label (k = min(n_neighbors, label count - 1)), the count m of all
    points within `nextafter(r, 0)`, and psi(N) + <psi(k)> - <psi(N_label)> - <psi(m)>, floored at 0. In one
    dimension the k nearest neighbours lie among the k sorted neighbours on either side, and the k-d tree's
    sqrt((a - b)**2) equals |a - b| exactly in binary floating point, so distances, radii and counts are the
    tree's. Labels with so few points that scikit-learn switches to brute-force neighbours (count - 1 >= k and
    k >= count // 2) are handed to scikit-learn itself.
    """
    from scipy.special import digamma

    x = np.asarray(x, dtype=np.float64).reshape(-1, 1)
    y = np.asarray(y)
    labels, inverse, counts = np.unique(y, return_inverse=True, return_counts=True)
    ks = np.minimum(n_neighbors, counts - 1)
    if np.any((counts > 1) & (ks >= counts // 2)):
        from sklearn.feature_selection import mutual_info_classif

        return float(mutual_info_classif(x, y, discrete_features=[False], n_neighbors=n_neighbors,
                                         random_state=seed)[0] / np.log(2))
    c = _scaled_with_noise(x, seed)
    radius, k_all = _same_label_radii(c, inverse, counts, ks)
    label_counts = counts[inverse].astype(float)

    keep = label_counts > 1
    c, radius, k_all, label_counts = c[keep], radius[keep], k_all[keep], label_counts[keep]
    n_kept = len(c)
    m_all = _counts_within(c, radius)
    mi = digamma(n_kept) + np.mean(digamma(k_all)) - np.mean(digamma(label_counts)) - np.mean(digamma(m_all))
    return float(max(0, mi) / np.log(2))


def _scaled_with_noise(x: np.ndarray, seed: int) -> np.ndarray:
    """The feature column `x` (shape (n, 1)) as scikit-learn's `mutual_info_classif` prepares it: scaled by its
    standard deviation, plus 1e-10 x max(1, mean |value|) standard normal noise from `RandomState(seed)`; 1-D."""
    from sklearn.preprocessing import scale

    n = len(x)
    c = x.copy()
    c[:, [True]] = scale(c[:, [True]], with_mean=False, copy=False)
    means = np.maximum(1, np.mean(np.abs(c[:, [True]]), axis=0))
    c[:, [True]] += 1e-10 * means * np.random.RandomState(seed).standard_normal(size=(n, 1))
    return c[:, 0]


def _same_label_radii(c: np.ndarray, inverse: np.ndarray, counts: np.ndarray,
                      ks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per point of `c`: `nextafter(r, 0)` with r the distance to its k-th nearest neighbour among the points with the
    same label (label index `inverse`, k = `ks` of the label), and that k; unset (np.empty) for labels of one point.
    """
    n = len(c)
    radius = np.empty(n)
    k_all = np.empty(n)
    for j, (count, k) in enumerate(zip(counts, ks)):
        if count <= 1:
            continue
        members = np.flatnonzero(inverse == j)
        order = np.argsort(c[members], kind="stable")
        v = c[members][order]
        m = len(v)
        cand = np.full((m, 2 * k), np.inf)
        for s in range(1, k + 1):  # s-th neighbour to the left and to the right in sorted order
            cand[s:, s - 1] = np.abs(v[s:] - v[:-s])
            cand[:-s, k + s - 1] = np.abs(v[:-s] - v[s:])
        kth = np.partition(cand, k - 1, axis=1)[:, k - 1]
        radius[members[order]] = np.nextafter(kth, 0)
        k_all[members] = k
    return radius, k_all


def _counts_within(c: np.ndarray, radius: np.ndarray) -> np.ndarray:
    """Per point of `c`: the number of points j (itself included) with |c_j - c_i| <= radius_i, counted as a
    contiguous window of the sorted values whose ends are settled on that exact test."""
    n_kept = len(c)
    s = np.sort(c, kind="stable")
    # points within the radius, self included: |s_j - c_i| <= r_i, a contiguous window of the sorted values
    lo = np.searchsorted(s, c - radius, side="left")
    hi = np.searchsorted(s, c + radius, side="right")
    while True:  # settle the window's ends on the exact |difference| <= radius test
        grow_lo = (lo > 0) & (np.abs(c - s[np.maximum(lo - 1, 0)]) <= radius)
        shrink_lo = (lo < n_kept) & (np.abs(c - s[np.minimum(lo, n_kept - 1)]) > radius)
        grow_hi = (hi < n_kept) & (np.abs(s[np.minimum(hi, n_kept - 1)] - c) <= radius)
        shrink_hi = (hi > 0) & (np.abs(s[np.maximum(hi - 1, 0)] - c) > radius)
        if not (grow_lo.any() or shrink_lo.any() or grow_hi.any() or shrink_hi.any()):
            break
        lo = lo - grow_lo + (shrink_lo & ~grow_lo)
        hi = hi + grow_hi - (shrink_hi & ~grow_hi)
    return (hi - lo).astype(np.int64)
