"""HTML report of the negation-bias study: per model, the interaction plot, the mixed-model table and the
condition means."""

from __future__ import annotations

import html
from pathlib import Path

import pandas as pd

from ..warehouse.catalog import with_model_names
from .html_report import MIN_POINTS, image_html, nothing_to_show, section_title, table_html, write_page
from .negation import GROUP, condition_means, fit_mixed_model, interaction_plot


def _settings(part: pd.DataFrame) -> str:
    """The collection settings of one model's sentences: scoring scheme, protocol and datasets."""
    columns = [c for c in GROUP[1:] if c in part.columns]
    values = part[columns].drop_duplicates().astype(str)
    return "; ".join(" · ".join(f"{c}={v}" for c, v in zip(columns, row)) for row in values.itertuples(index=False))


def write_report(ppl: pd.DataFrame, out: Path, db: str, model_table: pd.DataFrame | None = None) -> Path:
    """Write out/index.html and one interaction plot per model from per-sentence perplexities.

    Parameters
    ----------
    ppl : `sentence_perplexities` output.
    out : output folder (created).
    db : the warehouse path, shown on the page.
    model_table : `catalog.models(...)` executed, to name models; None names them by key.

    Returns
    -------
    The index path.
    """
    out.mkdir(parents=True, exist_ok=True)
    parts = [f"<h1>Negation bias</h1><p>Warehouse: {html.escape(db)}</p>"]
    if ppl.empty or "model_key" not in ppl.columns:
        parts.append(nothing_to_show("interaction plot", "no negation-bias sentence scores in the warehouse"))
        return write_page(out, "biaslab negation report", parts)
    model = fit_mixed_model(ppl)
    means = condition_means(ppl)
    for n, (model_key, part) in enumerate(ppl.groupby("model_key", sort=True)):
        parts.append(section_title(model_key, model_table, _settings(part)))
        mine = means[means["model_key"] == model_key].drop(columns="model_key")
        if int(mine["n"].sum()) < MIN_POINTS:
            parts.append(nothing_to_show("interaction plot", f"{int(mine['n'].sum())} sentences; a figure needs at "
                                         f"least {MIN_POINTS}"))
        else:
            by = [c for c in GROUP[1:] if c in mine.columns]
            name = f"interaction_{n}.png"
            interaction_plot(mine, out / name, by=by)
            parts.append(image_html(name))
        parts.append("<h3>Linear mixed model</h3>"
                     + table_html(model[model["model_key"] == model_key].drop(columns="model_key")))
        parts.append("<h3>Condition means</h3>" + table_html(mine))
    if model_table is not None:
        model, means = with_model_names(model, model_table), with_model_names(means, model_table)
    parts += ["<h2>All models: linear mixed model</h2>" + table_html(model),
              "<h2>All models: condition means</h2>" + table_html(means)]
    return write_page(out, "biaslab negation report", parts)
