"""`biaslab sql` and `biaslab info`: read-only access to the warehouse (the policy: `biaslab.warehouse.readonly`)."""

from __future__ import annotations

import json
import os
import re
import sys
from contextlib import nullcontext
from pathlib import Path

import click
import duckdb

from ..warehouse.guard import Stopped
from .common import ResultPrinter, db_option, emit, format_option, is_interrupt

#: rows fetched from DuckDB at a time
BATCH_ROWS = 4096


def _query_text(query: str | None, query_file: str | None) -> str:
    if query is not None and query_file is not None:
        raise click.ClickException("give the SQL either as the QUERY argument or with -f FILE, not both")
    if query is None and query_file is None:
        raise click.ClickException("no SQL given: pass a QUERY argument, or -f FILE (-f - reads standard input)")
    if query is not None:
        return query
    if query_file == "-":
        return sys.stdin.read()
    try:
        return Path(query_file).read_text(encoding="utf-8")  # a NUL byte in it: refused by read_statements
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise click.ClickException(f"cannot read the SQL file {query_file}: {reason}") from None


#: the longest --timeout (a week); a larger or infinite one is refused in one line
MAX_TIMEOUT_S = 7 * 24 * 3600.0
_SIZE = re.compile(r"\d+(\.\d+)?\s*(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)", re.IGNORECASE)


def _memory_size(ctx, param, value: str | None) -> str | None:
    """A DuckDB memory size (e.g. 4GB, 512MiB), checked before the warehouse is opened."""
    if value is not None and not _SIZE.fullmatch(value.strip()):
        raise click.BadParameter(f"{value!r} is not a memory size: a number and a unit (B, KB, MB, GB, TB, KiB, MiB, "
                                 "GiB, TiB), e.g. 4GB")
    return value


@click.command("sql")
@click.argument("query", required=False)
@click.option("-f", "--file", "query_file", metavar="FILE",
              help="Read the SQL from FILE instead of the QUERY argument (- reads standard input).")
@db_option
@format_option
@click.option("--allow-path", "allow_paths", metavar="DIR", multiple=True,
              help="Let queries read files under DIR (read_csv, read_parquet, read_json, glob, ...). Repeatable. "
                   "Nothing can be written there either.")
@click.option("--max-rows", type=click.IntRange(min=0), default=1000, show_default=True,
              help="Table format: show at most this many rows per result, then say that more were not shown "
                   "(0: no cap). csv and json are never capped.")
@click.option("--timeout", type=click.FloatRange(min=0, max=MAX_TIMEOUT_S), default=300, show_default=True,
              metavar="SECONDS",
              help="Stop the script after this many seconds (all statements together; 0: no limit; at most a week).")
@click.option("--memory-limit", default=None, metavar="SIZE", callback=_memory_size,
              help="DuckDB memory limit for the queries, e.g. 4GB (default: half the machine's memory). Nothing "
                   "spills to disk: a query that needs more stops with an out-of-memory error.")
def sql_command(query: str | None, query_file: str | None, db: str, fmt: str, allow_paths: tuple[str, ...],
                max_rows: int, timeout: float, memory_limit: str | None) -> None:
    """Run read-only SQL against the warehouse and print the results.

    The SQL is the QUERY argument or the contents of -f FILE (-f - reads standard input); give exactly one. SQL
    that starts with "-" (a -- comment) needs "--" before it: biaslab sql -- "-- note ...".

    Tables: stimuli, models, runs, sequence_scores, token_scores, ...; views such as sequence_metrics are
    defined on every connection.

    Read-only: nothing can be written anywhere. Only SELECT-like statements run: SELECT, FROM, WITH, VALUES,
    SHOW, DESCRIBE, SUMMARIZE, PIVOT ... IN (...), UNPIVOT, the PRAGMAs that only show something (table_info,
    show_tables, version, ...) and EXPLAIN [ANALYZE] of those. INSERT, UPDATE, DELETE, CREATE (also TEMP), DROP,
    ALTER, COPY, EXPORT, ATTACH, SET, RESET, other PRAGMAs, INSTALL, LOAD, CALL, CHECKPOINT, VACUUM, ... are
    refused with one line naming the statement type, and so are calls of enable_logging(), enable_profiling(),
    checkpoint(), query('...') and the like.

    Files, the network and extensions are out of reach, except that files under an --allow-path DIR can be
    read (not written), e.g. --allow-path /data/wino with "select * from read_csv('/data/wino/x.csv')".

    Several statements separated by ";" run in order and every result is printed: table format prints one table
    per statement; csv prints the results one after the other, separated by a blank line; json prints a list of
    row objects for one statement, and a list of such lists (one per statement) for more than one. Every
    statement is checked and planned before the first one runs, so a refused statement, a missing table or an
    unreadable file anywhere in the script prints only the error.

    Table format shows at most --max-rows rows per result (default 1000), then one line saying that more rows
    were not shown (they are not read, so a huge result prints at once); use --format csv or json for all rows.

    Ctrl-C stops a running query at once (exit status 130), and --timeout (default 300 s) stops a script that runs
    longer (exit status 1), each with one line. Text is shown literally (no markup or emoji codes). JSON
    is strict: NaN and Infinity become null, blobs base64 strings, dates and timestamps ISO 8601 strings,
    decimals numbers, JSON columns the JSON values they hold.

    Example: biaslab sql "select dataset, count(*) from stimuli group by 1" --format csv
    """
    from ..warehouse.readonly import read_only

    sql = _query_text(query, query_file)
    try:
        with read_only(db, allow_paths, timeout=timeout, memory_limit=memory_limit) as session:
            _run_script(session, sql, fmt, max_rows, allow_paths)
    except Exception as exc:  # Ctrl-C while the warehouse was being opened and checked (DuckDB's own interrupt)
        if not is_interrupt(exc):
            raise
        _stop(130, "interrupted (Ctrl-C); nothing was written")
    except KeyboardInterrupt:  # Ctrl-C before the session was set up, or while it closed
        _stop(130, "interrupted (Ctrl-C); nothing was written")


