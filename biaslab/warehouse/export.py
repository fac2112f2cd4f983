"""Export a warehouse as Parquet files plus `views.sql`, so that engines without biaslab see the same views; and
import such an export back into a warehouse file.

Layout of an export folder (format version EXPORT_FORMAT):

* ``<table>.parquet`` for every base table (``meta`` included), written by DuckDB's COPY;
* ``views.sql``: first ``CREATE OR REPLACE VIEW <table> AS FROM read_parquet('<folder>/<table>.parquet')`` for every
  base table, then every view and macro of ``biaslab/sql/views`` in dependency order, made non-TEMP. A plain DuckDB
  (``duckdb -c ".read DIR/views.sql"``, or ``con.execute(open(...).read())``) then has every table and view;
* ``manifest.json``: export format, schema version, biaslab and DuckDB versions, time, source file, per table its
  file and row count, and the views and macros views.sql creates.

The Parquet paths inside views.sql are absolute (a folder moved elsewhere needs them rewritten: `views_sql` does
it, and `biaslab.open(DIR)` always uses the folder it is given).
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from pathlib import Path

import duckdb

from .. import __version__
from . import ddl
from .errors import WarehouseError

#: version of the export layout (bump when files or their meaning change)
EXPORT_FORMAT = 1
MANIFEST = "manifest.json"
VIEWS_SQL = "views.sql"
_TEMP = re.compile(r"\bCREATE\s+OR\s+REPLACE\s+TEMP(?:ORARY)?\s+(VIEW|MACRO)\b", re.I)


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def views_sql(folder: Path, tables: list[str]) -> str:
    """The text of views.sql for an export in `folder` holding `tables` (see the module docstring).

    Parameters
    ----------
    folder : the export folder (its absolute path is written into the file).
    tables : the base tables exported.

    Returns
    -------
    SQL for DuckDB: one statement per table view, then the biaslab views and macros.
    """
    folder = Path(folder).resolve()
    lines = [f"-- biaslab export (format {EXPORT_FORMAT}, biaslab {__version__}, schema version "
             f"{ddl.current_version()}): base tables as views over Parquet, then the biaslab views and macros.",
             "-- Use: duckdb -c \".read DIR/views.sql\" (or execute this text on any DuckDB connection).", ""]
    for table in tables:
        lines.append(f"CREATE OR REPLACE VIEW {table} AS FROM read_parquet({_quote(str(folder / (table + '.parquet')))});")
    lines.append("")
    for f in ddl.view_files():
        lines.append(f"-- from biaslab/sql/views/{f.name}")
        lines.append(_TEMP.sub(lambda m: f"CREATE OR REPLACE {m.group(1).upper()}", f.sql).strip())
        lines.append("")
    return "\n".join(lines)


def relocated_views_sql(folder: Path, manifest: dict) -> str:
    """The export's own views.sql with its Parquet paths pointing into `folder` (where the export is now)."""
    text = (Path(folder) / VIEWS_SQL).read_text(encoding="utf-8")
    old = manifest.get("folder")
    new = str(Path(folder).resolve())
    if old and old != new:
        text = text.replace(_quote(old + "/")[:-1], _quote(new + "/")[:-1])
    return text


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
        path = folder / f"{table}.parquet"
        con.execute(f"COPY (FROM {table}) TO {_quote(str(path))} (FORMAT parquet)")
        written[table] = {"file": path.name, "rows": con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]}
    version = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    (folder / VIEWS_SQL).write_text(views_sql(folder, tables), encoding="utf-8")
    manifest = {
        "format": "biaslab-export", "export_format": EXPORT_FORMAT,
        "schema_version": int(version[0]) if version else 0, "biaslab_version": __version__,
        "duckdb_version": duckdb.__version__,
        "exported_at": datetime.now(timezone.utc).isoformat(timespec="seconds"), "source": source,
        "folder": str(folder.resolve()),
        "tables": written, "views": [{"name": n, "kind": k} for n, k in ddl.view_objects()],
    }
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    return manifest


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
    if manifest.get("format") != "biaslab-export" or manifest.get("export_format") != EXPORT_FORMAT:
        raise WarehouseError(f"{path}: unknown export format {manifest.get('format')!r} "
                             f"{manifest.get('export_format')!r} (this biaslab reads format {EXPORT_FORMAT})")
    if int(manifest.get("schema_version", 0)) > ddl.current_version():
        raise WarehouseError(f"{folder} was exported from schema version {manifest['schema_version']}, newer than "
                             f"this biaslab's {ddl.current_version()}: upgrade biaslab")
    return manifest


def import_export(folder: Path, db: Path) -> dict[str, int]:
    """Create the warehouse `db` from an export folder: the schema of the export's version, its rows, then the
    usual migration to this biaslab's version (Warehouse.open). Refuses an existing `db`.

    Parameters
    ----------
    folder : an export folder (see `export_warehouse`).
    db : the warehouse file to create.

    Returns
    -------
    Rows imported per table.
    """
    from .store import Warehouse

    folder, db = Path(folder), Path(db)
    manifest = read_manifest(folder)
    if db.exists():
        raise WarehouseError(f"{db} exists; import into a new file")
    db.parent.mkdir(parents=True, exist_ok=True)
    version = int(manifest["schema_version"])
    counts = {}
    con = duckdb.connect(str(db))
    try:
        con.begin()
        for mig in ddl.migrations():
            if mig.version <= version:
                con.execute(mig.sql)
        for table, info in manifest["tables"].items():
            path = folder / info["file"]
            con.execute(f"INSERT INTO {table} BY NAME FROM read_parquet({_quote(str(path))})")
            counts[table] = con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            if counts[table] != info["rows"]:
                raise WarehouseError(f"{path}: {counts[table]} rows read, the manifest says {info['rows']}")
        con.commit()
    except BaseException:
        con.close()
        db.unlink(missing_ok=True)
        raise
    con.close()
    Warehouse.open(db).close()  # migrates an older export to this biaslab's schema
    return counts
