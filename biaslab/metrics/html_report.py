"""Shared pieces of the HTML reports: figure saving, tables, section titles that name models, the text shown in
place of a figure with nothing to show, and the page wrapper."""

from __future__ import annotations

import html
import textwrap
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from .coverage import MIN_CLUSTERS  # noqa: E402
from .display import MODEL_COLUMNS, cell, constant_columns, is_value_column  # noqa: E402

#: Script recording, on the page, whether every figure loaded (read by the headless-browser tests).
IMAGE_CHECK = ("<script>window.addEventListener('load',function(){var i=document.images,n=0;"
               "for(var k=0;k<i.length;k++){if(i[k].complete&&i[k].naturalWidth>0){n++;}}"
               "document.body.setAttribute('data-images-loaded',n+'/'+i.length);});</script>")

_STYLE = ("<style>body{font-family:sans-serif;max-width:1100px;margin:auto} img{max-width:100%;display:block}"
          "table{border-collapse:collapse;font-size:12px;max-width:100%} td,th{padding:2px 6px;"
          "border-bottom:1px solid #ddd;overflow-wrap:anywhere;vertical-align:top} td.num{white-space:nowrap;"
          "text-align:right} th{text-align:left} p.constant,p.note{font-size:12px;color:#444;margin:4px 0}"
          "small.key{font-weight:normal;color:#777;font-size:60%} span.settings{font-weight:normal}"
          "p.empty{color:#555;font-style:italic} div.flags{border:2px solid #c60;padding:4px 10px;"
          "background:#fff4e5} tr.low-coverage td{background:#fde8e8} p.low-coverage{color:#a00}</style>")

#: A figure summarizing fewer measurements than this is replaced by a sentence saying so.
MIN_POINTS = 3


#: figures are saved at this resolution and shown at most this wide (the page's width, see _STYLE)
DPI, PAGE_PX = 90, 1100
#: the smallest text on a figure as shown on the page, in points (at DPI: 10 px)
MIN_FONT_PT = 8.0


def save_figure(fig, out: Path, name: str, rect: tuple[float, float, float, float] = (0, 0, 1, 1)) -> str:
    """Save a matplotlib figure as out/name (after `tidy`, laid out inside `rect` of the figure, e.g. leaving room
    for a figure legend) and close it; returns the name for an <img src>."""
    tidy(fig, rect)
    fig.savefig(out / name, dpi=DPI)
    plt.close(fig)
    return name


def tidy(fig, rect: tuple[float, float, float, float] = (0, 0, 1, 1)) -> None:
    """Make a figure readable on the page before it is saved: no text smaller than MIN_FONT_PT as shown (a figure
    wider than the page is scaled down by the browser, so its fonts are raised by that ratio); axes titles wider
    than their axes wrapped; a legend that covers plotted bars, lines or points moved outside the axes, to the
    right; then `tight_layout` within `rect`, which makes room for all of it."""
    from matplotlib.text import Text

    scale = max(1.0, fig.get_figwidth() * DPI / PAGE_PX)
    smallest = MIN_FONT_PT * scale
    for text in fig.findobj(Text):
        if text.get_fontsize() < smallest:
            text.set_fontsize(smallest)
    _tight(fig, rect)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        _wrap_title(ax, renderer)
        legend = ax.get_legend()
        if legend is not None and _covers_data(ax, legend.get_window_extent(renderer), renderer):
            legend.set_loc("upper left")  # outside, right of the axes (multi-panel figures place theirs themselves)
            legend.set_bbox_to_anchor((1.01, 1.0), transform=ax.transAxes)
    _tight(fig, rect)


def _tight(fig, rect: tuple[float, float, float, float]) -> None:
    """`tight_layout` within `rect`, quietly: a colour bar taken from several panels (BBQ's) is an axes it cannot
    place and says so to the user's terminal; the figures that have one leave it room through `rect`."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="This figure includes Axes that are not compatible with tight_layout")
        warnings.filterwarnings("ignore", message="Tight layout not applied")  # a tall figure: laid out as it is
        fig.tight_layout(rect=rect)


def _wrap_title(ax, renderer) -> None:
    title = ax.title
    text = title.get_text()
    width = title.get_window_extent(renderer).width
    room = ax.get_window_extent(renderer).width
    if text and width > room:
        longest = max(len(line) for line in text.splitlines())
        chars = max(12, int(longest * room / width))
        title.set_text("\n".join(textwrap.fill(line, chars) for line in text.splitlines()))


def _covers_data(ax, box, renderer) -> bool:
    """Whether a legend's box covers a bar, a plotted point, a scatter point or an annotation of `ax`."""
    from matplotlib.patches import Rectangle

    if any(t.get_visible() and t.get_text().strip() and box.overlaps(t.get_window_extent(renderer))
           for t in ax.texts):
        return True

    for patch in ax.patches:
        if isinstance(patch, Rectangle) and patch.get_visible() and patch.get_height() != 0 and \
                box.overlaps(patch.get_window_extent(renderer)):
            return True
    points = [line.get_transform().transform(line.get_xydata()) for line in ax.lines if line.get_visible()]
    points += [c.get_offset_transform().transform(c.get_offsets()) for c in ax.collections
               if hasattr(c, "get_offsets") and len(c.get_offsets())]
    for xy in points:
        xy = xy[np.isfinite(xy).all(axis=1)] if len(xy) else xy
        if len(xy) and ((xy[:, 0] >= box.x0) & (xy[:, 0] <= box.x1) & (xy[:, 1] >= box.y0)
                        & (xy[:, 1] <= box.y1)).any():
            return True
    return False


