"""The negation study read from a warehouse (`biaslab.open` handle): per-sentence (pseudo-)perplexities
(`views.negation_sentences`) and the study's public tables, each model fitted once (`model`)."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from ...errors import UsageError
from .model import (_group_columns, condition_means, fit_models, length_control, mixed_model_table,
                    prediction_table)

def sentence_perplexities(handle, datasets: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per (model, scheme, protocol, negation stimulus) scored as a whole sentence
    (`views.negation_sentences`): model_name, item (root item id), context, form, condition, n_tokens, sum_logprob
    and `perplexity` = exp(-sum_logprob / n_tokens) (pseudo-perplexity for masked schemes; NaN when no token was
    scored), ordered by model, scheme, dataset, protocol and item.

    Parameters
    ----------
    handle : a `biaslab.open` handle.
    datasets : the negation datasets to read.
    """
    from ... import views

    if datasets is None:  # the study's datasets (`biaslab.metrics.registry`)
        from ..registry import get_study

        datasets = get_study("negation").dataset_names
    datasets = list(datasets)
    if not datasets:
        raise UsageError("sentence_perplexities: no dataset given")
    return handle.fetch(views.negation_sentences(handle.source, datasets))


def negation_tables(ppl: pd.DataFrame, *, intercept_only_on_failure: bool = False,
                    satterthwaite_df: bool = True) -> dict[str, pd.DataFrame]:
    """The study's public tables from `sentence_perplexities` output, fitting each model once: `mixed_model`
    (`fit_mixed_model`), `predicted_values` (`prediction_table`: the data of the paper's Figure 2),
    `condition_means` and `length_control`. The command `biaslab metrics negation` prints these."""
    by = _group_columns(ppl, None)
    fits = fit_models(ppl, by=by, intercept_only_on_failure=intercept_only_on_failure,
                      satterthwaite_df=satterthwaite_df)
    return {"mixed_model": mixed_model_table(fits, by), "predicted_values": prediction_table(fits, by, ppl),
            "condition_means": condition_means(ppl), "length_control": length_control(ppl)}


def with_coverage(handle, tables: dict[str, pd.DataFrame], datasets: Sequence[str],
                  min_coverage: float) -> dict[str, pd.DataFrame]:
    """`mixed_model` and `condition_means` with `biaslab.metrics.coverage.COVERAGE_COLUMNS`, the unit being the
    sentence: the dataset's loaded sentences (per context and form for `condition_means`) against those the fit or
    the mean rests on (n_obs, n)."""
    from ..coverage import annotate

    st = handle.table("stimuli")
    st = st.filter(st.dataset.isin(list(datasets)))
    cells = handle.fetch(st.group_by(["dataset", "context", "form"]).aggregate(n_loaded=st.stimulus_id.nunique()))
    per_dataset = cells.groupby("dataset", as_index=False)["n_loaded"].sum()
    out = dict(tables)
    if not tables["mixed_model"].empty:
        out["mixed_model"] = annotate(tables["mixed_model"], used="n_obs", loaded=per_dataset, keys=["dataset"],
                                      min_coverage=min_coverage)
    if not tables["condition_means"].empty:
        out["condition_means"] = annotate(tables["condition_means"], used="n", loaded=cells,
                                          keys=["dataset", "context", "form"], min_coverage=min_coverage)
    return out
