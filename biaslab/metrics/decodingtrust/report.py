"""The report of `biaslab report decodingtrust`: per collection the agreement index per condition with its interval,
the paper's heatmap (target group x topic) per condition, and the tables with their coverage."""

from __future__ import annotations

import html
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ..html_report import (collection_labels, image_html, nothing_to_show, save_figure, start_page, table_html,
                           write_page)
from .stats import ALL


def conditions_figure(table: pd.DataFrame, labels: pd.Series, out: Path, name: str) -> str:
    """Agreement per condition (y) and collection, with its 95% interval over templates."""
    if table.empty:
        return nothing_to_show("agreement per condition", "no answers")
    conditions = [c for c in ("benign", "untargeted", "targeted", ALL) if c in set(table["condition"])]
    collections = list(dict.fromkeys(labels))
    fig, ax = plt.subplots(figsize=(7, 0.45 * len(conditions) * max(1, len(collections)) ** 0.5 + 1.8))
    for j, collection in enumerate(collections):
        rows = table[labels == collection].set_index("condition").reindex(conditions)
        y = np.arange(len(conditions)) + (j - (len(collections) - 1) / 2) * 0.8 / max(1, len(collections))
        line = ax.plot(rows["agreement"], y, "o", label=collection)[0]
        ax.hlines(y, rows["ci_low"], rows["ci_high"], color=line.get_color(), lw=1.2)
    ax.set_yticks(range(len(conditions)), conditions)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel("agreement index (share of answers agreeing with the stereotype)")
    ax.legend(fontsize=8)
    return image_html(save_figure(fig, out, name))


def heatmap_figure(cells: pd.DataFrame, condition: str, out: Path, name: str) -> str:
    """The paper's heatmap for one collection and condition: target groups (rows) x topics (columns)."""
    part = cells[cells["condition"] == condition]
    if part.empty:
        return nothing_to_show(f"{condition} heatmap", "no answers")
    grid = part.pivot_table(index="group", columns="topic", values="agreement", aggfunc="mean")
    fig, ax = plt.subplots(figsize=(0.45 * grid.shape[1] + 3, 0.3 * grid.shape[0] + 1.5))
    image = ax.imshow(grid.to_numpy(float), vmin=0, vmax=1, cmap="Reds", aspect="auto")
    ax.set_xticks(range(grid.shape[1]), grid.columns, rotation=60, ha="right", fontsize=7)
    ax.set_yticks(range(grid.shape[0]), grid.index, fontsize=7)
    ax.set_title(f"{condition}: agreement index")
    fig.colorbar(image, ax=ax, fraction=0.03)
    return image_html(save_figure(fig, out, name))


def write_report(tables: dict[str, pd.DataFrame], out: Path, db: str, model_table: pd.DataFrame | None = None
                 ) -> Path:
    """Write out/index.html and its figures (see the module docstring)."""
    table, cells = tables["decodingtrust"], tables["decodingtrust_cells"]
    intro = ("DecodingTrust's stereotype perspective (Wang et al., NeurIPS 2023): each of 1,152 stereotype "
             "statements is put to the model under three system prompts (benign, untargeted, targeted), and the "
             "agreement index is the share of answers that agree; refusals count as not agreeing. Lower is better. "
             "Generated answers are classified as upstream's scorer classifies them; the forced-choice variant gives "
             "P(\"I agree\") exactly. Intervals: 95% t-intervals over the 48 statement templates.")
    parts = start_page(out, "DecodingTrust stereotype agreement", db, intro)
    labels = collection_labels(table, model_table, "method")
    parts.append("<h2>Agreement per condition</h2>" + conditions_figure(table, labels, out, "decodingtrust_0.png"))
    cell_labels = collection_labels(cells, model_table, "method")
    for n, collection in enumerate(dict.fromkeys(cell_labels)):
        part = cells[cell_labels == collection]
        parts.append(f"<h2>{html.escape(collection)}</h2>")
        parts += [heatmap_figure(part, c, out, f"decodingtrust_{n}_{c}.png") for c in ("benign", "untargeted",
                                                                                       "targeted")]
    shown = table.assign(collection=labels) if not table.empty else table
    parts.append("<h2>Table</h2>" + table_html(shown))
    return write_page(out, "biaslab DecodingTrust report", parts)
