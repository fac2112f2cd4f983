"""What `biaslab compare contextuality` compares (`biaslab.metrics.compare`): the headline measures of the
contextual-invariance study per template, from the same rows as `biaslab metrics contextuality`.

Measures (item = template, unit = template, both option orders pooled as in the paper, `stats.pool_orders`):
- p_f per context: p(feminine | context) of the template (mean; the `pf` table's mean_p_f).
- p_valid per context: the template's valid share (mean; the `validity` side of `pf`).
- kl_bits per primed / null context: KL(p(f | c) || p(f | unprimed)) in bits (mean; the `kl` table).
- spearman_rho per context: Spearman's rho of p(f | c) with the Misersky rating over the rated templates (the
  `spearman` table).
- cbd_contextual ("joint · either", "joint · MF", "joint · FM"): whether the template pair is contextual under
  Contextuality-by-Default (binary, McNemar; item = unit = template pair; the `cbd_fractions` table's fraction).
- p_f_order (within only): p(f | context) per option order, to test the order effect (MF vs FM per context).

Within one setting (--within): each primed and null context against unprimed, primed_f against primed_m (p_f and
spearman_rho), and MF against FM per context (p_f_order).
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from ... import views
from ..compare.core import Measure, Observations, with_settings
from .stats import COMPARED, CONTEXTS, SETTING, cbd_table, kl_table, pool_orders

__all__ = ["observations"]

MEASURES = {m.name: m for m in (
    Measure("p_f", "mean", "template", "template", description="p(feminine | context), option orders pooled"),
    Measure("p_valid", "mean", "template", "template", description="share of valid answers"),
    Measure("kl_bits", "mean", "template", "template", description="KL(p(f | c) || p(f | unprimed)) in bits"),
    Measure("spearman_rho", "spearman", "template", "template",
            description="Spearman rho of p(f | c) with the Misersky rating"),
    Measure("cbd_contextual", "binary", "template pair", "template pair",
            description="contextual under Contextuality-by-Default (joint variant)"),
    Measure("p_f_order", "mean", "template", "template", between=False,
            description="p(feminine | context) in one option order"),
)}


def _long(frame: pd.DataFrame, measure: str, group: pd.Series | str, item: pd.Series, value: pd.Series,
          covariate: pd.Series | None = None) -> pd.DataFrame:
    """The rows of one measure; `valid` is the template's valid share in that context (and order) where the
    frame has it (`p_valid`), so a comparison is marked where the answers were rarely valid."""
    out = frame[SETTING].copy()
    out["measure"] = measure
    out["group"] = group
    out["item"] = item.astype(str).to_numpy()
    out["cluster"] = out["item"]
    out["value"] = value.to_numpy(float)
    out["covariate"] = np.nan if covariate is None else covariate.to_numpy(float)
    out["valid"] = frame["p_valid"].to_numpy(float) if "p_valid" in frame.columns else np.nan
    return out


def within_pairs() -> list[tuple[str, str, str]]:
    """The condition pairs of --within."""
    pairs = [("p_f", c, "unprimed") for c in COMPARED] + [("p_f", "primed_f", "primed_m")]
    pairs += [("spearman_rho", c, "unprimed") for c in COMPARED]
    pairs += [("p_f_order", f"{c} · MF", f"{c} · FM") for c in CONTEXTS]
    return pairs


def observations(handle) -> Observations:
    """The study's per-template values per collection setting (see the module docstring).

    Parameters
    ----------
    handle : a `biaslab.open` handle.
    """
    from .tables import load_pf

    pf = load_pf(handle)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        pooled = pool_orders(pf)
        kl_long, _ = kl_table(pooled)
        cbd_rows = cbd_table(pf)
    parts = [_long(pooled, "p_f", pooled["context"], pooled["item_id"], pooled["p_f"]),
             _long(pooled, "p_valid", pooled["context"], pooled["item_id"], pooled["p_valid"])]
    # KL needs p(f) in all five contexts; a template without is a missing value (NaN), not a dropped row
    kl = pooled[pooled["context"].isin(COMPARED)][[*SETTING, "item_id", "context", "p_valid"]].merge(
        kl_long.drop(columns="option_order"), on=[*SETTING, "item_id", "context"], how="left")
    parts.append(_long(kl, "kl_bits", kl["context"], kl["item_id"], kl["kl_bits"]))
    rated = pooled[pooled["stereotype_rating"].notna()]
    parts.append(_long(rated, "spearman_rho", rated["context"], rated["item_id"], rated["p_f"],
                       rated["stereotype_rating"]))
    if not pf.empty:
        parts.append(_long(pf, "p_f_order", pf["context"] + " · " + pf["option_order"], pf["item_id"], pf["p_f"]))
    if not cbd_rows.empty:
        joint = cbd_rows[cbd_rows["variant"] == "joint"]
        parts.append(_long(joint, "cbd_contextual", "joint · " + joint["option_order"], joint["pair_id"],
                           joint["contextual"].astype(float)))
        either = (joint.groupby([*SETTING, "pair_id"], dropna=False)
                  .agg(orders=("contextual", "size"), contextual=("contextual", "any")).reset_index())
        either = either[either["orders"] == 2]
        parts.append(_long(either, "cbd_contextual", "joint · either", either["pair_id"],
                           either["contextual"].astype(float)))
    values = pd.concat(parts, ignore_index=True)
    values, settings = with_settings(values, SETTING, handle.models())
    return Observations("contextuality", values, settings, dict(MEASURES), within_pairs(), loaded=_loaded(handle))


def _loaded(handle) -> pd.DataFrame:
    """The items loaded per measure (every group alike): WinoPron's templates, those with a human rating for
    Spearman's rho, and its template pairs for Contextuality-by-Default."""
    stimuli = handle.fetch(views.winopron_stimuli(handle.source).select("item_id", "pair_id", "stereotype_rating"))
    templates = int(stimuli["item_id"].nunique())
    rated = int(stimuli.loc[stimuli["stereotype_rating"].notna(), "item_id"].nunique())
    pairs = int(stimuli["pair_id"].nunique())
    counts = {"p_f": templates, "p_valid": templates, "kl_bits": templates, "p_f_order": templates,
              "spearman_rho": rated, "cbd_contextual": pairs}
    return pd.DataFrame({"measure": list(counts), "group": None, "n_loaded": list(counts.values())})
