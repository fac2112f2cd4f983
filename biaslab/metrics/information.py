"""Information-theoretic quantities for binary answers: Bernoulli KL divergence and plug-in mutual information."""

from __future__ import annotations

import numpy as np

#: Probabilities are clipped to [KL_EPSILON, 1 - KL_EPSILON] before the KL divergence, so that p in {0, 1}
#: (a model that always or never picks the feminine pronoun) gives a large finite value instead of infinity.
KL_EPSILON = 1e-6


def bernoulli_kl_bits(p, q, eps: float = KL_EPSILON):
    """KL(Bern(p) || Bern(q)) in bits: p log2(p/q) + (1-p) log2((1-p)/(1-q)), p and q clipped to [eps, 1-eps].

    Used for KL(context || unprimed) of p(feminine) (Gautam et al. 2024, contextual invariance).
    """
    p = np.clip(np.asarray(p, dtype=float), eps, 1 - eps)
    q = np.clip(np.asarray(q, dtype=float), eps, 1 - eps)
    return p * np.log2(p / q) + (1 - p) * np.log2((1 - p) / (1 - q))


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
