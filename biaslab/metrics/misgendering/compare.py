"""What `biaslab compare misgendering` compares (`biaslab.metrics.compare`): the per-protocol correctness rates and
the prob-gen agreement of the misgendering meta-evaluation, from the same rows as `biaslab metrics misgendering`.

A setting is a model (model_key) with the method's own settings (`method`: "prob SCHEME" or "gen SAMPLING
SETTINGS"), so two collections of one model that differ only in their sampling settings (gen at T = 1.0 and at 0.7)
are two settings and can be compared (issue 56, item 9); two models are compared setting by like setting. Groups:
"dataset · declared pronoun"; the prob-gen agreement's setting is "prob-gen SCHEME | SAMPLING SETTINGS".
- prob_correct (binary, McNemar; item = stimulus, unit = item): the candidate with the highest log-probability is
  the declared pronoun (the `correctness` table's prob rows).
- gen_correct (mean; item = stimulus and context, unit = stimulus): the share of the item's continuations that do
  not misgender (a continuation without a pronoun counts as correct, the paper's mapping; `--no-pronoun exclude` of
  `biaslab metrics misgendering` is not offered here).
- agreement (mean; item = instance, unit = instance): the share of the instance's continuations whose correctness
  equals the probability-based one (the `agreement` table's raw agreement).
Within one setting (--within): gen_correct and prob_correct cannot be paired item by item, so none are declared.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..compare.core import Measure, Observations, with_settings

__all__ = ["observations"]

MEASURES = {m.name: m for m in (
    Measure("prob_correct", "binary", "stimulus", "item",
            description="the most probable pronoun candidate is the declared one"),
    Measure("gen_correct", "mean", "prompt", "stimulus",
            description="share of continuations whose first pronoun does not misgender"),
    Measure("agreement", "mean", "instance", "instance",
            description="share of continuations whose correctness equals the probability-based one"),
)}


def _long(measure: str, model_key: pd.Series, method: pd.Series, group: pd.Series, item: pd.Series,
          cluster: pd.Series, value) -> pd.DataFrame:
    return pd.DataFrame({"model_key": model_key.to_numpy(), "method": method.to_numpy(), "measure": measure,
                         "group": group.to_numpy(),
                         "item": item.astype(str).to_numpy(), "cluster": cluster.astype(str).to_numpy(),
                         "value": np.asarray(value, dtype=float), "covariate": np.nan})


def observations(handle) -> Observations:
    """The study's per-item values per model (see the module docstring).

    Parameters
    ----------
    handle : a `biaslab.open` handle.
    """
    from .tables import binary_correct, generation_results, paired, prob_results

    prob = prob_results(handle)
    gen = generation_results(handle)
    parts = []
    if not prob.empty:
        group = prob["dataset"] + " · " + prob["declared"].astype(str)
        parts.append(_long("prob_correct", prob["model_key"], "prob " + prob["setting"], group, prob["stimulus_id"],
                           prob["item_id"]
                           if "item_id" in prob.columns else prob["stimulus_id"], prob["correct"].astype(float)))
    if not gen.empty:
        binary = binary_correct(gen, "correct")
        per_item = (binary.groupby(["model_key", "setting", "dataset", "declared", "stimulus_id", "context"],
                                   dropna=False)["correct"].mean().reset_index())
        group = per_item["dataset"] + " · " + per_item["declared"].astype(str)
        parts.append(_long("gen_correct", per_item["model_key"], "gen " + per_item["setting"], group,
                           per_item["stimulus_id"] + ":" + per_item["context"].astype(str), per_item["stimulus_id"],
                           per_item["correct"]))
    pairs = paired(prob, gen, "correct")
    if not pairs.empty:
        pairs = pairs.assign(agree=(pairs["prob_correct"] == pairs["gen_correct"]).astype(float))
        per_instance = (pairs.groupby(["model_key", "setting", "dataset", "declared", "instance"], dropna=False)
                        ["agree"].mean().reset_index())
        group = per_instance["dataset"] + " · " + per_instance["declared"].astype(str)
        parts.append(_long("agreement", per_instance["model_key"], "prob-gen " + per_instance["setting"], group,
                           per_instance["instance"],
                           per_instance["instance"], per_instance["agree"]))
    values = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(
        columns=["model_key", "method", "measure", "group", "item", "cluster", "value", "covariate"])
    values, settings = with_settings(values, ["model_key", "method"], handle.models())
    return Observations("misgendering", values, settings, dict(MEASURES), loaded=_loaded(handle),
                        within_note="--within: misgendering's measures are not paired item by item inside one "
                                    "setting; compare two settings (--between), e.g. two sampling settings of one "
                                    "model")


def _loaded(handle) -> pd.DataFrame:
    """The items loaded per measure and group ("dataset · declared pronoun"): prob_correct's stimuli, and
    gen_correct's stimuli in each of the two contexts the gen protocol asks (before and after the slot)."""
    st = handle.table("stimuli")
    counts = handle.fetch(st.filter(st.pronoun_set.notnull()).group_by(["dataset", "pronoun_set"])
                          .aggregate(n=st.stimulus_id.count()))
    group = counts["dataset"] + " · " + counts["pronoun_set"].astype(str)
    return pd.concat([pd.DataFrame({"measure": "prob_correct", "group": group, "n_loaded": counts["n"]}),
                      pd.DataFrame({"measure": "gen_correct", "group": group, "n_loaded": 2 * counts["n"]})],
                     ignore_index=True)
