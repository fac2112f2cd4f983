"""HTML report of the calibration study: metric tables, reliability diagrams with per-bin counts, post-hoc
calibration, sample-size ablation and the GenderLex variants."""

from __future__ import annotations

import html
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from ..warehouse.catalog import with_model_names  # noqa: E402
from .html_report import (MIN_POINTS, image_html, nothing_to_show, save_figure, section_title,  # noqa: E402
                          table_html, write_page)


def reliability_figure(bins: pd.DataFrame, title: str, out: Path, name: str) -> str:
    """Accuracy vs mean confidence per bin (equal width), with the per-bin counts as bars underneath; or, when fewer
    than MIN_POINTS items were binned, the sentence saying so.

    Parameters
    ----------
    bins : `reliability` rows of one (model, scheme, dataset).
    title : the figure's title (the dataset).
    out, name : where to write the PNG.

    Returns
    -------
    HTML (an image or the "nothing to show" sentence).
    """
    width_bins = bins[bins["binning"] == "equal_width"]
    n = int(width_bins[width_bins["confidence"] == "top_label"]["count"].sum()) if len(width_bins) else 0
    if n < MIN_POINTS:
        return nothing_to_show(f"reliability diagram ({title})", f"{n} scored pairs; a figure needs at least "
                               f"{MIN_POINTS}")
    fig, (top, bottom) = plt.subplots(2, 2, figsize=(9, 5.2), sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    for col, confidence in enumerate(("top_label", "male_class")):
        part = width_bins[width_bins["confidence"] == confidence]
        centers = (part["lower"] + part["upper"]) / 2
        width = (part["upper"] - part["lower"]).to_numpy()
        top[col].bar(centers, part["accuracy"].fillna(0), width=width * 0.9, alpha=0.6, label="accuracy")
        top[col].plot([0, 1], [0, 1], "k--", lw=0.8)
        top[col].plot(part["mean_conf"], part["accuracy"], "o-", color="C3", label="observed")
        top[col].set_title(f"{title}: {confidence}, n = {int(part['count'].sum())} pairs", fontsize=9)
        top[col].set_ylim(0, 1)
        bottom[col].bar(centers, part["count"], width=width * 0.9, color="grey")
        bottom[col].set_xlabel("confidence (top_label: max(p, 1-p); male_class: p(male))"
                               if col == 0 else "confidence p(male)")
        bottom[col].set_ylabel("count")
    top[0].set_ylabel("accuracy / frequency")
    top[1].set_ylabel("frequency of gold male")
    top[0].legend(fontsize=7)
    return image_html(save_figure(fig, out, name))


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


def write_report(tables: dict[str, pd.DataFrame], out: Path, db: str,
                 model_table: pd.DataFrame | None = None) -> Path:
    """Write out/index.html and its reliability diagrams; one section per (model, scheme, dataset).

    Parameters
    ----------
    tables : `calibration_report_tables` output (with `reliability`).
    out : output folder (created).
    db : the warehouse path, shown on the page.
    model_table : `catalog.models(...)` executed, to name models; None names them by key.
    """
    out.mkdir(parents=True, exist_ok=True)
    parts = [f"<h1>Calibration of pronoun probabilities</h1><p>Warehouse: {html.escape(db)}. Confidence binned is "
             "named in every metric (top_label = max(p, 1-p) vs correctness; male_class = p(male) vs gold).</p>"]
    metrics = tables["metrics"]
    for n, (key, group) in enumerate(metrics.groupby(["model_key", "scheme", "dataset"])):
        model_key, scheme, dataset = key
        parts.append(section_title(model_key, model_table, f"scheme={scheme}", prefix=f"{dataset}: "))
        rel = tables["reliability"]
        rel = rel[(rel["model_key"] == model_key) & (rel["scheme"] == scheme) & (rel["dataset"] == dataset)]
        parts.append(reliability_figure(rel, dataset, out, f"reliability_{n}.png"))
        parts.append(metrics_html(group))
        for title, name in (("Post-hoc calibration (held-out half)", "post_hoc"), ("Sample-size ablation", "ablation")):
            frame = tables[name]
            if not frame.empty:
                frame = frame[(frame["model_key"] == model_key) & (frame["scheme"] == scheme)
                              & (frame["dataset"] == dataset)]
                parts.append(f"<h3>{title}</h3>" + table_html(frame.drop(columns=["model_key", "scheme", "dataset"])))
    if not tables["genderlex_variants"].empty:
        variants = tables["genderlex_variants"]
        if model_table is not None:
            variants = with_model_names(variants, model_table)
        parts.append("<h2>GenderLex variants side by side</h2>" + table_html(variants))
    return write_page(out, "biaslab calibration report", parts)



