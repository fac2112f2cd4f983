"""Metric tables in a terminal, readable at 100 columns: what identifies a collection (model name, dtype, backend,
key, mode and sampling settings) in a header line per section instead of in every row; columns with one value in
the whole table, or none, in a line under the title; numbers with 4 significant digits; and a table still wider than
the terminal split into column groups that each repeat the row labels. No cell is ever cut: a long label wraps,
a number always fits. `--wide` prints every column in one table; `--columns` picks the value columns.

The layout is computed by `layout` (pure, tested on its own); `print_frame` renders it with rich.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TextIO

import pandas as pd

from ..errors import UsageError
from ..metrics.display import MODEL_COLUMNS, cell, constant_columns, is_value_column

#: what names the collection setting of a row (shown once per section, in this order)
SETTING_COLUMNS = ("method", "mode", "setting", "scheme", "temperature", "top_k", "top_p", "prompt_version",
                   "max_new_tokens")
SECTION_COLUMNS = MODEL_COLUMNS + SETTING_COLUMNS
#: rich's box: one border column plus three per column (a space each side and a separator)
_BORDER, _PER_COLUMN = 1, 3


@dataclass
class Block:
    """One rendered table: the section line above it (None for the first block of an unsectioned table) and its
    columns and rows (cells as text)."""

    section: str | None
    columns: list[str]
    rows: list[list[str]] = field(default_factory=list)
    headers: list[str] = field(default_factory=list)  # the column names wrapped to their widths
    notes: str | None = None  # what is constant (or empty) in this section


@dataclass
class Layout:
    """A table laid out for a width: a line of what is constant (or empty) in the whole table, then the blocks."""

    constant: str | None
    blocks: list[Block]


def _section_text(values: dict[str, str]) -> str:
    model = " · ".join(values[c] for c in MODEL_COLUMNS[:3] if values.get(c))
    if values.get("model_key"):
        model = f"{model} ({values['model_key']})" if model else values["model_key"]
    setting = ", ".join(values[c] if c in ("method", "mode", "setting", "prompt_version") else f"{c} {values[c]}"
                        for c in SETTING_COLUMNS if values.get(c))
    return " — ".join(part for part in (model, setting) if part)


def _width(texts: Sequence[str]) -> int:
    return max((len(line) for t in texts for line in (t.splitlines() or [""])), default=0)


def _pieces(text: str) -> list[str]:
    """`text` cut after each underscore, space or hyphen: where a header or label may wrap."""
    pieces, start = [], 0
    for i, ch in enumerate(text):
        if ch in "_ -":
            pieces.append(text[start:i + 1])
            start = i + 1
    if start < len(text):
        pieces.append(text[start:])
    return pieces or [""]


def wrap(text: str, width: int) -> str:
    """`text` in lines of at most `width` characters, broken after underscores, spaces or hyphens where it can be
    and inside a word only where a word alone is longer than `width`."""
    lines: list[str] = []
    for paragraph in text.split("\n"):
        line = ""
        for piece in _pieces(paragraph):
            while len(piece) > width:
                if line:
                    lines.append(line.rstrip())
                    line = ""
                lines.append(piece[:width])
                piece = piece[width:]
            if len(line) + len(piece.rstrip()) > width:
                lines.append(line.rstrip())
                line = ""
            line += piece
        lines.append(line.rstrip())
    return "\n".join(lines)


def _narrowest(text: str) -> int:
    """The narrowest width `text` wraps to without cutting a word."""
    return max(len(p.rstrip()) for p in _pieces(text))


def _natural(header: str, cells: Sequence[str]) -> int:
    """A column's width unsqueezed: its widest cell; the header wraps at underscores only where it is longer than
    both that and 10 characters."""
    cell_w = _width(cells)
    return max(cell_w, min(len(header), max(cell_w, 10)), _narrowest(header))


def _column_widths(text: pd.DataFrame, labels: list[str], values: list[str], width: int) -> dict[str, int]:
    """Per column the width it is shown in: a value column its widest cell (its header wraps at underscores, never
    narrower than its widest cell); label columns together at most half of `width` where wrapping at underscores
    allows, the widest one narrowed first."""
    full = {c: max(_width(list(text[c])), len(c)) for c in labels + values}
    if _BORDER + sum(w + _PER_COLUMN for w in full.values()) <= width:
        return full  # everything fits unwrapped
    widths = {c: _natural(c, list(text[c])) for c in values}
    labels_w = {c: _natural(c, list(text[c])) for c in labels}
    floor = {c: max([_narrowest(c), 6] + [_narrowest(v) for v in text[c]]) for c in labels}
    values_total = sum(w + _PER_COLUMN for w in widths.values())
    budget = max(width // 2, width - _BORDER - values_total) - _PER_COLUMN * len(labels)
    while sum(labels_w.values()) > budget:
        widest = max(labels_w, key=lambda c: labels_w[c] - floor[c])
        if labels_w[widest] <= floor[widest]:
            break
        labels_w[widest] -= 1
    return {**labels_w, **widths}


def _chunks(labels: list[str], values: list[str], widths: dict[str, int], width: int) -> list[list[str]]:
    """Value columns in groups that fit `width` beside the label columns (at least one value column a group)."""
    base = _BORDER + sum(widths[c] + _PER_COLUMN for c in labels)
    groups: list[list[str]] = []
    current: list[str] = []
    used = base
    for c in values:
        need = widths[c] + _PER_COLUMN
        if current and used + need > width:
            groups.append(current)
            current, used = [], base
        current.append(c)
        used += need
    if current or not groups:
        groups.append(current)
    return groups


def _block(section: str | None, columns: list[str], part: pd.DataFrame, widths: dict[str, int],
           notes: str | None = None) -> Block:
    rows = [[wrap(v, widths[c]) for c, v in zip(columns, r)] for r in part[columns].itertuples(index=False, name=None)]
    return Block(section, list(columns), rows, [wrap(c, widths[c]) for c in columns], notes)


def _section_blocks(frame: pd.DataFrame, part: pd.DataFrame, rest: list[str], section: str | None, width: int,
                    wide: bool) -> list[Block]:
    """The blocks of one section: its own constant columns in a line, the rest in column groups (or, for one row
    that does not fit, as (column, value) pairs)."""
    notes, rest = constant_columns(part, rest)
    note = "; ".join(notes) or None
    if not rest:
        return [Block(section, [], notes=note)]
    numeric = [c for c in rest if is_value_column(frame[c])]
    labels = [c for c in rest if c not in numeric]
    values = [c for c in rest if c in numeric]
    if not values:  # a table of labels only: every column is a value column
        labels, values = [], rest
    widths = ({c: max(_width(list(part[c])), len(c)) for c in rest} if wide
              else _column_widths(part, labels, values, width))
    groups = [values] if wide else _chunks(labels, values, widths, width)
    if len(part) == 1 and len(groups) > 1:
        pairs = pd.DataFrame({"column": rest, "value": [part[c].iloc[0] for c in rest]})
        name_w = max(_width(rest), 6)
        pair_w = {"column": name_w, "value": max(8, width - name_w - _BORDER - 2 * _PER_COLUMN)}
        return [_block(section, ["column", "value"], pairs, pair_w, note)]
    blocks = []
    for n, group in enumerate(groups):
        suffix = f" [columns {n + 1}/{len(groups)}]" if len(groups) > 1 else ""
        blocks.append(_block(((section or "") + suffix) or None, labels + group, part, widths,
                             note if n == 0 else None))
    return blocks


def layout(frame: pd.DataFrame, width: int, *, wide: bool = False, columns: Sequence[str] | None = None) -> Layout:
    """Lay out a metric table for a terminal of `width` columns (see the module docstring).

    Columns with one value in the whole table go to the table's line, those with one value in a section (e.g. a
    model's fit status) to the section's line. A section of one row that does not fit is shown as (column, value)
    pairs.

    Parameters
    ----------
    frame : the table.
    width : terminal columns.
    wide : one block per section with every column, whatever the width.
    columns : the value (numeric) columns to show, beside every label column; unknown names raise ValueError
        listing the known ones.

    Returns
    -------
    Layout: the table's constant line and the blocks, cells as text (wrapped to their column's width).
    """
    text = frame.apply(lambda col: col.map(cell)) if not frame.empty else frame.astype(object)
    if columns:
        unknown = [c for c in columns if c not in frame.columns]
        if unknown:
            raise UsageError(f"--columns: no column {', '.join(unknown)} in this table (columns: "
                             f"{', '.join(frame.columns)})")
        text = text[[c for c in frame.columns if c in columns or c in SECTION_COLUMNS or not is_value_column(frame[c])]]
    sections = [c for c in SECTION_COLUMNS if c in text.columns]
    notes, rest = constant_columns(text, [c for c in text.columns if c not in sections])
    blocks: list[Block] = []
    keyed = text.groupby(sections, sort=False, dropna=False) if sections else [((), text)]
    for key, part in keyed:
        key = key if isinstance(key, tuple) else (key,)
        section = _section_text(dict(zip(sections, key))) if sections else None
        blocks += _section_blocks(frame, part, rest, section, width, wide)
    return Layout("; ".join(notes) or None, blocks)


def print_frame(title: str, frame: pd.DataFrame, *, width: int, wide: bool = False,
                columns: Sequence[str] | None = None, out: TextIO) -> None:
    """Print one metric table as `layout` lays it out, with rich (no markup, emoji or highlighting)."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    plan = layout(frame, width, wide=wide, columns=columns)
    total = width
    if wide:
        total = max([width] + [_BORDER + sum(_width([c] + [r[i] for r in b.rows]) + _PER_COLUMN
                                             for i, c in enumerate(b.columns)) for b in plan.blocks])
    console = Console(file=out, width=total, markup=False, emoji=False, highlight=False, soft_wrap=False)

    def line(text: str, style: str = "") -> None:
        console.print(Text(textwrap.fill(text, width=width, subsequent_indent="    ", break_on_hyphens=False),
                           style=style))

    line(f"{title} ({len(frame)} row{'s' if len(frame) != 1 else ''})", "bold")
    if plan.constant:
        line(f"  all rows: {plan.constant}")
    for block in plan.blocks:
        table = Table(highlight=False)
        for i, c in enumerate(block.headers):
            table.add_column(Text(c), min_width=max(1, _width([c] + [r[i] for r in block.rows])), overflow="fold")
        for row in block.rows:
            table.add_row(*[Text(v) for v in row])
        if block.section:
            line(f"  {block.section}")
        if block.notes:
            line(f"    {block.notes}")
        if not block.columns:
            continue
        console.print(table)
