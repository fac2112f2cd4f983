"""HTML report of the negation-bias study: per model, the paper's Figure 2 (predicted values of the mixed model,
x = context, one line per form), the mixed-model table (Wald and Satterthwaite p-values side by side, singular fits
flagged), the length control, and the observed condition means with their plot."""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from ...warehouse.catalog import with_model_names
from ..html_report import (MIN_POINTS, image_html, nothing_to_show, section_title, start_page, table_html, write_page)
from .model import GROUP, RANDOM_INTERCEPT, RANDOM_SLOPE, _group_columns, _groups
from .tables import negation_tables

P_VALUES_NOTE = ("<p>p_value: two-sided Wald z-test (the paper's); p_value_satterthwaite: t-test with "
                 "Satterthwaite degrees of freedom df_satterthwaite (as lmerTest), same standard error. The z-test is "
                 "anti-conservative with few items. A fit is flagged singular when the random-effects covariance is "
                 "on the boundary (|correlation| &gt; 0.99, a variance ~0, or a boundary optimum found here even "
                 "where statsmodels stopped inside); the reasons are in <code>warnings</code>.</p>")
LENGTH_NOTE = ("<p>Length control: share of root items whose four sentences (SA, SN, NA, NN) have the same number "
               "of scored tokens under this model's tokenizer (share_equal_tokens), and the same number of words "
               "(share_equal_words, the count the items were built to match); share_equal_tokens_form_pairs: the "
               "same for the affirmative / negated pairs of one item and context (SA-SN, NA-NN) alone.</p>")


FORM_LABELS = {"aff": "affirmative", "neg": "negated"}
CONTEXT_LABELS = {"stereo": "stereotype-consistent", "nonstereo": "stereotype-inconsistent"}
#: x positions of the interaction plots (the paper's Figure 2: context on the x axis, one line per form).
CONTEXTS = ["stereo", "nonstereo"]
FORMS = ["aff", "neg"]


def _measure(key: dict) -> str:
    return "pseudo-perplexity" if key.get("scheme", "causal") != "causal" else "perplexity"


