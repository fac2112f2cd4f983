"""`biaslab sql` and `biaslab info`: read-only access to the warehouse."""

from __future__ import annotations

import json

import click

from ..warehouse import Warehouse
from .common import db_option, emit, format_option


@click.command("sql")
@click.argument("query")
@db_option
@format_option
def sql_command(query: str, db: str, fmt: str) -> None:
    """Run a read-only SQL QUERY against the warehouse and print the result.

    Tables: stimuli, models, runs, sequence_scores, token_scores, ...; views such as sequence_metrics are
    defined on every connection. Writes (INSERT, DELETE, DROP, ...) are refused.

    Example: biaslab sql "select dataset, count(*) from stimuli group by 1" --format csv
    """
    with Warehouse.open(db, read_only=True) as wh:
        cursor = wh.con.execute(query)
        if cursor.description is None:
            return
        columns = [d[0] for d in cursor.description]
        emit(columns, cursor.fetchall(), fmt)


@click.command("info")
@db_option
@format_option
def info_command(db: str, fmt: str) -> None:
    """Summarize a warehouse: tables with row counts, registered models, and the latest runs."""
    with Warehouse.open(db, read_only=True) as wh:
        sections = [
            ("tables", ["table", "rows"], [(t, wh.count(t)) for t in wh.tables()]),
            ("models", ["model_key", "name", "kind", "dtype", "quant", "bos"], wh.con.execute(
                "SELECT model_key, name, kind, dtype, quant, bos_policy FROM models ORDER BY registered_at"
            ).fetchall()),
            ("runs", ["run", "command", "status", "started", "finished", "rows_added"], wh.con.execute(
                "SELECT run_id[:8], command, status, started_at, finished_at, rows_added FROM runs "
                "ORDER BY started_at DESC LIMIT 20"
            ).fetchall()),
        ]
    if fmt == "json":
        click.echo(json.dumps({name: [dict(zip(cols, row)) for row in rows] for name, cols, rows in sections},
                              default=str, indent=2))
        return
    for name, cols, rows in sections:
        emit(cols, rows, fmt, title=f"{name} ({db})" if name == "tables" else name)
