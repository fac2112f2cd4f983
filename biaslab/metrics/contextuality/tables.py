"""The contextual-invariance study read from a warehouse (`biaslab.open` handle): the rows of `winopron_pf`,
`winopron_validity` and the valid samples (`biaslab.views`), and the temperature re-derivations through the
`winopron_pf_at` macro (DuckDB engine); the statistics are in `stats`."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from ... import views
from ...errors import UsageError
from .stats import (SETTING, STIMULUS_FEATURES, SampleMeasurements, _at, _with_rating_coverage,
                    cbd_fractions, cbd_table, contextuality_tables, kl_table, mutual_information_per_template, pf_table,
                    pool_orders, spearman_table, temperature_overlap)

def load_pf(handle) -> pd.DataFrame:
    """One row per (setting, stimulus) of `winopron_pf`: p_f, p_valid, counts, and the stimulus features, in a fixed
    order (setting, then request): the exact-mode draws and the bootstrap follow the row order, so it must not
    depend on the engine's parallel execution.

    Parameters
    ----------
    handle : a `biaslab.open` handle.
    """
    return handle.fetch(handle.table("winopron_pf").order_by([*SETTING, "request_id", "stimulus_id"]))


def validity(handle) -> pd.DataFrame:
    """The paper's valid-measurements table (`winopron_validity`): mean share of valid answers per setting, context
    and order, ordered by every column."""
    table = handle.table("winopron_validity")
    return handle.fetch(table.order_by(list(table.columns)))


def sample_measurements(handle) -> SampleMeasurements:
    """Valid samples as measurements (y = 1 for the feminine option), ordered by the samples' key (model, request,
    settings, sample index, seed): only integer codes leave the engine (`views.sample_codes`), the settings and
    stimuli as small tables."""
    source = handle.source
    stimuli = handle.fetch(views.winopron_stimuli(source).select("stimulus_id", *STIMULUS_FEATURES)
                           .order_by("stimulus_id"))
    settings = handle.fetch(views.sample_settings(source))
    settings.insert(1, "mode", "sample")
    codes = handle.fetch_arrays(views.sample_codes(source))
    return SampleMeasurements(settings[SETTING], stimuli, np.asarray(codes["setting"], dtype=np.int32),
                              np.asarray(codes["stimulus"], dtype=np.int32), np.asarray(codes["y"], dtype=np.int64))


def contextuality_report(handle, *, draws: int = 20, bootstrap: int = 30, seed: int = 0,
                         mi: str = "per-template") -> dict[str, pd.DataFrame]:
    """All contextuality tables of a `biaslab.open` handle, keyed by name (see `contextuality_tables`)."""
    samples = sample_measurements(handle) if mi != "per-template" else None
    return contextuality_tables(load_pf(handle), validity(handle), samples, draws=draws, bootstrap=bootstrap,
                                seed=seed, mi=mi)


def parse_temperatures(text: str) -> list[float]:
    """"0.3,0.5,0.7" -> [0.3, 0.5, 0.7]; a value that is not a number > 0 raises ValueError with one clear line."""
    values = []
    for part in text.split(","):
        part = part.strip()
        try:
            value = float(part)
        except ValueError:
            raise UsageError(f"--temperatures: {part!r} is not a number (expected e.g. 0.3,0.5,0.7)") from None
        if not np.isfinite(value) or value <= 0:
            raise UsageError(f"--temperatures: every temperature must be > 0, got {part}")
        values.append(value)
    if not values:
        raise UsageError("--temperatures: give at least one temperature, e.g. 0.3,0.5,0.7")
    return list(dict.fromkeys(values))


def pf_at_temperature(handle, temperature: float, top_k: int) -> pd.DataFrame:
    """`winopron_pf` rows of the exact-mode collections with this top_k, re-derived at `temperature` (same top_k)
    from the stored trie evidence (`winopron_pf_at`, i.e. `choice_probs_at`), no model.

    The SETTING columns name the collection the evidence came from (its temperature, top_k, top_p), so the tables
    of several temperatures line up by collection; `at_temperature` / `at_top_k` say where they were re-derived.
    """
    frame = handle.query(
        "SELECT * FROM winopron_pf_at(?, ?) WHERE collected_top_k = ? ORDER BY model_key, prompt_version, "
        "max_new_tokens, collected_temperature, collected_top_p, request_id, stimulus_id",
        [float(temperature), int(top_k), int(top_k)])
    frame = frame.assign(temperature=frame["collected_temperature"], top_k=frame["collected_top_k"],
                         top_p=frame["collected_top_p"], at_temperature=float(temperature), at_top_k=int(top_k))
    return frame.drop(columns=["collected_temperature", "collected_top_k", "collected_top_p"])


def temperature_tables(handle, temperatures: list[float]) -> dict[str, pd.DataFrame]:
    """Temperature robustness (the paper's Figures 8 and 9) from ONE exact collection per setting: every metric
    re-derived at each temperature (top_k as collected) through `choice_probs_at`, and the overlap of contextual
    template pairs across temperatures. No model runs.

    Parameters
    ----------
    handle : a `biaslab.open` handle on the DuckDB engine (exact-mode WinoPron collections with their trie
        evidence).
    temperatures : e.g. [0.3, 0.5, 0.7].

    Returns
    -------
    temperature_pf, temperature_kl, temperature_spearman (both orders pooled, as `pf`, `kl`, `spearman`),
    temperature_mutual_information (per template, as `mutual_information`), temperature_cbd_fractions (as
    `cbd_fractions`): each with `at_temperature` after the collection's SETTING columns; temperature_overlap: per
    collection, option order (MF, FM, either) and two temperatures, the contextual pairs (joint variant) at each,
    at both, and their Jaccard index. Empty tables when no exact-mode trie evidence is stored.
    """
    top_ks = [int(k) for k in handle.query(
        "SELECT DISTINCT c.top_k FROM choice_probs c JOIN choice_requests r USING (model_key, request_id) "
        "JOIN winopron_stimuli w USING (stimulus_id) JOIN (SELECT DISTINCT model_key, request_id FROM choice_nodes) "
        "USING (model_key, request_id) ORDER BY 1")["top_k"]]
    parts: dict[str, list[pd.DataFrame]] = {k: [] for k in ("pf", "kl", "spearman", "mutual_information",
                                                            "cbd_fractions")}
    cbd_parts = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for k in top_ks:
            for t in temperatures:
                frame = pf_at_temperature(handle, t, k)
                if frame.empty:
                    continue
                pooled = pool_orders(frame)
                cbd_rows = cbd_table(frame)
                results = {"pf": pf_table(pooled), "kl": kl_table(pooled)[1],
                           "spearman": _with_rating_coverage(spearman_table(pooled), frame),
                           "mutual_information": mutual_information_per_template(frame),
                           "cbd_fractions": cbd_fractions(cbd_rows)}
                for name, table in results.items():
                    if not table.empty:
                        parts[name].append(_at(table, t))
                if not cbd_rows.empty:
                    cbd_parts.append(_at(cbd_rows, t))
    out = {f"temperature_{name}": (pd.concat(p, ignore_index=True) if p else pd.DataFrame())
           for name, p in parts.items()}
    out["temperature_overlap"] = temperature_overlap(pd.concat(cbd_parts, ignore_index=True) if cbd_parts
                                                     else pd.DataFrame())
    return out




def with_coverage(handle, tables: dict[str, pd.DataFrame], min_coverage: float) -> dict[str, pd.DataFrame]:
    """The headline tables (pf, pf_by_order, kl, kl_by_order, spearman, spearman_by_order, cbd_fractions) with
    `biaslab.metrics.coverage.COVERAGE_COLUMNS`: the WinoPron templates (template pairs for CbD; rated templates for
    Spearman) loaded, those a score rests on, those with evidence but no valid answer in that setting and context,
    those without evidence; pf's valid_share is its mean_p_valid.

    Parameters
    ----------
    handle : the handle the tables came from.
    tables : `contextuality_report`'s tables (private ones included).
    min_coverage : the threshold of `low_coverage`.
    """
    from ..coverage import annotate

    stimuli = handle.fetch(views.winopron_stimuli(handle.source).select("item_id", "pair_id", "stereotype_rating"))
    templates = int(stimuli["item_id"].nunique())
    rated = int(stimuli.loc[stimuli["stereotype_rating"].notna(), "item_id"].nunique())
    pairs = int(stimuli["pair_id"].nunique())
    out = dict(tables)
    for name, source, key in (("pf", "_pooled", "templates"), ("pf_by_order", "_pf", "templates"),
                              ("kl", "_pooled", "templates"), ("kl_by_order", "_pf", "templates"),
                              ("spearman", "_pooled", "n"), ("spearman_by_order", "_pf", "n")):
        if name not in tables or source not in tables:
            continue
        rows = tables[source]
        if name.startswith("spearman"):
            rows = rows[rows["stereotype_rating"].notna()]
        evidence = (rows.groupby([*SETTING, "option_order", "context"], dropna=False)["item_id"].nunique()
                    .rename("n_evidence").reset_index())
        table = tables[name]
        share = "mean_p_valid" if "mean_p_valid" in table.columns else None
        out[name] = annotate(table, used=key, loaded=rated if name.startswith("spearman") else templates,
                             evidence=evidence, keys=[*SETTING, "option_order", "context"], valid_share=share,
                             min_coverage=min_coverage, clusters=key)
    if "cbd_fractions" in tables and not tables["cbd_fractions"].empty:
        out["cbd_fractions"] = annotate(tables["cbd_fractions"], used="pairs", loaded=pairs,
                                        min_coverage=min_coverage)
    return out
