"""Paired statistics of `biaslab compare`: two settings (or two conditions) measured on the same items.

Every function takes the items both sides have, as aligned arrays `a` and `b` (one value per item), and `cluster`,
the item's unit (template, item, name, ...): items of one unit are not independent, so the unit is what resampling
and permutation move, never the single item.

- Estimate. A mean measure: d_bar = mean_i (a_i - b_i) = mean(a) - mean(b) over the paired items. A statistic (a
  Spearman rho, an ECE): f(a) - f(b) over the paired items. A ratio (BBQ's bias score in disambiguated contexts,
  2 sum(biased) / sum(not unknown) - 1): g(sum_i a_i / sum_i c_i) - g(sum_i b_i / sum_i d_i), each side with its own
  numerators (a, b) and denominators (c, d) per item.
- Cluster bootstrap (Davison and Hinkley 1997, section 3.8): draw the C units with replacement B times, recompute the
  estimate on the items of the drawn units; the interval is the 2.5th and 97.5th percentile.
- Paired permutation test (Good 2005; Phipson and Smyth 2010): under H0 the labels A and B are exchangeable within
  each unit, so each unit's labels are swapped with probability 1/2 (for a mean: the sign of the unit's differences
  flips); p = (1 + #{|T*| >= |T|}) / (1 + R) over R random permutations, never 0, or the exact share over all 2^C
  assignments when 2^C <= R.
- McNemar's exact test (McNemar 1947) for a binary outcome: n10 items with a = 1, b = 0 and n01 with a = 0, b = 1;
  p = two-sided binomial test of n10 out of n10 + n01 at 1/2 (scipy.stats.binomtest; statsmodels' mcnemar with
  exact=True gives the same). It treats items as independent pairs; the bootstrap interval beside it resamples units.
- Effect sizes: d_z = d_bar / sd(d) (Cohen 1988, paired); Cohen's g = n10 / (n10 + n01) - 1/2 for McNemar; Cohen's
  q = atanh(rho_a) - atanh(rho_b) for correlations; otherwise the estimate over its bootstrap standard deviation.
- Multiplicity: Holm (1979) step-down and Benjamini and Hochberg (1995) step-up adjusted p over a family of tests.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

__all__ = ["Paired", "Result", "mean_difference", "binary_difference", "statistic_difference", "ratio_difference",
           "holm", "benjamini_hochberg", "mcnemar_exact", "spearman_rows", "RELATIVE_TIE"]

#: permutation statistics within this relative distance of the observed one count as "as extreme" (float sums)
RELATIVE_TIE = 1e-9

#: a vectorized statistic: rows of values (R, n) and the covariate rows (R, n) or None -> R values
Statistic = Callable[[np.ndarray, "np.ndarray | None"], np.ndarray]


@dataclass(frozen=True)
class Paired:
    """The items both sides have, aligned: `a[i]` and `b[i]` are item i's values, `cluster[i]` its unit (integer
    codes 0..C-1, every code used), `covariate[i]` a value shared by both sides (e.g. the stereotype rating a
    Spearman rho correlates with), or None; `covariate_b[i]`, where the B side has a covariate of its own (a ratio's
    denominators: `covariate` is then A's)."""

    a: np.ndarray
    b: np.ndarray
    cluster: np.ndarray
    covariate: np.ndarray | None = None
    covariate_b: np.ndarray | None = None

    @property
    def units(self) -> int:
        return int(self.cluster.max()) + 1 if len(self.cluster) else 0


@dataclass(frozen=True)
class Result:
    """One paired comparison: `estimate` (A minus B), the bootstrap interval, the p-value and the test that gave it,
    the effect size and its kind, and the value of each side (`value_a`, `value_b`)."""

    estimate: float
    ci_low: float
    ci_high: float
    p_value: float
    test: str
    effect_size: float
    effect_kind: str
    value_a: float
    value_b: float


def _empty(test: str, effect_kind: str) -> Result:
    nan = float("nan")
    return Result(nan, nan, nan, nan, test, nan, effect_kind, nan, nan)


def _interval(boot: np.ndarray) -> tuple[float, float]:
    boot = boot[np.isfinite(boot)]
    if boot.size == 0:
        return float("nan"), float("nan")
    low, high = np.quantile(boot, [0.025, 0.975])
    return float(low), float(high)


def _permutation_p(observed: float, permuted: np.ndarray, exact: bool) -> float:
    """(1 + #{|T*| >= |T|}) / (1 + R) over R random permutations, or #{|T*| >= |T|} / 2^C over all of them
    (`exact`: the identity is among them); ties within RELATIVE_TIE count as extreme, and so do NaN permutations
    (conservative)."""
    if not np.isfinite(observed):
        return float("nan")
    tie = RELATIVE_TIE * max(1.0, abs(observed))
    extreme = int((~(np.abs(permuted) < abs(observed) - tie)).sum())
    if exact:
        return float(extreme / permuted.size)
    return float((1 + extreme) / (1 + permuted.size))


def _swaps(rng: np.random.Generator, units: int, permutations: int) -> tuple[np.ndarray, bool]:
    """(R, units) booleans, True where a unit's labels are swapped, and whether they are all 2^units assignments
    (enumerated when 2^units <= permutations) rather than `permutations` random ones."""
    if units <= 24 and 2 ** units <= permutations:
        codes = np.arange(2 ** units, dtype=np.int64)[:, None]
        return ((codes >> np.arange(units, dtype=np.int64)) & 1).astype(bool), True
    return rng.random((permutations, units)) < 0.5, False


def _unit_sums(values: np.ndarray, cluster: np.ndarray, units: int) -> np.ndarray:
    return np.bincount(cluster, weights=values, minlength=units)


def _unit_draws(rng: np.random.Generator, units: int, bootstrap: int) -> np.ndarray:
    """(bootstrap, units) counts: how often each unit is drawn in each resample of C units drawn with replacement
    (`rng.integers(0, C, size=C)` per resample, in order)."""
    picks = rng.integers(0, units, size=(bootstrap, units))
    offsets = (np.arange(bootstrap, dtype=np.int64) * units)[:, None]
    return np.bincount((picks + offsets).ravel(), minlength=bootstrap * units).reshape(bootstrap, units).astype(float)


def mean_difference(pairs: Paired, *, bootstrap: int, permutations: int, rng: np.random.Generator) -> Result:
    """d_bar = mean(a - b) with its cluster-bootstrap interval, the sign-flip permutation p over units and d_z.

    Parameters
    ----------
    pairs : the paired items.
    bootstrap, permutations : resamples and permutations.
    rng : the generator (drawn in that order: bootstrap, then permutations).

    Returns
    -------
    `Result` with test "permutation" and effect kind "d_z".
    """
    n = len(pairs.a)
    if n == 0:
        return _empty("permutation", "d_z")
    d = pairs.a - pairs.b
    estimate = float(d.mean())
    units = pairs.units
    sums = _unit_sums(d, pairs.cluster, units)
    sizes = np.bincount(pairs.cluster, minlength=units).astype(float)
    draws = _unit_draws(rng, units, bootstrap)
    boot = (draws @ sums) / (draws @ sizes)
    swap, exact = _swaps(rng, units, permutations)
    permuted = (np.where(swap, -1.0, 1.0) @ sums) / n
    sd = float(d.std(ddof=1)) if n > 1 else float("nan")
    effect = estimate / sd if sd > 0 else float("nan")
    low, high = _interval(boot)
    return Result(estimate, low, high, _permutation_p(estimate, permuted, exact), "permutation", effect, "d_z",
                  float(pairs.a.mean()), float(pairs.b.mean()))


def mcnemar_exact(a: np.ndarray, b: np.ndarray) -> tuple[int, int, float]:
    """(n10, n01, p): discordant pairs and McNemar's exact two-sided p (1.0 without discordant pairs)."""
    from scipy.stats import binomtest

    a, b = np.asarray(a).astype(bool), np.asarray(b).astype(bool)
    n10, n01 = int((a & ~b).sum()), int((~a & b).sum())
    if n10 + n01 == 0:
        return n10, n01, 1.0
    return n10, n01, float(binomtest(n10, n10 + n01, 0.5).pvalue)


def binary_difference(pairs: Paired, *, bootstrap: int, rng: np.random.Generator) -> Result:
    """Difference of proportions of a 0/1 outcome: mean(a) - mean(b), its cluster-bootstrap interval, McNemar's
    exact p and Cohen's g.

    Returns
    -------
    `Result` with test "mcnemar" and effect kind "cohen_g".
    """
    if len(pairs.a) == 0:
        return _empty("mcnemar", "cohen_g")
    d = pairs.a.astype(float) - pairs.b.astype(float)
    units = pairs.units
    sums = _unit_sums(d, pairs.cluster, units)
    sizes = np.bincount(pairs.cluster, minlength=units).astype(float)
    draws = _unit_draws(rng, units, bootstrap)
    low, high = _interval((draws @ sums) / (draws @ sizes))
    n10, n01, p = mcnemar_exact(pairs.a, pairs.b)
    effect = n10 / (n10 + n01) - 0.5 if n10 + n01 else float("nan")
    return Result(float(d.mean()), low, high, p, "mcnemar", effect, "cohen_g", float(pairs.a.mean()),
                  float(pairs.b.mean()))


def ratio_difference(pairs: Paired, transform: Callable[[np.ndarray], np.ndarray], *, bootstrap: int,
                     permutations: int, rng: np.random.Generator) -> Result:
    """g(sum a / sum c) - g(sum b / sum d) for a ratio measured on each side with its own numerators (`a`, `b`) and
    denominators (`covariate` for A, `covariate_b` for B) per item, its cluster-bootstrap interval (units drawn with
    replacement, both sides' sums over the drawn units), the permutation p that swaps a unit's (numerator,
    denominator) pairs between A and B, and the estimate over its bootstrap standard deviation.

    Parameters
    ----------
    pairs : the paired items, with `covariate` and `covariate_b` (the denominators).
    transform : g, vectorized (e.g. r -> 100 (2 r - 1)).
    bootstrap, permutations, rng : as `mean_difference` (drawn in that order).

    Returns
    -------
    `Result` with test "permutation" and effect kind "standardized".
    """
    if len(pairs.a) == 0 or pairs.covariate is None or pairs.covariate_b is None:
        return _empty("permutation", "standardized")
    units = pairs.units
    num_a, num_b = _unit_sums(pairs.a, pairs.cluster, units), _unit_sums(pairs.b, pairs.cluster, units)
    den_a = _unit_sums(pairs.covariate, pairs.cluster, units)
    den_b = _unit_sums(pairs.covariate_b, pairs.cluster, units)

    def value(num: np.ndarray, den: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return transform(np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan))

    value_a, value_b = float(value(num_a.sum(), den_a.sum())), float(value(num_b.sum(), den_b.sum()))
    estimate = value_a - value_b
    draws = _unit_draws(rng, units, bootstrap)
    boot = value(draws @ num_a, draws @ den_a) - value(draws @ num_b, draws @ den_b)
    swap, exact = _swaps(rng, units, permutations)
    keep = (~swap).astype(float)
    moved = swap.astype(float)
    permuted = (value(keep @ num_a + moved @ num_b, keep @ den_a + moved @ den_b)
                - value(keep @ num_b + moved @ num_a, keep @ den_b + moved @ den_a))
    low, high = _interval(boot)
    finite = boot[np.isfinite(boot)]
    sd = float(finite.std(ddof=1)) if finite.size > 1 else float("nan")
    size = estimate / sd if sd > 0 else float("nan")
    return Result(estimate, low, high, _permutation_p(estimate, permuted, exact), "permutation", size, "standardized",
                  value_a, value_b)


def _unit_index(cluster: np.ndarray, units: int) -> np.ndarray | None:
    """(units, size) item indices per unit when every unit has the same number of items, else None."""
    sizes = np.bincount(cluster, minlength=units)
    if not (sizes == sizes[0]).all():
        return None
    return np.argsort(cluster, kind="stable").reshape(units, int(sizes[0]))


def statistic_difference(pairs: Paired, statistic: Statistic, *, bootstrap: int, permutations: int,
                         rng: np.random.Generator, effect: str = "standardized") -> Result:
    """f(a) - f(b) for a statistic f of the items (a correlation, an ECE), its cluster-bootstrap interval and the
    permutation p that swaps A and B within each unit.

    Parameters
    ----------
    pairs : the paired items (`covariate` is handed to the statistic).
    statistic : f(values (R, n), covariate (R, n) or None) -> (R,).
    bootstrap, permutations, rng : as `mean_difference`.
    effect : "cohen_q" (atanh(f(a)) - atanh(f(b)), for correlations) or "standardized" (estimate over the bootstrap
        standard deviation).

    Returns
    -------
    `Result` with test "permutation".
    """
    n = len(pairs.a)
    if n == 0:
        return _empty("permutation", effect)
    cov = None if pairs.covariate is None else pairs.covariate[None, :]
    value_a = float(statistic(pairs.a[None, :], cov)[0])
    value_b = float(statistic(pairs.b[None, :], cov)[0])
    estimate = value_a - value_b
    units = pairs.units
    index = _unit_index(pairs.cluster, units)
    if index is not None:
        picked = index[rng.integers(0, units, size=(bootstrap, units))].reshape(bootstrap, -1)
        covs = None if pairs.covariate is None else pairs.covariate[picked]
        boot = statistic(pairs.a[picked], covs) - statistic(pairs.b[picked], covs)
    else:  # units of different sizes: one resample at a time
        members = [np.flatnonzero(pairs.cluster == u) for u in range(units)]
        boot = np.empty(bootstrap)
        for r in range(bootstrap):
            picked = np.concatenate([members[u] for u in rng.integers(0, units, size=units)])[None, :]
            covs = None if pairs.covariate is None else pairs.covariate[picked]
            boot[r] = (statistic(pairs.a[picked], covs) - statistic(pairs.b[picked], covs))[0]
    swap, exact = _swaps(rng, units, permutations)
    swapped = swap[:, pairs.cluster]
    covs = None if pairs.covariate is None else np.broadcast_to(pairs.covariate, swapped.shape)
    permuted = (statistic(np.where(swapped, pairs.b, pairs.a), covs)
                - statistic(np.where(swapped, pairs.a, pairs.b), covs))
    low, high = _interval(boot)
    if effect == "cohen_q":
        with np.errstate(divide="ignore", invalid="ignore"):
            size = float(np.arctanh(value_a) - np.arctanh(value_b))
    else:
        finite = boot[np.isfinite(boot)]
        sd = float(finite.std(ddof=1)) if finite.size > 1 else float("nan")
        size = estimate / sd if sd > 0 else float("nan")
    return Result(estimate, low, high, _permutation_p(estimate, permuted, exact), "permutation", size, effect,
                  value_a, value_b)


def _rank_rows(x: np.ndarray) -> np.ndarray:
    from scipy.stats import rankdata

    return rankdata(x, axis=1)


def spearman_rows(values: np.ndarray, covariate: np.ndarray | None) -> np.ndarray:
    """Spearman's rho of each row of `values` with the same row of `covariate`: Pearson's r of the average ranks
    (scipy.stats.spearmanr per row); NaN where either row is constant or has fewer than 3 items."""
    if covariate is None:
        from ...errors import UsageError

        raise UsageError("spearman_rows needs a covariate (the values each row is correlated with)")
    rx, rz = _rank_rows(values), _rank_rows(np.broadcast_to(covariate, values.shape))
    rx = rx - rx.mean(axis=1, keepdims=True)
    rz = rz - rz.mean(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        rho = (rx * rz).sum(axis=1) / np.sqrt((rx * rx).sum(axis=1) * (rz * rz).sum(axis=1))
    if values.shape[1] < 3:
        rho[:] = np.nan
    return rho


def _adjusted(p: np.ndarray, step) -> np.ndarray:
    """The finite entries of `p` adjusted by `step(sorted p, m)` (ascending order), capped at 1, back in place;
    NaN entries stay NaN and do not count in m."""
    p = np.asarray(p, dtype=float)
    out = np.full(p.shape, np.nan)
    ok = np.flatnonzero(np.isfinite(p))
    if ok.size:
        order = ok[np.argsort(p[ok], kind="stable")]
        out[order] = np.minimum(step(p[order], ok.size), 1.0)
    return out


def holm(p: np.ndarray) -> np.ndarray:
    """Holm's step-down adjusted p: sorted ascending, p_(j) * (m - j + 1) made monotone by a running maximum, capped
    at 1; NaN entries stay NaN and do not count in m."""
    return _adjusted(p, lambda ranked, m: np.maximum.accumulate(ranked * (m - np.arange(m))))


def benjamini_hochberg(p: np.ndarray) -> np.ndarray:
    """Benjamini-Hochberg adjusted p (false discovery rate): sorted ascending, p_(j) * m / j made monotone from the
    largest down by a running minimum, capped at 1; NaN entries stay NaN and do not count in m."""
    return _adjusted(p, lambda ranked, m: np.minimum.accumulate((ranked * m / np.arange(1, m + 1))[::-1])[::-1])
