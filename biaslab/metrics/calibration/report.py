"""HTML report of the calibration study (Sabir et al.): metric tables, reliability diagrams with per-bin counts in
equal-width and equal-mass bins (Figure 5), post-hoc calibration as a table and a figure (Figure 3) with the
reliability diagrams after calibration (Figure 4), the sample-size ablation (Table 7), the GenderLex variants,
WinoQueer per identity group (Table 4) and the size / distillation % change of declared model pairs (Tables 6, 11).

Every figure and table that bins a confidence shows the paper's convention (male-class probability p(male) against
the gold label, equal-width bins) first and the top-label convention (max(p, 1-p) against correctness), labelled,
next to it."""

from __future__ import annotations

import html
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from ...warehouse.catalog import with_model_names  # noqa: E402
from .stats import CONFIDENCE_ORDER, MALE_CLASS, TOP_LABEL, UNCALIBRATED  # noqa: E402
from ..html_report import (MIN_POINTS, image_html, nothing_to_show, save_figure, section_title, start_page, table_html,
                           write_page)

#: How each confidence is labelled on figures.
CONFIDENCE_TITLE = {MALE_CLASS: "male_class (paper): p(male) vs gold", TOP_LABEL: "top_label: max(p, 1-p) vs correct"}
AXIS_LABEL = {MALE_CLASS: "confidence p(male)", TOP_LABEL: "confidence max(p, 1-p)"}
TARGET_LABEL = {MALE_CLASS: "frequency of gold male", TOP_LABEL: "accuracy"}
BINNING_TITLE = {"equal_width": "equal-width bins", "equal_mass": "equal-mass bins"}
KEYS = ["model_key", "scheme", "dataset"]


def _select(frame: pd.DataFrame, model_key: str, scheme: str, dataset: str) -> pd.DataFrame:
    """The rows of one (model, scheme, dataset); an empty frame stays empty."""
    if frame is None or frame.empty:
        return pd.DataFrame()
    return frame[(frame["model_key"] == model_key) & (frame["scheme"] == scheme) & (frame["dataset"] == dataset)]


def _draw_reliability(top, bottom, part: pd.DataFrame, confidence: str, title: str) -> None:
    """One reliability diagram: mean target vs mean confidence per bin (bars at the bins, the observed curve and the
    diagonal), the per-bin counts underneath when ``bottom`` is given."""
    filled = part[part["count"] > 0]
    lower, upper = part["lower"].to_numpy(float), part["upper"].to_numpy(float)
    centers, width = (lower + upper) / 2, np.nan_to_num(upper - lower)
    top.bar(centers, part["accuracy"].fillna(0), width=np.maximum(width, 0.01) * 0.9, alpha=0.6,
            label="bin mean target")
    top.plot([0, 1], [0, 1], "k--", lw=0.8, label="perfect calibration")
    top.plot(filled["mean_conf"], filled["accuracy"], "o-", color="C3", label="observed")
    top.set_title(f"{title}, n = {int(part['count'].sum())} pairs", fontsize=8)
    top.set_xlim(0, 1)
    top.set_ylim(0, 1)
    top.set_ylabel(TARGET_LABEL[confidence], fontsize=8)
    if bottom is None:
        top.set_xlabel(AXIS_LABEL[confidence], fontsize=8)
        return
    bottom.bar(centers, part["count"], width=np.maximum(width, 0.01) * 0.9, color="grey")
    bottom.set_xlabel(AXIS_LABEL[confidence], fontsize=8)
    bottom.set_ylabel("count", fontsize=8)