def _breakable(text: str) -> str:
    """Escaped text; the page's style lets it wrap anywhere when a column is narrow (numbers never wrap)."""
    return html.escape(text)


def table_html(frame: pd.DataFrame) -> str:
    """A data frame as a compact HTML table that fits the page: values as `display.cell` shows them (4 significant
    digits, missing as empty, never <NA>); a `note` column as sentences above the table; of several rows, the
    columns with one value (e.g. the model's name in a per-model section) and those with none in a line above it;
    headers and labels wrap where a column is too narrow for them; numbers never wrap.

    Parameters
    ----------
    frame : the table.

    Returns
    -------
    HTML: the notes, the constant line and the <table>.
    """
    parts = []
    if "note" in frame.columns:
        notes = [n for n in dict.fromkeys(frame["note"]) if isinstance(n, str) and n]
        parts += [f'<p class="note">Note: {html.escape(n)}.</p>' for n in notes]
        frame = frame.drop(columns="note")
    text = frame.apply(lambda col: col.map(cell)) if len(frame) else frame.astype(object)
    constant, columns = constant_columns(text, list(text.columns))
    if constant:
        parts.append(f'<p class="constant">All rows: {html.escape("; ".join(constant))}.</p>')
    numeric = {c for c in columns if is_value_column(frame[c])}
    per_model = _per_model_columns(text, columns)
    if per_model:  # several models, several rows each: what is one value per model goes to a table of its own
        named = [c for c in MODEL_COLUMNS if c in columns]
        parts.append(_table(text[named + per_model].drop_duplicates(), named + per_model, numeric))
        columns = [c for c in columns if c not in per_model]
    marked = frame["low_coverage"].fillna(False).astype(bool).to_numpy() if "low_coverage" in frame.columns else None
    if marked is not None and marked.any():
        parts.append(f'<p class="note low-coverage">{int(marked.sum())} row(s) marked <b>low coverage</b>: the '
                     "score rests on fewer than the threshold's share of the loaded units, or on a valid share of "
                     "answers below it (columns n_loaded, n_used, n_invalid, n_missing, coverage, "
                     "valid_share).</p>")
    few = frame["few_clusters"].fillna(False).astype(bool) if "few_clusters" in frame.columns else None
    if few is not None and few.any():
        parts.append(f'<p class="note few-clusters">{int(few.sum())} row(s) marked <b>few clusters</b>: their '
                     f"intervals rest on fewer than {MIN_CLUSTERS} templates, pairs or items (about the range of "
                     "those units' values, not a confidence interval for the dataset).</p>")
    return "".join(parts) + _table(text, columns, numeric, marked)


def _per_model_columns(text: pd.DataFrame, columns: list[str]) -> list[str]:
    """Of a table of several models with several rows each, the other columns that hold one value per model (e.g. a
    fit's log-likelihood and warnings beside its coefficient rows)."""
    if "model_key" not in columns or text["model_key"].nunique() < 2 or len(text) <= text["model_key"].nunique():
        return []
    grouped = text.groupby("model_key")
    return [c for c in columns if c not in MODEL_COLUMNS and bool((grouped[c].nunique() <= 1).all())]


def _table(text: pd.DataFrame, columns: list[str], numeric: set[str], marked=None) -> str:
    head = "".join(f"<th>{_breakable(str(c))}</th>" for c in columns)
    flags = marked if marked is not None and len(marked) == len(text) else [False] * len(text)
    rows = "".join(('<tr class="low-coverage">' if flag else "<tr>")
                   + "".join(f'<td class="num">{html.escape(v)}</td>' if c in numeric
                             else f"<td>{_breakable(v)}</td>" for c, v in zip(columns, row)) + "</tr>"
                   for flag, row in zip(flags, text[columns].itertuples(index=False, name=None)))
    return f'<table class="data"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>'


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


def collection_labels(table: pd.DataFrame, model_table: pd.DataFrame | None, column: str) -> pd.Series:
    """Each row's collection as the reports name it: the model (`warehouse.catalog.model_title`) and its `column`
    (method, scheme, setting), "model · value", indexed as `table` (empty for an empty table)."""
    if table.empty:
        return pd.Series(dtype=str)
    from ..warehouse.catalog import model_title

    return pd.Series([f"{model_title(k, model_table)} · {v}" for k, v in zip(table["model_key"], table[column])],
                     index=table.index)