def _interaction_figure(table: pd.DataFrame, value: str, by: list[str], ylabel: str, n_label):
    """A matplotlib Figure (Agg canvas) with one panel per fit group of `table`: x = context (stereotype-consistent,
    stereotype-inconsistent), one line per form (affirmative, negated) through `value`, error bars from `ci_low` /
    `ci_high` (none where undefined). `ylabel(key)` and `n_label(key, part)` give the axis label and the n in the
    panel title."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    panels = list(_groups(table, by)) if len(table) else []
    count = max(len(panels), 1)
    cols = min(count, 3)
    nrows = math.ceil(count / cols)
    fig = Figure(figsize=(4.4 * cols, 3.6 * nrows))
    FigureCanvasAgg(fig)
    if not panels:
        ax = fig.add_subplot(1, 1, 1)
        ax.text(0.5, 0.5, "no negation perplexities", ha="center", va="center")
        ax.set_axis_off()
    for i, (key, part) in enumerate(panels):
        ax = fig.add_subplot(nrows, cols, i + 1)
        for j, (form, style) in enumerate((("aff", "o-"), ("neg", "s--"))):
            cell = part[part["form"] == form].set_index("context").reindex(CONTEXTS)
            x = np.arange(len(CONTEXTS)) + (j - 0.5) * 0.04  # small dodge so the bars do not overlap
            y = cell[value].to_numpy(dtype=float)
            err = np.vstack([y - cell["ci_low"].to_numpy(dtype=float), cell["ci_high"].to_numpy(dtype=float) - y])
            ax.errorbar(x, y, yerr=np.where(np.isfinite(err), err, 0.0), fmt=style, capsize=4,
                        label=FORM_LABELS[form])
        ax.set_xticks(range(len(CONTEXTS)), [CONTEXT_LABELS[c] for c in CONTEXTS])
        ax.set_xlim(-0.4, len(CONTEXTS) - 0.6)
        ax.set_xlabel("context")
        ax.set_ylabel(ylabel(key))
        name = " / ".join(str(v) for k, v in key.items() if k != "random_effects") or "all"
        ax.set_title(f"{name}\n({n_label(key, part)})", fontsize=9)
        ax.legend(title="form", fontsize=8, title_fontsize=8)
    fig.tight_layout()
    return fig


def _save(fig, path: str | Path, title: str | None) -> Path:
    path = Path(path)
    if title:
        fig.suptitle(title)
        fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    return path


def interaction_plot(means: pd.DataFrame, path: str | Path, *, by: Sequence[str] | None = None,
                     title: str | None = None) -> Path:
    """Observed means: `condition_means` output drawn as the paper's Figure 2 is laid out (x = context, one line per
    form), 95% t-interval error bars, one panel per fit group, n = sentences in the title. Written with the Agg
    canvas (no display needed); the file type follows the suffix of `path`."""
    by = _group_columns(means, by)
    fig = _interaction_figure(means, "mean", by, lambda key: f"mean {_measure(key)} (95% CI)",
                              lambda key, part: f"n = {int(part['n'].sum())} sentences")
    return _save(fig, path, title)


def prediction_figure(predictions: pd.DataFrame, *, by: Sequence[str] | None = None):
    """The Figure of `prediction_plot` (for inspection; see there)."""
    by = _group_columns(predictions, by)
    if "random_effects" in predictions.columns and predictions["random_effects"].nunique() > 1:
        by = [*by, "random_effects"]

    def n_label(key: dict, part: pd.DataFrame) -> str:
        n = pd.to_numeric(part["n"], errors="coerce").sum()
        items = part["n_items"].iloc[0] if "n_items" in part.columns else math.nan
        effects = part["random_effects"].iloc[0] if "random_effects" in part.columns else RANDOM_SLOPE
        return f"n = {int(n)} sentences, {items} items; (1 | item)" if effects == RANDOM_INTERCEPT else \
            f"n = {int(n)} sentences, {items} items"

    return _interaction_figure(predictions, "predicted", by,
                               lambda key: f"predicted {_measure(key)} (Wald 95% CI)", n_label)


def prediction_plot(predictions: pd.DataFrame, path: str | Path, *, by: Sequence[str] | None = None,
                    title: str | None = None) -> Path:
    """The paper's Figure 2: the fitted model's predicted response per condition (`prediction_table` output: the
    fixed-effects prediction x'beta_hat, with Wald 95% intervals), x = context (stereotype-consistent,
    stereotype-inconsistent), one line per form (affirmative, negated), one panel per fit (a fallback fit gets its
    own, labelled panel), n = sentences and items in the title."""
    return _save(prediction_figure(predictions, by=by), path, title)


# --------------------------------------------------------------------------------------------------- length control


def _settings(part: pd.DataFrame) -> str:
    """The collection settings of one model's sentences: scoring scheme, protocol and datasets."""
    columns = [c for c in GROUP[1:] if c in part.columns]
    values = part[columns].drop_duplicates().astype(str)
    return "; ".join(" · ".join(f"{c}={v}" for c, v in zip(columns, row)) for row in values.itertuples(index=False))


def _flags(model: pd.DataFrame) -> str:
    """A box listing the fits that are not 'ok' (status, singular), or '' when all are."""
    fits = model.drop_duplicates([c for c in model.columns if c in (*GROUP, "random_effects")])
    bad = fits[(fits["status"] != "ok") | fits["singular"].astype(bool)]
    if bad.empty:
        return ""
    items = []
    for row in bad.itertuples(index=False):
        where = " · ".join(str(getattr(row, c)) for c in GROUP[1:] if hasattr(row, c))
        items.append(f"<li>{html.escape(where)} ({html.escape(row.random_effects)}): status "
                     f"<b>{html.escape(row.status)}</b>{', singular' if row.singular else ''}</li>")
    return "<div class='flags'><p>Fits to read with care:</p><ul>" + "".join(items) + "</ul></div>"


