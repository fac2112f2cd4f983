"""The pronoun-calibration study from the warehouse: metrics with bootstrap intervals, reliability bins (before and
after post-hoc calibration), post-hoc calibration, sample-size ablation, the GenderLex variants side by side,
WinoQueer per identity group, and the % change between declared model pairs, per model, scheme and dataset.

Reads the `pronoun_pair_probs` and `identity_pair_probs` views (`biaslab.views.calibration`); the statistics
are in `calibration.py`. Every table that bins a confidence gives the paper's convention (male-class probability,
equal-width bins; Sabir et al.) first and the top-label convention (Guo et al. 2017) labelled next to it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...errors import NoEvidence, UsageError
from ..registry import get_study
from . import stats as cal

KEYS = ["model_key", "scheme", "dataset"]
#: Items needed (with both labels) before the post-hoc calibrators are fitted on half of them.
MIN_POST_HOC_ITEMS = 20


def _gold_labelled(handle, view: str, gold: str, dataset: str | None) -> pd.DataFrame:
    """Rows of a pair view whose `gold` column is set (one dataset or all), ordered by dataset and item."""
    pairs = handle.table(view)
    pairs = pairs.filter(pairs[gold].notnull())
    if dataset:
        pairs = pairs.filter(pairs.dataset == dataset)
    return handle.fetch(pairs.order_by(["dataset", "item_id"]))


def load_pairs(handle, dataset: str | None = None) -> pd.DataFrame:
    """The gold-labelled pronoun pairs of `pronoun_pair_probs` (one dataset or all)."""
    return _gold_labelled(handle, "pronoun_pair_probs", "gold_male", dataset)


def load_identity_pairs(handle, dataset: str | None = None) -> pd.DataFrame:
    """The gold-labelled WinoQueer pairs of `identity_pair_probs` (one dataset or all)."""
    return _gold_labelled(handle, "identity_pair_probs", "gold_queer", dataset)


def _bin_rows(ident: dict, p: np.ndarray, y: np.ndarray, n_bins: int) -> list[dict]:
    """Reliability bins of (p, y) for each confidence (the paper's first) and binning, tagged with ``ident``."""
    rows = []
    for confidence in cal.CONFIDENCE_ORDER:
        conf, target = cal.confidence_and_target(p, y, confidence)
        for binning in cal.BINNINGS:
            result = cal.ece(conf, target, n_bins=n_bins, binning=binning, confidence=confidence)
            for b, row in enumerate(result.bin_rows()):
                rows.append({**ident, "confidence": confidence, "binning": binning, "bin": b, **row})
    return rows


def calibration_tables(pairs: pd.DataFrame, *, identity_pairs: pd.DataFrame | None = None, n_bins: int = 10,
                       n_boot: int = 1000, seed: int = 0, ablation_repeats: int = 100) -> dict[str, pd.DataFrame]:
    """All calibration tables for every (model, scheme, dataset) present.

    Parameters
    ----------
    pairs : `pronoun_pair_probs` rows with a gold label (`load_pairs`).
    identity_pairs : `identity_pair_probs` rows (`load_identity_pairs`), or None (then `winoqueer` is empty).
    n_bins : bins of the ECE family.
    n_boot : bootstrap resamples of the intervals.
    seed : seed of the bootstrap, the post-hoc split and the ablation.
    ablation_repeats : subsets drawn per size in the ablation.

    Returns
    -------
    metrics (one row per metric), genderlex_variants, post_hoc (the paper's post-hoc table: one row per calibrator,
    ECE before / after in both conventions), ablation (the paper's Table 7: male_class rows, then top_label rows, on
    the same subsets), winoqueer (Table 4: one row per identity group and "all"), reliability (bins of the raw
    probabilities) and reliability_post_hoc (bins of the held-out half, calibrator "none" = uncalibrated, then each
    calibrator; Figures 4 and 5).
    """
    metrics, bins, calibrators, ablation, post_bins = [], [], [], [], []
    for key, group in pairs.groupby(KEYS):
        ident = dict(zip(KEYS, key))
        p, y = group["p_male"].to_numpy(dtype=float), group["gold_male"].to_numpy().astype(int)
        for row in cal.calibration_metrics(p, y, n_bins=n_bins, n_boot=n_boot, seed=seed):
            metrics.append({**ident, **row})
        bins += _bin_rows(ident, p, y, n_bins)
        if len(set(y)) == 2 and len(y) >= MIN_POST_HOC_ITEMS:
            test, predictions = cal.post_hoc_predictions(p, y, seed=seed)
            for row in cal.post_hoc_rows(y[test], predictions, len(y) - test.size, seed, n_bins):
                calibrators.append({**ident, **row})
            for name, q in predictions.items():
                post_bins += _bin_rows({**ident, "calibrator": name}, q, y[test], n_bins)
        for row in cal.sample_size_ablation_by_confidence(p, y, repeats=ablation_repeats, seed=seed, n_bins=n_bins):
            ablation.append({**ident, **row})
    metric_frame = pd.DataFrame(metrics)
    return {
        "metrics": metric_frame,
        "genderlex_variants": _variants(metric_frame),
        "post_hoc": pd.DataFrame(calibrators),
        "ablation": pd.DataFrame(ablation),
        "winoqueer": identity_tables(identity_pairs, n_bins=n_bins, n_boot=n_boot, seed=seed),
        "reliability": pd.DataFrame(bins),
        "reliability_post_hoc": pd.DataFrame(post_bins),
    }


def identity_tables(identity_pairs: pd.DataFrame | None, *, n_bins: int = 10, n_boot: int = 1000,
                    seed: int = 0) -> pd.DataFrame:
    """WinoQueer calibration per identity group (`calibration.identity_group_metrics`) for every (model, scheme,
    dataset) of ``identity_pairs``; groups are the upstream `Gender_ID_x` values (a pair without one: "(none)")."""
    if identity_pairs is None or identity_pairs.empty:
        return pd.DataFrame()
    rows = []
    for key, group in identity_pairs.groupby(KEYS):
        ident = dict(zip(KEYS, key))
        identity = group["identity"].astype(object).where(group["identity"].notna(), "(none)").to_numpy()
        for row in cal.identity_group_metrics(group["p_queer"].to_numpy(dtype=float),
                                              group["gold_queer"].to_numpy().astype(int), identity,
                                              n_bins=n_bins, n_boot=n_boot, seed=seed):
            rows.append({**ident, **row})
    return pd.DataFrame(rows)


def _variants(metrics: pd.DataFrame) -> pd.DataFrame:
    """GenderLex occupation / "person" / "someone" variants side by side (value per metric and variant)."""
    if metrics.empty:
        return metrics
    variants = genderlex_variants()
    part = metrics[metrics["dataset"].isin(variants)]
    if part.empty:
        return part
    wide = part.pivot_table(index=["model_key", "scheme", "name"], columns="dataset", values="value", aggfunc="first")
    return wide.reindex(columns=[v for v in variants if v in wide.columns]).reset_index()


def genderlex_variants() -> tuple[str, ...]:
    """The GenderLex prompt variants (genderlex, genderlex-person, genderlex-someone): the calibration study's
    datasets of the GenderLex family, in the loaders' order (`metrics.registry`)."""
    return tuple(n for n in get_study("calibration").dataset_names if n.split("-")[0] == "genderlex")


def calibration_report_tables(handle, dataset: str | None = None, **kwargs) -> dict[str, pd.DataFrame]:
    """`calibration_tables` of the warehouse's gold-labelled pronoun pairs and WinoQueer pairs (one dataset or all)."""
    return calibration_tables(load_pairs(handle, dataset), identity_pairs=load_identity_pairs(handle, dataset),
                              **kwargs)


# ----------------------------------------------------------------------------------------------------------------
# model pairs: size and distillation % change (the paper's Tables 6 and 11)
# ----------------------------------------------------------------------------------------------------------------

_PAIR_RE = re.compile(r"^(?:(?P<kind>[A-Za-z][\w-]*):)?(?P<reference>[^=]+)=(?P<other>[^=]+)$")
#: A model key prefix must have at least this many characters to select a model.
MIN_KEY_PREFIX = 6


@dataclass(frozen=True)
class ModelPair:
    """A declared model pair: ``kind`` (a free label, e.g. size or distillation), the reference model (small /
    teacher) and the other model (large / distilled), each a model name or a model key (or a key prefix)."""

    kind: str
    reference: str
    other: str


def parse_model_pair(text: str) -> ModelPair:
    """``[KIND:]REFERENCE=OTHER`` -> ModelPair (KIND defaults to "pair"), e.g. ``size:SmolLM2-135M=SmolLM2-360M`` or
    ``distillation:Llama-3.1-8B=DeepSeek-R1-Distill-Llama-8B``. ValueError (one line) for any other form."""
    m = _PAIR_RE.match(text.strip())
    if not m or not m["reference"].strip() or not m["other"].strip() or m["reference"].strip().endswith(":"):
        raise UsageError(f"model pair {text!r} is not of the form [KIND:]REFERENCE=OTHER "
                         "(e.g. size:small-model=large-model)")
    return ModelPair(m["kind"] or "pair", m["reference"].strip(), m["other"].strip())


def resolve_model(spec: str, keys, model_table: pd.DataFrame | None) -> str:
    """The one model key among ``keys`` that ``spec`` names: its model_name (in ``model_table``), its full key, or a
    key prefix of at least MIN_KEY_PREFIX characters. ValueError (one line) when none or several match."""
    keys = list(dict.fromkeys(keys))
    names = {} if model_table is None or model_table.empty else dict(zip(model_table["model_key"],
                                                                         model_table["model_name"]))
    matches = [k for k in keys if names.get(k) == spec or k == spec]
    if not matches and len(spec) >= MIN_KEY_PREFIX:
        matches = [k for k in keys if k.startswith(spec)]
    if len(matches) == 1:
        return matches[0]
    known = ", ".join(f"{names.get(k, k)} ({k[:12]})" for k in keys) or "none"
    if not matches:
        raise UsageError(f"no model with calibration results is named or keyed {spec!r} (models: {known})")
    raise UsageError(f"{spec!r} names {len(matches)} models ({', '.join(k[:12] for k in matches)}): give a key "
                     "prefix instead")


def pair_changes(metrics: pd.DataFrame, model_pairs, model_table: pd.DataFrame | None = None) -> pd.DataFrame:
    """The % change of every metric from the reference model to the other model of each declared pair.

    pct_change = 100 * (other_value - reference_value) / |reference_value| (NaN when the reference value is 0 or
    NaN), for every (scheme, dataset, metric name) that both models have; change = other_value - reference_value.
    A positive change of an error metric (ECE, Brier, ...) means the other model is worse calibrated.

    Parameters
    ----------
    metrics : the `metrics` table of `calibration_tables` (model_key, scheme, dataset, name, value).
    model_pairs : ModelPair objects or ``[KIND:]REFERENCE=OTHER`` strings.
    model_table : `catalog.warehouse_models(...)` to resolve model names (None: keys only).

    Returns
    -------
    Rows (kind, reference_model, other_model, scheme, dataset, name, reference_value, other_value, change,
    pct_change, reference_key, other_key); empty when no pair is given. ValueError (one line) for a pair whose
    models are not found or that share no (scheme, dataset).
    """
    columns = ["kind", "reference_model", "other_model", "scheme", "dataset", "name", "reference_value",
               "other_value", "change", "pct_change", "reference_key", "other_key"]
    pairs = [p if isinstance(p, ModelPair) else parse_model_pair(p) for p in model_pairs]
    if not pairs:
        return pd.DataFrame(columns=columns)
    if metrics.empty:
        raise NoEvidence("model pairs declared, but no model has calibration metrics")
    keys = list(metrics["model_key"])
    names = {} if model_table is None or model_table.empty else dict(zip(model_table["model_key"],
                                                                         model_table["model_name"]))
    frames = []
    for pair in pairs:
        ref, other = resolve_model(pair.reference, keys, model_table), resolve_model(pair.other, keys, model_table)
        if ref == other:
            raise UsageError(f"model pair {pair.reference}={pair.other}: both name the same model ({ref[:12]})")
        a = metrics[metrics["model_key"] == ref][["scheme", "dataset", "name", "value"]]
        b = metrics[metrics["model_key"] == other][["scheme", "dataset", "name", "value"]]
        joined = a.merge(b, on=["scheme", "dataset", "name"], suffixes=("_ref", "_other"))
        if joined.empty:
            raise UsageError(f"model pair {pair.reference}={pair.other}: the two models share no scheme and dataset")
        ref_value = joined["value_ref"].astype(float)
        other_value = joined["value_other"].astype(float)
        with np.errstate(divide="ignore", invalid="ignore"):
            pct = np.where(ref_value.abs() > 0, 100.0 * (other_value - ref_value) / ref_value.abs(), np.nan)
        frames.append(pd.DataFrame({
            "kind": pair.kind, "reference_model": names.get(ref, ref), "other_model": names.get(other, other),
            "scheme": joined["scheme"], "dataset": joined["dataset"], "name": joined["name"],
            "reference_value": ref_value, "other_value": other_value, "change": other_value - ref_value,
            "pct_change": pct, "reference_key": ref, "other_key": other}))
    return pd.concat(frames, ignore_index=True)[columns]
