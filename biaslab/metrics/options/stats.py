"""Statistics of any dataset with options: item means, bootstrap intervals, paired contrasts, KL to a reference,
Spearman correlations and calibration.

Pure pandas / numpy / scipy over a frame of option probabilities; no warehouse code, no I/O.

Input (``probs``): one row per (model, method, setting, stimulus, option label) with the columns

- ``model_key``, ``method`` ('prob', 'choice-exact' or 'choice-sample'), ``setting``: `KEY`, one collection;
- ``stimulus_id``; ``item_id`` (stimuli of one item share it: one sentence in two option orders, in several
  contexts, ...);
- ``option_label``; ``p``: the probability of the label renormalized over the valid options (NaN where nothing was
  valid); ``valid_mass``: the share of probability or samples that was a valid answer (NaN for 'prob');
- ``gold_label``: the gold option's label where the stimulus has one (else None / NaN);
- any grouping columns (``by``, strings) and numeric columns the caller names.

Conventions (decided here):

- Results are always per `KEY` + the grouping columns, groups in sorted order (missing group values kept).
- Items are the unit of every interval and test: `item_means` first averages the stimuli of an item.
- Every random draw is seeded by `group_seed` (sha256 of the seed and the group's key values), so a group's
  interval or p-value depends only on ``seed`` and that group's rows: adding a model changes no other group. The
  option label is NOT part of the seed key, so complementary labels over the same items (p_A = 1 - p_B) get the
  very same resamples and mirror-image intervals.
- Percentile bootstrap: the ``(1 - level) / 2`` and ``(1 + level) / 2`` percentiles (numpy's linear
  interpolation) of the resampled means; NaN with fewer than 2 items.
"""

from __future__ import annotations

import hashlib
import warnings
from collections.abc import Iterator, Sequence

import numpy as np
import pandas as pd
from scipy.special import rel_entr
from scipy.stats import ConstantInputWarning, rankdata, spearmanr

from ...errors import DataError, UsageError
from ..calibration.stats import TOP_LABEL, ECEResult, ece

#: One collection: the model, the method and the collection settings.
KEY = ["model_key", "method", "setting"]
#: The statistic columns of `group_means` (every other column but `KEY` and option_label groups).
GROUP_MEAN_COLUMNS = ["items", "mean_p", "ci_low", "ci_high", "invalid_mass"]
#: Absolute tolerance of the permutation test's comparison |mean| >= observed.
TOLERANCE = 1e-12
#: Largest number of pairs for which `sign_flip_p_value` enumerates every sign vector.
EXACT_MAX = 16
#: Most numbers drawn at once (resamples x items) before the draws are cut into chunks.
CHUNK = 1 << 20


# ----------------------------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------------------------


def _names(by: str | Sequence[str] | None) -> list[str]:
    """``by`` as a list of column names (None -> [], a string -> [it])."""
    if by is None:
        return []
    return [by] if isinstance(by, str) else list(by)


def _key_dict(names: Sequence[str], key) -> dict:
    """{name: value} of a groupby key (a tuple, or a scalar for one name)."""
    values = key if isinstance(key, tuple) else (key,)
    return dict(zip(names, values))


def group_seed(seed: int, key: Sequence) -> int:
    """The seed of one group's draws: the first 8 bytes (big-endian) of sha256 of ``seed`` and the key values joined
    by the unit separator "\\x1f" (as `misgendering.annotations.cell_seed`). Depends only on seed and the key."""
    text = "\x1f".join(str(v) for v in (seed, *key)).encode()
    return int.from_bytes(hashlib.sha256(text).digest()[:8], "big")


