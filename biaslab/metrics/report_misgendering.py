"""HTML report of the misgendering meta-evaluation: correctness per method and pronoun, agreement between the
methods, Beta fits of per-instance disagreement, generation quality, and human annotation when present. One
section per model."""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.ticker import FormatStrFormatter, LogLocator, NullFormatter

from .html_report import (MIN_POINTS, image_html, nothing_to_show, plt, save_figure, section_title, table_html,
                          write_page)

PRONOUNS = ("he", "she", "they", "xe")


def _correctness_figure(table: pd.DataFrame, out: Path, slug: str) -> str:
    """Bars of correctness per pronoun: one group per (dataset, method, context), 95% Wilson intervals, n over each
    bar; or, with fewer than MIN_POINTS units in total, the sentence saying so."""
    total = int(table["n"].sum()) if len(table) else 0
    if total < MIN_POINTS or table["correct"].isna().all():
        return nothing_to_show("correctness per pronoun", f"{total} scored units; a figure needs at least "
                               f"{MIN_POINTS}")
    label = table["dataset"] + " " + table["method"] + " " + table["context"]
    several = table.groupby(["dataset", "method"])["setting"].transform("nunique") > 1
    series = table.assign(series=label.where(~several, label + " [" + table["setting"] + "]"))
    names = sorted(series["series"].unique())
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(names) + 3), 3.8))
    width = 0.8 / max(1, len(PRONOUNS))
    for p_index, pronoun in enumerate(PRONOUNS):
        rows = series[series["declared"] == pronoun].set_index("series").reindex(names)
        x = np.arange(len(names)) + p_index * width
        err = np.vstack([rows["correct"] - rows["ci_low"], rows["ci_high"] - rows["correct"]])
        ax.bar(x, rows["correct"], width, yerr=np.nan_to_num(err), capsize=2, label=pronoun)
        for xi, height, count in zip(x, rows["correct"], rows["n"]):
            if np.isfinite(height):
                ax.annotate(f"{int(count)}", (xi, 1.0), ha="center", fontsize=6)
    ax.set_xticks(np.arange(len(names)) + 0.4 - width / 2)
    ax.set_xticklabels(names, rotation=30, ha="right", fontsize=8)
    ax.set_ylim(0, 1.08)
    ax.set_xlabel("dataset, method, context (numbers at the top: n per bar)")
    ax.set_ylabel("correctness")
    ax.set_title(f"n = {total} scored units (candidates' stimuli or continuations)", fontsize=9)
    ax.legend(title="declared", fontsize=8)
    return image_html(save_figure(fig, out, f"{slug}_correctness.png"))


def _beta_figure(table: pd.DataFrame, out: Path, slug: str) -> str:
    """(alpha, beta) of the disagreement Beta fit per dataset and pronoun (log axes), n instances per point; or the
    sentence saying why there is nothing to show."""
    ok = table.dropna(subset=["alpha", "beta"])
    if ok.empty:
        return nothing_to_show("Beta fits of per-instance disagreement", "no defined Beta fit (it needs at least 2 "
                               "instances with a non-zero variance of disagreement)")
    fig, ax = plt.subplots(figsize=(5.5, 4.2))
    for dataset, group in ok.groupby("dataset"):
        ax.scatter(group["alpha"], group["beta"], label=dataset)
        for _, row in group.iterrows():
            ax.annotate(f"{row['declared']} (n={int(row['instances'])})", (row["alpha"], row["beta"]), fontsize=7)
    ax.set_xscale("log")
    ax.set_yscale("log")
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        axis.set_major_formatter(FormatStrFormatter("%g"))
        axis.set_minor_formatter(NullFormatter())
    ax.legend(fontsize=8)
    ax.set_title(f"n = {int(ok['instances'].sum())} instances", fontsize=9)
    ax.set_xlabel("alpha")
    ax.set_ylabel("beta")
    return image_html(save_figure(fig, out, f"{slug}_beta.png"))


def write_report(tables: dict[str, pd.DataFrame], out: Path, db: str,
                 model_table: pd.DataFrame | None = None) -> Path:
    """Write out/index.html (and its figures) from `misgendering_report` tables.

    Parameters
    ----------
    tables : `misgendering_report` output.
    out : output folder (created).
    db : the warehouse path, shown on the page.
    model_table : `catalog.models(...)` executed, to name models; None names them by key.
    """
    out.mkdir(parents=True, exist_ok=True)
    parts = [f"<h1>Misgendering: probability- vs generation-based evaluation</h1><p>Warehouse: {html.escape(db)}. "
             "Generation correctness maps continuations without a pronoun to correct (the paper's automatic "
             "metric); the three outcomes are shown separately.</p>"]
    correctness = tables["correctness"]
    for model_key in sorted(correctness["model_key"].unique()):
        slug = f"m{model_key[:8]}"
        settings = sorted(set(correctness.loc[correctness["model_key"] == model_key, "setting"].astype(str)))
        parts.append(section_title(model_key, model_table, "settings: " + "; ".join(settings)))
        mine = {name: frame[frame["model_key"] == model_key].drop(columns=["model_key"])
                for name, frame in tables.items() if not name.startswith("_") and "model_key" in frame.columns}
        parts.append(_correctness_figure(mine["correctness"], out, slug))
        parts.append("<h3>Correctness</h3>" + table_html(mine["correctness"]))
        parts.append("<h3>Agreement between methods (all samples)</h3>" + table_html(mine["agreement"]))
        if mine["disagreement_beta"].empty:
            parts.append("<h3>Per-instance disagreement</h3><p>No instance has evidence from both methods.</p>")
        else:
            parts.append("<h3>Per-instance disagreement, Beta method of moments</h3>"
                         + _beta_figure(mine["disagreement_beta"], out, slug)
                         + table_html(mine["disagreement_beta"]))
        parts.append("<h3>Instance-level spread of correctness</h3>" + table_html(mine["instance_std"]))
        parts.append("<h3>Generations: repetition rate and no-pronoun rate</h3>"
                     + table_html(mine["generation_quality"]))
    for name in ("annotation_vs_auto", "annotator_agreement"):
        if name in tables:
            parts.append(f"<h2>{name.replace('_', ' ')}</h2>" + table_html(tables[name]))
    return write_page(out, "biaslab misgendering report", parts)
