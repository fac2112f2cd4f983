"""The read-only query policy of `biaslab sql`: user SQL on a connection that cannot write anything anywhere,
enforced by DuckDB itself.

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
  statement's parse tree (``json_serialize_sql``, DuckDB's parser again) and refused; so are the table functions
  that read a Python object from a memory address (every function with a POINTER parameter: pandas_scan,
  arrow_scan, python_map_function, ...; a NULL address crashes the process), and Python variables are not
  tables (``python_enable_replacements = false``);
* IMPORT DATABASE is refused from DuckDB's tokens before the script is parsed (DuckDB's parser itself reads the
  folder's schema.sql and load.sql to expand it);
* resources: ``memory_limit`` (default half the machine's memory), no spilling to disk (``temp_directory = ''``:
  a read-only command writes no temporary files either), a `Guard` (Ctrl-C and --timeout stop the query
  with DuckDB's own interrupt), and `memory_cap`: while the script runs and prints, the process maps at most
  memory_limit + PRINT_MARGIN more writable memory (DuckDB's limit does not cover the values a query builds, nor
  Python's copies of them).

`read_only(db, allow_paths)` opens such a connection; `ReadOnly.statements(sql)` checks a script before any of it
runs.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import duckdb

from ..sql.quoting import literal
from .errors import WarehouseError
from .guard import Guard
from .store import Warehouse

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
    "python_enable_replacements": False,  # a Python variable's name is not a table
    "temp_directory": "",  # never spill to disk: nothing is written, also no temporary file
}

#: statements refused from their first keyword, before DuckDB parses the script (see `_refused_keywords`)
REFUSED_KEYWORDS = {"import": "IMPORT DATABASE"}

#: rows fetched from DuckDB at a time
BATCH_ROWS = 4096


class Refused(WarehouseError):
    """A statement that biaslab sql does not run: one line, exit status 1."""


class QueryError(WarehouseError):
    """DuckDB's error for a statement of biaslab sql (a syntax error, an unknown table or column, a failed cast, a
    file it cannot read, ...): the user's SQL, not a bug; DuckDB's message as one line, exit status 1."""


def allowed_directory(path: str) -> str:
    """The absolute form of an --allow-path folder, with a trailing separator (DuckDB matches prefixes: without it
    /data/x would also allow /data/xy)."""
    p = Path(path).expanduser()
    if not p.is_dir():
        raise WarehouseError(f"--allow-path {path}: not an existing folder")
    return str(p.resolve()).rstrip(os.sep) + os.sep


def default_memory_limit() -> str:
    """Half the machine's physical memory, in MiB, as a DuckDB size ("12288MiB"); DuckDB's default where the
    machine does not say."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return ""
    return f"{max(1, total // 2 // 2**20)}MiB"


#: writable memory `biaslab sql` may map beyond DuckDB's memory_limit (Python printing the rows it fetches)
PRINT_MARGIN = 256 * 2**20
_UNITS = {"b": 1, "byte": 1, "bytes": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "kib": 2**10,
          "mib": 2**20, "gib": 2**30, "tib": 2**40}


