"""The DuckDB evidence warehouse: open or create, migrate, idempotent bulk appends, provenance, read access.

Appends are all-or-nothing per call and idempotent on the identity keys of docs/design.md section 3: rows whose key
is already stored (or repeated inside the batch) are skipped, so collecting twice adds nothing and an
interrupted collection resumes where it stopped.
"""

from __future__ import annotations

import json
import os
import stat
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from ..sql.quoting import identifier, identifiers, literal
from . import migrations
from .errors import SchemaVersionError, WarehouseError
from .process import current_process

if TYPE_CHECKING:
    import pyarrow as pa

DEFAULT_DB = Path("warehouse") / "biaslab.duckdb"

#: an Arrow table, a list of dicts, or a pandas DataFrame (pyarrow is imported where rows are appended, not when a
#: warehouse is opened: `biaslab sql` and every reader start without it)
Rows = Any


def table_keys() -> dict[str, tuple[str, ...]]:
    """Identity key of every table that takes appends (docs/design.md section 3; `biaslab.schema.evidence.KEYS`),
    read on first use: the schema module needs pyarrow."""
    from ..schema.evidence import KEYS

    return KEYS


def __getattr__(name: str):
    if name == "TABLE_KEYS":  # `TABLE_KEYS`, as it has always been named, without importing the schema at start-up
        return table_keys()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _to_arrow(rows: Rows) -> pa.Table:
    import pyarrow as pa

    if isinstance(rows, pa.Table):
        return rows
    if isinstance(rows, (list, tuple)):
        return pa.Table.from_pylist(list(rows))
    if hasattr(rows, "to_arrow"):  # polars / ibis
        return rows.to_arrow()
    return pa.Table.from_pandas(rows, preserve_index=False)


def _utcnow() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


