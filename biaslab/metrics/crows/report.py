"""The report of `biaslab report crows-pairs`: the reliability caveat first, then per dataset the paper's metric and
lm-eval's pct_stereotype per bias type and collection with their intervals against the ideal 50, and the table with
its coverage and sign tests."""

from __future__ import annotations

import html
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ...loaders.crows_pairs import CAVEAT
from ..html_report import (collection_labels, image_html, nothing_to_show, save_figure, start_page, table_html,
                           write_page)
from .stats import ALL


def scores_figure(table: pd.DataFrame, labels: pd.Series, dataset: str, out: Path, name: str) -> str:
    """The two scores per bias type (y) and collection, with intervals; the dashed line is 50 (no preference)."""
    part = table[table["dataset"] == dataset]
    if part.empty:
        return nothing_to_show(f"{dataset} scores", "no scored pairs")
    types = sorted(t for t in part["bias_type"].unique() if t != ALL) + [ALL]
    collections = list(dict.fromkeys(labels.loc[part.index]))
    fig, axes = plt.subplots(1, 2, figsize=(10, 0.35 * len(types) + 2.2), sharey=True, squeeze=False)
    for ax, (score, low, high, title) in zip(axes[0], (
            ("metric_score", "metric_low", "metric_high", "paper's metric (shared tokens)"),
            ("pct_stereotype", "pct_low", "pct_high", "lm-eval's pct_stereotype (whole sentences)"))):
        for j, collection in enumerate(collections):
            rows = part[labels.loc[part.index] == collection].set_index("bias_type").reindex(types)
            y = np.arange(len(types)) + (j - (len(collections) - 1) / 2) * 0.8 / max(1, len(collections))
            # the interval as computed: a percentile bootstrap interval of few resamples need not contain the
            # score, so it is drawn from its own ends (an error bar would need it to)
            line = ax.plot(rows[score], y, "o", label=collection)[0]
            ax.hlines(y, rows[low], rows[high], color=line.get_color(), lw=1.2)
        ax.axvline(50, color="#777", ls="--", lw=0.8)
        ax.set_xlim(0, 100)
        ax.set_yticks(range(len(types)), [f"{t} (n={int(n)})" for t, n in zip(types, part.drop_duplicates(
            "bias_type").set_index("bias_type").reindex(types)["n_pairs"].fillna(0))])
        ax.set_xlabel("% of pairs where the more stereotyping sentence wins")
        ax.set_title(title)
    axes[0][0].invert_yaxis()
    axes[0][1].legend(fontsize=8)
    return image_html(save_figure(fig, out, name))


def write_report(tables: dict[str, pd.DataFrame], out: Path, db: str, model_table: pd.DataFrame | None = None
                 ) -> Path:
    """Write out/index.html and its figures (see the module docstring)."""
    table = tables["crows_pairs"]
    intro = ("CrowS-Pairs (Nangia et al., EMNLP 2020): the share of sentence pairs where the model prefers the more "
             "stereotyping sentence; 50 is ideal. The paper's metric compares the log-probabilities of the tokens "
             "both sentences share; lm-eval's pct_stereotype compares the whole sentences. Intervals: 95% bootstrap "
             "over pairs; p: sign test against 50.")
    parts = start_page(out, "CrowS-Pairs", db, intro)
    parts.append(f'<div class="flags"><p><b>Reliability.</b> {html.escape(CAVEAT)} Read these scores with that '
                 "caveat.</p></div>")
    labels = collection_labels(table, model_table, "scheme")
    for n, dataset in enumerate(sorted(table["dataset"].unique()) if not table.empty else []):
        parts.append(f"<h2>{html.escape(dataset)}</h2>" + scores_figure(table, labels, dataset, out,
                                                                         f"crows_{n}.png"))
    shown = table.assign(collection=labels) if not table.empty else table
    parts.append("<h2>Table</h2>" + table_html(shown))
    return write_page(out, "biaslab CrowS-Pairs report", parts)
