"""The tables of `biaslab metrics counterfactual`: counterfactual audits of a user's own prompts
(`biaslab data load --file prompts.csv --kind counterfactual`), from the stored generated answers.

A collection is (model_key, method "gen", setting: the sampler). Each stored answer is scored from its text alone
(`measures`: VADER sentiment, refusal, length), each prompt's two variants compared (`stats.pair_rows`: gaps and
ROUGE-L / BLEU similarities), and the prompts summarized (`stats.summary`), so a new measure never needs the model.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from ...errors import UsageError
from ...views import json_field
from ..coverage import DEFAULT_MIN_COVERAGE, MIN_CLUSTERS
from ..generations import SAMPLER, generated_answers
from . import measures, stats

KEY = ["model_key", "method", "setting"]
FIELDS = ("prompt_id", "attribute", "group")


def audits(handle, dataset: str | None = None) -> dict[str, dict]:
    """dataset -> its counterfactual declaration (`loaders.user.counterfactual`: attributes, groups, counts) and
    current stimulus ids, for every counterfactual dataset of the warehouse (or `dataset` alone)."""
    if "user_datasets" not in handle.base_tables():
        found = {}
    else:
        u = handle.table("user_datasets")
        rows = handle.fetch(u.select("dataset", "declaration", "stimulus_ids", "loaded_at"))
        rows = rows.sort_values("loaded_at").groupby("dataset").tail(1)
        found = {}
        for name, text, ids in zip(rows["dataset"], rows["declaration"], rows["stimulus_ids"]):
            decl = json.loads(text)
            if decl.get("kind") == "counterfactual":
                found[name] = {**decl["counterfactual"], "ids": list(ids)}
    if dataset is not None:
        if dataset not in found:
            raise UsageError(f"{dataset!r} is not a counterfactual dataset of {handle.path} (those: "
                             f"{', '.join(sorted(found)) or 'none'}); load one with `biaslab data load --file "
                             f"PROMPTS --kind counterfactual --name NAME`")
        return {dataset: found[dataset]}
    return found


def answers(handle, found: dict[str, dict]) -> pd.DataFrame:
    """One row per stored answer to a current variant of the audits `found`: the collection, dataset, prompt_id,
    attribute, group, sample_index, text, and the per-answer measures (sentiment, refusal, length)."""
    ids = [i for audit in found.values() for i in audit["ids"]]
    st = handle.table("stimuli")
    st = st.filter(st.dataset.isin(list(found)) & st.stimulus_id.isin(ids))
    st = st.select("stimulus_id", "dataset", **{f: json_field(st.attrs, f) for f in FIELDS})
    rows = generated_answers(handle, st, ("dataset", *FIELDS)).drop(columns=list(SAMPLER))
    texts = list(rows["text"])
    rows["sentiment"] = measures.sentiment(texts)
    rows["refusal"] = [float(measures.refusal(t)) for t in texts]
    rows["length"] = [float(measures.length(t)) for t in texts]
    return rows


def helm_table(handle, scored: pd.DataFrame) -> pd.DataFrame:
    """HELM's six bias measures (`helm.helm_scores`) per collection and dataset over every stored generation of the
    warehouse (a counterfactual audit's, DecodingTrust's, misgendering's), and per attribute and group of the
    counterfactual answers `scored`: group "(all)" for a dataset's whole set; n_texts the non-empty texts."""
    from .helm import helm_scores

    rows = generated_answers(handle, columns=("dataset",), context=None).assign(attribute="(all)", group="(all)")
    parts = [rows, scored.assign(group=scored["attribute"] + ": " + scored["group"])] if not scored.empty else [rows]
    out = []
    for frame in parts:
        for key, part in frame.groupby([*KEY, "dataset", "attribute", "group"], sort=False):
            texts = [t for t in part["text"] if t]
            out.append({**dict(zip([*KEY, "dataset", "attribute", "group"], key)), **helm_scores(texts),
                        "n_texts": len(texts)})
    return pd.DataFrame(out).drop(columns="attribute") if out else pd.DataFrame()


def _coverage(table: pd.DataFrame, found: dict[str, dict], min_coverage: float) -> pd.DataFrame:
    """n_loaded (prompts with variants of the attribute), n_missing, n_without (prompts without any word of it),
    coverage, low_coverage and few_clusters beside each row."""
    counts = [found[d]["counts"][a] for d, a in zip(table["dataset"], table["attribute"])]
    table["n_loaded"] = [c["with"] for c in counts]
    table["n_missing"] = table["n_loaded"] - table["n_prompts"]
    table["n_without"] = [c["without"] for c in counts]
    table["coverage"] = table["n_prompts"] / table["n_loaded"].replace(0, np.nan)
    table["low_coverage"] = table["coverage"] < min_coverage
    table["few_clusters"] = table["n_prompts"] < MIN_CLUSTERS
    return table


def _ordered(table: pd.DataFrame, found: dict[str, dict]) -> pd.DataFrame:
    """`table`'s rows in the declared order: attributes, then groups (and pairs), then measures."""
    def rank(column: pd.Series) -> pd.Series:
        if column.name == "attribute":
            return pd.Series([found[d]["attributes"].index(a) for d, a in zip(table["dataset"], column)],
                             index=column.index)
        if column.name in ("group", "group_a", "group_b"):
            return pd.Series([found[d]["groups"][a].index(g) for d, a, g in
                              zip(table["dataset"], table["attribute"], column)], index=column.index)
        return column.map({m: i for i, m in enumerate(stats.MEASURES)})
    by = [c for c in ("attribute", "group", "group_a", "group_b", "measure") if c in table.columns]
    return table.sort_values([*KEY, "dataset", *by], key=lambda c: rank(c) if c.name in by else c,
                             kind="stable").reset_index(drop=True)


def counterfactual_tables(handle, *, dataset: str | None = None, min_coverage: float = DEFAULT_MIN_COVERAGE
                          ) -> dict[str, pd.DataFrame]:
    """{"counterfactual": per collection, dataset, attribute, pair of groups and measure the mean over prompts with
    its 95% interval, the test and coverage (`stats.summary`); "counterfactual_groups": per group the mean
    sentiment, refusal rate and length; "helm_bias": HELM's representation and association measures of every stored
    generation (`helm_table`); "_pairs": the per-prompt rows; "_answers": the scored answers}.

    Coverage: n_loaded the prompts with variants of the attribute, n_prompts those with answers to both variants,
    n_missing the others, n_without the prompts of the file without any word of the attribute (counted at load,
    never dropped silently), few_clusters below 10 prompts.
    """
    from ..missing import missing

    found = audits(handle, dataset)
    if not found:
        from ..missing import NoEvidence

        raise NoEvidence(f"{handle.path}: no counterfactual dataset is loaded; load your prompts with `biaslab data "
                         f"load --file PROMPTS --kind counterfactual --name NAME`, then `runners collect --dataset "
                         f"NAME`")
    scored = answers(handle, found)
    if scored.empty:
        names = list(found)
        raise missing(handle, "counterfactual answer", names, f"runners collect --dataset {names[0]}")
    groups = {(d, a): audit["groups"][a] for d, audit in found.items() for a in audit["attributes"]}
    pairs = stats.pair_rows(scored, KEY, groups)
    table = _ordered(_coverage(stats.summary(pairs, KEY), found, min_coverage), found)
    return {"counterfactual": table, "counterfactual_groups": _ordered(stats.group_table(scored, KEY), found),
            "helm_bias": helm_table(handle, scored), "_pairs": pairs, "_answers": scored}
