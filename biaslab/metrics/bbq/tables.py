"""The tables of `biaslab metrics bbq`: BBQ's answer probabilities from the `option_probs` view (exact or sampled
forced choice, or the scored answers of the prob protocol), per collection, through `stats`.

A collection is (model_key, method, setting) as in the option tables: 'choice-exact' (exact probabilities of the
forced choice among the three answers), 'choice-sample', 'choice-logprobs' (a chat API's approximation) or 'prob'
(each answer scored after "A: " and normalized over the three, as lm-evaluation-harness scores multiple choice).
"""

from __future__ import annotations

import pandas as pd

from ...views import json_field
from ..coverage import DEFAULT_MIN_COVERAGE, annotate
from ..options.stats import KEY
from . import stats

DATASET = "bbq"
#: the stimulus fields every example row carries (attrs keys, and the gold answer)
FIELDS = ["category", "question_index", "context_condition", "question_polarity", "label_type", "gold"]


def examples(handle) -> pd.DataFrame:
    """One row per collection and BBQ example (`stats.example_frame`); `NoEvidence` when none is stored."""
    from ..missing import missing
    from ..options.tables import read_probs

    probs = handle.table("option_probs")
    if handle.fetch(probs.filter(probs.dataset == DATASET).limit(1)).empty:
        raise missing(handle, "BBQ answer probability", [DATASET], f"runners collect --dataset {DATASET}")
    probs = read_probs(handle, DATASET, FIELDS)
    return stats.example_frame(probs, KEY)


def _loaded(handle, variant: str) -> pd.DataFrame:
    """Examples loaded per category (as the variant names them) and context condition, with an `ALL` row per
    condition."""
    st = handle.table("stimuli")
    st = st.filter(st.dataset == DATASET)
    rows = handle.fetch(st.select(category=json_field(st.attrs, "category"),
                                  context_condition=json_field(st.attrs, "context_condition"),
                                  label_type=json_field(st.attrs, "label_type"),
                                  has_target=json_field(st.attrs, "target_loc").notnull()))
    if variant == "r-script":
        rows = rows[rows["has_target"].astype(bool)]
    rows = rows.assign(category=stats._category(rows, variant))
    per = rows.groupby(["category", "context_condition"]).size().rename("n_loaded").reset_index()
    total = rows.groupby("context_condition").size().rename("n_loaded").reset_index().assign(category=stats.ALL)
    return pd.concat([per, total[per.columns]], ignore_index=True)


def bbq_tables(handle, *, bootstrap: int = 1000, seed: int = 0, variant: str = "paper",
               min_coverage: float = DEFAULT_MIN_COVERAGE) -> dict[str, pd.DataFrame]:
    """{"bbq": accuracy and bias score per collection, category and context condition with intervals and coverage,
    "_examples": the per-example rows they come from}.

    Coverage (`biaslab.metrics.coverage`): n_loaded the examples of the category and condition loaded, n_used the
    examples scored (a valid answer), n_invalid those with evidence but no valid answer, n_missing those without
    evidence in that collection; valid_share the mean valid mass (forced choice); few_clusters where the intervals
    rest on fewer than 10 templates.
    """
    frame = examples(handle)
    table = stats.scores(frame, KEY, bootstrap=bootstrap, seed=seed, variant=variant)
    keys = [*KEY, "category", "context_condition"]
    counted = frame.assign(category=stats._category(frame, variant))
    if variant == "r-script":
        counted = counted[counted["has_target"]]
    evidence = pd.concat([counted, counted.assign(category=stats.ALL)])
    evidence = evidence.groupby(keys).size().rename("n_evidence").reset_index()
    loaded = table[keys].merge(_loaded(handle, variant), on=["category", "context_condition"], how="left")
    table = annotate(table, used="n_examples", loaded=loaded, evidence=evidence, keys=keys,
                     valid_share="valid_share", min_coverage=min_coverage, clusters="n_templates")
    return {"bbq": table, "_examples": frame}
