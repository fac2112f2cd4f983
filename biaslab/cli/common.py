"""Shared CLI pieces: the --db / --data-dir options, one-line errors, and table / csv / json output."""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Sequence
from typing import Any

import click
import duckdb

from ..loaders.errors import DataError
from ..warehouse import DEFAULT_DB, WarehouseError

#: Exceptions that are the user's input, not a bug: shown as one line, exit status 1.
EXPECTED_ERRORS = (DataError, WarehouseError, duckdb.Error, ValueError, FileNotFoundError, PermissionError)


def one_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


class Group(click.Group):
    """A click group that turns expected errors into a one-line message and a non-zero exit."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except EXPECTED_ERRORS as exc:
            raise click.ClickException(one_line(exc)) from None


db_option = click.option(
    "--db", "db", type=click.Path(dir_okay=False), default=str(DEFAULT_DB), show_default=True,
    help="DuckDB warehouse file.",
)
data_dir_option = click.option(
    "--data-dir", "data_dir", type=click.Path(file_okay=False), default=None,
    help="Folder holding the upstream datasets (default: $BIASLAB_DATA, else a per-user cache folder).",
)
format_option = click.option(
    "--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True,
    help="Output format.",
)


def _jsonable(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    return value


def emit(columns: Sequence[str], rows: Sequence[Sequence[Any]], fmt: str, title: str | None = None) -> None:
    """Print rows as a rich table, CSV (header + rows) or JSON (a list of objects)."""
    if fmt == "csv":
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows(rows)
    elif fmt == "json":
        records = [{c: _jsonable(v) for c, v in zip(columns, row)} for row in rows]
        click.echo(json.dumps(records, default=str, indent=None if len(records) > 50 else 2))
    else:
        from rich.console import Console
        from rich.table import Table

        table = Table(title=title, show_lines=False)
        for c in columns:
            table.add_column(str(c))
        for row in rows:
            table.add_row(*["" if v is None else (f"{v:.6g}" if isinstance(v, float) else str(v)) for v in row])
        Console(width=200 if not sys.stdout.isatty() else None).print(table)
