"""The report of `biaslab report counterfactual`: per attribute a figure of every measure (one panel each) with the
pairs of groups as rows and each collection's mean over prompts with its 95% interval, then the tables with their
coverage."""

from __future__ import annotations

import html
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ..html_report import (collection_labels, image_html, nothing_to_show, save_figure, start_page, table_html,
                           write_page)
from .stats import MEASURES, SIMILARITIES


def attribute_figure(table: pd.DataFrame, labels: pd.Series, attribute: str, out: Path, name: str) -> str:
    """One attribute: a panel per measure, the pairs of groups as rows, each collection's value and interval (the
    gaps with a line at 0, the similarities with their same-variant baseline as an open mark)."""
    part = table[table["attribute"] == attribute]
    if part.empty:
        return nothing_to_show(f"{attribute} gaps", "no answers")
    pairs = list(dict.fromkeys(part["group_a"] + " vs " + part["group_b"]))
    collections = list(dict.fromkeys(labels[part.index]))
    height = 0.4 * len(pairs) + 1.8 + 0.25 * len(collections)
    fig, axes = plt.subplots(1, len(MEASURES), figsize=(2.6 * len(MEASURES), height), sharey=True)
    for ax, measure in zip(axes, MEASURES):
        rows = part[part["measure"] == measure]
        for j, collection in enumerate(collections):
            mine = rows[labels[rows.index] == collection].assign(
                pair=lambda f: f["group_a"] + " vs " + f["group_b"]).set_index("pair").reindex(pairs)
            y = np.arange(len(pairs)) + (j - (len(collections) - 1) / 2) * 0.7 / max(1, len(collections))
            line = ax.plot(mine["value"], y, "o", ms=4, label=collection)[0]
            ax.hlines(y, mine["ci_low"], mine["ci_high"], color=line.get_color(), lw=1.1)
            if measure in SIMILARITIES:
                ax.plot(mine["baseline"], y, "o", mfc="none", color=line.get_color(), ms=5)
        if measure not in SIMILARITIES:
            ax.axvline(0, color="grey", lw=0.6)
        ax.set_title(measure, fontsize=9)
    axes[0].set_yticks(range(len(pairs)), pairs, fontsize=8)
    axes[0].invert_yaxis()
    fig.legend(*axes[0].get_legend_handles_labels(), loc="lower center", fontsize=7, frameon=False)
    fig.suptitle(f"{attribute}: gaps (a minus b) and similarities (open: same-variant baseline), 95% intervals",
                 fontsize=9)
    bottom = min(0.5, 0.25 * len(collections) / height)
    return image_html(save_figure(fig, out, name, rect=(0, bottom, 1, 0.95)))


def write_report(tables: dict[str, pd.DataFrame], out: Path, db: str, model_table: pd.DataFrame | None = None
                 ) -> Path:
    """Write out/index.html and its figures (see the module docstring)."""
    table = tables["counterfactual"]
    intro = ("Counterfactual audit (LangFair's use-case method, Bouchard 2024): each prompt's words of an attribute "
             "are swapped into every group, the model answers each variant, and the answers are compared pair by "
             "pair. Gaps: mean of group a's answers minus group b's (VADER sentiment, refusal rate, words); "
             "similarities: ROUGE-L and BLEU of a's and b's answers, against the same-variant baseline. 95% "
             "t-intervals over prompts; p: paired t-test over prompts, Holm / BH adjusted.")
    parts = start_page(out, "Counterfactual audit", db, intro)
    labels = collection_labels(table, model_table, "setting")
    for n, attribute in enumerate(dict.fromkeys(table["attribute"])):
        parts.append(f"<h2>{html.escape(attribute)}</h2>"
                     + attribute_figure(table, labels, attribute, out, f"counterfactual_{n}.png"))
    shown = table.assign(collection=labels) if not table.empty else table
    parts.append("<h2>Table</h2>" + table_html(shown))
    parts.append("<h2>Per group</h2>" + table_html(tables["counterfactual_groups"]))
    return write_page(out, "biaslab counterfactual report", parts)
