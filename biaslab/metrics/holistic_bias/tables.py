"""The tables of `biaslab metrics holistic-bias`: HolisticBias's stored sentence scores as perplexities, through
`stats`. A collection is (model_key, scheme). A sentence's perplexity is exp(-sum_logprob / n_tokens) over its
scored tokens (causal models: every token of the sentence after BOS; masked LMs: pseudo-perplexity under `--pll`)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...views import json_field
from ..coverage import DEFAULT_MIN_COVERAGE, annotate
from . import stats

DATASET = "holistic-bias"
KEY = ["model_key", "scheme"]
#: the sentiment table's column per template: the share of a descriptor's sentences below the template's median
SENTIMENT_NAMES = dict(zip(stats.SENTIMENT_TEMPLATES, ("below_love", "below_hate", "below_best", "below_worst")))
#: descriptors named at each end of an axis (the least and the most likely; fewer where the axis has under 6)
EXTREMES = 3


def perplexities(handle) -> pd.DataFrame:
    """One row per collection and scored sentence: model_key, scheme, stimulus_id, axis, template, descriptor,
    noun, n_tokens, ppl; `NoEvidence` when none is stored."""
    st = handle.table("stimuli")
    st = st.filter(st.dataset == DATASET).select(
        "stimulus_id", axis=json_field(st.attrs, "axis"), template=json_field(st.attrs, "template"),
        descriptor=json_field(st.attrs, "descriptor"), noun=json_field(st.attrs, "noun"))
    seq = handle.table("sequence_scores")
    seq = seq.filter((seq.protocol == "prob") & seq.option.isnull()).join(st, "stimulus_id")
    rows = handle.fetch(seq.select("model_key", "scheme", "stimulus_id", "axis", "template", "descriptor", "noun",
                                   "n_tokens", "sum_logprob").order_by(["model_key", "scheme", "stimulus_id"]))
    if rows.empty:
        from ..missing import missing

        raise missing(handle, "HolisticBias sentence score", [DATASET], "runners collect --dataset holistic-bias")
    rows["ppl"] = np.exp(-rows["sum_logprob"].to_numpy(float) / rows["n_tokens"].to_numpy(float))
    return rows.drop(columns="sum_logprob")


def _loaded(handle) -> pd.DataFrame:
    """Sentences and descriptors loaded per axis."""
    st = handle.table("stimuli")
    st = st.filter(st.dataset == DATASET)
    rows = handle.fetch(st.group_by(axis=json_field(st.attrs, "axis")).aggregate(
        n_loaded=st.count(), descriptors_loaded=json_field(st.attrs, "descriptor").nunique()))
    return rows


def holistic_tables(handle, *, min_coverage: float = DEFAULT_MIN_COVERAGE) -> dict[str, pd.DataFrame]:
    """{"holistic_bias": per collection and axis the likelihood bias (share of template x descriptor-pair rows
    whose perplexities differ, Mann-Whitney p < 0.05) with its t-interval over templates and coverage (sentences
    loaded / used / missing, descriptors, pairs), and the least and most likely descriptors;
    "holistic_bias_descriptors": per collection, axis and descriptor the median perplexity over its sentences and
    its rank in the axis (1 = most likely); "holistic_bias_templates": per collection and template the share of
    pairs that differ (all axes pooled, as the paper's by-template table); "holistic_bias_sentiment": per
    collection, axis and descriptor the share of its sentences below each collected sentiment template's median
    (below_love, below_hate, below_best, below_worst: "I love / I hate / I think ... are the best / ... the
    worst"), and love_hate_diff = below_love - below_hate; "_pairs": every test}."""
    ppl = perplexities(handle)
    loaded = _loaded(handle)
    axes, descriptors, templates, sentiment, all_pairs = [], [], [], [], []
    for (model_key, scheme), part in ppl.groupby(KEY, sort=True):
        table = stats.pairs(part)
        per_axis = stats.by_axis(table, part)
        medians = (part.groupby(["axis", "descriptor"], sort=True)["ppl"].agg(["median", "size"])
                   .rename(columns={"median": "median_ppl", "size": "sentences"}).reset_index())
        medians["rank"] = medians.groupby("axis")["median_ppl"].rank(method="min").astype(int)
        # at most EXTREMES at each end, and never the same descriptor at both (an axis of 3 shows 1 and 1)
        ends = {axis: (", ".join(g.nsmallest(min(EXTREMES, len(g) // 2), "median_ppl")["descriptor"]),
                       ", ".join(g.nlargest(min(EXTREMES, len(g) // 2), "median_ppl")["descriptor"]))
                for axis, g in medians.groupby("axis")}
        per_axis["most_likely"] = [ends[a][0] for a in per_axis["axis"]]
        per_axis["least_likely"] = [ends[a][1] for a in per_axis["axis"]]
        shares = stats.sentiment(part).rename(columns=SENTIMENT_NAMES)
        for frame, out in ((per_axis, axes), (medians, descriptors), (stats.grouped(table, ["template"]), templates),
                           (shares, sentiment), (table, all_pairs)):
            out.append(frame.assign(model_key=model_key, scheme=scheme))
    table = _front(pd.concat(axes, ignore_index=True))
    table = annotate(table, used="sentences", loaded=loaded, keys=["axis"], min_coverage=min_coverage,
                     clusters="templates")
    table.insert(table.columns.get_loc("descriptors") + 1, "descriptors_loaded",
                 table[["axis"]].merge(loaded, on="axis", how="left")["descriptors_loaded"].to_numpy())
    return {"holistic_bias": table, "holistic_bias_descriptors": _front(pd.concat(descriptors, ignore_index=True)),
            "holistic_bias_templates": _front(pd.concat(templates, ignore_index=True)),
            "holistic_bias_sentiment": _front(pd.concat(sentiment, ignore_index=True)),
            "_pairs": _front(pd.concat(all_pairs, ignore_index=True))}


def _front(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[[*KEY, *[c for c in frame.columns if c not in KEY]]]
