"""`biaslab sql` and `biaslab info`: read-only access to the warehouse.

`biaslab sql` runs user SQL on a connection that cannot write anything anywhere, enforced by DuckDB itself:

* the file is opened read-only, with extension auto-install / auto-load, community extensions and persistent
  secrets switched off at connect time;
* after the views are created: ``allowed_directories`` (the --allow-path folders; DuckDB refuses to set it at
  connect time or once external access is off), then ``enable_external_access = false`` (no file, network or
  extension access outside those folders), then ``lock_configuration = true`` (no SET / RESET / PRAGMA can undo it);
* DuckDB allows writes under ``allowed_directories`` too (COPY TO, EXPORT DATABASE), creates TEMP objects on a
  read-only file (which could shadow the views) and runs EXPLAIN ANALYZE's statement, so every statement is
  classified by DuckDB's parser (``extract_statements``) before any runs: only SELECT-type statements (SELECT,
  FROM, WITH, VALUES, TABLE, SHOW, DESCRIBE, SUMMARIZE, PIVOT with an IN list, UNPIVOT and the PRAGMAs that DuckDB
  rewrites to a SELECT) and EXPLAIN [ANALYZE] of such a statement run;
* a SELECT can still call table functions that change the connection or write files even with the configuration
  locked (``enable_logging(storage='file', storage_path=...)``, ``enable_profiling(save_location=...)``,
  ``checkpoint()``, ``query('...')`` running a string); calls to those (`SIDE_EFFECT_FUNCTIONS`) are found in the
  statement's parse tree (``json_serialize_sql``, DuckDB's parser again) and refused.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import click
import duckdb

from ..warehouse import Warehouse
from .common import ResultPrinter, cursor_batches, db_option, emit, format_option

#: DuckDB statement types that only read. SHOW / DESCRIBE / SUMMARIZE / PIVOT ... IN (...) / PRAGMA table_info
#: and the like parse to SELECT; EXPLAIN is checked further (EXPLAIN ANALYZE runs its statement).
READ_STATEMENT_TYPES = frozenset({duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN})

#: Functions that change the connection's state or write files, even inside a SELECT and with a locked
#: configuration (DuckDB 1.5: enable_logging(storage='file', storage_path='DIR') writes under an allowed folder),
#: or that run SQL given as a string (query, json_execute_serialized_sql).
SIDE_EFFECT_FUNCTIONS = frozenset({
    "enable_logging", "disable_logging", "truncate_duckdb_logs", "write_log", "enable_profiling",
    "disable_profiling", "checkpoint", "force_checkpoint", "query", "json_execute_serialized_sql",
})

#: DuckDB options given at connect time (these may be; allowed_directories may not: see `lock_down`).
CONNECT_CONFIG = {
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "allow_community_extensions": False,
    "allow_persistent_secrets": False,
}

#: rows fetched from DuckDB at a time
BATCH_ROWS = 4096


class Refused(click.ClickException):
    """A statement that biaslab sql does not run: one line, exit status 1."""


def _sql_literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def allowed_directory(path: str) -> str:
    """The absolute form of an --allow-path folder, with a trailing separator (DuckDB matches prefixes: without it
    /data/x would also allow /data/xy)."""
    p = Path(path).expanduser()
    if not p.is_dir():
        raise click.ClickException(f"--allow-path {path}: not an existing folder")
    return str(p.resolve()).rstrip(os.sep) + os.sep


def connect_config(allow_paths: Sequence[str]) -> dict:
    """Options for `duckdb.connect`. Without --allow-path, external access is switched off already at connect."""
    config = dict(CONNECT_CONFIG)
    if not allow_paths:
        config["enable_external_access"] = False
    return config


def lock_down(con: duckdb.DuckDBPyConnection, allow_dirs: Sequence[str]) -> None:
    """Make the connection unable to reach anything but the warehouse and `allow_dirs`, and lock its settings.

    Order matters (DuckDB 1.5): allowed_directories cannot be given to `duckdb.connect` ("cannot change/set
    allowed_directories before the database is started") nor set once external access is off, and nothing can be
    set once the configuration is locked.
    """
    if allow_dirs:
        con.execute(f"SET allowed_directories = [{', '.join(_sql_literal(d) for d in allow_dirs)}]")
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")


def _short(sql: str, limit: int = 60) -> str:
    text = " ".join(sql.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _function_names_from_tree(node) -> set[str]:
    names: set[str] = set()
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            name = item.get("function_name")
            if isinstance(name, str):
                names.add(name.lower())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return names


def _identifier(text: str) -> str:
    """The identifier at the start of a token's text (quoted or not), lower-cased."""
    text = text.strip()
    if text.startswith('"'):
        end = 1
        while end < len(text):
            if text[end] == '"':
                if text[end + 1:end + 2] == '"':
                    end += 2
                    continue
                break
            end += 1
        return text[1:end].replace('""', '"').lower()
    out = []
    for c in text:
        if not (c.isalnum() or c in "_$"):
            break
        out.append(c)
    return "".join(out).lower()


def _function_names_from_tokens(sql: str) -> set[str]:
    """Names followed by "(" according to DuckDB's tokenizer (for statements DuckDB cannot serialize to JSON)."""
    tokens = duckdb.tokenize(sql)
    names = set()
    for i, (start, kind) in enumerate(tokens[:-1]):
        if kind not in (duckdb.token_type.identifier, duckdb.token_type.keyword):
            continue
        nxt = tokens[i + 1][0]
        if sql[nxt:nxt + 1] == "(":
            names.add(_identifier(sql[start:nxt]))
    return names


def called_functions(con: duckdb.DuckDBPyConnection, sql: str) -> set[str]:
    """Lower-case names of the functions a SELECT statement calls, from DuckDB's parse tree."""
    try:
        tree = json.loads(con.execute("SELECT json_serialize_sql(?)", [sql]).fetchone()[0])
    except (duckdb.Error, ValueError, TypeError):
        tree = {"error": True}
    if tree.get("error"):
        return _function_names_from_tokens(sql)
    return _function_names_from_tree(tree)


def explained_statement(con: duckdb.DuckDBPyConnection, sql: str):
    """The statement an EXPLAIN [ANALYZE] [(options)] statement explains: the first suffix of `sql`, starting at a
    token boundary after EXPLAIN, that DuckDB parses as exactly one statement (None if there is none)."""
    for start, _ in duckdb.tokenize(sql)[1:]:
        try:
            inner = con.extract_statements(sql[start:])
        except duckdb.Error:
            continue
        return inner[0] if len(inner) == 1 else None
    return None


def _type_name(kind) -> str:
    name = kind.name
    if name.isidentifier():
        return name
    return {29: "UPDATE EXTENSIONS"}.get(kind.value, f"type #{kind.value}")  # duckdb 1.5 leaves 29 unnamed


def refusal(con: duckdb.DuckDBPyConnection, statement) -> str | None:
    """Why `statement` (from `extract_statements`) is not run, or None if it only reads."""
    kind = statement.type
    if kind not in READ_STATEMENT_TYPES:
        if not statement.query.strip():  # a statement DuckDB adds itself
            return (f"DuckDB adds a statement of type {_type_name(kind)} for it: a PIVOT without an IN (...) list "
                    f"creates an ENUM type; list the values with IN (...)")
        return f"statement type {_type_name(kind)}"
    sql = statement.query
    if kind == duckdb.StatementType.EXPLAIN:
        inner = explained_statement(con, sql)
        if inner is None:
            return "cannot tell which statement this EXPLAIN explains"
        if inner.type != duckdb.StatementType.SELECT:
            return f"EXPLAIN of a statement of type {_type_name(inner.type)}, which EXPLAIN ANALYZE would run"
        sql = inner.query
    bad = sorted(called_functions(con, sql) & SIDE_EFFECT_FUNCTIONS)
    if bad:
        return f"it calls {bad[0]}(), which changes settings, writes files or runs SQL from a string"
    return None


def read_statements(con: duckdb.DuckDBPyConnection, sql: str) -> list:
    """The statements of `sql`, every one checked before any runs; raises Refused naming the first refused one."""
    statements = con.extract_statements(sql)
    if not statements:
        raise click.ClickException("no SQL statement given")
    for number, statement in enumerate(statements, 1):
        why = refusal(con, statement)
        if why:
            text = _short(statement.query)
            if len(statements) > 1:
                where = f"statement {number} ({text})" if text else f"statement {number}"
            else:
                where = f"`{text}`"
            raise Refused(f"biaslab sql is read-only: refused {where} ({why}); nothing was run")
    return statements


def bind_all(con: duckdb.DuckDBPyConnection, statements: Sequence) -> None:
    """Plan every statement of a script (EXPLAIN without ANALYZE: nothing runs) so that one that cannot run
    (missing table, file outside --allow-path, ...) fails before any result is printed."""
    for statement in statements:
        sql = statement.query
        if statement.type == duckdb.StatementType.EXPLAIN:
            sql = explained_statement(con, sql).query
        con.execute("EXPLAIN " + sql)


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
        return Path(query_file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise click.ClickException(f"cannot read the SQL file {query_file}: {reason}") from None


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
              help="Table format: show at most this many rows per result, then say how many were not shown "
                   "(0: no cap). csv and json are never capped.")
def sql_command(query: str | None, query_file: str | None, db: str, fmt: str, allow_paths: tuple[str, ...],
                max_rows: int) -> None:
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

    Table format shows at most --max-rows rows per result (default 1000), then one line saying how many were
    not shown; use --format csv or json for all rows. Text is shown literally (no markup or emoji codes). JSON
    is strict: NaN and Infinity become null, blobs base64 strings, dates and timestamps ISO 8601 strings,
    decimals numbers, JSON columns the JSON values they hold.

    Example: biaslab sql "select dataset, count(*) from stimuli group by 1" --format csv
    """
    sql = _query_text(query, query_file)
    allow_dirs = [allowed_directory(p) for p in allow_paths]
    with Warehouse.open(db, read_only=True, config=connect_config(allow_dirs)) as wh:
        con = wh.con
        lock_down(con, allow_dirs)
        statements = read_statements(con, sql)
        try:
            if len(statements) > 1:
                bind_all(con, statements)
            printer = ResultPrinter(fmt, max_rows=max_rows, multiple=len(statements) > 1)
            for statement in statements:
                cursor = con.execute(statement)
                if cursor.description is None:  # not expected for SELECT / EXPLAIN; print an empty result
                    printer.result([], [])
                    continue
                printer.result([d[0] for d in cursor.description], cursor_batches(cursor, BATCH_ROWS),
                               types=[d[1] for d in cursor.description])
            printer.finish()
        except duckdb.PermissionException as exc:
            hint = "" if allow_dirs else " (files can be read only under an --allow-path DIR)"
            raise click.ClickException(str(exc).strip().splitlines()[0] + hint) from None
        except duckdb.InvalidInputException as exc:
            if "'pytz'" not in str(exc):
                raise
            raise click.ClickException("TIMESTAMP WITH TIME ZONE values need the pytz package in Python "
                                       "(pip install pytz), or cast them: ts::TIMESTAMP") from None
        except BrokenPipeError:  # e.g. `biaslab sql ... | head`: stop quietly
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            raise SystemExit(0) from None


@click.command("info")
@db_option
@format_option
def info_command(db: str, fmt: str) -> None:
    """Summarize a warehouse: tables with row counts, registered models (name, dtype, quantization, backend, key),
    collections in brief (details: `biaslab collections`), and the latest runs."""
    from .catalog_cmd import collection_rows, model_rows

    with Warehouse.open(db, read_only=True) as wh:
        sections = [
            ("tables", ["table", "rows"], [(t, wh.count(t)) for t in wh.tables()]),
            ("models", *model_rows(wh)),
            ("collections", *collection_rows(wh, ["model_name", "dataset", "protocol", "settings", "stored",
                                                  "pending", "last_status"])),
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
