"""Contextual invariance on WinoPron (Gautam et al. 2024): KL to the unprimed answer, Spearman correlation with
stereotype norms, mutual information with prompt features, Contextuality-by-Default per template pair.

Everything is computed from the `winopron_pf` view (biaslab/sql/views/contextuality.sql): exact-mode and
sample-mode evidence alike, any number of models and sampling settings ("setting" = model, mode, temperature,
top_k, top_p). No model is loaded.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

from ..warehouse import Warehouse
from .cbd import MARGINAL_PRODUCT_NOTE, VARIANTS, cbd
from .information import bernoulli_kl_bits, knn_mi_classif_bits, mi_table_bits, plugin_mutual_information_bits

#: One collection setting: everything that makes two sets of evidence for the same stimuli different.
SETTING = ["model_key", "mode", "temperature", "top_k", "top_p", "prompt_version", "max_new_tokens"]
CONTEXTS = ["unprimed", "primed_f", "primed_m", "null_1", "null_2"]
COMPARED = ["primed_f", "primed_m", "null_1", "null_2"]
CONTEXT_GROUPS = {"unprimed": ["unprimed"], "primed": ["primed_f", "primed_m"], "null": ["null_1", "null_2"]}


def load_pf(wh: Warehouse) -> pd.DataFrame:
    """One row per (setting, stimulus): p_f, p_valid, counts, and the stimulus features, in a fixed order (setting,
    then request): the exact-mode draws and the bootstrap follow the row order, so it must not depend on DuckDB's
    parallel execution."""
    return wh.con.execute(f"SELECT * FROM winopron_pf ORDER BY {', '.join(SETTING)}, request_id, stimulus_id").df()


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


def sample_measurements(wh: Warehouse) -> SampleMeasurements:
    """Valid samples as measurements (y = 1 for the feminine option), ordered by the samples' key (model, request,
    settings, sample index, seed): only integer codes leave DuckDB, the settings and stimuli as small tables."""
    stimuli = wh.con.execute(f"SELECT stimulus_id, {', '.join(STIMULUS_FEATURES)} FROM winopron_stimuli "
                             "ORDER BY stimulus_id").df()
    base = """
        FROM samples s JOIN winopron_stimuli w USING (stimulus_id)
        JOIN choice_requests r ON r.model_key = s.model_key AND r.request_id = s.request_id
        WHERE s.valid"""
    key = "s.model_key, s.temperature, s.top_k, s.top_p, r.prompt_version, s.max_new_tokens"
    settings = wh.con.execute(f"""
        SELECT DISTINCT s.model_key, 'sample' AS mode, s.temperature, s.top_k, s.top_p, r.prompt_version,
               s.max_new_tokens {base}
        ORDER BY model_key, temperature, top_k, top_p, prompt_version, max_new_tokens""").df()  # = the dense_rank
    rows = wh.con.execute(f"""
        SELECT (dense_rank() OVER (ORDER BY {key}) - 1)::INTEGER AS setting, st.stimulus::INTEGER AS stimulus,
               coalesce(s.answer = w.female_option, false)::TINYINT AS y
        FROM samples s JOIN winopron_stimuli w USING (stimulus_id)
        JOIN choice_requests r ON r.model_key = s.model_key AND r.request_id = s.request_id
        JOIN (SELECT stimulus_id, row_number() OVER (ORDER BY stimulus_id) - 1 AS stimulus FROM winopron_stimuli) st
          ON st.stimulus_id = s.stimulus_id
        WHERE s.valid
        ORDER BY s.model_key, s.request_id, s.temperature, s.top_k, s.top_p, s.max_new_tokens, s.sample_index,
                 s.seed""").fetchnumpy()
    return SampleMeasurements(settings, stimuli, np.asarray(rows["setting"]), np.asarray(rows["stimulus"]),
                              np.asarray(rows["y"], dtype=np.int64))


def _measurements(pf: pd.DataFrame, samples: SampleMeasurements | None, draws: int, seed: int):
    """Individual binary measurements (1 = feminine): the settings in `groupby(SETTING)` order with their keys, the
    stimulus feature table, and per measurement its setting, stimulus row and y.

    Sample mode: every valid sample. Exact mode: `draws` draws per stimulus from Bernoulli(p_f) with a fixed seed,
    in the order of `pf`."""
    exact = pf[(pf["mode"] == "exact") & pf["p_f"].notna()]
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
    """I(chosen pronoun; feature) in bits per setting and context group: scikit-learn's estimator
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
                discrete = name != "stereotype_rating"
                if discrete:
                    code = codes[name][stim]
                    n_codes = int(code.max()) + 1
                    if len(np.unique(code)) < 2:
                        continue
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
                    p_values, _, p_defined = prob_features[name]
                    plugin = plugin_mutual_information_bits(probs["p_f"].to_numpy()[p_defined], p_values[p_defined])
                    measured = len(y)
                else:
                    defined = ~np.isnan(rating[stim])
                    values, y_def, stim_def = rating[stim][defined], y[defined], stim[defined]
                    if len(values) > MAX_KNN_MEASUREMENTS:
                        keep = np.sort(rng.choice(len(values), MAX_KNN_MEASUREMENTS, replace=False))
                        values, y_def, stim_def = values[keep], y_def[keep], stim_def[keep]
                    if len(np.unique(values)) < 2 or len(np.unique(y_def)) < 2:
                        continue
                    mi = _mi_sklearn_bits(values, y_def, False, seed)
                    t_def, n_def = _first_appearance(item[stim_def])
                    order = np.argsort(t_def, kind="stable")
                    starts = np.searchsorted(t_def[order], np.arange(n_def + 1))
                    boots = []
                    for _ in range(bootstrap):
                        pick = np.concatenate([order[starts[t]:starts[t + 1]] for t in rng.choice(n_def, n_def)])
                        if len(np.unique(y_def[pick])) < 2:
                            continue
                        boots.append(knn_mi_classif_bits(values[pick], y_def[pick], seed))
                    plugin = np.nan
                    measured = len(values)
                rows.append({**dict(zip(SETTING, key)), "context_group": group, "feature": name,
                             "measurements": measured, "mi_bits": mi,
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


def model_overlap(cbd_rows: pd.DataFrame) -> pd.DataFrame:
    """For every two settings: contextual pairs (either order) of each, their intersection and Jaccard index
    (`note` as in `cbd_fractions`)."""
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
                             "jaccard": len(sa & sb) / len(union) if union else np.nan,
                             "note": MARGINAL_PRODUCT_NOTE if va == "marginal-product" else ""})
    return pd.DataFrame(rows)