def _holder(pid: int) -> str:
    """The command line of process `pid`, where the system tells."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        return " ".join(raw.split())
    except OSError:
        return ""


def _lock_message(path: Path, error: str, read_only: bool, waited: float = 0.0) -> str:
    """One-line explanation of a DuckDB lock conflict: who holds the file and what to do."""
    import re

    match = re.search(r"Conflicting lock is held in (.*?) \(PID (\d+)\)", error)
    if not match:
        return f"cannot open {path}: {error.splitlines()[0]}"
    pid = int(match.group(2))
    command = _holder(pid) or match.group(1)
    after = f" after waiting {waited:.0f} s" if waited >= 1 else ""
    if read_only:
        return (f"{path} is locked by another process (PID {pid}: {command[:120]}){after}; DuckDB allows one writer "
                f"and no readers meanwhile, so this process cannot read it now (a collection releases the lock "
                f"between its chunks: try again, or collect into another --db and merge it later with "
                f"`biaslab warehouse merge`)")
    return (f"{path} is held by another process (PID {pid}: {command[:120]}){after}; DuckDB lets no one write while "
            f"another process reads or writes the file, so this process cannot write to it now (a reader such as "
            f"`biaslab sql`, `view` or a notebook's `biaslab.open` holds it while its query or handle is open: let "
            f"it finish or close it, then run this again; or write into another --db and merge it later with "
            f"`biaslab warehouse merge`)")


class Rollback(WarehouseError):  # noqa: N818 (a signal, not an error)
    """Raised inside `Warehouse.transaction()` to roll it back without an error: the work found nothing to change.
    A `BiaslabError` (through `WarehouseError`), as every exception of biaslab is, should one ever escape."""


def _waiting_line(path: Path, error: str, wait: float) -> str:
    """One line while waiting for a lock: who holds it and for how long this process waits."""
    import re

    match = re.search(r"Conflicting lock is held in (.*?) \(PID (\d+)\)", error)
    holder = ""
    if match:
        pid = int(match.group(2))
        holder = f" by PID {pid} ({(_holder(pid) or match.group(1))[:80]})"
    return f"{path} is held{holder}; waiting up to {wait:.0f} s for it"


def schema_version(con: duckdb.DuckDBPyConnection) -> int:
    """Schema version recorded in `meta` (0 for an empty database)."""
    has_meta = con.execute(  # duckdb_tables(), not information_schema (a view over more): ~1 ms of each start
        "SELECT count(*) FROM duckdb_tables() WHERE table_name = 'meta' AND schema_name = 'main' "
        "AND database_name = current_database()"
    ).fetchone()[0]
    if not has_meta:
        return 0
    row = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    if not row:
        return 0
    value = str(row[0]).strip()
    if not (value.isascii() and value.isdigit()) or len(value) > 9:
        raise WarehouseError(f"its meta table says schema_version {value[:40]!r}, not a version number: it was not "
                             f"written by biaslab, or was edited; nothing was changed")
    return int(value)


#: seconds a reader waits for a writer's lock by default (a collection holds it only while it appends a chunk), and
#: a collection for readers when it first opens the warehouse
READER_WAIT_S = 60.0
#: seconds of waiting for a lock after which `connect` says it is waiting (its `notify`)
NOTIFY_AFTER_S = 1.0
#: seconds a collection waits to take the lock back from readers before its next append
WRITER_WAIT_S = 600.0


def _is_lock_conflict(exc: BaseException) -> bool:
    return isinstance(exc, duckdb.IOException) and "lock" in str(exc).lower()


#: DuckDB options of every warehouse connection: never download or load an extension on the fly (a SQLite or
#: Parquet path given as --db must not make DuckDB reach for the network)
SAFE_CONFIG = {"autoinstall_known_extensions": False, "autoload_known_extensions": False}
#: (magic bytes, offset, what the file is) of files that are not DuckDB databases but are given as --db by mistake
FOREIGN_FILES = ((b"SQLite format 3\x00", 0, "SQLite file"), (b"PAR1", 0, "Parquet file"),
                 (b"PK\x03\x04", 0, "zip archive"), (b"GGUF", 0, "GGUF model file"))
#: DuckDB's magic bytes and where they stand in its file header
DUCKDB_MAGIC, DUCKDB_MAGIC_AT = b"DUCK", 8


#: the DuckDB path of an in-memory database (`Warehouse.empty`)
MEMORY = ":memory:"


def refuse_foreign_file(path: Path) -> None:
    """Raise WarehouseError when `path` exists, is not empty and is not a DuckDB database (its header lacks
    DuckDB's magic bytes), naming what it is when known ("not a biaslab warehouse (SQLite file)")."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISREG(mode):  # checked before opening: a FIFO would block, a device never end
        what = "a folder" if stat.S_ISDIR(mode) else "not a regular file (a FIFO, device or socket)"
        raise WarehouseError(f"{path}: {what}, not a warehouse file (give --db the path of a file)")
    with open(path, "rb") as f:
        head = f.read(64)
    if not head or head[DUCKDB_MAGIC_AT:DUCKDB_MAGIC_AT + len(DUCKDB_MAGIC)] == DUCKDB_MAGIC:
        return
    what = next((name for magic, at, name in FOREIGN_FILES if head[at:at + len(magic)] == magic),
                "not a DuckDB file")
    raise WarehouseError(f"{path}: not a biaslab warehouse ({what}); nothing was changed")


def wal_path(path: Path) -> Path:
    """DuckDB's write-ahead log of the database file `path`."""
    return path.with_name(path.name + ".wal")


def _wal_refusal(path: Path, wal: Path, why: str) -> WarehouseError:
    return WarehouseError(
        f"{path}: DuckDB did not replay its write-ahead log {wal.name} ({wal.stat().st_size:,} bytes) whole ({why}); "
        f"it may hold committed rows, so nothing was opened and biaslab never deletes it: keep a copy of both "
        f"files, and either restore them from a backup or move {wal.name} aside to open the warehouse without "
        f"the rows it holds")


def check_wal(path: Path, config: Mapping[str, Any]) -> None:
    """Refuse a warehouse whose write-ahead log DuckDB would not replay whole (WarehouseError in one line).

    A DuckDB file's committed but not yet checkpointed rows live in `<file>.wal`. DuckDB 1.5 replays it on open, and
    a writer then checkpoints and deletes it; a damaged log either fails to replay (an error naming a checksum, or
    an allocation failure) or, when its header does not parse, is skipped without a word, its rows lost and, on the
    next write, the file deleted. So where a non-empty log exists, a read-only probe opens the file first: an error
    or a replayed log size of 0 (`PRAGMA database_size`'s wal_size) refuses the warehouse before anything else
    opens it. A probe that meets another process's lock leaves the log to that process (it replays it itself).
    """
    wal = wal_path(path)
    try:
        size = wal.stat().st_size
    except OSError:
        return
    if size == 0 or not path.exists():
        return
    try:
        probe = duckdb.connect(str(path), read_only=True, config=dict(config))
    except duckdb.Error as exc:
        if _is_lock_conflict(exc) or not wal.exists():  # its writer holds it, or checkpointed it meanwhile
            return
        raise _wal_refusal(path, wal, str(exc).splitlines()[0][:200]) from None
    try:
        replayed = probe.execute("PRAGMA database_size").fetchone()[6]
    finally:
        probe.close()
    if str(replayed).strip().startswith("0 bytes") and wal.exists():  # gone: its writer checkpointed it (a race)
        raise _wal_refusal(path, wal, "DuckDB read none of it: its header is not a DuckDB log's")


def connect(path: Path, read_only: bool, config: Mapping[str, Any] | None = None,
            wait: float = 0.0, notify: Callable[[str], None] | None = None) -> duckdb.DuckDBPyConnection:
    """`duckdb.connect`, retrying for up to `wait` seconds while another process holds the file's lock; `notify`
    gets one line saying so when the wait is longer than NOTIFY_AFTER_S.

    Raises WarehouseError with a one-line message (naming the holding process) when the lock is still held
    after `wait` seconds, or when the file is not a DuckDB database.
    """
    refuse_foreign_file(path)
    config = {**SAFE_CONFIG, **(config or {})}
    check_wal(path, config)
    start = time.monotonic()
    deadline = start + max(0.0, wait)
    delay = 0.02
    told = notify is None
    while True:
        try:
            return duckdb.connect(str(path), read_only=read_only, config=config)
        except duckdb.IOException as exc:
            if not _is_lock_conflict(exc):
                raise WarehouseError(f"cannot open {path}: {str(exc).splitlines()[0]}") from None
            if time.monotonic() >= deadline:
                raise WarehouseError(_lock_message(path, str(exc), read_only, wait)) from None
            if not told and time.monotonic() - start >= NOTIFY_AFTER_S:
                told = True
                notify(_waiting_line(path, str(exc), wait))
            time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 1.5, 0.25)
        except duckdb.Error as exc:
            raise WarehouseError(f"{path} is not a DuckDB warehouse: {str(exc).splitlines()[0]}") from None


