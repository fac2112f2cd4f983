"""What `biaslab compare options --dataset NAME [--by COL]` compares (`biaslab.metrics.compare`): the generic option
measures of any dataset with options, from the same rows as `biaslab metrics options` (`tables.read_probs`).

Measures (item = the dataset's item_id: a stimulus's options renormalized, averaged over the item's stimuli in the
group, `stats.item_means`, complete items only: an item with evidence for part of its stimuli in a setting is left
out of that setting, `tables.complete_items`, and counted as one the setting lacks; unit = the study's unit: the one
a user spec declares (`unit:`, e.g. name: items of one name are not independent observations, so the bootstrap and
the permutations resample names), `unit=` when given, else the item):
- p per group and option label: the item's mean probability of that option (the `means` table's mean_p).
- valid_mass per group: the item's mean share of valid answers (1 - the `means` table's invalid_mass).
- accuracy per group (stimuli with a gold option; item = stimulus, unit = item): whether the most probable option
  is the gold one (binary, McNemar).
- brier per group (gold): the stimulus's Brier score (mean).
- ece per group (gold): top-label ECE in 10 equal-width bins (`calibration.stats.ece`), a statistic of the stimuli.

A setting is (model_key, method, setting) as in the option tables. Within one setting (--within, needs one --by
column): p of every option label between each two values of the first --by column.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from itertools import combinations

import numpy as np
import pandas as pd

from ...errors import UsageError
from ..calibration.resampled import equal_width_index
from ..compare.core import Measure, Observations, with_settings
from . import stats
from .stats import KEY

__all__ = ["observations", "signed_ece_rows"]

#: equal-width bins of the compared ECE (the option tables' default)
ECE_BINS = 10


def signed_ece_rows(values: np.ndarray, covariate: np.ndarray | None) -> np.ndarray:
    """Top-label ECE of each row of stimuli given as signed confidences (+c: correct with confidence c, -c: wrong),
    in ECE_BINS equal-width bins, bin b = [b / B, (b + 1) / B) and the last one closed:
    ECE = sum_b |sum_{i in b} correct_i - sum_{i in b} c_i| / n (`biaslab.metrics.calibration.stats.ece`)."""
    conf = np.abs(values)
    correct = (values > 0).astype(float)
    rows, n = values.shape
    index = equal_width_index(conf.ravel(), ECE_BINS).reshape(conf.shape)
    flat = (index + (np.arange(rows, dtype=np.int64) * ECE_BINS)[:, None]).ravel()
    gap = (np.bincount(flat, weights=(correct - conf).ravel(), minlength=rows * ECE_BINS)
           .reshape(rows, ECE_BINS))
    return np.abs(gap).sum(axis=1) / n


MEASURES = {m.name: m for m in (
    Measure("p", "mean", "item", "item", description="probability of the option, renormalized over the options"),
    Measure("valid_mass", "mean", "item", "item", description="share of valid answers"),
    Measure("accuracy", "binary", "stimulus", "item", description="the most probable option is the gold one"),
    Measure("brier", "mean", "stimulus", "item", description="Brier score against the gold option"),
    Measure("ece", "statistic", "stimulus", "item", statistic=signed_ece_rows,
            description=f"top-label ECE, {ECE_BINS} equal-width bins"),
)}


def _group_text(frame: pd.DataFrame, by: Sequence[str]) -> pd.Series:
    if not by:
        return pd.Series("all", index=frame.index)
    return frame[list(by)].astype(str).agg(" · ".join, axis=1)


def _long(frame: pd.DataFrame, measure: str, group: pd.Series, item: pd.Series, cluster: pd.Series,
          value) -> pd.DataFrame:
    """The rows of one measure; `valid` is the item's (or stimulus's) valid mass (NaN for 'prob', whose scored
    options have no invalid answers)."""
    out = frame[KEY].copy()
    out["measure"], out["group"] = measure, group.to_numpy()
    out["item"], out["cluster"] = item.astype(str).to_numpy(), cluster.astype(str).to_numpy()
    out["value"] = np.asarray(value, dtype=float)
    out["covariate"] = np.nan
    out["valid"] = frame["valid_mass"].to_numpy(float) if "valid_mass" in frame.columns else np.nan
    return out


def observations(handle, dataset: str | None = None, by: Sequence[str] = (), all_versions: bool = False,
                 unit: str | None = None) -> Observations:
    """The option measures per item and collection setting (see the module docstring).

    Parameters
    ----------
    handle : a `biaslab.open` handle.
    dataset : the dataset (required).
    by : grouping columns (stimuli columns or attrs keys), as `biaslab metrics options --by`.
    all_versions : a user dataset at every loaded version.
    unit : the study's unit, a stimuli column or attrs key with one value per item (default: the spec's `unit:`,
        else the item).
    """
    from .tables import declared_unit, loaded_stimuli, read_probs

    if not dataset:
        raise UsageError("compare options needs --dataset NAME (the dataset whose options are compared)")
    by = list(dict.fromkeys(by))
    unit = unit or declared_unit(handle, dataset) or "item_id"
    extra = [] if unit in (*by, "item_id") else [unit]
    probs = _complete_only(read_probs(handle, dataset, [*by, *extra], (), all_versions),
                           loaded_stimuli(handle, dataset, by, all_versions, True), by)
    unit_of = _unit_of_item(probs, unit, dataset)
    items = stats.item_means(probs, by)
    group = _group_text(items, by)
    parts = [_long(items, "p", group + " · " + items["option_label"].astype(str), items["item_id"],
                   items["item_id"].map(unit_of), items["p"])]
    valid = items.drop_duplicates([*KEY, *by, "item_id"])
    parts.append(_long(valid, "valid_mass", _group_text(valid, by), valid["item_id"], valid["item_id"].map(unit_of),
                       valid["valid_mass"]))
    if probs["gold_label"].notna().any():
        scores = stats.stimulus_scores(probs, by).merge(
            probs.drop_duplicates([*KEY, "stimulus_id"])[[*KEY, "stimulus_id", "valid_mass"]],
            on=[*KEY, "stimulus_id"], how="left")
        item = scores["stimulus_id"].map(probs.drop_duplicates("stimulus_id").set_index("stimulus_id")["item_id"])
        cluster = item.map(unit_of)
        signed = np.where(scores["correct"], 1.0, -1.0) * scores["confidence"].to_numpy(float)
        text = _group_text(scores, by)
        parts += [_long(scores, "accuracy", text, scores["stimulus_id"], cluster, scores["correct"].astype(float)),
                  _long(scores, "brier", text, scores["stimulus_id"], cluster, scores["brier"]),
                  _long(scores, "ece", text, scores["stimulus_id"], cluster, signed)]
    values = pd.concat(parts, ignore_index=True)
    values, settings = with_settings(values, KEY, handle.models())
    within, note = [], ""
    if by and not (items.groupby("item_id")[by[0]].nunique() >= 2).any():
        note = (f"--within: {by[0]} varies between items in {dataset} (every item has one value), so no item can be "
                f"paired with itself; compare between settings, or give --by a column that varies within items")
    elif by:
        levels = sorted(items[by[0]].astype(str).unique())
        rest = items[by[1:]].astype(str).agg(" · ".join, axis=1) if len(by) > 1 else pd.Series("", index=items.index)
        for other in sorted(rest.unique()):
            for label in sorted(items["option_label"].astype(str).unique()):
                for a, b in combinations(levels, 2):
                    name = [" · ".join(x for x in (v, other) if x) + f" · {label}" for v in (a, b)]
                    within.append(("p", name[0], name[1]))
    named = "item" if unit == "item_id" else unit
    measures = {name: replace(m, unit=named) for name, m in MEASURES.items()}
    return Observations("options", values, settings, measures, within, note)


def _complete_only(probs: pd.DataFrame, loaded: pd.DataFrame, by: Sequence[str]) -> pd.DataFrame:
    """`probs` with no value (p, valid_mass NaN) for the stimuli of items a setting has only in part (one option
    order of three, after --limit), as `metrics options` leaves such items out (`tables.complete_items`):
    otherwise two settings' item values would rest on different stimuli. The rows stay, so the setting and the
    items it lacks are still seen, counted and named by the comparison."""
    from .tables import complete_items

    complete, _ = complete_items(probs, loaded, by)
    kept = pd.MultiIndex.from_frame(complete[[*KEY, "stimulus_id"]].drop_duplicates())
    partial = ~pd.MultiIndex.from_frame(probs[[*KEY, "stimulus_id"]]).isin(kept)
    probs = probs.copy()
    probs.loc[partial, ["p", "valid_mass"]] = np.nan
    return probs


def _unit_of_item(probs: pd.DataFrame, unit: str, dataset: str) -> pd.Series:
    """item_id -> the item's value of `unit` (the item itself for "item_id"); UsageError when an item has several:
    a unit groups whole items, so that the items of one unit are resampled and permuted together."""
    pairs = pd.DataFrame({"item_id": probs["item_id"].to_numpy(),
                          "unit": probs[unit].astype(str).to_numpy()}).drop_duplicates()
    several = pairs["item_id"][pairs["item_id"].duplicated()]
    if len(several):
        first = several.iloc[0]
        values = sorted(pairs.loc[pairs["item_id"] == first, "unit"])
        raise UsageError(f"unit {unit!r} of dataset {dataset}: item {first!r} has several values "
                         f"({', '.join(values)}); a unit must hold whole items (e.g. a name asked in several "
                         f"templates)")
    return pairs.set_index("item_id")["unit"]
