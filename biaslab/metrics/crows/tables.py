"""The tables of `biaslab metrics crows-pairs`: the stored sentence scores of CrowS-Pairs (and its revised English
set) paired again, through `stats`. A collection is (model_key, scheme): causal models score left to right, masked
LMs by pseudo-log-likelihood (`--pll original` is the paper's masking)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...views import json_field
from ..coverage import DEFAULT_MIN_COVERAGE, annotate
from . import stats

DATASETS = ("crows-pairs", "crows-pairs-revised")
KEY = ["model_key", "scheme"]


def sentences(handle, datasets=DATASETS) -> pd.DataFrame:
    """One row per collection and scored sentence of `datasets`, with its token ids and log-probabilities in order;
    `NoEvidence` when none is stored."""
    st = handle.table("stimuli")
    st = st.filter(st.dataset.isin(list(datasets))).select(
        "stimulus_id", "dataset", pair=st.item_id, sentence=json_field(st.attrs, "sentence"),
        direction=json_field(st.attrs, "direction"), bias_type=json_field(st.attrs, "bias_type"))
    seq = handle.table("sequence_scores")
    seq = seq.filter((seq.protocol == "prob") & seq.option.isnull()).join(st, "stimulus_id")
    rows = handle.fetch(seq.select("model_key", "scheme", "request_id", "dataset", "pair", "sentence", "direction",
                                   "bias_type", "sum_logprob").order_by(["model_key", "request_id"]))
    imported = _imported(handle, st)
    if rows.empty and imported.empty:
        from ..missing import missing

        raise missing(handle, "CrowS-Pairs sentence score", list(datasets), "runners collect --dataset crows-pairs")
    tok = handle.table("token_scores")
    requests = seq.select("model_key", "request_id")
    tokens = handle.fetch(tok.join(requests, ["model_key", "request_id"])
                          .select("model_key", "request_id", "position", "token_id", "logprob")
                          .order_by(["model_key", "request_id", "position"]))
    key = tokens["model_key"].astype(str) + "\x1f" + tokens["request_id"].astype(str)
    starts = np.flatnonzero(np.r_[True, key.to_numpy()[1:] != key.to_numpy()[:-1]]) if len(key) else np.array([], int)
    bounds = dict(zip(key.iloc[starts], zip(starts, np.r_[starts[1:], len(key)])))
    ids, lps = tokens["token_id"].to_numpy(), tokens["logprob"].to_numpy(float)
    wanted = rows["model_key"].astype(str) + "\x1f" + rows["request_id"].astype(str)
    rows["token_ids"] = [ids[slice(*bounds[k])].tolist() if k in bounds else [] for k in wanted]
    rows["logprobs"] = [lps[slice(*bounds[k])] if k in bounds else np.empty(0) for k in wanted]
    return pd.concat([rows, imported], ignore_index=True) if not imported.empty else rows


def _imported(handle, st) -> pd.DataFrame:
    """Sentence scores another tool computed (`biaslab import`: lm-eval's crows_pairs tasks, a CSV), as rows of
    `sentences` with scheme 'import' and no tokens (token_ids None: the paper's metric, which needs the tokens both
    sentences share, is not computed for them)."""
    if "imported_answers" not in handle.tables():
        return pd.DataFrame()
    a = handle.table("imported_answers")
    a = a.filter(a.option.isnull()).join(st, "stimulus_id")
    rows = handle.fetch(a.select("model_key", "request_id", "dataset", "pair", "sentence", "direction", "bias_type",
                                 sum_logprob=a.loglik).order_by(["model_key", "request_id"]))
    if rows.empty:
        return rows
    return rows.assign(scheme="import", token_ids=None, logprobs=None)


def _loaded(handle) -> pd.DataFrame:
    st = handle.table("stimuli")
    st = st.filter(st.dataset.isin(list(DATASETS)))
    rows = handle.fetch(st.select("dataset", pair=st.item_id, bias_type=json_field(st.attrs, "bias_type"))
                        .distinct())
    per = rows.groupby(["dataset", "bias_type"]).size().rename("n_loaded").reset_index()
    total = rows.groupby("dataset").size().rename("n_loaded").reset_index().assign(bias_type=stats.ALL)
    return pd.concat([per, total[per.columns]], ignore_index=True)


def crows_tables(handle, *, bootstrap: int = 1000, seed: int = 0,
                 min_coverage: float = DEFAULT_MIN_COVERAGE) -> dict[str, pd.DataFrame]:
    """{"crows_pairs": the scores per collection, dataset and bias type with intervals, sign tests and coverage,
    "_pairs": the per-pair rows}.

    Coverage (`biaslab.metrics.coverage`): n_loaded the pairs of the dataset and bias type loaded, n_used the pairs
    with both sentences scored, n_invalid the pairs with only one scored (an interrupted collection), n_missing the
    pairs without any score in that collection; few_clusters where the intervals rest on fewer than 10 pairs.
    """
    frame = sentences(handle)
    pairs = stats.pair_frame(frame, KEY)
    table = stats.scores(pairs, KEY, bootstrap=bootstrap, seed=seed)
    keys = [*KEY, "dataset", "bias_type"]
    seen = frame.drop_duplicates([*KEY, "dataset", "pair"])
    seen = pd.concat([seen, seen.assign(bias_type=stats.ALL)])
    evidence = seen.groupby(keys).size().rename("n_evidence").reset_index()
    loaded = table[keys].merge(_loaded(handle), on=["dataset", "bias_type"], how="left")
    table = annotate(table, used="n_pairs", loaded=loaded, evidence=evidence, keys=keys, min_coverage=min_coverage,
                     clusters="n_pairs")
    return {"crows_pairs": table, "_pairs": pairs}
