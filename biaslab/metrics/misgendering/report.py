"""HTML report of the misgendering meta-evaluation: the Beta fits of all models on one plot per dataset (the paper's
Beta figures), then one section per model (correctness per method and pronoun, agreement between the methods with
the paper's +- terms, Beta fits of per-instance disagreement, generation quality), and human annotation when
present (the label breakdown, the paper's Figure 7, and human-vs-automatic agreement per cell)."""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.ticker import FormatStrFormatter, LogLocator, NullFormatter

from ..html_report import (MIN_POINTS, image_html, nothing_to_show, plt, save_figure, section_title, start_page,
                           table_html, write_page)

PRONOUNS = ("he", "she", "they", "xe")
#: context -> panel title of the paper's Beta figures ("Prob vs. Pre-[MASK] Gen")
CONTEXT_TITLES = {"pre": "Prob vs. Pre-[MASK] Gen", "post": "Prob vs. Post-[MASK] Gen", "prompt": "Prob vs. Gen"}
PM_NOTE = ("<p>+- terms. <b>agreement</b> (all continuations): raw_agreement_sem = standard error of the mean over "
           "instances of the per-instance agreement share; cohen_kappa_pm, mcc_pm = 1.96 x the delete-one-instance "
           "jackknife standard error. <b>agreement_first_sample</b> (the paper's tables: one pair per instance, its "
           "first continuation): raw agreement +- scipy.stats.sem, Cohen's kappa +- 1.96 x its asymptotic standard "
           "error (statsmodels cohens_kappa), MCC with the Fisher 95% interval of Pearson's r.</p>")


def _correctness_figure(table: pd.DataFrame, out: Path, slug: str) -> str:
    """Bars of correctness per declared pronoun family (every family the table holds: the paper's he, she, they, xe
    first, then a user study's own, e.g. female / male): one group per (dataset, method, context), 95% Wilson
    intervals, n over each bar; or, with fewer than MIN_POINTS units in total, the sentence saying so."""
    total = int(table["n"].sum()) if len(table) else 0
    if total < MIN_POINTS or table["correct"].isna().all():
        return nothing_to_show("correctness per pronoun", f"{total} scored units; a figure needs at least "
                               f"{MIN_POINTS}")
    label = table["dataset"] + " " + table["method"] + " " + table["context"]
    several = table.groupby(["dataset", "method"])["setting"].transform("nunique") > 1
    series = table.assign(series=label.where(~several, label + " [" + table["setting"] + "]"))
    names = sorted(series["series"].unique())
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(names) + 3), 3.8))
    present = set(table["declared"].dropna())
    families = [p for p in PRONOUNS if p in present] + sorted(present - set(PRONOUNS))
    width = 0.8 / max(1, len(families))
    for p_index, pronoun in enumerate(families):
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
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    markers = dict(zip(PRONOUNS, "os^D"))  # pronoun -> marker, dataset -> colour; each point named in the legend
    for d_index, (dataset, group) in enumerate(ok.groupby("dataset")):
        for _, row in group.iterrows():
            context = f" {row['context']}" if isinstance(row.get("context"), str) else ""
            ax.scatter([row["alpha"]], [row["beta"]], color=f"C{d_index}", marker=markers.get(row["declared"], "x"),
                       label=f"{dataset} · {row['declared']}{context} (n={int(row['instances'])})")
    ax.set_xscale("log")
    ax.set_yscale("log")
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        axis.set_major_formatter(FormatStrFormatter("%g"))
        axis.set_minor_formatter(NullFormatter())
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.set_title(f"n = {int(ok['instances'].sum())} instances", fontsize=9)
    ax.set_xlabel("alpha")
    ax.set_ylabel("beta")
    return image_html(save_figure(fig, out, f"{slug}_beta.png"))


def _series_labels(table: pd.DataFrame, model_table: pd.DataFrame | None) -> pd.Series:
    """Model name per row (from `model_table`, else the key), with the setting appended where one model has several
    settings in `table`."""
    from ...warehouse.catalog import model_names_of

    if model_table is None:
        names = table["model_key"].astype(str)
    else:
        names = pd.Series(model_names_of(table["model_key"], model_table)["model_name"].to_numpy(), index=table.index)
    several = table.groupby("model_key")["setting"].transform("nunique") > 1
    return names.where(~several, names + " [" + table["setting"].astype(str) + "]")