def size_bytes(text: str) -> int | None:
    """Bytes of a DuckDB size ("4GB", "512 MiB", "1.8 GiB", as `current_setting('memory_limit')` says it); None
    when it is not one."""
    import re

    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-z]+)\s*", text or "", re.IGNORECASE)
    if not match or match.group(2).lower() not in _UNITS:
        return None
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def _writable_mapped() -> int | None:
    """The process's writable private memory mapped now (Linux's VmData, what RLIMIT_DATA counts), in bytes."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmData:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


@contextmanager
def memory_cap(extra: int) -> Iterator[int | None]:
    """Inside: the process may map at most `extra` more bytes of writable memory (RLIMIT_DATA's soft limit, set
    from VmData now; Linux only, elsewhere nothing is capped); the earlier limit after. Yields the cap (None when
    none was set).

    Why: DuckDB's memory_limit bounds its buffers, not the strings a query builds (`repeat('x', 10^9)` over 20 rows
    built 20 GB under a 2 GB limit) nor Python's copies of the values fetched. Under the cap an allocation past it
    fails instead: DuckDB raises OutOfMemoryException, Python MemoryError. RLIMIT_DATA counts memory mapped
    writable, not address space merely reserved (64 DuckDB threads reserve 2.3 GB of address space and write
    0.5 GB), so the cap does not refuse what would fit.
    """
    import resource
    import sys

    mapped = _writable_mapped() if sys.platform.startswith("linux") else None
    if mapped is None:
        yield None
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    cap = mapped + extra
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    if soft != resource.RLIM_INFINITY:
        cap = min(cap, soft)
    resource.setrlimit(resource.RLIMIT_DATA, (cap, hard))
    try:
        yield cap
    finally:
        resource.setrlimit(resource.RLIMIT_DATA, (soft, hard))


def connect_config(allow_paths: Sequence[str], memory_limit: str | None = None) -> dict:
    """Options for `duckdb.connect`. Without --allow-path, external access is switched off already at connect.
    `memory_limit`: a DuckDB size such as "4GB" (None: `default_memory_limit()`)."""
    config = dict(CONNECT_CONFIG)
    limit = default_memory_limit() if memory_limit is None else memory_limit
    if limit:
        config["memory_limit"] = limit
    if not allow_paths:
        config["enable_external_access"] = False
    return config


#: `POINTER_SQL`'s answer for the DuckDB releases it was read from (a test holds the installed release's entry equal
#: to the query): asking DuckDB lists all its functions, about 20 ms of every `biaslab sql` start (issue 57)
KNOWN_POINTER_FUNCTIONS = {
    "1.5.6": frozenset({"arrow_scan", "arrow_scan_dumb", "pandas_scan", "python_map_function"}),
}
POINTER_SQL = ("SELECT DISTINCT lower(function_name) FROM duckdb_functions() "
               "WHERE list_contains(parameter_types, 'POINTER')")


def pointer_functions(con: duckdb.DuckDBPyConnection) -> frozenset[str]:
    """Lower-case names of the functions that take a POINTER (a memory address of a Python object): the known set of
    the installed DuckDB release (`KNOWN_POINTER_FUNCTIONS`; extensions never auto-load on these connections, so a
    release's set is fixed), else DuckDB's own answer (`POINTER_SQL`).

    Parameters
    ----------
    con : the read-only connection (asked only for a release not in `KNOWN_POINTER_FUNCTIONS`).

    Returns
    -------
    frozenset of str : the function names, lower case.
    """
    known = KNOWN_POINTER_FUNCTIONS.get(duckdb.__version__)
    if known is not None:
        return known
    return frozenset(r[0] for r in con.execute(POINTER_SQL).fetchall())


def lock_down(con: duckdb.DuckDBPyConnection, allow_dirs: Sequence[str]) -> None:
    """Make the connection unable to reach anything but the warehouse and `allow_dirs`, and lock its settings.

    Order matters (DuckDB 1.5): allowed_directories cannot be given to `duckdb.connect` ("cannot change/set
    allowed_directories before the database is started") nor set once external access is off, and nothing can be
    set once the configuration is locked.
    """
    if allow_dirs:
        con.execute(f"SET allowed_directories = [{', '.join(literal(d) for d in allow_dirs)}]")
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
        # the statement as a quoted literal, not a bound parameter: DuckDB's Python client imports pandas to bind
        # one, which would double `biaslab sql`'s start-up
        tree = json.loads(con.execute(f"SELECT json_serialize_sql({literal(sql)})").fetchone()[0])
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


def _refused_keywords(sql: str) -> str | None:
    """The `REFUSED_KEYWORDS` name of the first statement of `sql` that starts with one of them, from DuckDB's
    tokenizer (a statement starts at the first token and after each `;`)."""
    tokens = duckdb.tokenize(sql)
    ends = [start for start, _ in tokens[1:]] + [len(sql)]
    starts_statement = True
    for (start, kind), end in zip(tokens, ends):
        word = _identifier(sql[start:end])
        if starts_statement and kind == duckdb.token_type.keyword and word in REFUSED_KEYWORDS:
            return REFUSED_KEYWORDS[word]
        starts_statement = kind == duckdb.token_type.operator and sql[start] == ";"
    return None


def refusal(con: duckdb.DuckDBPyConnection, statement, pointers: frozenset[str] = frozenset()) -> str | None:
    """Why `statement` (from `extract_statements`) is not run, or None if it only reads. `pointers`: the
    functions that read Python objects (`pointer_functions`)."""
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
    called = called_functions(con, sql)
    bad = sorted(called & SIDE_EFFECT_FUNCTIONS)
    if bad:
        return f"it calls {bad[0]}(), which changes settings, writes files or runs SQL from a string"
    bad = sorted(called & pointers)
    if bad:
        return f"it calls {bad[0]}(), which reads a Python object from a memory address"
    return None


def read_statements(con: duckdb.DuckDBPyConnection, sql: str, pointers: frozenset[str] = frozenset()) -> list:
    """The statements of `sql`, every one checked before any runs; raises Refused naming the first refused one."""
    if "\0" in sql:
        line = sql[:sql.index("\0")].count("\n") + 1
        raise Refused(f"the SQL holds a NUL byte (line {line}); DuckDB would silently stop reading there; "
                      f"nothing was run")
    keyword = _refused_keywords(sql)
    if keyword:
        raise Refused(f"biaslab sql is read-only: refused a statement of type {keyword}; nothing was run")
    statements = con.extract_statements(sql)
    if not statements:
        raise Refused("no SQL statement given")
    for number, statement in enumerate(statements, 1):
        why = refusal(con, statement, pointers)
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


class ReadOnly:
    """A locked-down connection (see the module docstring): check a script, plan it, run its statements, each
    DuckDB call under one `Guard` (Ctrl-C, `timeout` seconds for the whole script; None: no limit)."""

    def __init__(self, warehouse: Warehouse, allow_dirs: Sequence[str], timeout: float | None = None) -> None:
        self.warehouse, self.allow_dirs = warehouse, list(allow_dirs)
        self.con = warehouse.con
        self.pointers = pointer_functions(self.con)
        lock_down(self.con, self.allow_dirs)
        self.guard = Guard(self.con, timeout)

    def statements(self, sql: str) -> list:
        """The statements of `sql`, every one checked before any runs (`read_statements`), and, for a script of
        several, every one planned (`bind_all`)."""
        statements = read_statements(self.con, sql, self.pointers)
        if len(statements) > 1:
            self.guard.call(bind_all, self.con, statements)
        return statements

    def execute(self, statement):
        """Run one checked statement; returns the DuckDB cursor (its `description` names the columns)."""
        return self.guard.call(self.con.execute, statement)

    def memory_limit(self) -> int | None:
        """DuckDB's memory_limit of this connection, in bytes."""
        return size_bytes(self.con.execute("SELECT current_setting('memory_limit')").fetchone()[0])

    def batches(self, cursor, size: int = BATCH_ROWS) -> Iterator[list[tuple]]:
        """The rows of an executed cursor, `size` at a time, each fetch under the guard (streamed)."""
        while batch := self.guard.call(cursor.fetchmany, size):
            yield batch


@contextmanager
def read_only(db: str | os.PathLike, allow_paths: Sequence[str] = (), *, timeout: float | None = None,
              memory_limit: str | None = None) -> Iterator[ReadOnly]:
    """A `ReadOnly` connection to the warehouse `db`; files under `allow_paths` (folders) may be read; `timeout`
    seconds for all its queries together (None: no limit); `memory_limit` a DuckDB size (None: half the
    machine's memory)."""
    allow_dirs = [allowed_directory(p) for p in allow_paths]
    with Warehouse.open(Path(db), read_only=True, config=connect_config(allow_dirs, memory_limit)) as wh:
        yield ReadOnly(wh, allow_dirs, timeout)
