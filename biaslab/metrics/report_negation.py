"""HTML report of the negation-bias study: interaction plot, mixed-model table, condition means."""

from __future__ import annotations

import html
from pathlib import Path

import pandas as pd

from .html_report import table_html, write_page
from .negation import condition_means, fit_mixed_model, interaction_plot


def write_report(ppl: pd.DataFrame, out: Path, db: str) -> Path:
    """Write out/index.html and interaction.png from per-sentence perplexities (`sentence_perplexities`)."""
    out.mkdir(parents=True, exist_ok=True)
    means = condition_means(ppl)
    interaction_plot(means, out / "interaction.png")
    parts = [f"<h1>Negation bias</h1><p>Warehouse: {html.escape(db)}</p>",
             "<img src='interaction.png' alt='interaction plot'>",
             "<h2>Linear mixed model</h2>" + table_html(fit_mixed_model(ppl)),
             "<h2>Condition means</h2>" + table_html(means)]
    return write_page(out, "biaslab negation report", parts)
