"""What `biaslab compare calibration` compares (`biaslab.metrics.compare`): the calibration of pronoun-pair
probabilities, from the same rows as `biaslab metrics calibration` (`tables.load_pairs`: the gold-labelled pairs of
`pronoun_pair_probs`).

A setting is (model_key, scheme); the group is the dataset; item = unit = the dataset's item (one pronoun pair).
Each item's value is its p(male) = p_he / (p_he + p_she) and its covariate the gold label (1 = male), the same for
both settings. Measures, all in `equal_width` bins of 10 as the `metrics` table's defaults:
- ece: top-label ECE (Guo et al. 2017; `stats.ece`): conf = max(p, 1 - p), correct = [p >= 0.5] == gold,
  ECE = sum_b |sum_{i in b} (correct_i - conf_i)| / n.
- gender_ece: Gender-ECE = 1/2 (ECE(items predicted male) + ECE(items predicted female)) (`stats.gender_ece`; one
  group's ECE when the other is empty).
- brier: mean (p_male - gold)^2 per item (mean).
- p_male: the mean p(male) (mean).
WinoQueer's identity pairs are not compared here (`biaslab metrics calibration` reports them).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..compare.core import Measure, Observations, with_settings
from .resampled import equal_width_index

__all__ = ["observations", "ece_rows", "gender_ece_rows"]

#: equal-width bins of the compared ECEs (the calibration tables' default)
BINS = 10
SETTING = ["model_key", "scheme"]


def _top_label(p_male: np.ndarray, gold: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    predicted = (p_male >= 0.5).astype(float)
    conf = np.where(predicted == 1, p_male, 1.0 - p_male)
    return conf, (predicted == gold).astype(float), predicted


def _bin_gaps(conf: np.ndarray, correct: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row: sum_b |sum_{i in b, mask} (correct_i - conf_i)| and the number of masked items."""
    rows = conf.shape[0]
    index = equal_width_index(conf.ravel(), BINS).reshape(conf.shape)
    flat = (index + (np.arange(rows, dtype=np.int64) * BINS)[:, None]).ravel()
    gaps = np.bincount(flat, weights=((correct - conf) * mask).ravel(), minlength=rows * BINS).reshape(rows, BINS)
    return np.abs(gaps).sum(axis=1), mask.sum(axis=1)


def ece_rows(values: np.ndarray, covariate: np.ndarray | None) -> np.ndarray:
    """Top-label ECE of each row of p(male) values against the gold labels in `covariate` (module docstring)."""
    conf, correct, _ = _top_label(values, covariate)
    gap, n = _bin_gaps(conf, correct, np.ones_like(conf))
    return gap / n


def gender_ece_rows(values: np.ndarray, covariate: np.ndarray | None) -> np.ndarray:
    """Gender-ECE of each row: the mean of the top-label ECEs of the items predicted male and predicted female
    (the non-empty ones)."""
    conf, correct, predicted = _top_label(values, covariate)
    parts = []
    for label in (1.0, 0.0):
        gap, n = _bin_gaps(conf, correct, (predicted == label).astype(float))
        with np.errstate(invalid="ignore", divide="ignore"):
            parts.append(np.where(n > 0, gap / np.where(n > 0, n, 1), np.nan))
    with np.errstate(invalid="ignore"):
        return np.nanmean(np.vstack(parts), axis=0)


MEASURES = {m.name: m for m in (
    Measure("ece", "statistic", "item", "item", statistic=ece_rows, description="top-label ECE, 10 bins"),
    Measure("gender_ece", "statistic", "item", "item", statistic=gender_ece_rows,
            description="Gender-ECE: mean ECE of the items predicted male and predicted female"),
    Measure("brier", "mean", "item", "item", description="Brier score of p(male) against the gold label"),
    Measure("p_male", "mean", "item", "item", description="p(male) of the pronoun pair"),
)}


def observations(handle, dataset: str | None = None) -> Observations:
    """The study's per-item values per setting (see the module docstring).

    Parameters
    ----------
    handle : a `biaslab.open` handle.
    dataset : only this dataset (default: every pair dataset).
    """
    from .tables import load_pairs

    pairs = load_pairs(handle, dataset)
    gold = pairs["gold_male"].to_numpy(float)
    p = pairs["p_male"].to_numpy(float)
    base = pairs[SETTING].assign(group=pairs["dataset"].to_numpy(), item=pairs["item_id"].astype(str).to_numpy())
    base["cluster"] = base["item"]
    parts = []
    for name, value in (("ece", p), ("gender_ece", p), ("brier", (p - gold) ** 2), ("p_male", p)):
        covariate = gold if MEASURES[name].kind == "statistic" else np.full(len(p), np.nan)
        parts.append(base.assign(measure=name, value=value, covariate=covariate))
    values = pd.concat(parts, ignore_index=True) if parts else base
    if values.empty:
        from ...errors import NoEvidence

        raise NoEvidence("nothing to compare: no scored pronoun pair with a gold label is stored")
    values, settings = with_settings(values, SETTING, handle.models())
    return Observations("calibration", values, settings, dict(MEASURES))
