"""The tables of `biaslab metrics decodingtrust`: DecodingTrust's stereotype agreement (Wang et al., NeurIPS 2023)
from the stored evidence of both protocols, one row per collection and prompt first (`prompts`), then summarized
(`stats.summary`).

A collection is (model_key, method, setting):
- method "gen": the generated answers (`--protocol gen`), each classified as upstream classifies it
  (`lexicon.agreement.classify`, applied here to the stored text: a new classifier never needs the model again);
  a prompt's agree and neither values are the shares of its answers; setting names the sampler;
- method "choice-exact" (or "choice-sample", "choice-logprobs"): the forced-choice variant (`--protocol choice`);
  a prompt's agree value is P("I agree") over every reply the model could give, its neither value the mass of every
  other beginning (1 - the valid mass), so that a reply outside the two forms counts as upstream's refusals do.

A prompt is one statement (topic x group x template) under one condition (benign, untargeted, targeted): 3,456.

With `published`, GPT-4-0314's 86,400 published answers in the data folder are read as a collection of their own
(model_key "published:gpt-4-0314", method "gen", setting "published"): evidence of that model, classified by the
same rule, shown beside the warehouse's collections and never stored in the warehouse.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...lexicon.agreement import AGREE, NEITHER, classify
from ...views import json_field
from ..coverage import DEFAULT_MIN_COVERAGE, annotate
from . import stats

DATASET = "decodingtrust"
KEY = ["model_key", "method", "setting"]
FIELDS = ("condition", "group", "topic", "template_index")


def _stimuli(handle):
    st = handle.table("stimuli")
    st = st.filter(st.dataset == DATASET)
    return st.select("stimulus_id", "item_id", **{f: json_field(st.attrs, f) for f in FIELDS})


def generated(handle) -> pd.DataFrame:
    """One row per stored generated answer: the collection, the prompt's fields, the text and its class."""
    from ..generations import generated_answers

    rows = generated_answers(handle, _stimuli(handle), ("stimulus_id", "item_id", *FIELDS), dataset=DATASET)
    rows["answer"] = [classify(text) for text in rows["text"]]
    return rows


def _generated_prompts(answers: pd.DataFrame) -> pd.DataFrame:
    keys = [*KEY, "stimulus_id", "item_id", *FIELDS]
    out = answers.assign(agree=answers["answer"] == AGREE, neither=answers["answer"] == NEITHER).groupby(
        keys, sort=False).agg(agree=("agree", "mean"), neither=("neither", "mean"), n=("answer", "size"))
    return out.reset_index().assign(valid=np.nan)


def _choice_prompts(handle) -> pd.DataFrame:
    """One row per forced-choice collection and prompt: agree = P(agree) x valid mass, neither = 1 - valid mass."""
    probs = handle.table("option_probs")
    probs = probs.filter((probs.dataset == DATASET) & probs.method.startswith("choice"))
    wide = handle.fetch(probs.join(_stimuli(handle).drop("item_id"), "stimulus_id").select(
        *KEY, "stimulus_id", "item_id", *FIELDS, "option_label", "p", "valid_mass", "n"))
    if wide.empty:
        return wide
    keys = [*KEY, "stimulus_id", "item_id", *FIELDS]
    agree = wide[wide["option_label"] == "agree"].set_index(keys)
    valid = agree["valid_mass"].astype(float).fillna(1.0)
    p_agree = (agree["p"].astype(float) * valid).where(valid > 0, 0.0)  # no valid reply: nothing agrees
    return pd.DataFrame({"agree": p_agree, "neither": 1.0 - valid, "valid": valid, "n": agree["n"]}).reset_index()


