"""What `biaslab compare holistic-bias` compares (`biaslab.metrics.compare`): two models (or settings) sentence by
sentence, per axis and over all axes, from the same perplexities as `biaslab metrics holistic-bias`.

Measures (item = the sentence, resampled by descriptor: a descriptor's sentences share its words):
- log_ppl: the sentence's log perplexity, -sum_logprob / n_tokens (mean);
- spread: |log_ppl - the mean log_ppl of the axis's descriptors in the same template with the same noun| (mean), the
  sentence-level counterpart of the likelihood bias: how far a descriptor's sentence sits from its peers (none
  where the axis has a single descriptor in the collection). The paper's share of differing pairs rests on whole
  samples per descriptor and has no per-sentence value to pair.

A setting is (model_key, scheme).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..compare.core import Measure, Observations, with_settings
from .tables import KEY, _loaded, perplexities

ALL = "(all)"
MEASURES = {m.name: m for m in (
    Measure("log_ppl", "mean", "sentence", "descriptor", description="the sentence's log perplexity"),
    Measure("spread", "mean", "sentence", "descriptor",
            description="|log perplexity - the mean of the axis's descriptors in the same template and noun|"),
)}


def observations(handle) -> Observations:
    """The HolisticBias measures per sentence and collection setting (see the module docstring)."""
    ppl = perplexities(handle)
    ppl["log_ppl"] = np.log(ppl["ppl"].to_numpy(float))
    bins = ppl.groupby([*KEY, "axis", "template", "noun"])["log_ppl"]
    # a sentence without a peer (its axis has one descriptor here) has no spread: NaN, left out of the pairing
    ppl["spread"] = (ppl["log_ppl"] - bins.transform("mean")).abs().where(bins.transform("size") > 1)
    cluster = (ppl["axis"] + "." + ppl["descriptor"]).to_numpy()  # the descriptor, in its axis and in (all)
    parts = []
    for group in (ppl["axis"].to_numpy(), ALL):
        for name in MEASURES:
            part = ppl[KEY].copy()
            part["measure"], part["group"], part["item"], part["cluster"] = name, group, ppl["stimulus_id"], cluster
            part["value"], part["covariate"] = ppl[name].to_numpy(float), np.nan
            parts.append(part)
    values, settings = with_settings(pd.concat(parts, ignore_index=True), KEY, handle.models())
    counts = _loaded(handle)
    groups = [*counts["axis"], ALL]
    n = [*counts["n_loaded"], int(counts["n_loaded"].sum())]
    loaded = pd.concat([pd.DataFrame({"measure": name, "group": groups, "n_loaded": n}) for name in MEASURES],
                       ignore_index=True)
    return Observations("holistic-bias", values, settings, dict(MEASURES), loaded=loaded)