def _chunks(total: int, width: int) -> Iterator[int]:
    """Sizes of consecutive chunks of ``total`` rows of ``width`` numbers each, at most `CHUNK` numbers a chunk."""
    step = max(1, CHUNK // max(1, width))
    for start in range(0, total, step):
        yield min(step, total - start)


def bootstrap_mean_ci(x, rng: np.random.Generator, bootstrap: int = 1000,
                      level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``x``.

    Draws ``bootstrap`` resamples of the n values with replacement (``rng.integers(0, n, (m, n))`` in chunks), takes
    each resample's mean and returns the (1 - level) / 2 and (1 + level) / 2 percentiles.

    Parameters
    ----------
    x : the n values (NaN not allowed).
    rng : the generator of the draws.
    bootstrap : number of resamples.
    level : coverage of the interval.

    Returns
    -------
    (low, high); (NaN, NaN) when n < 2 or bootstrap < 1.
    """
    x = np.asarray(x, dtype=float).reshape(-1)
    if x.size < 2 or bootstrap < 1:
        return float("nan"), float("nan")
    means = np.concatenate([x[rng.integers(0, x.size, size=(m, x.size))].mean(axis=1)
                            for m in _chunks(bootstrap, x.size)])
    low, high = np.percentile(means, [50 * (1 - level), 50 * (1 + level)])
    return float(low), float(high)


# ----------------------------------------------------------------------------------------------------------------
# item and group means
# ----------------------------------------------------------------------------------------------------------------


def item_means(probs: pd.DataFrame, by: str | Sequence[str] | None, numeric: Sequence[str] = ()) -> pd.DataFrame:
    """Per item and option label: the means over the item's stimuli.

    p_item = mean_s p_s and valid_mass_item = mean_s valid_mass_s over the stimuli s of the item in the group (NaN
    ignored; NaN when every value is NaN).

    Parameters
    ----------
    probs : option probabilities (module docstring).
    by : grouping columns besides `KEY`.
    numeric : numeric columns to average per item as well (e.g. for `spearman`).

    Returns
    -------
    One row per KEY + by + item_id + option_label (sorted), columns KEY + by + item_id + option_label + ``p``,
    ``valid_mass``, ``stimuli`` (the number of distinct stimuli) + the ``numeric`` columns.
    """
    keys = KEY + _names(by) + ["item_id", "option_label"]
    grouped = probs.groupby(keys, dropna=False, sort=True)
    out = grouped.agg(p=("p", "mean"), valid_mass=("valid_mass", "mean"), stimuli=("stimulus_id", "nunique"))
    for name in numeric:
        out[name] = grouped[name].mean()
    return out.reset_index()


def group_means(items: pd.DataFrame, by: str | Sequence[str] | None, *, bootstrap: int = 1000, seed: int = 0,
                level: float = 0.95) -> pd.DataFrame:
    """Per group and option label: the mean of p over items with a percentile bootstrap interval.

    mean_p = 1/n sum_i p_i over the n items with a non-NaN p; (ci_low, ci_high) = `bootstrap_mean_ci` of those p_i
    (items in item_id order, generator ``default_rng(group_seed(seed, KEY + by values))``); invalid_mass =
    1 - mean_i valid_mass_i over every item of the group (NaN when every valid_mass is NaN, as for 'prob').

    Parameters
    ----------
    items : output of `item_means`.
    by : grouping columns besides `KEY`.
    bootstrap : number of resamples.
    seed : base seed of every group's generator.
    level : coverage of the interval.

    Returns
    -------
    One row per KEY + by + option_label (sorted): KEY + by + option_label + ``items``, ``mean_p``, ``ci_low``,
    ``ci_high``, ``invalid_mass``.
    """
    keys = KEY + _names(by)
    rows = []
    ordered = items.sort_values(keys + ["option_label", "item_id"], kind="stable")
    for key, group in ordered.groupby(keys + ["option_label"], dropna=False, sort=True):
        values = _key_dict(keys + ["option_label"], key)
        x = group["p"].to_numpy(dtype=float)
        x = x[~np.isnan(x)]
        rng = np.random.default_rng(group_seed(seed, [values[k] for k in keys]))
        low, high = bootstrap_mean_ci(x, rng, bootstrap, level)
        valid = group["valid_mass"].to_numpy(dtype=float)
        valid = valid[~np.isnan(valid)]
        rows.append({**values, "items": int(x.size), "mean_p": float(x.mean()) if x.size else float("nan"),
                     "ci_low": low, "ci_high": high,
                     "invalid_mass": float(1.0 - valid.mean()) if valid.size else float("nan")})
    return pd.DataFrame(rows, columns=keys + ["option_label"] + GROUP_MEAN_COLUMNS)


# ----------------------------------------------------------------------------------------------------------------
# paired contrasts
# ----------------------------------------------------------------------------------------------------------------


def _sign_matrix(codes: np.ndarray, n: int) -> np.ndarray:
    """Sign vectors (+1 / -1) whose bits are the integers ``codes``: row r, column j = 1 - 2 * bit j of codes[r]."""
    return 1.0 - 2.0 * ((codes[:, None] >> np.arange(n)) & 1)


def sign_flip_p_value(d, *, permutations: int = 10000, rng: np.random.Generator | int | None = None,
                      exact_max: int = EXACT_MAX) -> float:
    """Two-sided sign-flip permutation test of mean(d) = 0 for paired differences d_1..d_n.

    Statistic T(s) = |1/n sum_i s_i d_i| for sign vectors s in {-1, +1}^n; observed t = |mean(d)|.

    - n <= exact_max: exact, p = #{s : T(s) >= t - 1e-12} / 2^n over all 2^n sign vectors;
    - otherwise Monte Carlo: ``permutations`` independent uniform sign vectors, p = (1 + count) / (1 + permutations).

    Parameters
    ----------
    d : the paired differences (finite).
    permutations : number of random sign vectors of the Monte Carlo branch.
    rng : generator (or seed) of the Monte Carlo branch; None means ``default_rng(0)``.
    exact_max : largest n tested exactly (pass -1 to force Monte Carlo).

    Returns
    -------
    The p-value; NaN when d is empty, 1.0 when every d_i is 0.
    """
    d = np.asarray(d, dtype=float).reshape(-1)
    if not np.all(np.isfinite(d)):
        raise DataError("d contains NaN or infinite values")
    n = d.size
    if n == 0:
        return float("nan")
    if np.all(d == 0):
        return 1.0
    observed = abs(d.mean()) - TOLERANCE
    if n <= exact_max:
        total, count = 1 << n, 0
        for start in range(0, total, max(1, CHUNK // n)):
            codes = np.arange(start, min(total, start + max(1, CHUNK // n)), dtype=np.int64)
            count += int(np.count_nonzero(np.abs(_sign_matrix(codes, n) @ d) / n >= observed))
        return count / total
    rng = np.random.default_rng(0 if rng is None else rng)
    count = 0
    for m in _chunks(permutations, n):
        signs = rng.choice(np.array([-1.0, 1.0]), size=(m, n))
        count += int(np.count_nonzero(np.abs(signs @ d) / n >= observed))
    return (1 + count) / (1 + permutations)


def _pair_table(items: pd.DataFrame, keys: list[str], column: str, a: str, b: str) -> pd.DataFrame:
    """Per keys + option_label + item_id: the mean p at ``column`` = a and at = b (columns "a", "b"; NaN if absent)."""
    sub = items[items[column].isin([a, b])]
    wide = sub.groupby(keys + ["option_label", "item_id", column], dropna=False, sort=True)["p"].mean()
    wide = wide.unstack(column).reindex(columns=[a, b])
    wide.columns = ["a", "b"]
    return wide.reset_index()


def paired_contrast(items: pd.DataFrame, column: str, a: str, b: str, by: str | Sequence[str] | None, *,
                    bootstrap: int = 1000, permutations: int = 10000, seed: int = 0,
                    level: float = 0.95) -> pd.DataFrame:
    """Paired difference of p between two values of one grouping column, over the items that have both.

    For the n pairs (items with a non-NaN p at ``column`` = a and at = b): d_i = p_i(a) - p_i(b), mean_diff =
    1/n sum_i d_i, (ci_low, ci_high) = `bootstrap_mean_ci` of d and p_value = `sign_flip_p_value` of d. The group's
    generator is ``default_rng(group_seed(seed, KEY + by values + ["a - b"]))``, spawned into two independent
    streams (bootstrap, permutations). Items missing one side are dropped.

    Parameters
    ----------
    items : output of `item_means` grouped by ``column`` and ``by``.
    column : the grouping column compared (e.g. "context").
    a, b : its two values (e.g. "primed_f", "unprimed").
    by : the other grouping columns (not ``column``).
    bootstrap, permutations, seed, level : resamples, random sign vectors, base seed, interval coverage.

    Returns
    -------
    One row per KEY + by + option_label (sorted): KEY + by + ``column`` (the text "a - b") + option_label +
    ``pairs``, ``unpaired`` (items with a p on one side only: left out, and counted), ``mean_diff``, ``ci_low``,
    ``ci_high``, ``p_value`` (NaN when there is no pair).
    """
    by = _names(by)
    if column in by:
        raise UsageError(f"{column!r} is the compared column; leave it out of by")
    if a == b:
        raise UsageError("a and b must differ")
    keys, text = KEY + by, f"{a} - {b}"
    rows = []
    for key, group in _pair_table(items, keys, column, a, b).groupby(keys + ["option_label"], dropna=False,
                                                                      sort=True):
        values = _key_dict(keys + ["option_label"], key)
        d = (group["a"] - group["b"]).dropna().to_numpy(dtype=float)
        unpaired = int((group["a"].isna() != group["b"].isna()).sum())
        base = np.random.default_rng(group_seed(seed, [*(values[k] for k in keys), text]))
        boot_rng, perm_rng = base.spawn(2)
        low, high = bootstrap_mean_ci(d, boot_rng, bootstrap, level)
        rows.append({**{k: values[k] for k in keys}, column: text, "option_label": values["option_label"],
                     "pairs": int(d.size), "unpaired": unpaired,
                     "mean_diff": float(d.mean()) if d.size else float("nan"),
                     "ci_low": low, "ci_high": high,
                     "p_value": sign_flip_p_value(d, permutations=permutations, rng=perm_rng)})
    return pd.DataFrame(rows, columns=keys + [column, "option_label", "pairs", "unpaired", "mean_diff", "ci_low",
                                              "ci_high", "p_value"])


# ----------------------------------------------------------------------------------------------------------------
# distributions over options
# ----------------------------------------------------------------------------------------------------------------


def _distributions(group: pd.DataFrame, column: str) -> pd.DataFrame:
    """Rows = values of ``column``, columns = option labels: mean_p renormalized to sum 1 (missing / NaN -> 0; a row
    whose mean_p sum to 0 is NaN)."""
    table = group.groupby([column, "option_label"], sort=True)["mean_p"].sum().unstack("option_label")
    table = table.fillna(0.0)
    totals = table.sum(axis=1)
    return table.div(totals.where(totals > 0), axis=0)


def kl_to_reference(means: pd.DataFrame, column: str, reference: str) -> pd.DataFrame:
    """Kullback-Leibler divergence of each group's option distribution from the reference group's, in nats.

    KL(P_g || P_ref) = sum_l P_g(l) ln(P_g(l) / P_ref(l)) (``scipy.special.rel_entr``), P = the mean_p vector over
    option labels renormalized to sum 1 (a label absent from a group has P = 0). KL is 0 for the reference itself,
    inf where P_ref(l) = 0 < P_g(l), NaN when the reference group is missing (or its mean_p are all NaN / 0).

    Parameters
    ----------
    means : output of `group_means` with ``column`` among its grouping columns.
    column : the grouping column whose values are compared.
    reference : the value of ``column`` compared against.

    Returns
    -------
    One row per KEY + the other grouping columns + value of ``column`` (sorted): those columns + ``kl`` +
    ``reference``.
    """
    others = [c for c in means.columns if c not in {*KEY, column, "option_label", *GROUP_MEAN_COLUMNS}]
    keys = KEY + others
    rows = []
    for key, group in means.groupby(keys, dropna=False, sort=True):
        dist = _distributions(group, column)
        ref = dist.loc[reference].to_numpy(dtype=float) if reference in dist.index else None
        for value, row in dist.iterrows():
            kl = float("nan") if ref is None else float(np.sum(rel_entr(row.to_numpy(dtype=float), ref)))
            rows.append({**_key_dict(keys, key), column: value, "kl": kl, "reference": reference})
    return pd.DataFrame(rows, columns=keys + [column, "kl", "reference"])


# ----------------------------------------------------------------------------------------------------------------
# correlation with a numeric item property
# ----------------------------------------------------------------------------------------------------------------


def _spearman(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(rho, p) of scipy.stats.spearmanr; (NaN, NaN) for fewer than 3 points or a constant input, no warning."""
    if x.size < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan"), float("nan")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConstantInputWarning)
        result = spearmanr(x, y)
    return float(result.statistic), float(result.pvalue)


def unit_points(items: pd.DataFrame, numeric: str, by: str | Sequence[str] | None,
                unit: str | None = None) -> pd.DataFrame:
    """Per study unit (``unit``, e.g. the name of a names study; default the item) and option label: the mean of
    ``numeric`` and of p over the unit's items (NaN ignored), the points of `spearman` and of the report's scatter.

    Returns
    -------
    One row per KEY + by + option_label + unit value with both means (units with a NaN in either left out):
    KEY + by + option_label + ``unit`` (the unit's value) + ``numeric`` + ``p``.
    """
    keys = KEY + _names(by) + ["option_label"]
    column = unit or "item_id"
    per = items.groupby(keys + [column], dropna=False, sort=True)[[numeric, "p"]].mean().reset_index()
    per = per.rename(columns={column: "unit"}).dropna(subset=[numeric, "p"])
    return per[keys + ["unit", numeric, "p"]].reset_index(drop=True)


def spearman_ci(x, y, rng: np.random.Generator, bootstrap: int = 1000,
                level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval of Spearman's rho over the n (x, y) pairs: ``bootstrap`` resamples of the pairs
    with replacement, rho of each (Pearson's r of the within-resample average ranks), the (1 - level) / 2 and
    (1 + level) / 2 percentiles of the resamples where rho is defined (a resample with a constant side has none).
    (NaN, NaN) for n < 3."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.size < 3 or bootstrap < 1:
        return float("nan"), float("nan")
    rhos = []
    for m in _chunks(bootstrap, x.size):
        idx = rng.integers(0, x.size, size=(m, x.size))
        rx, ry = rankdata(x[idx], axis=1), rankdata(y[idx], axis=1)  # average ranks, ties share theirs
        rx -= rx.mean(axis=1, keepdims=True)
        ry -= ry.mean(axis=1, keepdims=True)
        denominator = np.sqrt((rx ** 2).sum(axis=1) * (ry ** 2).sum(axis=1))
        with np.errstate(invalid="ignore", divide="ignore"):
            rhos.append(np.where(denominator > 0, (rx * ry).sum(axis=1) / denominator, np.nan))
    values = np.concatenate(rhos)
    values = values[np.isfinite(values)]
    if values.size == 0:
        return float("nan"), float("nan")
    low, high = np.percentile(values, [50 * (1 - level), 50 * (1 + level)])
    return float(low), float(high)


def spearman(items: pd.DataFrame, numeric: str, by: str | Sequence[str] | None, *, unit: str | None = None,
             bootstrap: int = 1000, seed: int = 0, level: float = 0.95) -> pd.DataFrame:
    """Spearman rank correlation between a numeric property and p, over the study's units.

    The unit is what is independently sampled: by default the item; a study of names asked in several templates
    declares the name (``unit``), since templates x names are not independent observations and a p-value over
    items would be too small. Per unit: the means of ``numeric`` and of p over its items (`unit_points`); rho and
    its two-sided p-value are ``scipy.stats.spearmanr(numeric, p)`` over the n units; the interval is a percentile
    bootstrap over units (`spearman_ci`), seeded per group (`group_seed`, the option label not in the key).

    Parameters
    ----------
    items : item-level frame (`item_means`, e.g. with ``numeric=[numeric]``) holding ``numeric`` (and ``unit``).
    numeric : the numeric column.
    by : grouping columns besides `KEY`.
    unit : the column naming each item's study unit (default: the item itself).
    bootstrap, seed, level : the interval's resamples, seed and coverage.

    Returns
    -------
    One row per KEY + by + option_label (sorted): KEY + by + option_label + ``unit`` (the unit's column), ``n``
    (units), ``rho``, ``ci_low``, ``ci_high``, ``p_value`` (NaN when n < 3 or either input is constant).
    """
    names = _names(by)
    keys = KEY + names
    points = unit_points(items, numeric, by, unit)
    rows = []
    for key, group in points.groupby(keys + ["option_label"], dropna=False, sort=True):
        x, y = group[numeric].to_numpy(dtype=float), group["p"].to_numpy(dtype=float)
        rho, p_value = _spearman(x, y)
        low = high = float("nan")
        if np.isfinite(rho):
            low, high = spearman_ci(x, y, np.random.default_rng(group_seed(seed, key[:-1])), bootstrap, level)
        rows.append({**_key_dict(keys + ["option_label"], key), "unit": unit or "item_id", "n": int(len(group)),
                     "rho": rho, "ci_low": low, "ci_high": high, "p_value": p_value})
    return pd.DataFrame(rows, columns=keys + ["option_label", "unit", "n", "rho", "ci_low", "ci_high", "p_value"])


# ----------------------------------------------------------------------------------------------------------------
# option order
# ----------------------------------------------------------------------------------------------------------------

#: an option-order effect is called large when an option's mean p differs by this much between two positions
ORDER_EFFECT = 0.2


def order_effect(probs: pd.DataFrame, by: str | Sequence[str] | None) -> pd.DataFrame:
    """How an option's probability depends on where the prompt lists it.

    Per position k of the option in the stimulus's option list (``position``, 1 = listed first): the mean over
    items of the item's mean p of the stimuli listing the option at k. ``spread`` = the largest minus the smallest
    of these means over the positions of the option (over items present at every position, so the spread compares
    like with like); ``large`` when spread >= `ORDER_EFFECT`. A mean over both orders (0.97 listed first, 0.04
    second, averaged to 0.5) hides this; the table shows it.

    Parameters
    ----------
    probs : option probabilities (module docstring) with ``position``.
    by : grouping columns besides `KEY`.

    Returns
    -------
    One row per KEY + by + option_label + position (sorted): those columns + ``items``, ``mean_p``, ``spread``,
    ``large``. Empty where no option appears at two positions.
    """
    keys = KEY + _names(by) + ["option_label"]
    columns = keys + ["position", "items", "mean_p", "spread", "large"]
    per_item = probs.groupby(keys + ["position", "item_id"], dropna=False, sort=True)["p"].mean().reset_index()
    rows = []
    for key, group in per_item.groupby(keys, dropna=False, sort=True):
        wide = group.pivot_table(index="item_id", columns="position", values="p", aggfunc="mean")
        if wide.shape[1] < 2:
            continue
        means = wide.mean(axis=0)
        both = wide.dropna().mean(axis=0)  # over the items present at every position
        spread = float(both.max() - both.min()) if both.notna().all() else float("nan")
        for position, mean_p in means.items():
            rows.append({**_key_dict(keys, key), "position": int(position),
                         "items": int(wide[position].notna().sum()), "mean_p": float(mean_p), "spread": spread,
                         "large": bool(spread >= ORDER_EFFECT)})
    return pd.DataFrame(rows, columns=columns)


# ----------------------------------------------------------------------------------------------------------------
# calibration against a gold option
# ----------------------------------------------------------------------------------------------------------------


def stimulus_scores(probs: pd.DataFrame, by: str | Sequence[str] | None) -> pd.DataFrame:
    """Per stimulus with a gold label: the predicted option, its confidence, correctness and Brier score.

    predicted = argmax_l p_l (ties: the first label in sorted order), confidence = max_l p_l, correct = [predicted ==
    gold], brier = sum_l (p_l - 1[l == gold])^2 (+ 1 when the gold label is not among the stimulus's options, its
    p being 0). Stimuli with a NaN p (nothing valid) are left out.

    Parameters
    ----------
    probs : option probabilities (module docstring).
    by : grouping columns besides `KEY`.

    Returns
    -------
    One row per KEY + by + stimulus_id (sorted): those columns + ``gold_label``, ``predicted``, ``confidence``,
    ``correct`` (bool), ``brier``.
    """
    keys = KEY + _names(by) + ["stimulus_id"]
    columns = keys + ["gold_label", "predicted", "confidence", "correct", "brier"]
    rows = probs.loc[probs["gold_label"].notna(), keys + ["option_label", "p", "gold_label"]]
    rows = rows.sort_values(keys + ["option_label"], kind="stable").reset_index(drop=True)
    rows["undefined"] = rows["p"].isna()
    rows = rows[~rows.groupby(keys, dropna=False, sort=False)["undefined"].transform("max").astype(bool)]
    if rows.empty:
        return pd.DataFrame(columns=columns)
    rows = rows.reset_index(drop=True)
    rows["is_gold"] = (rows["option_label"] == rows["gold_label"]).astype(float)
    rows["squared"] = (rows["p"] - rows["is_gold"]) ** 2
    grouped = rows.groupby(keys, dropna=False, sort=True)
    out = grouped["gold_label"].first().reset_index()
    out["predicted"] = rows.loc[grouped["p"].idxmax().to_numpy(), "option_label"].to_numpy()
    out["confidence"] = np.clip(grouped["p"].max().to_numpy(dtype=float), 0.0, 1.0)
    out["correct"] = (out["predicted"] == out["gold_label"]).to_numpy(dtype=bool)
    out["brier"] = grouped["squared"].sum().to_numpy() + 1.0 - grouped["is_gold"].max().to_numpy()
    return out[columns]


def _group_ece(scores: pd.DataFrame, n_bins: int) -> ECEResult:
    """Top-label ECE (equal-width bins) of one group's stimulus confidences against correctness."""
    return ece(scores["confidence"].to_numpy(dtype=float), scores["correct"].to_numpy(dtype=int), n_bins,
               confidence=TOP_LABEL)


def calibration(probs: pd.DataFrame, by: str | Sequence[str] | None, *, n_bins: int = 10) -> pd.DataFrame:
    """Accuracy, ECE and Brier score of the predicted option against the gold option (stimuli with a gold label).

    Over the N scored stimuli of a group (`stimulus_scores`): accuracy = mean correct; ece = sum_b |B_b| / N *
    |acc_b - conf_b| in ``n_bins`` equal-width bins of the confidence (`biaslab.metrics.calibration.stats.ece`,
    top-label convention); brier = mean over stimuli of sum_l (p_l - 1[l == gold])^2.

    Parameters
    ----------
    probs : option probabilities (module docstring).
    by : grouping columns besides `KEY`.
    n_bins : equal-width bins of the ECE.

    Returns
    -------
    One row per KEY + by (sorted, groups with a scored stimulus): KEY + by + ``stimuli``, ``accuracy``, ``ece``,
    ``brier``.
    """
    keys = KEY + _names(by)
    rows = []
    for key, group in stimulus_scores(probs, by).groupby(keys, dropna=False, sort=True):
        rows.append({**_key_dict(keys, key), "stimuli": int(len(group)), "accuracy": float(group["correct"].mean()),
                     "ece": _group_ece(group, n_bins).value, "brier": float(group["brier"].mean())})
    return pd.DataFrame(rows, columns=keys + ["stimuli", "accuracy", "ece", "brier"])


def reliability(probs: pd.DataFrame, by: str | Sequence[str] | None, n_bins: int = 10) -> pd.DataFrame:
    """Reliability-diagram bins of the confidences `calibration` bins (the ECE's own equal-width bins).

    Bin b covers [b / B, (b + 1) / B) (the last also 1); confidence = mean confidence and accuracy = mean
    correctness of its stimuli (NaN for an empty bin).

    Parameters
    ----------
    probs : option probabilities (module docstring).
    by : grouping columns besides `KEY`.
    n_bins : number of bins B.

    Returns
    -------
    One row per KEY + by + bin: KEY + by + ``bin``, ``lower``, ``upper``, ``count``, ``confidence``, ``accuracy``.
    """
    keys = KEY + _names(by)
    rows = []
    for key, group in stimulus_scores(probs, by).groupby(keys, dropna=False, sort=True):
        for index, cell in enumerate(_group_ece(group, n_bins).bins):
            rows.append({**_key_dict(keys, key), "bin": index, "lower": cell.lower, "upper": cell.upper,
                         "count": cell.count, "confidence": cell.mean_conf, "accuracy": cell.accuracy})
    return pd.DataFrame(rows, columns=keys + ["bin", "lower", "upper", "count", "confidence", "accuracy"])
