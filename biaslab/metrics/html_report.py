"""Shared pieces of the HTML reports: figure saving, tables, section titles that name models, the text shown in
place of a figure with nothing to show, and the page wrapper."""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

#: Script recording, on the page, whether every figure loaded (read by the headless-browser tests).
IMAGE_CHECK = ("<script>window.addEventListener('load',function(){var i=document.images,n=0;"
               "for(var k=0;k<i.length;k++){if(i[k].complete&&i[k].naturalWidth>0){n++;}}"
               "document.body.setAttribute('data-images-loaded',n+'/'+i.length);});</script>")

_STYLE = ("<style>body{font-family:sans-serif;max-width:1100px;margin:auto} img{max-width:100%;display:block}"
          "table{border-collapse:collapse;font-size:12px} td,th{padding:2px 6px;border-bottom:1px solid #ddd}"
          "small.key{font-weight:normal;color:#777;font-size:60%} span.settings{font-weight:normal}"
          "p.empty{color:#555;font-style:italic} div.flags{border:2px solid #c60;padding:4px 10px;"
          "background:#fff4e5}</style>")

#: A figure summarizing fewer measurements than this is replaced by a sentence saying so.
MIN_POINTS = 3


def save_figure(fig, out: Path, name: str) -> str:
    """Save a matplotlib figure as out/name and close it; returns the name for an <img src>."""
    fig.tight_layout()
    fig.savefig(out / name, dpi=90)
    plt.close(fig)
    return name


def table_html(frame: pd.DataFrame) -> str:
    """A data frame as a compact HTML table (4 significant digits, empty cells for missing values)."""
    return frame.to_html(index=False, float_format=lambda x: f"{x:.4g}", na_rep="", border=0)


def start_page(out: Path, heading: str, db: str, intro: str = "") -> list[str]:
    """Create the report folder `out` and return the page's first fragment: the heading, the warehouse it was
    computed from and an introduction (HTML, written by the report).

    Parameters
    ----------
    out : the report folder (created; `write_page` writes out/index.html, figures go beside it).
    heading : the page heading (text).
    db : the warehouse path, shown on the page.
    intro : HTML after the warehouse path (e.g. what the page's numbers mean).

    Returns
    -------
    The list of body fragments, to which the report appends its sections.
    """
    out.mkdir(parents=True, exist_ok=True)
    return [f"<h1>{html.escape(heading)}</h1><p>Warehouse: {html.escape(db)}.{' ' + intro if intro else ''}</p>"]


def write_page(out: Path, title: str, parts: Sequence[str]) -> Path:
    """Write out/index.html from body fragments, with the shared style and the image-load check."""
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title>{IMAGE_CHECK}{_STYLE}"
            "</head><body>" + "\n".join(parts) + "</body></html>")
    index = out / "index.html"
    index.write_text(page, encoding="utf-8")
    return index


def section_title(model_key: str, model_table: pd.DataFrame | None, settings: str = "", *, level: int = 2,
                  prefix: str = "") -> str:
    """A section heading that names the model ("name · dtype · backend", `catalog.model_title`), then the collection
    settings, with the short model key in small text.

    Parameters
    ----------
    model_key : the model's key (hash).
    model_table : `catalog.models(...)` executed, or None (the model is then named by its key).
    settings : the collection settings, e.g. "exact · T=0.5 · top_k=40"; empty for none.
    level : heading level (2 = h2).
    prefix : text before the model (e.g. the dataset).

    Returns
    -------
    HTML of the heading.
    """
    from ..warehouse.catalog import model_title

    text = html.escape(prefix) + html.escape(model_title(model_key, model_table))
    if settings:
        text += f' <span class="settings">— {html.escape(settings)}</span>'
    return f'<h{level}>{text} <small class="key">model_key {html.escape(str(model_key)[:12])}</small></h{level}>'


def nothing_to_show(what: str, reason: str) -> str:
    """The sentence shown instead of a figure that would be an empty frame.

    Parameters
    ----------
    what : the figure (e.g. "p(feminine) by context").
    reason : why it is empty (e.g. "2 prompts with a defined p(feminine); a figure needs at least 3").

    Returns
    -------
    HTML paragraph.
    """
    return f'<p class="empty">{html.escape(what)}: nothing to show: {html.escape(reason)}.</p>'


def image_html(name: str) -> str:
    """An <img> of a figure saved with `save_figure`."""
    return f'<img src="{html.escape(name)}" alt="{html.escape(name)}">'