def _figure_html(what: str, sentences: int, draw: Callable[[Path], Path], out: Path, name: str) -> str:
    """The figure `draw(path)` writes to out/name, as an <img>; or, with fewer than MIN_POINTS sentences, the
    sentence saying so (and nothing is drawn)."""
    if sentences < MIN_POINTS:
        return nothing_to_show(what, f"{sentences} sentences; a figure needs at least {MIN_POINTS}")
    draw(out / name)
    return image_html(name)


def _model_section(tables: dict[str, pd.DataFrame], model_key: str, part: pd.DataFrame, n: int, out: Path,
                   model_table: pd.DataFrame | None) -> list[str]:
    """The page fragments of one model (the `n`-th; `part`: its sentences): title, flagged fits, Figure 2, the
    mixed-model and length-control tables, and the observed condition means as a plot and a table."""
    model, predicted, means, length = (tables[k] for k in ("mixed_model", "predicted_values", "condition_means",
                                                            "length_control"))
    parts = [section_title(model_key, model_table, _settings(part))]
    mine_model = model[model["model_key"] == model_key].drop(columns="model_key")
    parts.append(_flags(mine_model))
    by = [c for c in GROUP[1:] if c in mine_model.columns]

    parts.append("<h3>Figure 2: predicted values of the mixed model</h3>")
    mine_pred = predicted[predicted["model_key"] == model_key].drop(columns="model_key")
    finite = int(np.isfinite(mine_pred["predicted"].to_numpy(dtype=float)).sum())
    sentences = int(pd.to_numeric(mine_pred["n"], errors="coerce").fillna(0).sum())
    if finite == 0:
        parts.append(nothing_to_show("predicted-values plot", "the mixed model could not be fitted (see the "
                                     "status and warnings in the table)"))
    else:
        parts.append(_figure_html("predicted-values plot", sentences,
                                  lambda path: prediction_plot(mine_pred, path, by=by), out, f"figure2_{n}.png"))

    parts.append("<h3>Linear mixed model</h3>" + P_VALUES_NOTE + table_html(mine_model))
    parts.append("<h3>Length control</h3>" + LENGTH_NOTE
                 + table_html(length[length["model_key"] == model_key].drop(columns="model_key")))

    mine = means[means["model_key"] == model_key].drop(columns="model_key")
    parts.append("<h3>Observed condition means</h3>")
    parts.append(_figure_html("interaction plot", int(mine["n"].sum()),
                              lambda path: interaction_plot(mine, path, by=by), out, f"interaction_{n}.png"))
    parts.append(table_html(mine))
    return parts


def write_report(ppl: pd.DataFrame, out: Path, db: str, model_table: pd.DataFrame | None = None) -> Path:
    """Write out/index.html, one Figure 2 (predicted values) and one observed-means plot per model, from
    per-sentence perplexities.

    Parameters
    ----------
    ppl : `sentence_perplexities` output.
    out, db : the report folder and the warehouse path (as `html_report.start_page`).
    model_table : `catalog.models(...)` executed, to name models; None names them by key.

    Returns
    -------
    The index path.
    """
    parts = start_page(out, "Negation bias", db)
    if ppl.empty or "model_key" not in ppl.columns:
        parts.append(nothing_to_show("interaction plot", "no negation-bias sentence scores in the warehouse"))
        return write_page(out, "biaslab negation report", parts)
    tables = negation_tables(ppl)
    for n, (model_key, part) in enumerate(ppl.groupby("model_key", sort=True)):
        parts += _model_section(tables, model_key, part, n, out, model_table)
    model, predicted, means, length = (tables[k] for k in ("mixed_model", "predicted_values", "condition_means",
                                                            "length_control"))
    if model_table is not None:
        model, predicted, means, length = (with_model_names(t, model_table) for t in (model, predicted, means, length))
    parts += ["<h2>All models: linear mixed model</h2>" + table_html(model),
              "<h2>All models: predicted values (Figure 2)</h2>" + table_html(predicted),
              "<h2>All models: length control</h2>" + table_html(length),
              "<h2>All models: condition means</h2>" + table_html(means)]
    return write_page(out, "biaslab negation report", parts)