def reliability_figure(bins: pd.DataFrame, title: str, out: Path, name: str, binning: str = "equal_width") -> str:
    """Reliability diagrams of one (model, scheme, dataset) in one binning: the paper's male-class confidence (left)
    and the top-label confidence (right), accuracy vs mean confidence per bin with the per-bin counts as bars
    underneath (equal width as the paper's reliability diagrams; equal mass as its Figure 5); or, when fewer than
    MIN_POINTS items were binned, the sentence saying so.

    Parameters
    ----------
    bins : `reliability` rows of one (model, scheme, dataset).
    title : the figure's title (the dataset).
    out, name : where to write the PNG.
    binning : "equal_width" or "equal_mass".

    Returns
    -------
    HTML (an image or the "nothing to show" sentence).
    """
    part_bins = bins[bins["binning"] == binning] if len(bins) else bins
    n = int(part_bins[part_bins["confidence"] == MALE_CLASS]["count"].sum()) if len(part_bins) else 0
    what = f"reliability diagram, {BINNING_TITLE[binning]} ({title})"
    if n < MIN_POINTS:
        return nothing_to_show(what, f"{n} scored pairs; a figure needs at least {MIN_POINTS}")
    fig, (top, bottom) = plt.subplots(2, 2, figsize=(9, 5.2), sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    for col, confidence in enumerate(CONFIDENCE_ORDER):
        part = part_bins[part_bins["confidence"] == confidence].sort_values("bin")
        _draw_reliability(top[col], bottom[col], part, confidence,
                          f"{title}, {BINNING_TITLE[binning]}\n{CONFIDENCE_TITLE[confidence]}")
    top[0].legend(fontsize=7)
    return image_html(save_figure(fig, out, name))


#: why a post-hoc figure is empty
NO_CALIBRATOR = "no calibrator was fitted (needs at least 20 pairs with both gold labels)"


def post_hoc_figure(post_hoc: pd.DataFrame, title: str, out: Path, name: str) -> str:
    """The paper's post-hoc calibration figure (Figure 3): ECE on the held-out half before and after each calibrator,
    the paper's male-class ECE (left) and the top-label ECE (right), equal-width bins.

    Parameters
    ----------
    post_hoc : `post_hoc` rows of one (model, scheme, dataset).
    title : the figure's title (the dataset).
    out, name : where to write the PNG.

    Returns
    -------
    HTML (an image, or the sentence saying why there is none).
    """
    if post_hoc.empty:
        return nothing_to_show(f"post-hoc calibration ({title})", NO_CALIBRATOR)
    n_test = int(post_hoc["n_test"].iloc[0])
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.2), sharey=True)
    x = np.arange(len(post_hoc))
    for ax, confidence in zip(axes, CONFIDENCE_ORDER):
        column = f"ece_{confidence}_equal_width"
        ax.bar(x - 0.2, post_hoc[f"{column}_before"], width=0.4, color="grey", label="before")
        ax.bar(x + 0.2, post_hoc[f"{column}_after"], width=0.4, color="C0", label="after")
        ax.set_xticks(x, post_hoc["calibrator"], fontsize=8)
        ax.set_xlabel("calibrator (fitted on the other half)", fontsize=8)
        ax.set_title(f"{title}, n = {n_test} held-out pairs\n{CONFIDENCE_TITLE[confidence]}", fontsize=8)
    axes[0].set_ylabel("ECE (equal-width bins)", fontsize=8)
    axes[0].legend(fontsize=7)
    return image_html(save_figure(fig, out, name))


def post_hoc_reliability_figure(bins: pd.DataFrame, title: str, out: Path, name: str) -> str:
    """Reliability diagrams after post-hoc calibration (the paper's Figure 4): one column per calibrator (first
    "none", the same held-out items uncalibrated), the paper's male-class confidence in the first row and the
    top-label confidence in the second, equal-width bins.

    `bins` are the `reliability_post_hoc` rows of one (model, scheme, dataset); the other parameters and the
    returned HTML are those of `post_hoc_figure`.
    """
    if bins.empty:
        return nothing_to_show(f"reliability after calibration ({title})", NO_CALIBRATOR)
    width = bins[bins["binning"] == "equal_width"]
    calibrators = list(dict.fromkeys(width["calibrator"]))
    fig, axes = plt.subplots(2, len(calibrators), figsize=(2.4 * len(calibrators), 6.2), squeeze=False,
                             sharex=True, sharey=True)
    for col, calibrator in enumerate(calibrators):
        for row, confidence in enumerate(CONFIDENCE_ORDER):
            part = width[(width["calibrator"] == calibrator) & (width["confidence"] == confidence)].sort_values("bin")
            label = "uncalibrated" if calibrator == UNCALIBRATED else calibrator
            _draw_reliability(axes[row][col], None, part, confidence, f"{label}: {confidence}")
            if col:  # shared axes: the labels once, on the left column
                axes[row][col].set_ylabel("")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=9, frameon=False)
    fig.suptitle(f"{title}: held-out half after post-hoc calibration, equal-width bins", fontsize=10)
    return image_html(save_figure(fig, out, name, rect=(0, 0.06, 1, 1)))  # room for the legend under the panels


#: Rows of the metrics table shown again, side by side, in the "Calibration by gender" table.
GENDER_ROWS = ("gender_ece_top_label_equal_width", "ece_top_label_equal_width_predicted_male",
               "ece_top_label_equal_width_predicted_female", "gender_ece_gap_top_label_equal_width",
               "cc_ece_top_label_equal_width", "ece_top_label_equal_width_gold_male",
               "ece_top_label_equal_width_gold_female")


def metrics_html(group: pd.DataFrame) -> str:
    """The metric rows of one (model, scheme, dataset); each row's `note` becomes a one-line note under the table
    (e.g. the upstream Brier convention), then the Gender-ECE / cc-ECE parts as their own small table."""
    frame = group.drop(columns=["model_key", "scheme", "dataset"])
    notes = []
    if "note" in frame.columns:
        notes = [(name, note) for name, note in zip(frame["name"], frame["note"]) if isinstance(note, str) and note]
        frame = frame.drop(columns="note")
    parts = [table_html(frame)]
    parts += [f'<p class="note"><b>{html.escape(name)}</b>: {html.escape(note)}.</p>' for name, note in notes]
    gender = frame[frame["name"].isin(GENDER_ROWS)]
    if not gender.empty:
        gender = gender.set_index("name").reindex([n for n in GENDER_ROWS if n in set(gender["name"])]).reset_index()
        parts.append("<h3>Calibration by gender (top-label ECE, equal width)</h3><p>predicted_*: the two parts of "
                     "Gender-ECE (items grouped by predicted label); gold_*: the two parts of cc-ECE (ECE by gold "
                     "gender); n = items in the group; no value = empty group.</p>" + table_html(gender))
    return "".join(parts)


