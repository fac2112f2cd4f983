"""How a metric value reads in a table, in the terminal (`cli/frames.py`) and in the HTML reports
(`html_report.table_html`): one rule for both."""

from __future__ import annotations

import math
import numbers
from typing import Any

import pandas as pd

from ..warehouse.catalog import NAME_COLUMNS
from .text import printable

#: the columns that name a model in metric tables (shown once per section or per table)
MODEL_COLUMNS = (*NAME_COLUMNS, "model_key")


def is_value_column(column: pd.Series) -> bool:
    """A value column (numbers, flags): never wrapped, right-aligned; the others (text) label the rows."""
    return pd.api.types.is_numeric_dtype(column) or pd.api.types.is_bool_dtype(column)


def cell(value: Any) -> str:
    """A value as a table shows it: missing as empty, an integral number as an integer, any other float with 4
    significant digits, anything else as `table_text` shows it."""
    if value is None or value is pd.NA or value is pd.NaT:
        return ""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, numbers.Real):
        value = float(value)
        if math.isnan(value):
            return ""
        if value.is_integer() and abs(value) < 1e15:
            return str(int(value))
        return f"{value:.4g}"
    return printable(str(value))


def constant_columns(text: pd.DataFrame, columns: list[str]) -> tuple[list[str], list[str]]:
    """(notes, the other columns) of a table of cells as text: of several rows, the columns with one value
    ("name value") and those with none ("no values: a, b")."""
    if len(text) <= 1:
        return [], columns
    empty = [c for c in columns if (text[c] == "").all()]
    constant = [c for c in columns if c not in empty and text[c].nunique() == 1]
    notes = [f"{c} {text[c].iloc[0]}" for c in constant] + ([f"no values: {', '.join(empty)}"] if empty else [])
    return notes, [c for c in columns if c not in empty and c not in constant]
