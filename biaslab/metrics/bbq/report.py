"""The report of `biaslab report bbq`: the bias scores as the paper draws them (a grid of categories x collections,
one panel per context condition, each cell the score with its template-bootstrap interval), accuracy per category
with intervals, and the table with its coverage."""

from __future__ import annotations

import html
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ..html_report import (collection_labels, image_html, nothing_to_show, save_figure, start_page, table_html,
                           write_page)
from ..options.stats import KEY
from .stats import ALL

CONDITIONS = (("ambig", "ambiguous contexts (s_AMB)"), ("disambig", "disambiguated contexts (s_DIS)"))


def _labels(table: pd.DataFrame, model_table: pd.DataFrame | None) -> pd.Series:
    """Each collection's name: the model (as the reports name it) and the method, with the setting where two
    collections of one model and method differ only there."""
    label = collection_labels(table, model_table, "method")
    keys = table[KEY].drop_duplicates()
    named = keys.assign(label=label.loc[keys.index])
    tied = named["label"].duplicated(keep=False)
    named.loc[tied, "label"] = named.loc[tied, "label"] + " [" + named.loc[tied, "setting"].astype(str) + "]"
    return table[KEY].merge(named, on=KEY, how="left")["label"].set_axis(table.index)


def bias_figure(table: pd.DataFrame, labels: pd.Series, out: Path) -> str:
    """Bias score per category (rows) and collection (columns), a panel per context condition, with intervals;
    cells resting on low coverage are hatched."""
    if table.empty or table["bias_score"].notna().sum() == 0:
        return nothing_to_show("BBQ bias scores", "no scored examples")
    collections = list(dict.fromkeys(labels))
    categories = sorted(c for c in table["category"].unique() if c != ALL) + ([ALL] if (table["category"] == ALL)
                                                                               .any() else [])
    limit = max(10.0, float(np.nanmax(np.abs(table["bias_score"]))))
    fig, axes = plt.subplots(1, 2, figsize=(4 + 2.4 * len(collections), 0.45 * len(categories) + 2.2),
                             squeeze=False)
    for ax, (condition, title) in zip(axes[0], CONDITIONS):
        grid = np.full((len(categories), len(collections)), np.nan)
        text = [["" for _ in collections] for _ in categories]
        part = table[table["context_condition"] == condition]
        for index, row in part.iterrows():
            i, j = categories.index(row["category"]), collections.index(labels[index])
            grid[i, j] = row["bias_score"]
            ci = (f"\n[{row['bias_low']:.1f}, {row['bias_high']:.1f}]" if np.isfinite(row["bias_low"]) else "")
            mark = " *" if bool(row.get("low_coverage", False)) else ""
            text[i][j] = f"{row['bias_score']:.1f}{mark}{ci}" if np.isfinite(row["bias_score"]) else "-"
        image = ax.imshow(grid, cmap="RdBu_r", vmin=-limit, vmax=limit, aspect="auto")
        for i in range(len(categories)):
            for j in range(len(collections)):
                ax.text(j, i, text[i][j], ha="center", va="center", fontsize=8)
        ax.set_xticks(range(len(collections)), collections, rotation=20, ha="right")
        ax.set_yticks(range(len(categories)), categories)
        ax.set_title(title)
    fig.colorbar(image, ax=axes[0].tolist(), label="bias score (0: none; 100: every non-UNKNOWN answer biased)")
    return image_html(save_figure(fig, out, "bbq_bias.png", rect=(0, 0, 0.88, 1)))


def accuracy_figure(table: pd.DataFrame, labels: pd.Series, out: Path) -> str:
    """Accuracy per category and collection with its interval, a panel per context condition."""
    if table.empty or table["accuracy"].notna().sum() == 0:
        return nothing_to_show("BBQ accuracy", "no scored examples")
    collections = list(dict.fromkeys(labels))
    categories = sorted(c for c in table["category"].unique() if c != ALL) + ([ALL] if (table["category"] == ALL)
                                                                               .any() else [])
    fig, axes = plt.subplots(1, 2, figsize=(10, 0.35 * len(categories) + 2.2), sharey=True, squeeze=False)
    for ax, (condition, title) in zip(axes[0], CONDITIONS):
        part = table[table["context_condition"] == condition]
        for j, collection in enumerate(collections):
            rows = part[labels.loc[part.index] == collection].set_index("category").reindex(categories)
            y = np.arange(len(categories)) + (j - (len(collections) - 1) / 2) * 0.8 / max(1, len(collections))
            # the interval from its own ends: a bootstrap interval need not contain the point (an error bar would)
            line = ax.plot(rows["accuracy"], y, "o", label=collection)[0]
            ax.hlines(y, rows["accuracy_low"], rows["accuracy_high"], color=line.get_color(), lw=1.2)
        ax.set_yticks(range(len(categories)), categories)
        ax.set_xlim(-0.02, 1.02)
        ax.set_xlabel("accuracy (expected share of gold answers)")
        ax.set_title(title.split(" (")[0])
        ax.axvline(1 / 3, color="#999", lw=0.8, ls=":")
    axes[0][0].invert_yaxis()
    axes[0][1].legend(fontsize=8)
    return image_html(save_figure(fig, out, "bbq_accuracy.png"))


def write_report(tables: dict[str, pd.DataFrame], out: Path, db: str, model_table: pd.DataFrame | None = None
                 ) -> Path:
    """Write out/index.html and its figures (see the module docstring)."""
    table = tables["bbq"]
    intro = ("BBQ (Parrish et al., Findings of ACL 2022). Bias score: s_DIS = 100 (2 n_biased / n_non-UNKNOWN - 1) "
             "in disambiguated contexts, s_AMB = (1 - accuracy) s_DIS in ambiguous ones, from expected counts of the "
             "answer probabilities (the argmax versions in the table); 0 is no bias, positive scores lean towards "
             "the targeted social bias. Brackets: 95% bootstrap intervals over the templates of a category; * marks "
             "a cell resting on low coverage (few examples scored, or a low share of valid answers).")
    parts = start_page(out, "BBQ: bias in question answering", db, intro)
    labels = _labels(table, model_table) if not table.empty else pd.Series(dtype=str)
    parts.append("<h2>Bias scores</h2>" + bias_figure(table, labels, out))
    parts.append("<h2>Accuracy</h2>" + accuracy_figure(table, labels, out))
    shown = table.assign(collection=labels) if not table.empty else table
    parts.append(f"<h2>Table</h2><p class=\"note\">{html.escape(str(len(table)))} rows.</p>" + table_html(shown))
    return write_page(out, "biaslab BBQ report", parts)
