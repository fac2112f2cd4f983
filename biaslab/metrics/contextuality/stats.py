"""Contextual invariance on WinoPron (Kumar, Flint, Aiello and Baronchelli, "Failure of contextual invariance in
gender inference with large language models", 2026; stimuli of Gautam et al. 2024): p(feminine), KL to the unprimed
answer, Spearman correlation with stereotype norms, mutual information with prompt features, Contextuality-by-Default
per template pair.

Everything is computed from the `winopron_pf` view (`biaslab.views.contextuality`): exact-mode and
sample-mode evidence alike, any number of models and sampling settings ("setting" = model, mode, temperature,
top_k, top_p). No model is loaded.

Pooling (docs/design.md section 7, as the paper): p(f), KL, Spearman and mutual information pool both option orders per
template (tables `pf`, `kl`, `spearman`, `mutual_information`, column option_order = "pooled"); the per-order tables
(`pf_by_order`, `kl_by_order`, `spearman_by_order`) are extra. Contextuality-by-Default is per order. Temperature
robustness (the paper's Figures 8 and 9): `temperature_tables` re-derives every metric at other temperatures from one
exact-mode collection (`winopron_pf_at`, i.e. `choice_probs_at`).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

from ...errors import UsageError
from .cbd import MARGINAL_PRODUCT_NOTE, VARIANTS, cbd
from .information import bernoulli_kl_bits, knn_mi_classif_bits, mi_table_bits, plugin_mutual_information_bits

#: One collection setting: everything that makes two sets of evidence for the same stimuli different.
SETTING = ["model_key", "mode", "temperature", "top_k", "top_p", "prompt_version", "max_new_tokens"]
CONTEXTS = ["unprimed", "primed_f", "primed_m", "null_1", "null_2"]
COMPARED = ["primed_f", "primed_m", "null_1", "null_2"]
CONTEXT_GROUPS = {"unprimed": ["unprimed"], "primed": ["primed_f", "primed_m"], "null": ["null_1", "null_2"]}


def _wide(pf: pd.DataFrame) -> pd.DataFrame:
    """p_f with one column per context, per (setting, template, option order)."""
    return pf.pivot_table(index=[*SETTING, "item_id", "option_order"], columns="context", values="p_f",
                          aggfunc="first").reindex(columns=CONTEXTS)


#: option_order value of the tables that pool both orders per template
POOLED = "pooled"
ORDERS = ("MF", "FM")
#: per-template columns carried into the pooled frame (constant within a template)
TEMPLATE_FEATURES = ["grammatical_case", "referent_role", "stereotype_rating", "occupation", "participant", "pair_id",
                     "answer"]


def pool_orders(pf: pd.DataFrame) -> pd.DataFrame:
    """Both option orders pooled per (setting, template, context), as the paper pools its samples.

    Each order contributes its valid measurements: weight w = n_valid (sample mode) or w = p_valid (exact mode), and
    the pooled p(f) = sum_o w_o p_f,o / sum_o w_o. In sample mode this is (n_female,MF + n_female,FM) /
    (n_valid,MF + n_valid,FM), the share of feminine answers among all valid samples of the template in that context;
    in exact mode it is the value that share converges to with equally many samples per order,
    (p(female)_MF + p(female)_FM) / (p_valid,MF + p_valid,FM). An order with no valid measurement (w = 0) adds nothing.

    Parameters
    ----------
    pf : `winopron_pf` rows (SETTING, item_id, context, option_order, p_f, p_valid, n, n_valid, TEMPLATE_FEATURES).

    Returns
    -------
    One row per (SETTING, item_id, context): option_order = "pooled", p_f (NaN when no order has a valid
    measurement), p_valid (exact: mean over orders; sample: pooled n_valid / n), n, n_valid (sample mode; summed),
    orders (orders with a valid measurement), and TEMPLATE_FEATURES.
    """
    if pf.empty:
        return pf.assign(orders=pd.Series(dtype="int64"))
    frame = pf.copy()
    sample = (frame["mode"] == "sample").to_numpy()
    weight = np.where(sample, frame["n_valid"].to_numpy(dtype=float, na_value=np.nan),
                      frame["p_valid"].to_numpy(dtype=float, na_value=np.nan))
    weight = np.nan_to_num(weight, nan=0.0)
    p_f = frame["p_f"].to_numpy(dtype=float, na_value=np.nan)
    frame["_w"] = weight
    frame["_wf"] = np.where(weight > 0, weight * np.nan_to_num(p_f, nan=0.0), 0.0)
    frame["_n"] = frame["n"].to_numpy(dtype=float, na_value=np.nan)
    frame["_nv"] = frame["n_valid"].to_numpy(dtype=float, na_value=np.nan)
    frame["_has"] = weight > 0
    keys = [*SETTING, "item_id", "context"]
    grouped = frame.groupby(keys, dropna=False, sort=True)
    out = grouped.agg(_w=("_w", "sum"), _wf=("_wf", "sum"), orders=("_has", "sum"), _pv=("p_valid", "mean"),
                      _n=("_n", "sum"), _nv=("_nv", "sum"), _counted=("_n", "count"),
                      **{c: (c, "first") for c in TEMPLATE_FEATURES}).reset_index()
    counted = out.pop("_counted") > 0  # sample mode: n and n_valid summed; exact mode: NaN
    out["_n"], out["_nv"] = out["_n"].where(counted), out["_nv"].where(counted)
    out["p_f"] = np.where(out["_w"] > 0, out["_wf"] / out["_w"].where(out["_w"] > 0, 1.0), np.nan)
    out["p_valid"] = np.where(out["mode"] == "sample", out["_nv"] / out["_n"], out["_pv"])
    out["n"] = out["_n"].astype("Int64")
    out["n_valid"] = out["_nv"].astype("Int64")
    out["orders"] = out["orders"].astype("int64")
    out.insert(len(SETTING) + 1, "option_order", POOLED)
    return out.drop(columns=["_w", "_wf", "_pv", "_n", "_nv"])


def pf_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Mean p(feminine) per setting, option order (or "pooled") and context, over the templates with a defined p(f).

    Parameters
    ----------
    frame : `winopron_pf` rows (per order) or `pool_orders` rows.

    Returns
    -------
    SETTING, option_order, context, templates, mean_p_f, sd_p_f (ddof = 1), mean_p_valid.
    """
    if frame.empty:
        return pd.DataFrame(columns=[*SETTING, "option_order", "context", "templates", "mean_p_f", "sd_p_f",
                                     "mean_p_valid"])
    out = (frame.groupby([*SETTING, "option_order", "context"], dropna=False, sort=True)
           .agg(templates=("p_f", "count"), mean_p_f=("p_f", "mean"), sd_p_f=("p_f", "std"),
                mean_p_valid=("p_valid", "mean")).reset_index())
    order = {c: i for i, c in enumerate(CONTEXTS)}
    return out.sort_values([*SETTING, "option_order", "context"], key=lambda col: col.map(order)
                           if col.name == "context" else col, kind="stable").reset_index(drop=True)


