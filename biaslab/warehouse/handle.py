"""`biaslab.open`: one handle on a warehouse file or on a Parquet export, for notebooks and scripts.

The handle lists the tables and views, gives any of them as an Ibis table expression, runs SQL into an Ibis
expression, and is what the study functions (`biaslab.contextuality(wh)`, ...) take. Engines:

* a warehouse file (``.duckdb``): DuckDB, read-only by default, with biaslab's views;
* an export folder (`biaslab warehouse export`): ``engine="duckdb"`` (default) defines every table as a view over
  its Parquet file on an in-memory DuckDB, then biaslab's views and macros; ``engine="datafusion"`` reads the
  Parquet files with DataFusion and defines the views from the same expressions (`biaslab.views`; the macros such
  as ``choice_probs_at`` are DuckDB-only). The export's own views.sql is never run: an export is data.
"""

from __future__ import annotations

import os
from pathlib import Path


import ibis
import ibis.expr.types as ir

from .. import views as view_defs
from ..errors import UsageError
from ..schema import evidence
from .errors import WarehouseError
from .export import MANIFEST, read_manifest, table_files
from ..sql.quoting import identifier, literal

ENGINES = ("duckdb", "datafusion")


class WarehouseHandle:
    """An open warehouse (or export). Create it with `biaslab.open`; close it with `close()` or a `with` block.

    Attributes
    ----------
    path : the warehouse file or export folder.
    engine : 'duckdb' or 'datafusion'.
    backend : the Ibis backend holding the tables.
    warehouse : the `Warehouse` (a warehouse file only; None for an export).
    """

    def __init__(self, path: Path, engine: str, backend, warehouse=None, duckdb_con=None,
                 manifest: dict | None = None):
        self.path = path
        self.engine = engine
        self.backend = backend
        self.warehouse = warehouse
        self._duckdb = duckdb_con
        self.manifest = manifest
        self._ibis_views: set[str] = set()
        self._absent: dict[str, ir.Table] = {}  # tables an older export has no file for: empty, read by the views

    @classmethod
    def on(cls, warehouse) -> WarehouseHandle:
        """A handle over an open `Warehouse` (e.g. a writer that also reads what it wrote); closing the handle
        closes the warehouse."""
        return cls(Path(warehouse.path), "duckdb", ibis.duckdb.from_connection(warehouse.con), warehouse=warehouse)

    # ------------------------------------------------------------------ listing
    def base_tables(self) -> list[str]:
        """Names of the base tables (evidence, stimuli, models, runs, meta), sorted."""
        if self.manifest is not None:
            return sorted(self.manifest["tables"])
        return self.warehouse.tables()

    def views(self) -> list[str]:
        """Names of the views this handle offers, in dependency order (macros are not listed: see `macros`)."""
        if self.engine == "datafusion":
            return [n for n in view_defs.VIEWS if n in self._ibis_views]
        return [name for name, kind in view_defs.objects() if kind == "view"]

    def macros(self) -> list[str]:
        """Table macros callable in `sql` (DuckDB engine only), e.g. ``choice_probs_at(T, k)``."""
        return [name for name, kind in view_defs.objects() if kind == "macro"] if self.engine == "duckdb" else []

    def tables(self) -> list[str]:
        """Base tables (sorted), then views (in dependency order): every name `table` accepts."""
        return [*self.base_tables(), *self.views()]

    # ------------------------------------------------------------------ reading
    def table(self, name: str) -> ir.Table:
        """An Ibis table expression for a base table or view, e.g. ``wh.table('winopron_pf').count().execute()``.

        Parameters
        ----------
        name : a name from `tables()`.

        Returns
        -------
        ibis Table (lazy: nothing runs until `.execute()`, `.to_pandas()` or `.to_polars()`).
        """
        if name not in self.tables():
            raise WarehouseError(f"no table or view {name!r} in {self.path}; known: {', '.join(self.tables())}")
        return self.backend.table(name)

    def sql(self, query: str) -> ir.Table:
        """An Ibis expression for a SQL query in the engine's dialect (DuckDB's, macros included, or DataFusion's).

        Parameters
        ----------
        query : one SELECT statement.
        """
        return self.backend.sql(query)

    def source(self, name: str) -> ir.Table:
        """A base table as an Ibis table (the `Source` the view expressions of `biaslab.views` read); a table an older
        export has no file for is an empty one with the current columns."""
        if name in self._absent:
            return self._absent[name]
        return self.backend.table(name)

    def fetch(self, expr: ir.Table):
        """Execute an Ibis expression of this handle into a pandas DataFrame (on DuckDB through DuckDB's own
        conversion, so columns have the types `biaslab sql` shows).

        Parameters
        ----------
        expr : an expression over `table` / `source` tables of this handle.
        """
        if self.engine == "duckdb":
            return self.backend.con.execute(ibis.to_sql(expr, dialect="duckdb")).df()
        return expr.execute()

    def fetch_arrays(self, expr: ir.Table) -> dict:
        """Execute an Ibis expression into NumPy arrays, one per column (for integer codes of many rows)."""
        if self.engine == "duckdb":
            return self.backend.con.execute(ibis.to_sql(expr, dialect="duckdb")).fetchnumpy()
        table = expr.to_pyarrow()
        return {name: table.column(name).to_numpy() for name in table.column_names}

    def query(self, sql: str, params=None):
        """Run one SQL statement on the DuckDB engine (macros included) and return a pandas DataFrame; values go in
        as bound `params`. For what only DuckDB has, e.g. ``choice_probs_at(T, k)``.

        Raises
        ------
        WarehouseError on another engine.
        """
        if self.engine != "duckdb":
            raise WarehouseError(f"this needs the DuckDB engine (the handle on {self.path} uses {self.engine}): "
                                 f"open it with engine='duckdb'")
        return self.backend.con.execute(sql, list(params or [])).df()

    def schema_version(self) -> int:
        """The schema version of the warehouse (or of the export's source)."""
        if self.manifest is not None:
            return int(self.manifest["schema_version"])
        from .store import schema_version

        return schema_version(self.warehouse.con)

    def models(self, output: str = "pandas"):
        """Registered models: name, dtype, quantization, backend, key (see `biaslab.warehouse.catalog.models`)."""
        from .catalog import models

        return _output(models(self).execute(), output)

    def collections(self, output: str = "pandas"):
        """One row per collection: model x dataset x protocol x settings (see `biaslab.warehouse.catalog`)."""
        from .catalog import collections

        return _output(collections(self), output)

    def export(self, folder: str | os.PathLike, force: bool = False) -> dict:
        """Write this warehouse as Parquet + views.sql + manifest.json into `folder` (see `biaslab.warehouse.export`).

        Returns
        -------
        The manifest.
        """
        from .export import export_warehouse

        if self.warehouse is None:
            raise WarehouseError("export works on a warehouse file; this handle is an export already")
        known = [t for t in self.base_tables() if t in evidence.SCHEMAS]
        return export_warehouse(self.warehouse.con, known, Path(folder), source=str(self.path), force=force)

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        if self.warehouse is not None:
            self.warehouse.close()
        if self._duckdb is not None:
            self._duckdb.close()
            self._duckdb = None

    def __enter__(self) -> WarehouseHandle:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<biaslab warehouse {self.path} ({self.engine})>"

    # ------------------------------------------------------------------ internals
    def _define_ibis_views(self) -> None:
        for name, build in view_defs.VIEWS.items():
            expr = build(self.source, with_sample_id=False) if name == "gen_samples" else build(self.source)
            self.backend.create_view(name, expr, overwrite=True)
            self._ibis_views.add(name)