def beta_figure(table: pd.DataFrame, dataset: str, model_table: pd.DataFrame | None = None):
    """The paper's Beta figure for one dataset (upstream `measure-disagreement.py`, e.g. `RUFF-beta.pdf`): one panel
    per context (Pre-[MASK], Post-[MASK]; TANGO: one), every model and pronoun a point at (beta, alpha) of its
    method-of-moments fit, colour = model (legend with model names), marker = the pronoun's letter, dashed lines
    alpha = beta, alpha = 1 and beta = 1. Axes start at -0.1 and end at max(3, 1.05 x the largest parameter) (the
    paper fixes 3, which could hide a point). Returns (figure, caption) or (None, reason) when no fit is defined."""
    rows = table[table["dataset"] == dataset]
    ok = rows.dropna(subset=["alpha", "beta"])
    if ok.empty:
        return None, (f"no defined Beta fit for {dataset} (a fit needs at least 2 instances and a variance of "
                      "per-instance disagreement strictly between 0 and mean (1 - mean))")
    ok = ok.assign(series=_series_labels(ok, model_table))
    contexts = [c for c in ("pre", "post", "prompt", "template") if c in set(ok["context"])]
    contexts += sorted(set(ok["context"]) - set(contexts))
    series = sorted(ok["series"].unique())
    cmap = plt.get_cmap("tab10" if len(series) <= 10 else "tab20")
    colors = {name: cmap(i % cmap.N) for i, name in enumerate(series)}
    top = max(3.0, 1.05 * float(np.nanmax(ok[["alpha", "beta"]].to_numpy())))
    fig, axes = plt.subplots(1, len(contexts), figsize=(4.6 * len(contexts) + 2.2, 4.6), squeeze=False,
                             sharex=True, sharey=True)
    for ax, context in zip(axes[0], contexts):
        mine = ok[ok["context"] == context]
        for row in mine.itertuples(index=False):
            ax.scatter(row.beta, row.alpha, color=colors[row.series], marker=f"${row.declared}$",
                       s=60 + 40 * len(str(row.declared)))
        ident = [-0.1, top]
        for xs, ys in ((ident, ident), (ident, [1.0, 1.0]), ([1.0, 1.0], ident)):
            ax.plot(xs, ys, linestyle="--", color="k", linewidth=0.8)
        ax.set_xlim(-0.1, top)
        ax.set_ylim(-0.1, top)
        ax.set_box_aspect(1)
        ax.set_xlabel("β (Beta fit of per-instance disagreement)")
        ax.set_ylabel("α")
        ax.set_title(f"{CONTEXT_TITLES.get(context, context)}\nn = {int(mine['instances'].sum())} instances, "
                     f"{len(mine)} fits", fontsize=9)
    handles = [plt.Line2D([], [], marker="s", color=colors[name], linestyle="none") for name in series]
    pronouns = [p for p in PRONOUNS if p in set(ok["declared"])] + sorted(set(ok["declared"]) - set(PRONOUNS))
    handles += [plt.Line2D([], [], marker=f"${p}$", color="k", linestyle="none", markersize=10) for p in pronouns]
    axes[0][-1].legend(handles, [*series, *pronouns], fontsize=8, framealpha=0.75, loc="upper left",
                       bbox_to_anchor=(1.02, 1.0))
    fig.suptitle(f"{dataset}: Beta fits of per-instance disagreement, all models", fontsize=10)
    left_out = rows[rows["alpha"].isna()]
    caption = ("" if left_out.empty else "Not plotted (undefined fit): " + "; ".join(
        f"{m} {d} {c}" for m, d, c in zip(_series_labels(left_out, model_table), left_out["declared"],
                                          left_out["context"])) + ".")
    return fig, caption


def _beta_all_models(table: pd.DataFrame, out: Path, model_table: pd.DataFrame | None) -> list[str]:
    parts = ["<h2>Beta fits of per-instance disagreement, all models (as the paper)</h2>"]
    if table.empty:
        return parts + ["<p>No instance has evidence from both methods.</p>"]
    for dataset in sorted(table["dataset"].unique()):
        fig, caption = beta_figure(table, dataset, model_table)
        if fig is None:
            parts.append(nothing_to_show(f"Beta fits for {dataset}", caption))
        else:
            parts.append(image_html(save_figure(fig, out, f"beta_all_{dataset}.png"))
                         + (f"<p>{html.escape(caption)}</p>" if caption else ""))
    return parts


def _with_names(frame: pd.DataFrame, model_table: pd.DataFrame | None) -> pd.DataFrame:
    from ...warehouse.catalog import with_model_names

    return frame if model_table is None else with_model_names(frame, model_table)