class Warehouse:
    """A handle on one warehouse file. Use `Warehouse.open(path)` (writer) or `Warehouse.open(path, read_only=True)`.

    The DuckDB connection is `con`. DuckDB lets one process write a file and no other process read it meanwhile, so
    a long-running writer (a collection) calls `release()` between its appends: the connection is closed, other
    processes can read, and the next use of `con` reopens it (waiting up to `wait` seconds for readers to finish).
    With `shared=True` every write method releases the connection after it commits.
    """

    def __init__(self, con: duckdb.DuckDBPyConnection | None, path: Path, read_only: bool,
                 config: Mapping[str, Any] | None = None, wait: float = 0.0, shared: bool = False,
                 views: bool = True):
        self._con = con
        self.path = path
        self.read_only = read_only
        self.config = dict(config or {})
        self.wait = wait
        self.shared = shared
        self.views = views  # create the relational views on each connection
        self._views_pending = False
        self._in_transaction = False

    # ------------------------------------------------------------------ opening
    @classmethod
    def open(cls, path: str | os.PathLike = DEFAULT_DB, read_only: bool = False, *,
             wait: float | None = None, config: Mapping[str, Any] | None = None,
             shared: bool = False, notify: Callable[[str], None] | None = None, views: bool = True) -> Warehouse:
        """Open (and for writers create and migrate) the warehouse at `path`.

        A warehouse written by a newer biaslab is refused; an older one is migrated in one transaction by a
        writer, and refused with advice by a reader.

        Parameters
        ----------
        path : the DuckDB file.
        read_only : open without write access (several readers may share the file; no writer meanwhile).
        wait : seconds to wait while another process holds the file's lock (default: READER_WAIT_S for readers
            and for `shared` writers, a collection waiting for readers as they wait for it; 0 for other writers;
            `shared` writers wait WRITER_WAIT_S when they take the lock back).
        config : DuckDB configuration options given to `duckdb.connect` (e.g. ``enable_external_access``).
        shared : release the connection after every write (see the class docstring).
        notify : gets one line when the first open waits for another process (e.g. stderr of a command).
        views : create the relational views on the connection (False: a command that reads only tables, e.g.
            `biaslab info`, starts without them).
        """
        path = Path(path)
        if read_only and not path.exists():
            raise WarehouseError(f"no warehouse at {path} (create one with `biaslab data load` or `runners collect`)")
        if not read_only:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise WarehouseError(f"cannot create the folder of {path}: {exc.strerror or exc}") from None
            if path.exists() and not os.access(path, os.W_OK):
                raise WarehouseError(f"cannot write {path}: permission denied (use another --db)")
            if not path.exists() and not os.access(path.parent, os.W_OK | os.X_OK):
                raise WarehouseError(f"cannot create {path}: the folder {path.parent} is not writable "
                                     f"(use another --db)")
        if wait is None:
            wait = READER_WAIT_S if read_only or shared else 0.0
        wh = cls(None, path, read_only, config, max(wait, WRITER_WAIT_S) if shared else wait, shared, views)
        wh._reconnect(wait, notify)  # the first open waits `wait`; a shared writer taking the lock back waits longer
        return wh

    def _reconnect(self, wait: float, notify: Callable[[str], None] | None = None,
                   views: bool | None = None) -> duckdb.DuckDBPyConnection:
        """Open the connection (checked and migrated); with the views unless `views` is False, when they are made
        at the first use of `con` instead (a shared writer's append between releases reads tables only)."""
        views = self.views if views is None else views
        con = connect(self.path, self.read_only, self.config, wait, notify)
        self._con, self._views_pending = con, False
        try:
            self._check_and_migrate()
            if views:
                self._create_views()
        except Exception:
            self._con = None
            con.close()
            raise
        self._views_pending = self.views and not views
        return con

    @property
    def con(self) -> duckdb.DuckDBPyConnection:
        """The DuckDB connection with biaslab's views (reopened after `release()`, waiting up to `self.wait` s for
        other processes)."""
        if self._con is None:
            return self._reconnect(self.wait)
        if self._views_pending:
            self._views_pending = False
            self._create_views()
        return self._con

    @property
    def _tables(self) -> duckdb.DuckDBPyConnection:
        """The connection for statements on tables alone (appends, resume queries, meta, runs): reopened after
        `release()` without making the views, which take most of a reopen (a chat collection reopens once per
        stored chunk)."""
        if self._con is None:
            return self._reconnect(self.wait, views=False)
        return self._con

    @classmethod
    def empty(cls) -> Warehouse:
        """An empty warehouse at the current schema, in memory (nothing is written to any file): what a survey of
        a warehouse that does not exist yet reads (`biaslab audit --dry-run`). It is never released."""
        wh = cls(None, Path(MEMORY), False)
        wh._reconnect(0.0)
        return wh

    def release(self) -> None:
        """Close the connection so that other processes can open the file; the next use of `con` reopens it."""
        if str(self.path) == MEMORY:  # an in-memory warehouse lives as long as its connection
            return
        if self._con is not None and not self._in_transaction:
            self._con.close()
            self._con = None

    def _check_and_migrate(self) -> None:
        try:
            found = schema_version(self._tables)
        except WarehouseError as exc:
            raise WarehouseError(f"{self.path}: {exc}") from None
        supported = migrations.current_version()
        if found == 0:
            foreign = self._tables.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_catalog = current_database() "
                "ORDER BY table_name LIMIT 4").fetchall()
            if foreign:  # tables, but no biaslab schema version: another program's file, or a damaged warehouse
                names = ", ".join(r[0] for r in foreign[:3]) + (", ..." if len(foreign) > 3 else "")
                raise WarehouseError(
                    f"{self.path} is a DuckDB file but not a complete biaslab warehouse (it holds {names} but no "
                    f"schema version in a meta table); nothing was read or written: use another --db")
        if found > supported:
            raise SchemaVersionError(
                f"{self.path} has schema version {found}, but this biaslab writes version {supported}: "
                "upgrade biaslab (pip install -U biaslab) to use this warehouse"
            )
        if found == supported:
            return
        if self.read_only:
            raise WarehouseError(
                f"{self.path} has schema version {found}; this biaslab needs {supported}: "
                f"migrate it once with `biaslab warehouse migrate --db {self.path}`"
            )
        self._tables.begin()
        try:
            for mig in migrations.migrations():
                if mig.version > found:
                    self._tables.execute(mig.sql)
            self._tables.execute("DELETE FROM meta WHERE key = 'schema_version'")
            self._tables.execute("INSERT INTO meta VALUES ('schema_version', ?)", [str(supported)])
            self._tables.commit()
        except Exception:
            self._tables.rollback()
            raise

    def _create_views(self) -> None:
        from ..sql.prepared_views import shipped

        statements = shipped()  # compiled when biaslab was built; Ibis only where a view's source changed since
        if statements is None:
            from .. import views

            statements = views.statements()
        for name, sql in statements:
            try:
                self.con.execute(sql)
            except duckdb.Error as exc:  # a broken view is a packaging bug: say which one
                raise WarehouseError(f"biaslab view {name}: {str(exc).splitlines()[0]}") from None

    def close(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None

    def __enter__(self) -> Warehouse:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ writing
    @contextmanager
    def transaction(self) -> Iterator[None]:
        """All statements inside commit together or not at all. Nested: an inner `transaction()` joins the outer
        one (its statements commit or roll back with it). `Rollback` raised inside rolls the outermost one back
        quietly (a load that adds nothing leaves the file's bytes as they were)."""
        self._require_writer()
        if self._in_transaction:
            yield
            return
        con = self._tables
        con.begin()
        self._in_transaction = True
        try:
            yield
        except Rollback:
            self._in_transaction = False
            con.rollback()
            return
        except BaseException:
            self._in_transaction = False
            con.rollback()
            raise
        self._in_transaction = False
        con.commit()
        if self.shared:
            self.release()

    @contextmanager
    def memory_limit(self, limit: str) -> Iterator[None]:
        """DuckDB's `memory_limit` set to `limit` (a DuckDB size, e.g. "256MB") inside, the earlier one after: a
        bulk insert then keeps at most that much in DuckDB's buffers (the rest is written to the file or spilled)."""
        before = self._tables.execute("SELECT current_setting('memory_limit')").fetchone()[0]
        self._tables.execute(f"SET memory_limit = {literal(limit)}")
        try:
            yield
        finally:
            self._tables.execute(f"SET memory_limit = {literal(before)}")

    def _require_writer(self) -> None:
        if self.read_only:
            raise WarehouseError(f"{self.path} is open read-only")

    def _insert_new(self, table: str, data: pa.Table, keys: Sequence[str],
                    only_keys: tuple[str, Sequence[str]] | None = None) -> int:
        """Insert rows of `data` whose key is not stored yet (one row per key inside the batch).

        With `only_keys=(temp_table, columns)`, insert only rows whose `columns` appear in that temp table
        (the new keys of a parent table).
        """
        missing = [k for k in keys if k not in data.column_names]
        if missing:
            raise WarehouseError(f"append to {table}: missing key column(s) {missing}")
        view = f"_incoming_{table}"
        self._tables.register(view, data)
        try:
            table_sql, keys_sql = identifier(table), identifiers(keys)
            source_sql = f"SELECT * FROM {identifier(view)}"
            if only_keys is not None:
                source_sql += f" SEMI JOIN {identifier(only_keys[0])} USING ({identifiers(only_keys[1])})"
            before = self._tables.execute(f"SELECT count(*) FROM {table_sql}").fetchone()[0]
            self._tables.execute(f"INSERT INTO {table_sql} BY NAME "
                             f"SELECT * FROM ({source_sql}) AS incoming ANTI JOIN {table_sql} USING ({keys_sql}) "
                             f"QUALIFY row_number() OVER (PARTITION BY {keys_sql}) = 1")
            after = self._tables.execute(f"SELECT count(*) FROM {table_sql}").fetchone()[0]
            return after - before
        finally:
            self._tables.unregister(view)

    def append(self, table: str, rows: Rows) -> int:
        """Append rows to `table` in one transaction, skipping rows whose identity key is stored. Returns rows added."""
        if table not in table_keys():
            raise WarehouseError(f"append: unknown table {table!r}; known: {sorted(table_keys())}")
        data = _to_arrow(rows)
        if data.num_rows == 0:
            return 0
        with self.transaction():
            return self._insert_new(table, data, table_keys()[table])

    def append_file(self, table: str, path: str | os.PathLike) -> int:
        """Append the rows of a Parquet file holding each key of `table` once, skipping rows whose key is stored;
        DuckDB reads the file as it inserts (its rows never pass through Python: a million rows within DuckDB's
        memory limit). Returns rows added."""
        if table not in table_keys():
            raise WarehouseError(f"append: unknown table {table!r}; known: {sorted(table_keys())}")
        table_sql, keys_sql = identifier(table), identifiers(table_keys()[table])
        with self.transaction():
            before = self._tables.execute(f"SELECT count(*) FROM {table_sql}").fetchone()[0]
            self._tables.execute(f"INSERT INTO {table_sql} BY NAME SELECT * FROM read_parquet(?) AS incoming "
                             f"ANTI JOIN {table_sql} USING ({keys_sql})", [str(path)])
            return self._tables.execute(f"SELECT count(*) FROM {table_sql}").fetchone()[0] - before

    def append_many(self, tables: Mapping[str, Rows]) -> dict[str, int]:
        """Append rows to several tables in ONE transaction (each with its identity-key anti-join): all or nothing.

        For evidence whose rows may be added to an existing parent later (more samples of a stored request).
        Returns rows added per table.
        """
        unknown = [t for t in tables if t not in table_keys()]
        if unknown:
            raise WarehouseError(f"append: unknown table(s) {unknown}; known: {sorted(table_keys())}")
        added = {}
        with self.transaction():
            for table, rows in tables.items():
                data = _to_arrow(rows)
                added[table] = self._insert_new(table, data, table_keys()[table]) if data.num_rows else 0
        return added

    def append_with_children(self, parent: str, parent_rows: Rows, children: Mapping[str, Rows]) -> int:
        """Append parent rows and their child rows (e.g. sequence_scores and token_scores) atomically.

        Children are written only for parents whose key is new, so a parent and its children are either both
        stored or both absent, and re-appending a finished request adds nothing. Returns parent rows added.
        """
        keys = table_keys()[parent]
        data = _to_arrow(parent_rows)
        if data.num_rows == 0:
            return 0
        keys_sql, parent_sql = identifiers(keys), identifier(parent)
        with self.transaction():
            self._tables.register("_parent_incoming", data.select(list(keys)))
            try:
                self._tables.execute(
                    f"CREATE OR REPLACE TEMP TABLE _new_keys AS SELECT DISTINCT {keys_sql} "
                    f"FROM _parent_incoming ANTI JOIN {parent_sql} USING ({keys_sql})"
                )
            finally:
                self._tables.unregister("_parent_incoming")
            added = self._insert_new(parent, data, keys, only_keys=("_new_keys", keys))
            for child, rows in children.items():
                child_data = _to_arrow(rows)
                if child_data.num_rows:
                    self._insert_new(child, child_data, table_keys()[child], only_keys=("_new_keys", keys))
            self._tables.execute("DROP TABLE _new_keys")
        return added

    def stored(self, table: str, model_key: str, request_ids: Sequence[str], columns: Sequence[str] = ("request_id",),
               **equal: Any) -> set[tuple]:
        """What `table` already holds for this model and these requests: the distinct `columns` tuples of its rows
        with `model_key`, a `request_id` among `request_ids` and every `column = value` of `equal` (e.g. the
        sampling settings of a samples key). The one resume query of every protocol (docs/design.md section 3).

        Parameters
        ----------
        table : an evidence table with `model_key` and `request_id` columns (TABLE_KEYS).
        model_key, request_ids : the model and the requests asked about.
        columns : the key columns returned per stored row (default: the request id alone).
        equal : further key columns and the values they must equal.

        Returns
        -------
        set of tuples, one per distinct stored (columns...) combination.
        """
        if table not in table_keys() or "request_id" not in table_keys()[table]:
            raise WarehouseError(f"stored: {table!r} is not an evidence table keyed by request")
        allowed = set(table_keys()[table])
        unknown = [c for c in (*columns, *equal) if c not in allowed]
        if unknown:
            raise WarehouseError(f"stored: {unknown} are not key columns of {table} ({sorted(allowed)})")
        if not request_ids:
            return set()
        where_sql = "".join(f" AND {identifier(c)} = ?" for c in equal)
        import pyarrow as pa

        self._tables.register("_wanted", pa.table({"request_id": pa.array(list(request_ids), pa.string())}))
        try:
            return set(self._tables.execute(
                f"SELECT DISTINCT {identifiers(columns)} FROM {identifier(table)} SEMI JOIN _wanted USING (request_id) "
                f"WHERE model_key = ?{where_sql}", [model_key, *equal.values()]).fetchall())
        finally:
            self._tables.unregister("_wanted")

    # ------------------------------------------------------------------ meta
    def get_meta(self, key: str) -> str | None:
        row = self._tables.execute("SELECT value FROM meta WHERE key = ?", [key]).fetchone()
        return row[0] if row else None

    def set_meta(self, key: str, value: str) -> None:
        with self.transaction():
            self._tables.execute("DELETE FROM meta WHERE key = ?", [key])
            self._tables.execute("INSERT INTO meta VALUES (?, ?)", [key, value])

    # ------------------------------------------------------------------ provenance
    def start_run(self, command: str, params: Mapping[str, Any] | None = None, *,
                  generation_config: Mapping[str, Any] | None = None, device: str | None = None,
                  model_key: str | None = None) -> str:
        """Register a run (status 'running') and return its id."""
        from .provenance import library_versions

        run_id = uuid.uuid4().hex
        self.append("runs", [{
            "run_id": run_id,
            "command": command,
            "params": json.dumps(dict(params or {}), sort_keys=True, default=str),
            "generation_config": json.dumps(dict(generation_config or {}), sort_keys=True, default=str),
            "versions": json.dumps(library_versions(), sort_keys=True),
            "device": device,
            "model_key": model_key,
            "started_at": _utcnow(),
            "finished_at": None,
            "status": "running",
            "rows_added": None,
            **current_process(),
        }])
        return run_id

    def finish_run(self, run_id: str, status: str = "finished", rows_added: int | None = None,
                   params: Mapping[str, Any] | None = None) -> None:
        """Mark a run finished (or failed / interrupted) with its end time; `params`, if given, are merged into the
        run's recorded parameters (what is known only at the end, such as the thread counts used)."""
        with self.transaction():
            self._tables.execute(
                "UPDATE runs SET status = ?, finished_at = ?, rows_added = ? WHERE run_id = ?",
                [status, _utcnow(), rows_added, run_id],
            )
            if params:
                self._tables.execute("UPDATE runs SET params = json_merge_patch(coalesce(params, '{}'), ?::JSON) "
                                 "WHERE run_id = ?", [json.dumps(dict(params), sort_keys=True, default=str), run_id])

    # ------------------------------------------------------------------ reading
    def tables(self) -> list[str]:
        rows = self._tables.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main' "
            "AND table_type = 'BASE TABLE' ORDER BY table_name"
        ).fetchall()
        return [r[0] for r in rows]

    def table_counts(self) -> list[tuple[str, int]]:
        """(table, rows) of every base table, by name, in one statement."""
        names = self.tables()
        if not names:
            return []
        counts_sql = " UNION ALL ".join(f"SELECT {literal(n)} AS t, count(*) AS n FROM {identifier(n)}" for n in names)
        return [(t, int(n)) for t, n in self._tables.execute(f"SELECT t, n FROM ({counts_sql}) ORDER BY t").fetchall()]

    def count(self, table: str, where_sql: str | None = None, params: Sequence[Any] = ()) -> int:
        """Rows of `table`, optionally those matching `where_sql` (SQL text written by biaslab, values as bound
        `params`)."""
        sql = f"SELECT count(*) FROM {identifier(table)}" + (f" WHERE {where_sql}" if where_sql else "")
        return self._tables.execute(sql, list(params)).fetchone()[0]

    def query(self, sql: str, params: Sequence[Any] | None = None):
        """Run one SQL statement (values as bound `params`) and return its result as a pandas DataFrame."""
        return self.con.execute(sql, params or []).df()

    def rows(self, sql: str, params: Sequence[Any] | None = None) -> list[tuple]:
        """Run one SQL statement (values as bound `params`) and return its rows as tuples of Python values."""
        return self.con.execute(sql, params or []).fetchall()

    def columns(self, table: str) -> list[str]:
        """The column names of a table of this warehouse (in stored order)."""
        return [d[0] for d in self.con.execute(f"SELECT * FROM {identifier(table)} LIMIT 0").description]

    def ibis(self):
        """An Ibis backend on this connection (temp views included) for metrics."""
        import ibis

        return ibis.duckdb.from_connection(self.con)