def contextuality_report(wh: Warehouse, *, draws: int = 20, bootstrap: int = 30, seed: int = 0) -> dict[str, pd.DataFrame]:
    """All contextuality tables, keyed by name."""
    return contextuality_tables(load_pf(wh), validity(wh), sample_measurements(wh), draws=draws, bootstrap=bootstrap,
                                seed=seed)


def sample_measurements_from_rows(rows: pd.DataFrame, stimuli: pd.DataFrame) -> SampleMeasurements:
    """`sample_measurements` from already-fetched relations (e.g. the Ibis relations on any backend).

    Parameters
    ----------
    rows : valid WinoPron samples (`relations.winopron_sample_answers`): the setting columns, request_id,
        sample_index, seed, stimulus_id, y.
    stimuli : `winopron_stimuli` rows (stimulus_id and STIMULUS_FEATURES).

    Returns
    -------
    The same SampleMeasurements `sample_measurements` reads from DuckDB.
    """
    stimuli = stimuli[["stimulus_id", *STIMULUS_FEATURES]].sort_values("stimulus_id").reset_index(drop=True)
    key = ["model_key", "temperature", "top_k", "top_p", "prompt_version", "max_new_tokens"]
    rows = rows.sort_values(["model_key", "request_id", "temperature", "top_k", "top_p", "max_new_tokens",
                             "sample_index", "seed"], kind="stable").reset_index(drop=True)
    settings = rows[key].drop_duplicates().sort_values(key).reset_index(drop=True)
    settings.insert(1, "mode", "sample")
    setting = rows.groupby(key, sort=True).ngroup().to_numpy(dtype=np.int32) if len(rows) else np.zeros(0, np.int32)
    stimulus = pd.Index(stimuli["stimulus_id"]).get_indexer(rows["stimulus_id"]).astype(np.int32)
    return SampleMeasurements(settings[SETTING], stimuli, setting, stimulus, rows["y"].to_numpy(dtype=np.int64))


def contextuality_tables(pf: pd.DataFrame, validity_table: pd.DataFrame, samples: SampleMeasurements | None, *,
                         draws: int = 20, bootstrap: int = 30, seed: int = 0) -> dict[str, pd.DataFrame]:
    """All contextuality tables from the fetched relations (`load_pf`, `validity`, `sample_measurements`, or their
    Ibis equivalents), keyed by name; private tables start with '_'."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        kl_long, kl_summary = kl_table(pf)
        cbd_rows = cbd_table(pf)
        tables = {
            "validity": validity_table,
            "kl": kl_summary,
            "spearman": spearman_table(pf),
            "mutual_information": mutual_information_table(pf, samples, draws=draws,
                                                           bootstrap=bootstrap, seed=seed),
            "cbd_fractions": cbd_fractions(cbd_rows),
            "model_overlap": model_overlap(cbd_rows),
        }
    tables["_pf"], tables["_kl_templates"], tables["_cbd"] = pf, kl_long, cbd_rows
    return tables
