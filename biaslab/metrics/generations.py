"""Stored generated answers as the studies that read them see them (DecodingTrust's, a counterfactual audit's, HELM's
measures of any generation): one row per answer with its collection, model_key, method "gen" and setting, the
sampler it was drawn with."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

__all__ = ["SAMPLER", "generated_answers", "sampler_setting"]

#: the sampler columns of a stored answer, which name its collection's setting
SAMPLER = ("temperature", "top_k", "top_p", "max_new_tokens", "min_new_tokens")


def sampler_setting(rows: pd.DataFrame) -> list[str]:
    """Each row's setting, "T=1 top_k=262144 top_p=1 max_new_tokens=150 min_new_tokens=0", from its SAMPLER
    columns."""
    return [f"T={t:g} top_k={k} top_p={p:g} max_new_tokens={m} min_new_tokens={n}" for t, k, p, m, n in
            zip(*(rows[c] for c in SAMPLER))]


def generated_answers(handle, stimuli=None, columns: Sequence[str] = (), *, context: str | None = "dialogue",
                      dataset: str | None = None) -> pd.DataFrame:
    """One row per stored generated answer: model_key, `columns`, sample_index, text, the SAMPLER columns, method
    ("gen") and setting (`sampler_setting`).

    Parameters
    ----------
    handle : from `biaslab.open`.
    stimuli : an Ibis table of stimuli (its stimulus_id and `columns`) the answers are joined to; None: no join, and
        the request's `dataset` can be a column.
    columns : the columns taken besides the answer's own.
    context : the requests' context (`gen_requests.context`; None: every context).
    dataset : the requests' dataset (None: every dataset).
    """
    g = handle.table("gen_requests")
    if context is not None:
        g = g.filter(g.context == context)
    if dataset is not None:
        g = g.filter(g.dataset == dataset)
    g = g.select("model_key", "request_id", "min_new_tokens", *(("dataset",) if stimuli is None else ()))
    s = handle.table("samples").join(g, ["model_key", "request_id"])
    if stimuli is not None:
        s = s.join(stimuli, "stimulus_id")
    rows = handle.fetch(s.select("model_key", *columns, "sample_index", "text", *SAMPLER))
    rows["method"] = "gen"
    rows["setting"] = sampler_setting(rows)
    return rows
