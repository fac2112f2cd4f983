"""Contextual invariance on WinoPron (Gautam et al. 2024): KL to the unprimed answer, Spearman correlation with
stereotype norms, mutual information with prompt features, Contextuality-by-Default per template pair.

Everything is computed from the `winopron_pf` view (biaslab/sql/views/contextuality.sql): exact-mode and
sample-mode evidence alike, any number of models and sampling settings ("setting" = model, mode, temperature,
top_k, top_p). No model is loaded.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

from ..warehouse import Warehouse
from .cbd import VARIANTS, cbd
from .information import bernoulli_kl_bits, plugin_mutual_information_bits

#: One collection setting: everything that makes two sets of evidence for the same stimuli different.
SETTING = ["model_key", "mode", "temperature", "top_k", "top_p", "prompt_version", "max_new_tokens"]
CONTEXTS = ["unprimed", "primed_f", "primed_m", "null_1", "null_2"]
COMPARED = ["primed_f", "primed_m", "null_1", "null_2"]
CONTEXT_GROUPS = {"unprimed": ["unprimed"], "primed": ["primed_f", "primed_m"], "null": ["null_1", "null_2"]}


def load_pf(wh: Warehouse) -> pd.DataFrame:
    """One row per (setting, stimulus): p_f, p_valid, counts, and the stimulus features."""
    return wh.con.execute("SELECT * FROM winopron_pf").df()


def validity(wh: Warehouse) -> pd.DataFrame:
    """The paper's valid-measurements table: mean share of valid answers per setting, context and order."""
    return wh.con.execute("SELECT * FROM winopron_validity ORDER BY ALL").df()


def _wide(pf: pd.DataFrame) -> pd.DataFrame:
    """p_f with one column per context, per (setting, template, option order)."""
    return pf.pivot_table(index=[*SETTING, "item_id", "option_order"], columns="context", values="p_f",
                          aggfunc="first").reindex(columns=CONTEXTS)


