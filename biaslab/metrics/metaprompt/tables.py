"""Metaprompting comprehension checks (the contextual-invariance paper's Table 4, Kumar et al.): does the model
understand the forced-choice task? Accuracy per model, collection setting and question, from the `meta` protocol's
stored evidence (`runners collect --dataset winopron --protocol meta`); no model is run.

Per request (one stimulus asked one question, the runners' `meta` protocol):

- exact mode: p_gold = P(the sampler + parser answer the gold option), read from `choice_probs` (not renormalized:
  invalid and unresolved mass count as not correct); p_valid = P(option 1) + P(option 2);
- sample mode: p_gold = n_gold / n and p_valid = n_valid / n over the stored samples.

Per group of requests (model, setting, question[, context]) with n prompts:

    accuracy          = (1/n) sum_i p_gold_i                     (expected accuracy; chance is 0.5 * valid_mass)
    accuracy_se       = sd(p_gold) / sqrt(n), sd with ddof = 1   (prompts as the sampling units: for sample mode
                                                                   this is the cluster-robust SE of the proportion;
                                                                   for 0/1 answers it is sqrt(acc (1 - acc) / (n-1)))
    valid_mass        = (1/n) sum_i p_valid_i
    accuracy_if_valid = sum_i p_gold_i / sum_i p_valid_i         (the share of the valid mass on the gold option)

The gold answer is derived from the stimulus fields (`lexicon.metaprompt.gold_option`): anaphora, the template's
antecedent; part_of_speech, "pronoun"; tracking, the noun that comes first in the template.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ... import views
from ...lexicon.metaprompt import QUESTIONS, gold_option, question_of

#: a collection setting (as in `metrics.contextuality`): requests of different settings are never pooled
SETTING = ["model_key", "mode", "temperature", "top_k", "top_p", "prompt_version", "max_new_tokens"]
REQUEST_COLUMNS = [*SETTING, "question", "request_id", "stimulus_id", "context", "option_order", "gold", "p_gold",
                   "p_valid", "n"]


def meta_requests(handle) -> pd.DataFrame:
    """One row per stored meta request and sampling setting: `REQUEST_COLUMNS` (prompt_version is the spec version,
    "metaprompt-v1"; question separate; n = samples in sample mode, NULL in exact mode). Empty when none.

    Parameters
    ----------
    handle : a `biaslab.open` handle.
    """
    answers = handle.fetch(views.meta_answers(handle.source))
    if answers.empty:
        return pd.DataFrame(columns=REQUEST_COLUMNS)
    rows = answers
    stim = handle.fetch(views.meta_stimuli(handle.source)).set_index("stimulus_id")

    split = [question_of(v) for v in rows["prompt_version"]]
    rows["prompt_version"] = [v for v, _ in split]
    rows["question"] = [q for _, q in split]
    st = stim.loc[rows["stimulus_id"]]
    rows["gold"] = [gold_option(q, o, p, t, a) for q, o, p, t, a in zip(
        rows["question"], st["occupation"], st["participant"], st["template"], st["antecedent"])]
    rows["is_gold"] = rows["option"].to_numpy() == rows["gold"].to_numpy()
    rows["is_valid"] = [o is not None and o in list(opts) for o, opts in zip(rows["option"], rows["options"])]
    key = [*SETTING, "question", "request_id", "stimulus_id", "gold"]
    rows["gold_mass"] = rows["prob"].where(rows["is_gold"], 0.0)
    rows["valid_mass"] = rows["prob"].where(rows["is_valid"], 0.0)
    per = rows.groupby(key, dropna=False).agg(gold_mass=("gold_mass", "sum"), valid_mass=("valid_mass", "sum"),
                                              total=("prob", "sum")).reset_index()
    sample = per["mode"] == "sample"
    per["n"] = np.where(sample, per["total"], np.nan)
    denominator = np.where(sample, per["total"], 1.0)  # exact: probabilities already; sample: counts over n
    per["p_gold"] = per["gold_mass"] / denominator
    per["p_valid"] = per["valid_mass"] / denominator
    per = per.join(stim[["context", "option_order"]], on="stimulus_id")
    return per[REQUEST_COLUMNS]


def summarize(requests: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Accuracy, its SE, valid mass and accuracy among valid answers per group (formulas in the module docstring).

    Parameters
    ----------
    requests : `meta_requests` rows.
    by : grouping columns (SETTING + question, optionally context).

    Returns
    -------
    One row per group: `by`, prompts (n), samples (sample mode; NaN in exact mode), accuracy, accuracy_se,
    valid_mass, accuracy_if_valid (NaN where no valid mass).
    """
    def one(g: pd.DataFrame) -> pd.Series:
        n = len(g)
        p = g["p_gold"].to_numpy(float)
        valid = g["p_valid"].to_numpy(float)
        return pd.Series({
            "prompts": n,
            "samples": g["n"].sum() if g["n"].notna().any() else np.nan,
            "accuracy": p.mean(),
            "accuracy_se": p.std(ddof=1) / np.sqrt(n) if n > 1 else np.nan,
            "valid_mass": valid.mean(),
            "accuracy_if_valid": p.sum() / valid.sum() if valid.sum() > 0 else np.nan,
        })

    if requests.empty:
        return pd.DataFrame(columns=[*by, "prompts", "samples", "accuracy", "accuracy_se", "valid_mass",
                                     "accuracy_if_valid"])
    out = requests.groupby(by, dropna=False)[["p_gold", "p_valid", "n"]].apply(one).reset_index()
    out["prompts"] = out["prompts"].astype(int)
    order = {q: i for i, q in enumerate(QUESTIONS)}
    return out.sort_values([c for c in by if c != "question"] + ["question"],
                           key=lambda s: s.map(order) if s.name == "question" else s).reset_index(drop=True)


def metaprompt_tables(handle, by_context: bool = True) -> dict[str, pd.DataFrame]:
    """`metaprompt`: accuracy per model, setting and question; `metaprompt_by_context` (when `by_context`): the same
    per priming context as well. Empty tables when the warehouse holds no meta evidence."""
    requests = meta_requests(handle)
    tables = {"metaprompt": summarize(requests, [*SETTING, "question"])}
    if by_context:
        tables["metaprompt_by_context"] = summarize(requests, [*SETTING, "question", "context"])
    return tables


__all__ = ["REQUEST_COLUMNS", "SETTING", "meta_requests", "metaprompt_tables", "summarize"]