def _drop_keys(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.drop(columns=[c for c in KEYS if c in frame.columns])


def winoqueer_html(frame: pd.DataFrame, model_table: pd.DataFrame | None) -> str:
    """The WinoQueer section (Table 4): one row per model, scheme, dataset and identity group, or a sentence when the
    warehouse holds no WinoQueer evidence."""
    head = ("<h2>WinoQueer calibration per identity group (Table 4)</h2><p>Gold = the stereotyped (queer-term) "
            "sentence of every pair, as the paper's code fixes every label to 1; ece_stereotype_class_equal_width "
            "(the paper's) bins p(stereotyped sentence) against it in equal-width bins (= 1 - mean_p_stereotype); "
            "the top-label ECEs are labelled, not in the paper; group = upstream Gender_ID_x, \"all\" pools the "
            "groups.</p>")
    if frame is None or frame.empty:
        return head + nothing_to_show("WinoQueer table", "the warehouse holds no scored WinoQueer pairs (collect "
                                      "`--dataset winoqueer` with the prob protocol)")
    if model_table is not None:
        frame = with_model_names(frame, model_table)
    return head + table_html(frame)


def pairs_html(frame: pd.DataFrame | None) -> str:
    """The size / distillation % change section (Tables 6 and 11): one table per pair kind, or the sentence saying
    that no model pair was declared."""
    head = ("<h2>Model pairs: size / distillation % change (Tables 6, 11)</h2><p>pct_change = 100 * (other - "
            "reference) / |reference| per metric; a positive change of an error (ECE, Brier) means the other model "
            "is worse calibrated.</p>")
    if frame is None or frame.empty:
        return head + nothing_to_show("% change table", "no model pairs declared (give --pair KIND:REFERENCE=OTHER, "
                                      "e.g. --pair size:small-model=large-model)")
    parts = [head]
    for kind, part in frame.groupby("kind", sort=False):
        parts.append(f"<h3>{html.escape(str(kind))}</h3>" + table_html(part.drop(columns="kind")))
    return "".join(parts)


def write_report(tables: dict[str, pd.DataFrame], out: Path, db: str,
                 model_table: pd.DataFrame | None = None) -> Path:
    """Write out/index.html and its figures; one section per (model, scheme, dataset), then WinoQueer, the GenderLex
    variants and the model pairs.

    Parameters
    ----------
    tables : `calibration_report_tables` output (with `reliability`, `reliability_post_hoc`; `pair_change` when
        model pairs were declared).
    out, db : the report folder and the warehouse path (as `html_report.start_page`).
    model_table : `catalog.models(...)` executed, to name models; None names them by key.
    """
    parts = start_page(out, "Calibration of pronoun probabilities", db,
                       "Confidence binned is named in every metric: male_class = p(male) vs gold (the paper's "
                       "convention, shown first), top_label = max(p, 1-p) vs correctness (Guo et al. 2017, not in the "
                       "paper).")
    metrics = tables["metrics"]
    groups = metrics.groupby(KEYS) if not metrics.empty else []
    for n, (key, group) in enumerate(groups):
        model_key, scheme, dataset = key
        parts.append(section_title(model_key, model_table, f"scheme={scheme}", prefix=f"{dataset}: "))
        rel = _select(tables["reliability"], *key)
        parts.append("<h3>Reliability diagrams (equal width, as the paper; Figure 5: equal mass)</h3>")
        parts.append(reliability_figure(rel, dataset, out, f"reliability_{n}.png"))
        parts.append(reliability_figure(rel, dataset, out, f"reliability_equal_mass_{n}.png", "equal_mass"))
        parts.append(metrics_html(group))
        post_hoc = _select(tables["post_hoc"], *key)
        parts.append("<h3>Post-hoc calibration (held-out half; table and Figure 3)</h3>")
        if not post_hoc.empty:
            parts.append(table_html(_drop_keys(post_hoc)))
        parts.append(post_hoc_figure(post_hoc, dataset, out, f"post_hoc_{n}.png"))
        parts.append("<h3>Reliability after post-hoc calibration (Figure 4)</h3>")
        parts.append(post_hoc_reliability_figure(_select(tables.get("reliability_post_hoc"), *key), dataset, out,
                                                 f"reliability_post_hoc_{n}.png"))
        ablation = _select(tables["ablation"], *key)
        if not ablation.empty:
            parts.append("<h3>Sample-size ablation (Table 7; male_class = the paper's, then top_label, on the same "
                         "subsets)</h3>" + table_html(_drop_keys(ablation)))
    parts.append(winoqueer_html(tables.get("winoqueer"), model_table))
    if not tables["genderlex_variants"].empty:
        variants = tables["genderlex_variants"]
        if model_table is not None:
            variants = with_model_names(variants, model_table)
        parts.append("<h2>GenderLex variants side by side</h2>" + table_html(variants))
    parts.append(pairs_html(tables.get("pair_change")))
    return write_page(out, "biaslab calibration report", parts)
