"""Export a warehouse as Parquet files plus `views.sql`, so that engines without biaslab see the same views; and
import such an export back into a warehouse file.

Layout of an export folder (format version EXPORT_FORMAT):

* ``<table>.parquet`` for every base table of biaslab's schema (``meta`` included), written by DuckDB's COPY;
* ``views.sql``: first ``CREATE OR REPLACE VIEW <table> AS FROM read_parquet('<table>.parquet')`` for every base
  table, then every view and macro of `biaslab.views` (the same statements as a warehouse connection's, not TEMP).
  The Parquet paths are relative, so the folder can be moved or sent: DuckDB resolves them when a view is queried,
  from the working directory or the folders in its ``file_search_path`` setting. A plain DuckDB then has every table
  and view: ``cd DIR && duckdb -c ".read views.sql"``, or from anywhere
  ``duckdb -c "SET file_search_path = 'DIR'" -c ".read DIR/views.sql"``;
* ``manifest.json``: export format, schema version, biaslab and DuckDB versions, time, source file, per table its
  file and row count, and the views and macros views.sql creates.

An export folder is data someone may have sent: biaslab never runs its views.sql. `read_manifest` checks the
manifest field by field (known tables only, each file a plain name inside the folder) and `table_files` gives
the checked Parquet paths; `biaslab.open(DIR)` defines biaslab's own views over them.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import duckdb

from .. import __version__
from ..schema import evidence
from . import migrations
from .errors import WarehouseError
from ..sql.quoting import identifier, literal

#: version of the export layout (bump when files or their meaning change)
EXPORT_FORMAT = 1
MANIFEST = "manifest.json"
VIEWS_SQL = "views.sql"


def views_sql(folder: Path, tables: list[str]) -> str:
    """The text of views.sql for an export in `folder` holding `tables` (see the module docstring).

    Parameters
    ----------
    folder : the export folder (unused: the paths are relative to it; kept for callers).
    tables : the base tables exported.

    Returns
    -------
    SQL for DuckDB: one statement per table view, then the biaslab views and macros.
    """
    from .. import views

    lines = [f"-- biaslab export (format {EXPORT_FORMAT}, biaslab {__version__}, schema version "
             f"{migrations.current_version()}): base tables as views over Parquet, then the biaslab views and macros.",
             "-- The Parquet paths are relative to this folder (it can be moved). Use, from inside it:",
             "--   duckdb -c \".read views.sql\"",
             "-- or from anywhere: duckdb -c \"SET file_search_path = 'DIR'\" -c \".read DIR/views.sql\"", ""]
    for table in tables:
        lines.append(f"CREATE OR REPLACE VIEW {identifier(table)} AS FROM read_parquet({literal(table + '.parquet')});")
    lines.append("")
    for name, sql in views.statements(temp=False):
        lines += [f"-- biaslab view {name}", sql.rstrip().rstrip(";") + ";", ""]
    return "\n".join(lines)


def _refuse_non_empty(folder: Path, force: bool) -> None:
    if folder.exists() and not folder.is_dir():
        raise WarehouseError(f"{folder} exists and is not a folder")
    if folder.is_dir() and any(folder.iterdir()) and not force:
        raise WarehouseError(f"{folder} is not empty; choose an empty folder or pass --force to overwrite "
                             f"the export files in it")


def export_warehouse(con: duckdb.DuckDBPyConnection, tables: list[str], folder: Path, *, source: str = "",
                     force: bool = False) -> dict:
    """Write every table of `tables` as Parquet into `folder`, plus views.sql and manifest.json.

    Writes only into `folder` (created if missing); refuses a non-empty folder unless `force`.

    Parameters
    ----------
    con : a connection to the warehouse (read-only is enough).
    tables : the base tables to export (all of them, normally).
    folder : the export folder.
    source : the warehouse path, recorded in the manifest.
    force : overwrite the export files in a non-empty folder.

    Returns
    -------
    The manifest (also written as manifest.json).
    """
    folder = Path(folder)
    _refuse_non_empty(folder, force)
    folder.mkdir(parents=True, exist_ok=True)
    written = {}
    for table in tables:
        if table not in evidence.SCHEMAS:
            raise WarehouseError(f"export: {table!r} is not a table of biaslab's schema")
        path = folder / f"{table}.parquet"
        con.execute(f"COPY (FROM {identifier(table)}) TO {literal(str(path))} (FORMAT parquet)")
        written[table] = {"file": path.name,
                          "rows": con.execute(f"SELECT count(*) FROM {identifier(table)}").fetchone()[0]}
    version = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    (folder / VIEWS_SQL).write_text(views_sql(folder, tables), encoding="utf-8")
    manifest = {
        "format": "biaslab-export", "export_format": EXPORT_FORMAT,
        "schema_version": int(version[0]) if version else 0, "biaslab_version": __version__,
        "duckdb_version": duckdb.__version__,
        "exported_at": datetime.now(timezone.utc).isoformat(timespec="seconds"), "source": source,
        "folder": str(folder.resolve()),
        "tables": written, "views": [{"name": n, "kind": k} for n, k in _objects()],
    }
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    return manifest


def _objects() -> list[tuple[str, str]]:
    from .. import views

    return views.objects()


def read_manifest(folder: Path) -> dict:
    """The manifest of an export folder, checked: a biaslab export of a known format and a schema version this
    biaslab can read. Raises WarehouseError otherwise."""
    path = Path(folder) / MANIFEST
    if not path.is_file():
        raise WarehouseError(f"{folder} is not a biaslab export (no {MANIFEST})")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise WarehouseError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(manifest, dict):
        raise WarehouseError(f"{path}: not a JSON object")
    if manifest.get("format") != "biaslab-export" or manifest.get("export_format") != EXPORT_FORMAT:
        raise WarehouseError(f"{path}: unknown export format {manifest.get('format')!r} "
                             f"{manifest.get('export_format')!r} (this biaslab reads format {EXPORT_FORMAT})")
    version = manifest.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise WarehouseError(f"{path}: field 'schema_version' must be a positive integer, got {version!r}")
    if version > migrations.current_version():
        raise WarehouseError(f"{folder} was exported from schema version {version}, newer than this biaslab's "
                             f"{migrations.current_version()}: upgrade biaslab")
    tables = manifest.get("tables")
    if not isinstance(tables, dict) or not tables:
        raise WarehouseError(f"{path}: field 'tables' must be an object of table name -> {{file, rows}}")
    for table, info in tables.items():
        _check_entry(path, folder, table, info)
    return manifest


def _check_entry(path: Path, folder: Path, table: str, info) -> None:
    """One manifest table entry: a table of biaslab's schema, a plain file name inside the folder, a row count."""
    where = f"{path}: table {table!r}"
    if table not in evidence.SCHEMAS:
        raise WarehouseError(f"{where} is not a table of biaslab's schema ({', '.join(evidence.TABLES)})")
    if not isinstance(info, dict):
        raise WarehouseError(f"{where}: entry must be an object with 'file' and 'rows', got {type(info).__name__}")
    file, rows = info.get("file"), info.get("rows")
    if not isinstance(file, str) or not file or Path(file).name != file or file in (".", ".."):
        raise WarehouseError(f"{where}: field 'file' must be a file name inside the export folder, got {file!r}")
    if not isinstance(rows, int) or isinstance(rows, bool) or rows < 0:
        raise WarehouseError(f"{where}: field 'rows' must be a non-negative integer, got {rows!r}")
    target = Path(folder) / file
    if target.is_symlink() or not target.is_file():
        raise WarehouseError(f"{where}: file {file} is missing or not a plain file in {folder}")


