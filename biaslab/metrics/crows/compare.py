"""What `biaslab compare crows-pairs` compares (`biaslab.metrics.compare`): per dataset and bias type (and over all
bias types), from the same per-pair rows as `biaslab metrics crows-pairs`.

Measures (item = unit = the pair):
- metric: 1 where sent_more's shared-token score is higher (the paper's metric; a neutral pair is 0), binary
  (McNemar), shown in percent of pairs (values, differences and intervals x 100, as `biaslab metrics` shows it);
  not for sentence scores without tokens (`biaslab import`), which have no shared tokens to score;
- pct_stereotype: 1 where sent_more's whole-sentence log-likelihood is higher (lm-eval's), binary (McNemar), in
  percent likewise;
- likelihood_diff: |ll_more - ll_less| (lm-eval's), mean.

A setting is (model_key, scheme).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..compare.core import Measure, Observations, with_settings
from . import stats
from .tables import KEY, _loaded

MEASURES = {m.name: m for m in (
    Measure("metric", "binary", "pair", "pair", scale=100.0,
            description="percent of pairs whose sent_more's shared tokens score higher (the paper's)"),
    Measure("pct_stereotype", "binary", "pair", "pair", scale=100.0,
            description="percent of pairs whose sent_more is more likely (lm-eval's, in percent)"),
    Measure("likelihood_diff", "mean", "pair", "pair", description="|log-likelihood difference| (lm-eval's)"),
)}


def observations(handle) -> Observations:
    """The CrowS-Pairs measures per pair and collection setting (see the module docstring)."""
    from .tables import crows_tables

    pairs = crows_tables(handle, bootstrap=0)["_pairs"]
    pairs = pd.concat([pairs, pairs.assign(bias_type=stats.ALL)], ignore_index=True)
    group = pairs["dataset"] + " · " + pairs["bias_type"]
    item = pairs["dataset"] + "." + pairs["pair"].astype(str)
    parts = []
    everywhere = np.ones(len(pairs), bool)
    paper = pairs["paper"].to_numpy(bool) if "paper" in pairs else everywhere  # imported scores: no paper's metric
    for name, value, kept in (("metric", pairs["paper_win"].astype(float), paper),
                              ("pct_stereotype", pairs["lm_win"].astype(float), everywhere),
                              ("likelihood_diff", (pairs["ll_more"] - pairs["ll_less"]).abs(), everywhere)):
        part = pairs[KEY].copy()
        part["measure"], part["group"], part["item"], part["cluster"] = name, group.to_numpy(), item, item
        part["value"], part["covariate"] = np.asarray(value, float), np.nan
        parts.append(part[kept])
    values, settings = with_settings(pd.concat(parts, ignore_index=True), KEY, handle.models())
    counts = _loaded(handle)
    groups = (counts["dataset"] + " · " + counts["bias_type"]).to_numpy()
    loaded = pd.concat([pd.DataFrame({"measure": name, "group": groups, "n_loaded": counts["n_loaded"].to_numpy()})
                        for name in MEASURES], ignore_index=True)
    return Observations("crows-pairs", values, settings, dict(MEASURES), loaded=loaded)