def kl_table(pf: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """KL(c || unprimed) in bits per template and order, and its mean per setting, order and context over the
    templates with a defined p(f) in all five contexts."""
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
    """Spearman rho between p(f | c) and the Misersky femininity rating, per setting, context and order."""
    rows = []
    rated = pf.dropna(subset=["p_f", "stereotype_rating"])
    for key, group in rated.groupby([*SETTING, "context", "option_order"], dropna=False):
        rho, p = (np.nan, np.nan)
        if len(group) >= 3 and group["p_f"].nunique() > 1:
            rho, p = spearmanr(group["p_f"], group["stereotype_rating"])
        rows.append({**dict(zip([*SETTING, "context", "option_order"], key)), "n": len(group),
                     "spearman_rho": float(rho), "p_value": float(p)})
    return pd.DataFrame(rows)


def measurements(pf: pd.DataFrame, samples: pd.DataFrame | None, draws: int, seed: int) -> pd.DataFrame:
    """Individual binary measurements (1 = feminine) with their stimulus features.

    Sample mode: every valid sample. Exact mode: `draws` draws per stimulus from Bernoulli(p_f) with a fixed seed.
    """
    parts = []
    exact = pf[(pf["mode"] == "exact") & pf["p_f"].notna()]
    if len(exact):
        rng = np.random.default_rng(seed)
        repeated = exact.loc[exact.index.repeat(draws)].copy()
        repeated["y"] = (rng.random(len(repeated)) < repeated["p_f"].to_numpy()).astype(int)
        parts.append(repeated)
    if samples is not None and len(samples):
        parts.append(samples)
    return pd.concat(parts, ignore_index=True) if parts else pf.iloc[:0].assign(y=[])


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


def _mi_sklearn_bits(x: np.ndarray, y: np.ndarray, discrete: bool, seed: int) -> float:
    """scikit-learn's mutual_info_classif (n_neighbors=3) for one feature, in bits."""
    from sklearn.feature_selection import mutual_info_classif

    value = mutual_info_classif(np.asarray(x, dtype=float).reshape(-1, 1), y, discrete_features=[discrete],
                                n_neighbors=3, random_state=seed)[0]
    return float(value / np.log(2))


def _mi_counts_bits(codes: np.ndarray, y: np.ndarray) -> float:
    """Plug-in mutual information of two discrete codings from their contingency table, in bits (the value
    scikit-learn computes for discrete features, without its per-call overhead; used inside the bootstrap)."""
    table = np.bincount(codes * 2 + y, minlength=2 * (codes.max() + 1)).reshape(-1, 2).astype(float)
    joint = table / table.sum()
    px, py = joint.sum(1, keepdims=True), joint.sum(0, keepdims=True)
    nz = joint > 0
    return float((joint[nz] * np.log2(joint[nz] / (px @ py)[nz])).sum())


def mutual_information_table(pf: pd.DataFrame, samples: pd.DataFrame | None = None, *, draws: int = 20,
                             bootstrap: int = 30, seed: int = 0) -> pd.DataFrame:
    """I(chosen pronoun; feature) in bits per setting and context group: scikit-learn's estimator
    (`mutual_info_classif`, n_neighbors=3) on individual measurements, a bootstrap standard error over templates,
    and for discrete features the exact plug-in value from the probabilities. The continuous feature (stereotype
    rating) is estimated on at most MAX_KNN_MEASUREMENTS measurements (seeded subsample)."""
    meas = measurements(pf, samples, draws, seed)
    rows = []
    rng = np.random.default_rng(seed)
    for key, setting in meas.groupby(SETTING, dropna=False):
        for group, contexts in CONTEXT_GROUPS.items():
            frame = setting[setting["context"].isin(contexts)].reset_index(drop=True)
            if frame["y"].nunique() < 2:
                continue
            probs = pf.merge(pd.DataFrame([dict(zip(SETTING, key))]), on=SETTING)
            probs = probs[probs["context"].isin(contexts) & probs["p_f"].notna()]
            prob_features = _features(probs.reset_index(drop=True), group)
            for name, (all_values, discrete, defined) in _features(frame, group).items():
                sub = frame[defined].reset_index(drop=True)
                values, y = all_values[defined], sub["y"].to_numpy().astype(int)
                if not discrete and len(sub) > MAX_KNN_MEASUREMENTS:
                    keep = np.sort(rng.choice(len(sub), MAX_KNN_MEASUREMENTS, replace=False))
                    sub, values, y = sub.iloc[keep].reset_index(drop=True), values[keep], y[keep]
                if len(np.unique(values)) < 2 or len(np.unique(y)) < 2:
                    continue
                codes = np.unique(values, return_inverse=True)[1] if discrete else None
                mi = _mi_sklearn_bits(codes if discrete else values, y, discrete, seed)
                templates = sub["item_id"].unique()
                by_template = sub.groupby("item_id").indices
                boots = []
                for _ in range(bootstrap):
                    pick = np.concatenate([by_template[t] for t in rng.choice(templates, len(templates))])
                    if len(np.unique(y[pick])) < 2:
                        continue
                    boots.append(_mi_counts_bits(codes[pick], y[pick]) if discrete
                                 else _mi_sklearn_bits(values[pick], y[pick], False, seed))
                plugin = np.nan
                if discrete:
                    p_values, _, p_defined = prob_features[name]
                    plugin = plugin_mutual_information_bits(probs["p_f"].to_numpy()[p_defined], p_values[p_defined])
                rows.append({**dict(zip(SETTING, key)), "context_group": group, "feature": name,
                             "measurements": len(sub), "mi_bits": mi,
                             "mi_se_bits": float(np.std(boots, ddof=1)) if len(boots) > 1 else np.nan,
                             "mi_plugin_bits": plugin})
    return pd.DataFrame(rows)


def cbd_table(pf: pd.DataFrame) -> pd.DataFrame:
    """Delta C per setting, template pair, option order and variant (pairs with p(f) defined where needed)."""
    wide = _wide(pf).reset_index()
    features = pf.drop_duplicates("item_id").set_index("item_id")[["pair_id", "answer"]]
    wide = wide.join(features, on="item_id")
    rows = []
    for key, group in wide.groupby([*SETTING, "pair_id", "option_order"], dropna=False):
        by_answer = {int(r["answer"]): r for _, r in group.iterrows()}
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
    """Fraction of pairs contextual per order, and in either order (pairs measured in both orders)."""
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
    return out


def model_overlap(cbd_rows: pd.DataFrame) -> pd.DataFrame:
    """For every two settings: contextual pairs (either order) of each, their intersection and Jaccard index."""
    if cbd_rows.empty:
        return pd.DataFrame()
    label = cbd_rows[SETTING].astype(str).agg(" ".join, axis=1)
    sets = {}
    for (name, variant), group in cbd_rows.assign(setting=label).groupby(["setting", "variant"]):
        sets[(name, variant)] = set(group.loc[group["contextual"], "pair_id"])
    rows = []
    for (a, va), sa in sets.items():
        for (b, vb), sb in sets.items():
            if va == vb:
                union = sa | sb
                rows.append({"variant": va, "setting_a": a, "setting_b": b, "contextual_a": len(sa),
                             "contextual_b": len(sb), "both": len(sa & sb),
                             "jaccard": len(sa & sb) / len(union) if union else np.nan})
    return pd.DataFrame(rows)


def sample_measurements(wh: Warehouse) -> pd.DataFrame:
    """Valid samples as measurements (y = 1 for the feminine option) with stimulus features."""
    return wh.con.execute("""
        SELECT s.model_key, 'sample' AS mode, s.temperature, s.top_k, s.top_p, r.prompt_version, s.max_new_tokens,
               w.*, CAST(s.answer = w.female_option AS INTEGER) AS y
        FROM samples s JOIN winopron_stimuli w USING (stimulus_id)
        JOIN choice_requests r ON r.model_key = s.model_key AND r.request_id = s.request_id
        WHERE s.valid""").df()


def contextuality_report(wh: Warehouse, *, draws: int = 20, bootstrap: int = 30, seed: int = 0) -> dict[str, pd.DataFrame]:
    """All contextuality tables, keyed by name."""
    pf = load_pf(wh)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        kl_long, kl_summary = kl_table(pf)
        cbd_rows = cbd_table(pf)
        tables = {
            "validity": validity(wh),
            "kl": kl_summary,
            "spearman": spearman_table(pf),
            "mutual_information": mutual_information_table(pf, sample_measurements(wh), draws=draws,
                                                           bootstrap=bootstrap, seed=seed),
            "cbd_fractions": cbd_fractions(cbd_rows),
            "model_overlap": model_overlap(cbd_rows),
        }
    tables["_pf"], tables["_kl_templates"], tables["_cbd"] = pf, kl_long, cbd_rows
    return tables