def _output(frame, output: str):
    if output == "polars":
        import polars as pl

        return pl.from_pandas(frame)
    if output != "pandas":
        raise UsageError(f"output must be 'pandas' or 'polars', got {output!r}")
    return frame


def open_warehouse(path: str | os.PathLike = "warehouse/biaslab.duckdb", read_only: bool = True, *,
                   engine: str | None = None, wait: float | None = None) -> WarehouseHandle:
    """Open a warehouse file or an export folder.

    Parameters
    ----------
    path : a DuckDB warehouse file, or a folder written by `biaslab warehouse export`.
    read_only : open a warehouse file without write access (default). Exports are always read-only.
    engine : 'duckdb' (default) or, for an export folder, 'datafusion'.
    wait : seconds to wait while a collection holds the file's lock (default: the readers' wait).

    Returns
    -------
    WarehouseHandle.
    """
    path = Path(path)
    engine = engine or "duckdb"
    if engine not in ENGINES:
        raise UsageError(f"engine must be one of {ENGINES}, got {engine!r}")
    if path.is_dir():
        return _open_export(path, engine)
    if engine != "duckdb":
        raise UsageError(f"engine {engine!r} reads an export folder; {path} is a warehouse file "
                         f"(export it first: biaslab warehouse export DIR)")
    from .store import Warehouse

    wh = Warehouse.open(path, read_only=read_only, wait=wait)
    return WarehouseHandle(path, "duckdb", ibis.duckdb.from_connection(wh.con), warehouse=wh)


