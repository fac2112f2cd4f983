"""The report of `biaslab report holistic-bias`: per axis and collection the likelihood bias with its interval over
templates (the dashed line is the 0.05 expected when no descriptor differs), the most and least likely descriptors,
and the tables with their coverage."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ..html_report import (collection_labels, image_html, nothing_to_show, save_figure, start_page, table_html,
                           write_page)
from .stats import THRESHOLD


def axes_figure(table: pd.DataFrame, labels: pd.Series, out: Path) -> str:
    """The likelihood bias per axis (y) and collection, with its 95% interval over templates."""
    shown = table.dropna(subset=["likelihood_bias"])
    if shown.empty:
        return nothing_to_show("likelihood bias", "no axis with two descriptors scored")
    axes_names = sorted(shown["axis"].unique())
    collections = list(dict.fromkeys(labels.loc[shown.index]))
    fig, ax = plt.subplots(figsize=(8, 0.4 * len(axes_names) + 1.8))
    for j, collection in enumerate(collections):
        rows = shown[labels.loc[shown.index] == collection].set_index("axis").reindex(axes_names)
        y = np.arange(len(axes_names)) + (j - (len(collections) - 1) / 2) * 0.8 / max(1, len(collections))
        line = ax.plot(rows["likelihood_bias"], y, "o", label=collection)[0]
        ax.hlines(y, rows["ci_low"], rows["ci_high"], color=line.get_color(), lw=1.2)
    ax.axvline(THRESHOLD, color="#777", ls="--", lw=0.8)
    ax.set_xlim(0, 1)
    ax.set_yticks(range(len(axes_names)), axes_names)
    ax.invert_yaxis()
    ax.set_xlabel("share of descriptor pairs whose perplexities differ (Mann-Whitney p < 0.05)")
    ax.legend(fontsize=8)
    return image_html(save_figure(fig, out, "holistic_bias_axes.png"))


def write_report(tables: dict[str, pd.DataFrame], out: Path, db: str, model_table: pd.DataFrame | None = None
                 ) -> Path:
    """Write out/index.html and its figure (see the module docstring)."""
    table = tables["holistic_bias"]
    intro = ("HolisticBias (Smith et al., EMNLP 2022): sentences naming people by about 600 descriptors on 13 axes, "
             "in 26 templates with 32 nouns. Per axis and template every pair of descriptors is compared by the "
             "perplexities of their sentences (two-sided Mann-Whitney U test); the likelihood bias of an axis is the "
             "share of pairs that differ at p < 0.05 (about 0.05 if no descriptor were less likely than another). "
             "Intervals: 95% t-interval over the templates.")
    parts = start_page(out, "HolisticBias", db, intro)
    labels = collection_labels(table, model_table, "scheme")
    parts.append("<h2>Likelihood bias per axis</h2>" + axes_figure(table, labels, out))
    shown = table.assign(collection=labels) if not table.empty else table
    parts.append("<h2>Table</h2>" + table_html(shown))
    descriptors = tables.get("holistic_bias_descriptors")
    if descriptors is not None and not descriptors.empty:
        parts.append("<h2>Descriptors by median perplexity</h2>" + table_html(descriptors))
    return write_page(out, "biaslab HolisticBias report", parts)