def kl_table(pf: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """KL(p(f | c) || p(f | unprimed)) of Bernoulli answers in bits (`bernoulli_kl_bits`, only the reference
    smoothed) per template and order, and its mean and sd per setting, order and context over the templates with a
    defined p(f) in all five contexts. Given `pool_orders` rows, "order" is "pooled" (the paper's table).

    Returns
    -------
    (per template: SETTING, item_id, option_order, context, kl_bits; summary: SETTING, option_order, context,
    templates, mean_kl_bits, sd_kl_bits)."""
    wide = _wide(pf).dropna()
    per_template = pd.DataFrame({c: bernoulli_kl_bits(wide[c], wide["unprimed"]) for c in COMPARED},
                                index=wide.index).reset_index()
    long = per_template.melt(id_vars=[*SETTING, "item_id", "option_order"], value_vars=COMPARED,
                             var_name="context", value_name="kl_bits")
    summary = (long.groupby([*SETTING, "option_order", "context"], dropna=False)
               .agg(templates=("kl_bits", "size"), mean_kl_bits=("kl_bits", "mean"), sd_kl_bits=("kl_bits", "std"))
               .reset_index())
    return long, summary


def spearman_table(pf: pd.DataFrame) -> pd.DataFrame:
    """Spearman rho between p(f | c) and the Misersky femininity rating over the rated templates, per setting, context
    and option order (scipy.stats.spearmanr; NaN with fewer than 3 templates or a constant p(f)). Given `pool_orders`
    rows, option_order is "pooled" (the paper's table).

    Returns
    -------
    SETTING, context, option_order, n (templates), spearman_rho, p_value."""
    rows = []
    rated = pf.dropna(subset=["p_f", "stereotype_rating"])
    for key, group in rated.groupby([*SETTING, "context", "option_order"], dropna=False):
        rho, p = (np.nan, np.nan)
        if len(group) >= 3 and group["p_f"].nunique() > 1 and group["stereotype_rating"].nunique() > 1:
            rho, p = spearmanr(group["p_f"], group["stereotype_rating"])
        rows.append({**dict(zip([*SETTING, "context", "option_order"], key)), "n": len(group),
                     "spearman_rho": float(rho), "p_value": float(p)})
    return pd.DataFrame(rows)


#: Stimulus features the mutual information uses, per WinoPron stimulus.
STIMULUS_FEATURES = ["item_id", "context", "option_order", "grammatical_case", "referent_role", "stereotype_rating"]
DISCRETE_FEATURES = {"role_type": "referent_role", "grammatical_case": "grammatical_case",
                     "option_order": "option_order"}
#: Features per context group, in the order of `_features` (the bootstrap's random draws follow this order).
FEATURE_NAMES = {group: [*DISCRETE_FEATURES, "stereotype_rating", *(["prime_gender"] if group == "primed" else [])]
                 for group in CONTEXT_GROUPS}


@dataclass(frozen=True)
class SampleMeasurements:
    """Valid samples as binary measurements, in the canonical order of the samples' key, as arrays.

    settings: one row per collection setting (SETTING columns); stimuli: stimulus_id and STIMULUS_FEATURES of every
    WinoPron stimulus; per valid sample: `setting` (row of settings), `stimulus` (row of stimuli), `y` (1 = the
    feminine option)."""

    settings: pd.DataFrame
    stimuli: pd.DataFrame
    setting: np.ndarray
    stimulus: np.ndarray
    y: np.ndarray


def _measurements(pf: pd.DataFrame, samples: SampleMeasurements | None, draws: int, seed: int):
    """Individual binary measurements (1 = feminine): the settings in `groupby(SETTING)` order with their keys, the
    stimulus feature table, and per measurement its setting, stimulus row and y.

    Sample mode: every valid sample. Exact mode: `draws` draws per stimulus from Bernoulli(p_f) with a fixed seed,
    in the order of `pf`."""
    exact = pf[(pf["mode"] != "sample") & pf["p_f"].notna()]  # exact, or logprobs (a probability per prompt)
    stimuli = pf[["stimulus_id", *STIMULUS_FEATURES]]
    if samples is not None:
        stimuli = pd.concat([samples.stimuli, stimuli], ignore_index=True)
    stimuli = stimuli.drop_duplicates("stimulus_id").reset_index(drop=True)  # sample rows keep their positions
    parts = []
    if len(exact):
        rng = np.random.default_rng(seed)
        p = np.repeat(exact["p_f"].to_numpy(dtype=float), draws)
        y = (rng.random(len(p)) < p).astype(np.int64)
        stim = np.repeat(pd.Index(stimuli["stimulus_id"]).get_indexer(exact["stimulus_id"]), draws)
        parts.append((exact[SETTING].reset_index(drop=True), np.repeat(np.arange(len(exact)), draws), stim, y))
    if samples is not None and len(samples.y):
        parts.append((samples.settings[SETTING], samples.setting, samples.stimulus, samples.y))
    if not parts:
        return [], stimuli, np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    # number the settings as pandas' groupby over all measurements would order them
    keys = pd.concat([k for k, *_ in parts], ignore_index=True)
    grouped = keys.groupby(SETTING, dropna=False, sort=True)
    ordinal = grouped.ngroup().to_numpy()
    names = [key for key, _ in grouped]
    offsets = np.cumsum([0, *(len(k) for k, *_ in parts)])
    setting = np.concatenate([ordinal[offsets[i]:offsets[i + 1]][local] for i, (_, local, _, _) in enumerate(parts)])
    stim = np.concatenate([s for *_, s, _ in parts])
    y = np.concatenate([v for *_, v in parts])
    return names, stimuli, setting, stim, y


def _features(frame: pd.DataFrame, group: str) -> dict[str, tuple[np.ndarray, bool, np.ndarray]]:
    """Prompt features available in a context group: name -> (values, is_discrete, rows where defined)."""
    everywhere = np.ones(len(frame), dtype=bool)
    feats = {
        "role_type": (frame["referent_role"].to_numpy(), True, everywhere),
        "grammatical_case": (frame["grammatical_case"].to_numpy(), True, everywhere),
        "option_order": (frame["option_order"].to_numpy(), True, everywhere),
        "stereotype_rating": (frame["stereotype_rating"].to_numpy(dtype=float), False,
                              frame["stereotype_rating"].notna().to_numpy()),
    }
    if group == "primed":
        feats["prime_gender"] = (frame["context"].map({"primed_f": "f", "primed_m": "m"}).to_numpy(), True,
                                 everywhere)
    return feats


#: The k-nearest-neighbour estimator for the continuous feature runs on at most this many measurements (a seeded
#: subsample): its cost grows like n log n per call, and the bootstrap calls it many times.
MAX_KNN_MEASUREMENTS = 5_000


def _codes(values: pd.Series) -> np.ndarray:
    """Integer codes of a discrete feature in sorted order of its values (np.unique's order)."""
    return np.unique(values.to_numpy(dtype=object).astype(str), return_inverse=True)[1].astype(np.int64)


def _first_appearance(ids: np.ndarray) -> tuple[np.ndarray, int]:
    """Renumber `ids` 0.. in order of first appearance (the order of pandas' `unique`)."""
    uniq, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
    rank = np.empty(len(uniq), np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(uniq))
    return rank[inverse], len(uniq)


def _mi_sklearn_bits(x: np.ndarray, y: np.ndarray, discrete: bool, seed: int) -> float:
    """scikit-learn's mutual_info_classif (n_neighbors=3) for one feature, in bits."""
    from sklearn.feature_selection import mutual_info_classif

    value = mutual_info_classif(np.asarray(x, dtype=float).reshape(-1, 1), y, discrete_features=[discrete],
                                n_neighbors=3, random_state=seed)[0]
    return float(value / np.log(2))


def _mi_counts_bits(codes: np.ndarray, y: np.ndarray) -> float:
    """Plug-in mutual information of two discrete codings from their contingency table, in bits (the value
    scikit-learn computes for discrete features, without its per-call overhead; used inside the bootstrap)."""
    return mi_table_bits(np.bincount(codes * 2 + y, minlength=2 * (codes.max() + 1)).reshape(-1, 2))


def _mi_sklearn_table_bits(table: np.ndarray) -> float:
    """scikit-learn's discrete-discrete mutual information (`mutual_info_score`, what `mutual_info_classif` runs for
    a discrete feature) from the contingency table of the feature values present, in bits."""
    from sklearn.metrics import mutual_info_score

    present = table[table.sum(1) > 0].astype(np.int64)
    return float(mutual_info_score(None, None, contingency=present) / np.log(2))


def mutual_information_table(pf: pd.DataFrame, samples: SampleMeasurements | None = None, *, draws: int = 20,
                             bootstrap: int = 30, seed: int = 0) -> pd.DataFrame:
    """The pooled variant (not the paper's; table `mutual_information_pooled`, variant "pooled"): the measurements
    of all templates of a setting and context group pooled, so features constant within a template (role, case,
    stereotype rating) have a defined value.

    I(chosen pronoun; feature) in bits per setting and context group: scikit-learn's estimator
    (`mutual_info_classif`, n_neighbors=3) on individual measurements, a bootstrap standard error over templates,
    and for discrete features the exact plug-in value from the probabilities. The continuous feature (stereotype
    rating) is estimated on at most MAX_KNN_MEASUREMENTS measurements (seeded subsample).

    Discrete features never leave integer counts: per template, a [feature value, answer] table; a bootstrap
    resample of templates is their weighted sum. The estimator's value equals scikit-learn's on the measurements
    (`mutual_info_score` on the same contingency table); the continuous feature's bootstrap runs
    `knn_mi_classif_bits`, scikit-learn's k-NN estimator computed in one dimension (same values)."""
    names, stimuli, setting_of, stim_of, y_of = _measurements(pf, samples, draws, seed)
    rows = []
    rng = np.random.default_rng(seed)
    context = stimuli["context"].to_numpy(dtype=object)
    item = np.unique(stimuli["item_id"].to_numpy(dtype=object).astype(str), return_inverse=True)[1]
    rating = stimuli["stereotype_rating"].to_numpy(dtype=float)
    codes = {name: _codes(stimuli[column]) for name, column in DISCRETE_FEATURES.items()}
    codes["prime_gender"] = np.where(context == "primed_m", 1, 0)  # 'f' < 'm'
    by_setting = np.argsort(setting_of, kind="stable")
    bounds = np.searchsorted(setting_of[by_setting], np.arange(len(names) + 1))
    for s, key in enumerate(names):
        members = by_setting[bounds[s]:bounds[s + 1]]  # this setting's measurements, in order
        for group, contexts in CONTEXT_GROUPS.items():
            in_group = np.isin(context, contexts)[stim_of[members]]
            stim, y = stim_of[members][in_group], y_of[members][in_group]
            if len(np.unique(y)) < 2:
                continue
            probs = pf.merge(pd.DataFrame([dict(zip(SETTING, key))]), on=SETTING)
            probs = probs[probs["context"].isin(contexts) & probs["p_f"].notna()]
            prob_features = _features(probs.reset_index(drop=True), group)
            template, n_templates = _first_appearance(item[stim])
            for name in FEATURE_NAMES[group]:
                if name != "stereotype_rating":
                    estimate = _discrete_estimate(codes[name][stim], y, template, n_templates, bootstrap, rng,
                                                  probs, prob_features[name])
                else:
                    estimate = _continuous_estimate(rating[stim], y, item[stim], bootstrap, rng, seed)
                if estimate is None:
                    continue
                measured, mi, boots, plugin = estimate
                rows.append({**dict(zip(SETTING, key)), "context_group": group, "feature": name,
                             "measurements": measured, "mi_bits": mi,
                             "mi_se_bits": float(np.std(boots, ddof=1)) if len(boots) > 1 else np.nan,
                             "mi_plugin_bits": plugin})
    return pd.DataFrame(rows)


def _discrete_estimate(code: np.ndarray, y: np.ndarray, template: np.ndarray, n_templates: int, bootstrap: int,
                       rng: np.random.Generator, probs: pd.DataFrame, prob_feature: tuple):
    """One discrete feature of one setting and context group (`mutual_information_table`): (measurements, the
    estimator's MI in bits, the bootstrap values over templates, the plug-in MI from the probabilities), or None
    when the feature takes a single value. `code`, `y`, `template`: per measurement; `prob_feature`: the feature's
    (values, is_discrete, rows where defined) over the rows of `probs`."""
    n_codes = int(code.max()) + 1
    if len(np.unique(code)) < 2:
        return None
    counts = np.bincount((template * n_codes + code) * 2 + y,
                         minlength=n_templates * n_codes * 2).reshape(n_templates, n_codes, 2)
    mi = _mi_sklearn_table_bits(counts.sum(0))
    boots = []
    for _ in range(bootstrap):
        weights = np.bincount(rng.choice(n_templates, n_templates), minlength=n_templates)
        table = np.tensordot(weights, counts, axes=1)
        if (table.sum(0) == 0).any():
            continue
        boots.append(mi_table_bits(table))
    p_values, _, p_defined = prob_feature
    plugin = plugin_mutual_information_bits(probs["p_f"].to_numpy()[p_defined], p_values[p_defined])
    return len(y), mi, boots, plugin


def _continuous_estimate(rating: np.ndarray, y: np.ndarray, item: np.ndarray, bootstrap: int,
                         rng: np.random.Generator, seed: int):
    """The stereotype rating of one setting and context group (`mutual_information_table`): (measurements used, the
    k-NN estimator's MI in bits, the bootstrap values over templates, NaN for the plug-in value), or None when the
    rating or the answer takes a single value. Measurements without a rating are left out, and at most
    MAX_KNN_MEASUREMENTS are kept (seeded subsample). `rating`, `y`, `item`: per measurement."""
    defined = ~np.isnan(rating)
    values, y_def, item_def = rating[defined], y[defined], item[defined]
    if len(values) > MAX_KNN_MEASUREMENTS:
        keep = np.sort(rng.choice(len(values), MAX_KNN_MEASUREMENTS, replace=False))
        values, y_def, item_def = values[keep], y_def[keep], item_def[keep]
    if len(np.unique(values)) < 2 or len(np.unique(y_def)) < 2:
        return None
    mi = _mi_sklearn_bits(values, y_def, False, seed)
    t_def, n_def = _first_appearance(item_def)
    order = np.argsort(t_def, kind="stable")
    starts = np.searchsorted(t_def[order], np.arange(n_def + 1))
    boots = []
    for _ in range(bootstrap):
        pick = np.concatenate([order[starts[t]:starts[t + 1]] for t in rng.choice(n_def, n_def)])
        if len(np.unique(y_def[pick])) < 2:
            continue
        boots.append(knn_mi_classif_bits(values[pick], y_def[pick], seed))
    return len(values), mi, boots, np.nan


#: Features that vary WITHIN a template, per context group, for the per-template mutual information: the order of the
#: options (every group), the gender of the prime (primed), which null sentence (null), and the context itself (all
#: five contexts). Role, case and stereotype rating are constant within a template, so I[X_i; F_i] = 0 for them by
#: construction: they are in the pooled variant only (`mutual_information_table`).
PER_TEMPLATE_FEATURES = {
    "unprimed": {"option_order": ("unprimed",)},
    "primed": {"prime_gender": ("primed_f", "primed_m"), "option_order": ("primed_f", "primed_m")},
    "null": {"null_prime": ("null_1", "null_2"), "option_order": ("null_1", "null_2")},
    "all": {"context": tuple(CONTEXTS)},
}
PER_TEMPLATE_NOTE = ("per template (the paper's I[X_i; F_i], averaged over templates; se = sd / sqrt(templates)); "
                     "role, case and stereotype rating are constant within a template (I = 0 by construction): see "
                     "the pooled variant (--mi pooled)")
MI_VARIANTS = ("per-template", "pooled", "both")


def _feature_values(frame: pd.DataFrame, feature: str) -> np.ndarray:
    """The value of a within-template feature on each `winopron_pf` row."""
    if feature == "prime_gender":
        return frame["context"].map({"primed_f": "f", "primed_m": "m"}).to_numpy(dtype=object)
    if feature in ("null_prime", "context"):
        return frame["context"].to_numpy(dtype=object)
    return frame[feature].to_numpy(dtype=object)


def per_template_mi(pf: pd.DataFrame) -> pd.DataFrame:
    """I[X_i; F_i] in bits for every template i, setting and within-template feature F (PER_TEMPLATE_FEATURES).

    X_i is the answer (feminine / masculine) to template i, F_i the feature over the template's stimuli in the
    feature's contexts; both option orders and, for a feature, all other stimuli of the group are pooled. Each
    stimulus s contributes its valid measurements: sample mode n_female(s) feminine and n_valid(s) - n_female(s)
    masculine valid samples (the plug-in estimate from the contingency table [feature value, answer], equal to
    scikit-learn's `mutual_info_score`); exact mode the same table with the exact valid masses p_valid(s) p_f(s) and
    p_valid(s) (1 - p_f(s)), i.e. the value the sample estimate converges to. With table c[v, y], N = sum c:

        I = sum_{v, y} c[v, y] / N log2(c[v, y] N / (c[v, .] c[., y])).

    A template enters when at least two feature values have valid measurements.

    Returns
    -------
    SETTING, context_group, feature, item_id, values (feature values with valid measurements), measurements (sample
    mode: valid samples; exact mode: NaN), mi_bits.
    """
    columns = [*SETTING, "context_group", "feature", "item_id", "values", "measurements", "mi_bits"]
    rows: list[pd.DataFrame] = []
    if pf.empty:
        return pd.DataFrame(columns=columns)
    base = pf.copy()
    sample = (base["mode"] == "sample").to_numpy()
    weight = np.where(sample, base["n_valid"].to_numpy(dtype=float, na_value=np.nan),
                      base["p_valid"].to_numpy(dtype=float, na_value=np.nan))
    weight = np.nan_to_num(weight, nan=0.0)
    p_f = np.nan_to_num(base["p_f"].to_numpy(dtype=float, na_value=np.nan), nan=0.0)
    base["_f"] = np.where(weight > 0, weight * p_f, 0.0)
    base["_m"] = np.where(weight > 0, weight * (1 - p_f), 0.0)
    base["_nv"] = np.where(sample, weight, np.nan)
    keys = [*SETTING, "item_id"]
    for group, features in PER_TEMPLATE_FEATURES.items():
        for feature, contexts in features.items():
            part = base[base["context"].isin(contexts) & (base["_f"] + base["_m"] > 0)]
            if part.empty:
                continue
            part = part.assign(_v=_feature_values(part, feature).astype(str), _has_n=part["_nv"].notna())
            cells = (part.groupby([*keys, "_v"], dropna=False, sort=True)
                     .agg(f=("_f", "sum"), m=("_m", "sum"), nv=("_nv", "sum"), has_n=("_has_n", "any"))
                     .reset_index())
            by_template = cells.groupby(keys, dropna=False, sort=False)
            total_f, total_m = by_template["f"].transform("sum"), by_template["m"].transform("sum")
            n = total_f + total_m
            n_v = cells["f"] + cells["m"]
            with np.errstate(divide="ignore", invalid="ignore"):
                terms = (np.where(cells["f"] > 0, cells["f"] / n * np.log2(cells["f"] * n / (n_v * total_f)), 0.0)
                         + np.where(cells["m"] > 0, cells["m"] / n * np.log2(cells["m"] * n / (n_v * total_m)), 0.0))
            cells = cells.assign(_term=terms, _nv=cells["nv"].where(cells["has_n"]))
            per = (cells.groupby(keys, dropna=False, sort=True)
                   .agg(values=("_v", "size"), measurements=("_nv", "sum"), _any_n=("has_n", "any"),
                        mi_bits=("_term", "sum")).reset_index())
            per = per[per["values"] >= 2]
            per["measurements"] = per["measurements"].where(per["_any_n"])
            per["mi_bits"] = per["mi_bits"].clip(lower=0.0)  # rounding below 0 of an independent table
            rows.append(per.drop(columns="_any_n").assign(context_group=group, feature=feature))
    if not rows:
        return pd.DataFrame(columns=columns)
    return pd.concat(rows, ignore_index=True)[columns]


def mutual_information_per_template(pf: pd.DataFrame) -> pd.DataFrame:
    """The paper's mutual information: I[X_i; F_i] per template (`per_template_mi`), averaged over templates, with
    the standard error of that mean.

    Returns
    -------
    SETTING, context_group, feature, templates, measurements (sample mode: valid samples; exact: NaN), mi_bits (mean
    over templates), mi_sd_bits (ddof = 1), mi_se_bits (= sd / sqrt(templates)), variant ("per-template"), note.
    """
    per = per_template_mi(pf)
    columns = [*SETTING, "context_group", "feature", "templates", "measurements", "mi_bits", "mi_sd_bits",
               "mi_se_bits", "variant", "note"]
    if per.empty:
        return pd.DataFrame(columns=columns)
    per = per.assign(_counted=per["measurements"].notna())
    out = (per.groupby([*SETTING, "context_group", "feature"], dropna=False, sort=False)
           .agg(templates=("mi_bits", "size"), measurements=("measurements", "sum"), _counted=("_counted", "any"),
                mi_bits=("mi_bits", "mean"), mi_sd_bits=("mi_bits", "std")).reset_index())
    out["measurements"] = out["measurements"].where(out.pop("_counted"))
    out["mi_se_bits"] = out["mi_sd_bits"] / np.sqrt(out["templates"])
    out["variant"] = "per-template"
    out["note"] = PER_TEMPLATE_NOTE
    return out[columns]


def cbd_table(pf: pd.DataFrame) -> pd.DataFrame:
    """Delta C per setting, template pair, option order and variant (pairs with p(f) defined where needed)."""
    wide = _wide(pf).reset_index()
    features = pf.drop_duplicates("item_id").set_index("item_id")[["pair_id", "answer"]]
    wide = wide.join(features, on="item_id")
    rows = []
    for key, group in wide.groupby([*SETTING, "pair_id", "option_order"], dropna=False):
        by_answer = {int(r["answer"]): r for r in group[["answer", *CONTEXTS]].to_dict("records")}
        if set(by_answer) != {0, 1}:
            continue
        q1, q2 = by_answer[0], by_answer[1]
        needed = [q1["unprimed"], q2["unprimed"], q1["primed_f"], q1["primed_m"], q2["primed_f"], q2["primed_m"]]
        if any(pd.isna(v) for v in needed):
            continue
        for variant in VARIANTS:
            result = cbd(q1["unprimed"], q2["unprimed"], {"f": q2["primed_f"], "m": q2["primed_m"]},
                         {"f": q1["primed_f"], "m": q1["primed_m"]}, variant)
            rows.append({**dict(zip([*SETTING, "pair_id", "option_order"], key)), "variant": variant,
                         "delta_c": result.delta, "contextual": result.contextual})
    return pd.DataFrame(rows)


def cbd_fractions(cbd_rows: pd.DataFrame) -> pd.DataFrame:
    """Fraction of pairs contextual per order, and in either order (pairs measured in both orders). Column `note`
    says, on the rows of the marginal-product variant, that it can never be contextual (cbd.MARGINAL_PRODUCT_NOTE)."""
    if cbd_rows.empty:
        return pd.DataFrame()
    per_order = (cbd_rows.groupby([*SETTING, "variant", "option_order"], dropna=False)
                 .agg(pairs=("contextual", "size"), contextual=("contextual", "sum")).reset_index())
    either = (cbd_rows.groupby([*SETTING, "variant", "pair_id"], dropna=False)
              .agg(orders=("contextual", "size"), any_contextual=("contextual", "any")).reset_index())
    either = either[either["orders"] == 2]
    either = (either.groupby([*SETTING, "variant"], dropna=False)
              .agg(pairs=("any_contextual", "size"), contextual=("any_contextual", "sum")).reset_index())
    either["option_order"] = "either"
    out = pd.concat([per_order, either], ignore_index=True)
    out["fraction"] = out["contextual"] / out["pairs"]
    out["note"] = np.where(out["variant"] == "marginal-product", MARGINAL_PRODUCT_NOTE, "")
    return out


#: Why `model_overlap` has no rows where one collection setting is stored.
ONE_SETTING = "a comparison needs at least 2 collection settings (models, dtypes, modes or sampling settings)"


def model_overlap(cbd_rows: pd.DataFrame) -> pd.DataFrame:
    """For every two different settings (each pair once, `setting_a` < `setting_b`): contextual pairs (either order)
    of each, their intersection and Jaccard index |A & B| / |A | B| (NaN when both are empty); `note` as in
    `cbd_fractions`. With fewer than two settings the table has no rows and `attrs["empty_because"]` says why (a
    setting compared with itself says nothing)."""
    if cbd_rows.empty:
        return pd.DataFrame()
    label = cbd_rows[SETTING].astype(str).agg(" ".join, axis=1)
    sets = {}
    for (name, variant), group in cbd_rows.assign(setting=label).groupby(["setting", "variant"]):
        sets[(name, variant)] = set(group.loc[group["contextual"], "pair_id"])
    rows = []
    for (a, va), sa in sets.items():
        for (b, vb), sb in sets.items():
            if va == vb and a < b:
                union = sa | sb
                rows.append({"variant": va, "setting_a": a, "setting_b": b, "contextual_a": len(sa),
                             "contextual_b": len(sb), "both": len(sa & sb),
                             "jaccard": len(sa & sb) / len(union) if union else np.nan,
                             "note": MARGINAL_PRODUCT_NOTE if va == "marginal-product" else ""})
    out = pd.DataFrame(rows, columns=["variant", "setting_a", "setting_b", "contextual_a", "contextual_b", "both",
                                      "jaccard", "note"])
    if out.empty:
        out.attrs["empty_because"] = f"{label.nunique()} collection setting; {ONE_SETTING}"
    return out


#: Note on the Spearman tables: how many templates have a stereotype rating, and the paper's count.
MISERSKY_NOTE = ("stereotype ratings: Misersky et al. (2014) English norms matched to the antecedent when the stimuli "
                 "were loaded (rated_templates of templates); the paper rates 279 of 360 templates, biaslab's default "
                 "rule 234 (docs/decisions.md, 'Contextual invariance: paper tables')")


def _with_rating_coverage(table: pd.DataFrame, pf: pd.DataFrame) -> pd.DataFrame:
    """The Spearman table with, per setting, templates (measured), rated_templates (with a stereotype rating) and
    MISERSKY_NOTE."""
    if table.empty:
        return table
    coverage = (pf.assign(_rated=pf["item_id"].where(pf["stereotype_rating"].notna()))
                .groupby(SETTING, dropna=False).agg(templates=("item_id", "nunique"),
                                                   rated_templates=("_rated", "nunique")).reset_index())
    out = table.merge(coverage, on=SETTING, how="left")
    out["note"] = MISERSKY_NOTE
    return out


def _validity_types(table: pd.DataFrame) -> pd.DataFrame:
    """The validity table with its sample counts as nullable integers, whichever engine produced it (DuckDB gives
    Int64, an Ibis backend may give objects)."""
    table = table.copy()
    for column in ("valid_samples", "samples"):
        if column in table.columns:
            table[column] = pd.to_numeric(table[column].astype(object).where(table[column].notna())).astype("Int64")
    return table


def contextuality_tables(pf: pd.DataFrame, validity_table: pd.DataFrame, samples: SampleMeasurements | None, *,
                         draws: int = 20, bootstrap: int = 30, seed: int = 0,
                         mi: str = "per-template") -> dict[str, pd.DataFrame]:
    """All contextuality tables from the fetched relations (`load_pf`, `validity`, `sample_measurements`, or their
    Ibis equivalents), keyed by name; private tables start with '_'.

    Parameters
    ----------
    pf, validity_table, samples : the relations (samples only needed for the pooled mutual information).
    draws, bootstrap, seed : of the pooled mutual information (exact-mode draws per stimulus, bootstrap resamples).
    mi : "per-template" (the paper's I[X_i; F_i] averaged over templates: table `mutual_information`), "pooled"
        (measurements of all templates pooled: table `mutual_information_pooled`), or "both".

    Returns
    -------
    validity (the paper's Table 3); pf, kl, spearman (both option orders pooled per template, as the paper:
    option_order = "pooled") and pf_by_order, kl_by_order, spearman_by_order; mutual_information and / or
    mutual_information_pooled; cbd_fractions and model_overlap (per order, and "either").
    """
    if mi not in MI_VARIANTS:
        raise UsageError(f"mi must be one of {', '.join(MI_VARIANTS)}, got {mi!r}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        pooled = pool_orders(pf)
        kl_long, kl_summary = kl_table(pooled)
        kl_long_by_order, kl_by_order = kl_table(pf)
        cbd_rows = cbd_table(pf)
        tables = {
            "validity": _validity_types(validity_table),
            "pf": pf_table(pooled),
            "pf_by_order": pf_table(pf),
            "kl": kl_summary,
            "kl_by_order": kl_by_order,
            "spearman": _with_rating_coverage(spearman_table(pooled), pf),
            "spearman_by_order": _with_rating_coverage(spearman_table(pf), pf),
        }
        if mi in ("per-template", "both"):
            tables["mutual_information"] = mutual_information_per_template(pf)
        if mi in ("pooled", "both"):
            pooled_mi = mutual_information_table(pf, samples, draws=draws, bootstrap=bootstrap, seed=seed)
            tables["mutual_information_pooled"] = pooled_mi.assign(variant="pooled")
        tables["cbd_fractions"] = cbd_fractions(cbd_rows)
        tables["model_overlap"] = model_overlap(cbd_rows)
    tables["_pf"], tables["_pooled"], tables["_kl_templates"] = pf, pooled, kl_long
    tables["_kl_templates_by_order"], tables["_cbd"] = kl_long_by_order, cbd_rows
    return tables


#: Per-order tables that `biaslab metrics contextuality` prints only with --by-order.
BY_ORDER_TABLES = ("pf_by_order", "kl_by_order", "spearman_by_order")


def _at(table: pd.DataFrame, temperature: float) -> pd.DataFrame:
    """The table with `at_temperature` right after the SETTING columns."""
    table = table.copy()
    table.insert(len(SETTING), "at_temperature", float(temperature))
    return table


def temperature_overlap(cbd_rows: pd.DataFrame) -> pd.DataFrame:
    """Overlap of the contextual template pairs (joint variant) of one collection re-derived at two temperatures.

    Parameters
    ----------
    cbd_rows : `cbd_table` rows with `at_temperature`.

    Returns
    -------
    SETTING, option_order (MF, FM, or "either": pairs measured in both orders, contextual in at least one),
    temperature_a, temperature_b (a < b), pairs (measured at both), contextual_a, contextual_b, both, jaccard
    (both / contextual at either temperature; NaN when no pair is contextual at either).
    """
    columns = [*SETTING, "option_order", "temperature_a", "temperature_b", "pairs", "contextual_a", "contextual_b",
               "both", "jaccard"]
    if cbd_rows.empty:
        return pd.DataFrame(columns=columns)
    joint = cbd_rows[cbd_rows["variant"] == "joint"]
    either = (joint.groupby([*SETTING, "at_temperature", "pair_id"], dropna=False)
              .agg(orders=("contextual", "size"), contextual=("contextual", "any")).reset_index())
    either = either[either["orders"] == 2].drop(columns="orders").assign(option_order="either")
    rows = []
    frame = pd.concat([joint[[*SETTING, "at_temperature", "pair_id", "option_order", "contextual"]], either],
                      ignore_index=True)
    for key, part in frame.groupby([*SETTING, "option_order"], dropna=False, sort=True):
        sets = {t: dict(zip(g["pair_id"], g["contextual"])) for t, g in part.groupby("at_temperature", sort=True)}
        temps = sorted(sets)
        for i, a in enumerate(temps):
            for b in temps[i + 1:]:
                common = sets[a].keys() & sets[b].keys()
                in_a = {p for p in common if sets[a][p]}
                in_b = {p for p in common if sets[b][p]}
                union = in_a | in_b
                rows.append({**dict(zip([*SETTING, "option_order"], key)), "temperature_a": a, "temperature_b": b,
                             "pairs": len(common), "contextual_a": len(in_a), "contextual_b": len(in_b),
                             "both": len(in_a & in_b),
                             "jaccard": len(in_a & in_b) / len(union) if union else np.nan})
    return pd.DataFrame(rows, columns=columns)