def label_figure(labels: pd.DataFrame, model_table: pd.DataFrame | None = None):
    """The paper's Figure 7: human label counts per model and pronoun, stacked by label (correct, misgendering,
    no_pronoun, plural_they), one panel per dataset and context, summed over annotators. (figure, None) or
    (None, reason)."""
    from .annotations import LABELS

    if labels.empty or int(labels["n"].sum()) == 0:
        return None, "no imported annotation"
    frame = labels.assign(series=_series_labels(labels.assign(setting=""), model_table))
    cols = [f"n_{label}" for label in LABELS]
    panels = sorted(frame.groupby(["dataset", "context"]).groups)
    fig, axes = plt.subplots(1, len(panels), figsize=(max(5.0, 0.5 * len(frame) + 3) * len(panels) / 1.5, 4.2),
                             squeeze=False)
    for ax, (dataset, context) in zip(axes[0], panels):
        mine = frame[(frame["dataset"] == dataset) & (frame["context"] == context)]
        summed = mine.groupby(["series", "declared"], sort=True)[cols + ["n"]].sum()
        names = [f"{s} · {d}" for s, d in summed.index]
        bottom = np.zeros(len(summed))
        for col, label in zip(cols, LABELS):
            ax.bar(np.arange(len(summed)), summed[col].to_numpy(), bottom=bottom, label=label)
            bottom += summed[col].to_numpy()
        ax.set_xticks(np.arange(len(summed)))
        ax.set_xticklabels(names, rotation=45, ha="right", fontsize=7)
        ax.set_xlabel("model · declared pronoun")
        ax.set_ylabel("annotated continuations")
        ax.set_title(f"{dataset} {context}: n = {int(summed['n'].sum())}", fontsize=9)
    axes[0][-1].legend(fontsize=8, title="human label")
    return fig, None


def write_report(tables: dict[str, pd.DataFrame], out: Path, db: str,
                 model_table: pd.DataFrame | None = None) -> Path:
    """Write out/index.html (and its figures) from `misgendering_report` tables.

    Parameters
    ----------
    tables : `misgendering_report` output.
    out, db : the report folder and the warehouse path (as `html_report.start_page`).
    model_table : `catalog.models(...)` executed, to name models; None names them by key.
    """
    parts = start_page(out, "Misgendering: probability- vs generation-based evaluation", db,
                       "Generation correctness maps continuations without a pronoun to correct (the paper's automatic "
                       "metric); the three outcomes are shown separately.")
    correctness = tables["correctness"]
    parts += _beta_all_models(tables["disagreement_beta"], out, model_table)
    for model_key in sorted(correctness["model_key"].unique()):
        slug = f"m{model_key[:8]}"
        settings = sorted(set(correctness.loc[correctness["model_key"] == model_key, "setting"].astype(str)))
        parts.append(section_title(model_key, model_table, "settings: " + "; ".join(settings)))
        mine = {name: frame[frame["model_key"] == model_key].drop(columns=["model_key"])
                for name, frame in tables.items() if not name.startswith("_") and "model_key" in frame.columns}
        parts.append(_correctness_figure(mine["correctness"], out, slug))
        parts.append("<h3>Correctness</h3>" + table_html(mine["correctness"]))
        parts.append("<h3>Agreement between methods (all samples)</h3>" + PM_NOTE + table_html(mine["agreement"]))
        if "agreement_first_sample" in mine:
            parts.append("<h3>Agreement between methods, the paper's tables (first continuation per instance)</h3>"
                         + table_html(mine["agreement_first_sample"]))
        if mine["disagreement_beta"].empty:
            parts.append("<h3>Per-instance disagreement</h3><p>No instance has evidence from both methods.</p>")
        else:
            parts.append("<h3>Per-instance disagreement, Beta method of moments</h3>"
                         + _beta_figure(mine["disagreement_beta"], out, slug)
                         + table_html(mine["disagreement_beta"]))
        parts.append("<h3>Instance-level spread of correctness</h3>" + table_html(mine["instance_std"]))
        parts.append("<h3>Generations: repetition rate and no-pronoun rate</h3>"
                     + table_html(mine["generation_quality"]))
    if "annotation_labels" in tables:
        fig, reason = label_figure(tables["annotation_labels"], model_table)
        parts.append("<h2>Human annotation: label breakdown (the paper's Figure 7)</h2>"
                     + (nothing_to_show("label breakdown", reason) if fig is None
                        else image_html(save_figure(fig, out, "annotation_labels.png")))
                     + table_html(_with_names(tables["annotation_labels"], model_table)))
    for name, title in (("annotation_vs_auto_cells", "Human vs automatic per cell (raw agreement +- SEM, as the "
                                                     "paper; kappa +- 1.96 x asymptotic SE)"),
                        ("annotation_vs_auto", "Human vs automatic per annotator"),
                        ("annotator_agreement", "Agreement between annotators")):
        if name in tables:
            parts.append(f"<h2>{html.escape(title)}</h2>" + table_html(_with_names(tables[name], model_table)))
    return write_page(out, "biaslab misgendering report", parts)
