"""The views as DuckDB SQL: each `VIEWS` expression compiled against unbound tables of the stored schema
(`biaslab.schema.evidence`), then the SQL macros (`macros`).

Compiling takes a few tenths of a second (and imports Ibis and sqlglot), so a warehouse connection runs the
statements shipped compiled in `biaslab/sql/views.json` (`biaslab.sql.prepared_views`) while they match the sources,
and compiles here, once per process (`compiled` is cached), only when they do not: `python -m biaslab.views.prepare`
refreshes the file after a view is edited.
"""

from __future__ import annotations

from functools import lru_cache

from ..schema import evidence
from ..sql.quoting import identifier
from . import macros


def unbound_source(name: str):
    """An Ibis table without a backend, named `name` and typed as the stored table: what the views compile
    against, so the SQL names the warehouse's own tables."""
    import ibis

    return ibis.table(evidence.ibis_schema(name), name=name)


@lru_cache(maxsize=1)
def compiled() -> tuple[tuple[str, str], ...]:
    """(view name, DuckDB SELECT) of every view, in dependency order."""
    import ibis

    from .registry import VIEWS

    return tuple((name, ibis.to_sql(build(unbound_source), dialect="duckdb")) for name, build in VIEWS.items())


def statements(temp: bool = True) -> list[tuple[str, str]]:
    """(object name, SQL statement) creating every view, then every macro, in an order that works.

    Parameters
    ----------
    temp : TEMP views and macros (a warehouse connection: defined afresh on every connection, so they always match
        the installed code), or plain ones (an export's views.sql).
    """
    temp_sql = "TEMP " if temp else ""
    out = [(name, f"CREATE OR REPLACE {temp_sql}VIEW {identifier(name)} AS\n{select_sql}")
           for name, select_sql in compiled()]
    for f in macros.macro_files():
        out.append((f.name, f.sql if temp else macros.without_temp(f.sql)))
    return out


def objects() -> list[tuple[str, str]]:
    """(name, 'view' | 'macro') of every object `statements` creates, in creation order."""
    from .registry import VIEWS

    return [(name, "view") for name in VIEWS] + [obj for f in macros.macro_files() for obj in f.provides]

