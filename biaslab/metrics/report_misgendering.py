"""HTML report of the misgendering meta-evaluation: correctness per method and pronoun, agreement between the
methods, Beta fits of per-instance disagreement, generation quality, and human annotation when present. One
section per model."""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.ticker import FormatStrFormatter, LogLocator, NullFormatter

from .html_report import plt, save_figure, table_html, write_page

PRONOUNS = ("he", "she", "they", "xe")


def _correctness_figure(table: pd.DataFrame, out: Path, slug: str) -> str:
    """Bars of correctness per pronoun: one group per (dataset, method, context), 95% Wilson intervals."""
    label = table["dataset"] + " " + table["method"] + " " + table["context"]
    several = table.groupby(["dataset", "method"])["setting"].transform("nunique") > 1
    series = table.assign(series=label.where(~several, label + " [" + table["setting"] + "]"))
    names = sorted(series["series"].unique())
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(names) + 3), 3.6))
    width = 0.8 / max(1, len(PRONOUNS))
    for p_index, pronoun in enumerate(PRONOUNS):
        rows = series[series["declared"] == pronoun].set_index("series").reindex(names)
        x = np.arange(len(names)) + p_index * width
        err = np.vstack([rows["correct"] - rows["ci_low"], rows["ci_high"] - rows["correct"]])
        ax.bar(x, rows["correct"], width, yerr=np.nan_to_num(err), capsize=2, label=pronoun)
    ax.set_xticks(np.arange(len(names)) + 0.4 - width / 2)
    ax.set_xticklabels(names, rotation=30, ha="right", fontsize=8)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("correctness")
    ax.legend(title="declared", fontsize=8)
    return save_figure(fig, out, f"{slug}_correctness.png")


def _beta_figure(table: pd.DataFrame, out: Path, slug: str) -> str:
    """(alpha, beta) of the disagreement Beta fit per dataset and pronoun (log axes)."""
    fig, ax = plt.subplots(figsize=(5, 4))
    ok = table.dropna(subset=["alpha", "beta"])
    for dataset, group in ok.groupby("dataset"):
        ax.scatter(group["alpha"], group["beta"], label=dataset)
        for _, row in group.iterrows():
            ax.annotate(row["declared"], (row["alpha"], row["beta"]), fontsize=8)
    if not ok.empty:
        ax.set_xscale("log")
        ax.set_yscale("log")
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
            axis.set_major_formatter(FormatStrFormatter("%g"))
            axis.set_minor_formatter(NullFormatter())
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no defined Beta fit", ha="center", transform=ax.transAxes)
    ax.set_xlabel("alpha")
    ax.set_ylabel("beta")
    return save_figure(fig, out, f"{slug}_beta.png")


def write_report(tables: dict[str, pd.DataFrame], out: Path, db: str) -> Path:
    """Write out/index.html (and its figures) from `misgendering_report` tables."""
    out.mkdir(parents=True, exist_ok=True)
    parts = [f"<h1>Misgendering: probability- vs generation-based evaluation</h1><p>Warehouse: {html.escape(db)}. "
             "Generation correctness maps continuations without a pronoun to correct (the paper's automatic "
             "metric); the three outcomes are shown separately.</p>"]
    correctness = tables["correctness"]
    for model_key in sorted(correctness["model_key"].unique()):
        slug = f"m{model_key[:8]}"
        parts.append(f"<h2>Model {html.escape(model_key)}</h2>")
        mine = {name: frame[frame["model_key"] == model_key].drop(columns=["model_key"])
                for name, frame in tables.items() if not name.startswith("_") and "model_key" in frame.columns}
        if not mine["correctness"].empty:
            parts.append(f"<img src='{_correctness_figure(mine['correctness'], out, slug)}' alt='correctness'>")
        parts.append("<h3>Correctness</h3>" + table_html(mine["correctness"]))
        parts.append("<h3>Agreement between methods (all samples)</h3>" + table_html(mine["agreement"]))
        if mine["disagreement_beta"].empty:
            parts.append("<h3>Per-instance disagreement</h3><p>No instance has evidence from both methods.</p>")
        else:
            parts.append("<h3>Per-instance disagreement, Beta method of moments</h3>"
                         f"<img src='{_beta_figure(mine['disagreement_beta'], out, slug)}' alt='beta fits'>"
                         + table_html(mine["disagreement_beta"]))
        parts.append("<h3>Instance-level spread of correctness</h3>" + table_html(mine["instance_std"]))
        parts.append("<h3>Generations: repetition rate and no-pronoun rate</h3>"
                     + table_html(mine["generation_quality"]))
    for name in ("annotation_vs_auto", "annotator_agreement"):
        if name in tables:
            parts.append(f"<h2>{name.replace('_', ' ')}</h2>" + table_html(tables[name]))
    return write_page(out, "biaslab misgendering report", parts)
