"""What `biaslab compare negation` compares (`biaslab.metrics.compare`): the negation-bias effects per root item,
from the same rows as `biaslab metrics negation` (`tables.sentence_perplexities`).

A setting is (model_key, scheme); the group is the dataset; item = unit = the root item (its four sentences SA, SN,
NA, NN: stereotype-consistent or not x affirmative or negated, `model.CONDITION_OF`). Per item, from the sentences'
perplexities (pseudo-perplexities for masked schemes):
- interaction: (PPL_SA - PPL_SN) - (PPL_NA - PPL_NN), the context x form interaction of the paper's model with its
  coding (stereo = 1, aff = 1); its mean over items equals the mixed model's fixed interaction on complete, balanced
  items (the model's random effects do not move a balanced cell-means contrast).
- context_effect: (PPL_SA + PPL_SN - PPL_NA - PPL_NN) / 2, stereotype-consistent minus inconsistent.
- form_effect: (PPL_SA + PPL_NA - PPL_SN - PPL_NN) / 2, affirmative minus negated.
- ppl per condition (SA, SN, NA, NN): the sentence's perplexity (the `condition_means` table's means).
An item missing one of its four sentences (or a perplexity) has no value for the contrasts.
Within one setting (--within): the interaction's two simple effects, affirmative vs negated under each context
(ppl SA vs SN, NA vs NN).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..compare.core import Measure, Observations, with_settings
from .model import CONDITION_OF

__all__ = ["observations"]

SETTING = ["model_key", "scheme"]
CONDITIONS = ("SA", "SN", "NA", "NN")

MEASURES = {m.name: m for m in (
    Measure("interaction", "mean", "root item", "root item",
            description="(PPL_SA - PPL_SN) - (PPL_NA - PPL_NN) per root item"),
    Measure("context_effect", "mean", "root item", "root item",
            description="stereotype-consistent minus inconsistent perplexity, averaged over forms"),
    Measure("form_effect", "mean", "root item", "root item",
            description="affirmative minus negated perplexity, averaged over contexts"),
    Measure("ppl", "mean", "root item", "root item", description="the sentence's perplexity"),
)}


def observations(handle) -> Observations:
    """The study's per-item values per setting (see the module docstring).

    Parameters
    ----------
    handle : a `biaslab.open` handle.
    """
    from ..studies import negation_sentences

    ppl = negation_sentences(handle)
    ppl = ppl.assign(cell=[CONDITION_OF.get((c, f)) for c, f in zip(ppl["context"], ppl["form"])])
    ppl = ppl[ppl["cell"].notna()]
    keys = [*SETTING, "dataset", "item"]
    wide = ppl.pivot_table(index=keys, columns="cell", values="perplexity", aggfunc="first", dropna=False)
    wide = wide.reindex(columns=list(CONDITIONS)).reset_index()
    sa, sn, na, nn = (wide[c].to_numpy(float) for c in CONDITIONS)
    contrasts = {"interaction": (sa - sn) - (na - nn), "context_effect": (sa + sn - na - nn) / 2,
                 "form_effect": (sa + na - sn - nn) / 2}
    parts = [wide[keys].assign(measure=name, group=wide["dataset"], value=value) for name, value in contrasts.items()]
    for cell in CONDITIONS:
        parts.append(wide[keys].assign(measure="ppl", group=wide["dataset"] + " · " + cell, value=wide[cell]))
    values = pd.concat(parts, ignore_index=True)
    values["item"] = values["item"].astype(str)
    values["cluster"], values["covariate"] = values["item"], np.nan
    values = values.drop(columns="dataset")
    values, settings = with_settings(values, SETTING, handle.models())
    datasets = sorted({g for g in values.loc[values["measure"] != "ppl", "group"]})
    within = [("ppl", f"{d} · {a}", f"{d} · {b}") for d in datasets for a, b in (("SA", "SN"), ("NA", "NN"))]
    return Observations("negation", values, settings, dict(MEASURES), within)