def prompts(handle, published: bool = False) -> pd.DataFrame:
    """One row per collection and prompt (see the module docstring): agree, neither, n (answers; NaN for exact
    probabilities), valid (the forced choice's valid mass), and template (topic.template_index, the statement
    template, the unit of the intervals); with `published`, GPT-4-0314's published answers too; `NoEvidence` when
    nothing is there."""
    from ..missing import missing

    found = [_generated_prompts(generated(handle)), _choice_prompts(handle)]
    if published:
        found.append(published_prompts())
    parts = [p for p in found if not p.empty]
    if not parts:
        raise missing(handle, "DecodingTrust answer", [DATASET],
                      f"runners collect --dataset {DATASET} --protocol gen (or --protocol choice)")
    frame = pd.concat(parts, ignore_index=True)
    frame["template"] = frame["topic"] + "." + frame["template_index"].astype(str)
    return frame


#: the published collection's key and setting
PUBLISHED_KEY, PUBLISHED_SETTING = "published:gpt-4-0314", "published (DecodingTrust: T=1, 25 answers, 150 tokens)"


def published_prompts(data_dir=None) -> pd.DataFrame:
    """GPT-4-0314's published answers as per-prompt rows (see the module docstring), from the data folder."""
    from ...loaders.decodingtrust import FOLDER, SLOT, load_prompts, published_answers
    from ...loaders.registry import default_data_dir

    folder = default_data_dir(data_dir) / FOLDER
    stimuli = {(s.text.removesuffix(f"\n\n{SLOT}"), s.attrs["condition"]): s for s in load_prompts(folder)}
    rows = []
    for answer in published_answers(folder):
        s = stimuli[(answer["user_prompt"], answer["condition"])]
        rows.append({"stimulus_id": s.stimulus_id, "item_id": s.item_id, "sample_index": answer["sample"],
                     "text": answer["text"], **{f: str(s.attrs[f]) for f in FIELDS}})
    frame = pd.DataFrame(rows).assign(model_key=PUBLISHED_KEY, method="gen", setting=PUBLISHED_SETTING)
    frame["answer"] = [classify(text) for text in frame["text"]]
    return _generated_prompts(frame)


def _loaded(handle) -> pd.DataFrame:
    """Prompts loaded per condition, and in all."""
    rows = handle.fetch(_stimuli(handle).select("condition"))
    per = rows.groupby("condition").size().rename("n_loaded").reset_index()
    return pd.concat([per, pd.DataFrame({"condition": [stats.ALL], "n_loaded": [len(rows)]})], ignore_index=True)


def decodingtrust_tables(handle, *, min_coverage: float = DEFAULT_MIN_COVERAGE, published: bool = False
                         ) -> dict[str, pd.DataFrame]:
    """{"decodingtrust": per collection and condition (and over all three) the agreement index with a 95%
    t-interval over templates, the share neither and coverage; "decodingtrust_topics" and "decodingtrust_groups":
    the same per topic and per target group; "decodingtrust_cells": per condition x group x topic (the paper's
    heatmap); "_prompts": the per-prompt rows}.

    Coverage (`biaslab.metrics.coverage`): n_loaded the prompts loaded for the condition, n_used those with
    evidence in the collection, n_missing the others; few_clusters where an interval rests on fewer than 10
    templates (a topic has 3).
    """
    frame = prompts(handle, published)
    both = pd.concat([frame, frame.assign(condition=stats.ALL)], ignore_index=True)
    order = {c: i for i, c in enumerate(("benign", "untargeted", "targeted", stats.ALL))}
    both = both.sort_values([*KEY, "condition"], key=lambda c: c.map(order) if c.name == "condition" else c,
                            kind="stable")
    table = stats.summary(both, [*KEY, "condition"])
    loaded = table[[*KEY, "condition"]].merge(_loaded(handle), on="condition", how="left")
    table = annotate(table, used="n_prompts", loaded=loaded, keys=[*KEY, "condition"],
                     valid_share="valid_share", min_coverage=min_coverage, clusters="n_templates")
    topics = stats.summary(both, [*KEY, "condition", "topic"])
    groups = stats.summary(both, [*KEY, "condition", "group"])
    cells = stats.summary(frame, [*KEY, "condition", "group", "topic"], intervals=False)
    return {"decodingtrust": table, "decodingtrust_topics": topics, "decodingtrust_groups": groups,
            "decodingtrust_cells": cells, "_prompts": frame}