def _run_script(session, sql: str, fmt: str, max_rows: int, allow_paths) -> None:
    """Run and print `sql` in `session`, every failure of the user's script as one line (see `sql_command`)."""
    from ..warehouse.readonly import PRINT_MARGIN, QueryError, memory_cap

    limit = session.memory_limit()
    try:
        with memory_cap(limit + PRINT_MARGIN) if limit else nullcontext():
            _print_all(session, sql, fmt, max_rows)
    except (MemoryError, duckdb.OutOfMemoryException):
        shown = f"{limit / 2**20:,.0f} MiB" if limit else "the machine's"
        _stop(1, f"out of memory: the query and its printing need more than the memory limit ({shown} for DuckDB, "
                 f"{PRINT_MARGIN // 2**20} MiB more for printing); select less (e.g. left(v, 1000) of a long "
                 "value, or fewer rows) or raise --memory-limit")
    except Stopped as exc:
        _stop(exc.exit_code, str(exc))
    except KeyboardInterrupt:  # Ctrl-C while printing, between two fetches
        session.guard.stop()
        _stop(130, "interrupted (Ctrl-C); nothing was written")
    except duckdb.PermissionException as exc:
        hint = "" if allow_paths else " (files can be read only under an --allow-path DIR)"
        raise click.ClickException(str(exc).strip().splitlines()[0] + hint) from None
    except duckdb.Error as exc:  # the user's own SQL failed (syntax, unknown table, bad cast, ...): one line
        if isinstance(exc, duckdb.InvalidInputException) and "'pytz'" in str(exc):
            raise click.ClickException("TIMESTAMP WITH TIME ZONE values need the pytz package in Python "
                                       "(pip install pytz), or cast them: ts::TIMESTAMP") from None
        raise QueryError(str(exc)) from exc
    except BrokenPipeError:  # e.g. `biaslab sql ... | head`: stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        raise SystemExit(0) from None


def _print_all(session, sql: str, fmt: str, max_rows: int) -> None:
    """Check and plan every statement of `sql`, then run them in order, printing each result."""
    statements = session.statements(sql)
    printer = ResultPrinter(fmt, max_rows=max_rows, multiple=len(statements) > 1)
    for statement in statements:
        cursor = session.execute(statement)
        if cursor.description is None:  # not expected for SELECT / EXPLAIN; print an empty result
            printer.result([], [])
            continue
        printer.result([d[0] for d in cursor.description], session.batches(cursor, BATCH_ROWS),
                       types=[d[1] for d in cursor.description])
    printer.finish()


def _stop(code: int, message: str) -> None:
    """End the command with one line on stderr and exit status `code` (what was printed so far stays)."""
    sys.stdout.flush()
    click.echo(f"Error: {message}", err=True)
    raise SystemExit(code)


@click.command("info")
@db_option
@format_option
def info_command(db: str, fmt: str) -> None:
    """Summarize a warehouse: tables with row counts, registered models (name, dtype, quantization, backend, key),
    collections in brief (details: `biaslab collections`), and the latest runs."""
    from ..warehouse import Warehouse
    from ..warehouse.catalog import collection_records, model_records
    from .catalog_cmd import MODEL_COLUMNS

    # plain SQL on the warehouse's tables (no Ibis, no pandas, no views): `info` starts as fast as a DuckDB script
    with Warehouse.open(db, read_only=True, views=False) as wh:
        sections = [
            ("tables", ["table", "rows"], wh.table_counts()),
            ("models", *model_records(wh, MODEL_COLUMNS)),
            ("collections", *collection_records(wh, ["model_name", "dataset", "protocol", "settings", "stored",
                                                     "pending", "last_status"])),
            ("runs", ["run", "command", "status", "started", "finished", "rows_added"], wh.rows(
                "SELECT run_id[:8], command, status, started_at, finished_at, rows_added FROM runs "
                "ORDER BY started_at DESC LIMIT 20")),
        ]
    if fmt == "json":
        click.echo(json.dumps({name: [dict(zip(cols, row)) for row in rows] for name, cols, rows in sections},
                              default=str, indent=2))
        return
    for name, cols, rows in sections:
        emit(cols, rows, fmt, title=f"{name} ({db})" if name == "tables" else name)