def table_files(folder: Path, manifest: dict) -> dict[str, Path]:
    """Table -> its Parquet file, from a manifest checked by `read_manifest`."""
    return {table: Path(folder) / info["file"] for table, info in manifest["tables"].items()}


def import_export(folder: Path, db: Path) -> dict[str, int]:
    """Create the warehouse `db` from an export folder: the schema of the export's version, its rows, every rule of
    stored evidence checked (`rules`: probabilities in [0, 1], finite log-probabilities <= 0, exact outcomes summing
    to 1, unique keys, references, one schema version), then the usual migration to this biaslab's version
    (Warehouse.open). The file is built beside `db` and renamed into place only when everything passed, so a failed
    import leaves no file behind. Refuses an existing `db`.

    Parameters
    ----------
    folder : an export folder (see `export_warehouse`).
    db : the warehouse file to create.

    Returns
    -------
    Rows imported per table.
    """
    import os

    from .store import Warehouse, wal_path

    folder, db = Path(folder), Path(db)
    manifest = read_manifest(folder)
    if db.exists():
        raise WarehouseError(f"{db} exists; import into a new file")
    db.parent.mkdir(parents=True, exist_ok=True)
    staging = db.with_name(f".{db.name}.importing-{os.getpid()}")
    try:
        counts = _load_export(folder, manifest, staging)
        Warehouse.open(staging).close()  # migrates an older export to this biaslab's schema
        os.replace(staging, db)
    finally:
        for leftover in (staging, wal_path(staging)):
            leftover.unlink(missing_ok=True)
    return counts


def _load_export(folder: Path, manifest: dict, staging: Path) -> dict[str, int]:
    """The export's tables in the staging file, in one transaction committed only when every rule holds."""
    from . import rules

    files = table_files(folder, manifest)
    con = duckdb.connect(str(staging))
    try:
        con.begin()
        for mig in migrations.migrations():
            if mig.version <= int(manifest["schema_version"]):
                con.execute(mig.sql)
        counts = {}
        for table, path in files.items():
            try:
                con.execute(f"INSERT INTO {identifier(table)} BY NAME FROM read_parquet(?)", [str(path)])
            except duckdb.Error as exc:
                raise WarehouseError(f"{path}: table {table}: {str(exc).splitlines()[0]}") from None
            counts[table] = con.execute(f"SELECT count(*) FROM {identifier(table)}").fetchone()[0]
            if counts[table] != manifest["tables"][table]["rows"]:
                raise WarehouseError(f"{path}: {counts[table]} rows read, the manifest says "
                                     f"{manifest['tables'][table]['rows']}")
        problems = rules.violations(con, identifier, set(files))
        if problems:
            first = problems[0]
            more = f"; and {len(problems) - 1} more rule(s) broken" if len(problems) > 1 else ""
            raise WarehouseError(first.line(str(files.get(first.table, folder))) + more + "; nothing was imported")
        con.commit()
        return counts
    finally:
        con.close()