def _open_export(folder: Path, engine: str) -> WarehouseHandle:
    manifest = read_manifest(folder)
    files = table_files(folder, manifest)
    if engine == "duckdb":
        import duckdb

        con = duckdb.connect()
        try:
            for table, path in files.items():
                con.execute(f"CREATE VIEW {identifier(table)} AS {_current_columns_sql(table, path)}")
            for table in _absent(files):  # an older export: a table of a later schema version reads as empty
                con.execute(f"CREATE VIEW {identifier(table)} AS {_empty_sql(table)}")
            for _name, sql in view_defs.statements():
                con.execute(sql)
        except duckdb.Error as exc:
            con.close()
            raise WarehouseError(f"{folder}: {str(exc).splitlines()[0]}") from None
        return WarehouseHandle(folder, engine, ibis.duckdb.from_connection(con), duckdb_con=con, manifest=manifest)
    backend = ibis.datafusion.connect()
    for table, path in files.items():
        backend.read_parquet(str(path), table_name=table)
    handle = WarehouseHandle(folder, engine, backend, manifest=manifest)
    handle._absent = {table: ibis.memtable(evidence.SCHEMAS[table].empty_table()) for table in _absent(files)}
    handle._define_ibis_views()
    return handle


def _absent(files: dict[str, Path]) -> list[str]:
    """The tables of the current schema an export (of an older version) has no file for."""
    return [t for t in evidence.SCHEMAS if t not in files]


def _empty_sql(table: str) -> str:
    """SELECT of no rows with the columns of `table` in the current schema."""
    columns_sql = ", ".join(f"CAST(NULL AS {evidence.duckdb_type(f)}) AS {identifier(f.name)}"
                            for f in evidence.SCHEMAS[table])
    return f"SELECT {columns_sql} WHERE false"


def _current_columns_sql(table: str, path: Path) -> str:
    """SELECT of a Parquet file of `table` with the columns of the current schema: a column that an older schema
    version lacked reads as NULL of its stored type (so biaslab's views work on exports of any readable version)."""
    import pyarrow.parquet as pq

    present = set(pq.read_schema(path).names)
    columns = [identifier(f.name) if f.name in present
               else f"CAST(NULL AS {evidence.duckdb_type(f)}) AS {identifier(f.name)}"
               for f in evidence.SCHEMAS[table]]
    columns_sql = ", ".join(columns)
    return f"SELECT {columns_sql} FROM read_parquet({literal(str(path))})"


__all__ = ["ENGINES", "MANIFEST", "WarehouseHandle", "open_warehouse"]


