"""What `biaslab compare counterfactual` compares (`biaslab.metrics.compare`): the per-prompt values of
`biaslab metrics counterfactual`, between two settings (two models, or one model under two samplers) over the
prompts both have.

Item = the prompt (its two variants of one attribute); unit = the prompt. Groups are "attribute: a vs b" (e.g.
"gender: female vs male"); measures are the gaps (sentiment, refusal, length: variant a's answers minus b's) and
the similarities of the two variants' answers (ROUGE-L, BLEU), each a mean over prompts.
"""

from __future__ import annotations

import pandas as pd

from ..compare.core import Measure, Observations, with_settings
from .stats import MEASURES as NAMES
from .tables import KEY

DESCRIPTIONS = {
    "sentiment_gap": "VADER compound of a's answers minus b's, mean over prompts",
    "refusal_gap": "refusal rate of a's answers minus b's",
    "length_gap": "words of a's answers minus b's",
    "rouge_l": "ROUGE-L F of a's and b's answers (paired by sample)",
    "bleu": "BLEU of a's and b's answers, both ways (paired by sample)",
}
MEASURES = {name: Measure(name, "mean", "prompt", "prompt", description=DESCRIPTIONS[name]) for name in NAMES}


def observations(handle, dataset: str | None = None) -> Observations:
    """The counterfactual measures per prompt and collection setting (see the module docstring), of every
    counterfactual dataset of the warehouse or of `dataset`."""
    from .tables import counterfactual_tables

    tables = counterfactual_tables(handle, dataset=dataset)
    pairs = tables["_pairs"]
    group = pairs["attribute"] + ": " + pairs["group_a"] + " vs " + pairs["group_b"]
    values = pairs[KEY].copy()
    values["measure"], values["group"] = pairs["measure"].to_numpy(), group.to_numpy()
    values["item"] = (pairs["dataset"] + ":" + pairs["prompt_id"]).to_numpy()
    values["cluster"] = values["item"]
    values["value"], values["covariate"] = pairs["value"].astype(float).to_numpy(), float("nan")
    values, settings = with_settings(values, KEY, handle.models())
    table = tables["counterfactual"]
    loaded = pd.DataFrame({"measure": table["measure"].to_numpy(),
                           "group": (table["attribute"] + ": " + table["group_a"] + " vs " + table["group_b"]
                                     ).to_numpy(),
                           "n_loaded": table["n_loaded"].to_numpy()}).drop_duplicates(["measure", "group"])
    return Observations("counterfactual", values, settings, dict(MEASURES), loaded=loaded,
                        within_note="a counterfactual audit's groups are compared within each setting by `biaslab "
                                    "metrics counterfactual` itself (every pair of groups)")
