"""The pronoun-calibration study from the warehouse: metrics with bootstrap intervals, reliability bins, post-hoc
calibration, sample-size ablation and the GenderLex variants side by side, per model, scheme and dataset.

Reads the `pronoun_pair_probs` view (biaslab/sql/views/calibration.sql); the statistics are in `calibration.py`.
"""

from __future__ import annotations

import pandas as pd

from ..warehouse import Warehouse
from . import calibration as cal

KEYS = ["model_key", "scheme", "dataset"]
GENDERLEX_VARIANTS = ("genderlex", "genderlex-person", "genderlex-someone")


def load_pairs(wh: Warehouse, dataset: str | None = None) -> pd.DataFrame:
    """Normalized male-pronoun probabilities with gold labels (items without a gold label are left out)."""
    sql = "SELECT * FROM pronoun_pair_probs WHERE gold_male IS NOT NULL"
    params: list = []
    if dataset:
        sql += " AND dataset = ?"
        params.append(dataset)
    return wh.con.execute(sql + " ORDER BY dataset, item_id", params).df()


def calibration_tables(pairs: pd.DataFrame, *, n_bins: int = 10, n_boot: int = 1000, seed: int = 0,
                       ablation_repeats: int = 100) -> dict[str, pd.DataFrame]:
    """All calibration tables for every (model, scheme, dataset) present."""
    metrics, bins, calibrators, ablation = [], [], [], []
    for key, group in pairs.groupby(KEYS):
        ident = dict(zip(KEYS, key))
        p, y = group["p_male"].to_numpy(), group["gold_male"].to_numpy().astype(int)
        for row in cal.calibration_metrics(p, y, n_bins=n_bins, n_boot=n_boot, seed=seed):
            metrics.append({**ident, **row})
        for confidence in (cal.TOP_LABEL, cal.MALE_CLASS):
            conf, target = cal.confidence_and_target(p, y, confidence)
            for binning in (cal.EQUAL_WIDTH, cal.EQUAL_MASS):
                result = cal.ece(conf, target, n_bins=n_bins, binning=binning, confidence=confidence)
                for b, row in enumerate(result.bin_rows()):
                    bins.append({**ident, "confidence": confidence, "binning": binning, "bin": b, **row})
        if len(set(y)) == 2 and len(y) >= 20:
            for row in cal.evaluate_calibrators(p, y, seed=seed, n_bins=n_bins):
                calibrators.append({**ident, **row})
        conf, correct = cal.top_label_confidence(p, y)
        for row in cal.sample_size_ablation(conf, correct, repeats=ablation_repeats, seed=seed, n_bins=n_bins):
            ablation.append({**ident, **row})
    metric_frame = pd.DataFrame(metrics)
    return {
        "metrics": metric_frame,
        "genderlex_variants": _variants(metric_frame),
        "post_hoc": pd.DataFrame(calibrators),
        "ablation": pd.DataFrame(ablation),
        "reliability": pd.DataFrame(bins),
    }


def _variants(metrics: pd.DataFrame) -> pd.DataFrame:
    """GenderLex occupation / "person" / "someone" variants side by side (value per metric and variant)."""
    if metrics.empty:
        return metrics
    part = metrics[metrics["dataset"].isin(GENDERLEX_VARIANTS)]
    if part.empty:
        return part
    wide = part.pivot_table(index=["model_key", "scheme", "name"], columns="dataset", values="value", aggfunc="first")
    return wide.reindex(columns=[v for v in GENDERLEX_VARIANTS if v in wide.columns]).reset_index()


def calibration_report_tables(wh: Warehouse, dataset: str | None = None, **kwargs) -> dict[str, pd.DataFrame]:
    return calibration_tables(load_pairs(wh, dataset), **kwargs)
