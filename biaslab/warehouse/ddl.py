"""DDL and views shipped as package data in `biaslab/sql/`.

`sql/schema/NNN_name.sql` are migrations applied in order; the schema version of a warehouse is the number of
the last one applied, kept in `meta`. `sql/views/*.sql` create TEMP views, so they are defined afresh on every
connection (read-only ones included) and always match the installed code.

A view file may use views or macros of another file: it says so in a header comment line
``-- requires: name, name`` (the names of the views / macros it reads). `view_sql` orders the files so that every
file comes after the files providing what it requires (name order among independent files), and refuses a
requirement that no file provides or a cycle. Inside a file, statements run in their written order.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

_MIGRATION_NAME = re.compile(r"^(\d{3})_[a-z0-9_]+\.sql$")


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


def _sql_dir(sub: str):
    return resources.files("biaslab").joinpath("sql", sub)


def migrations() -> list[Migration]:
    """All schema migrations shipped with this package, in version order."""
    found = []
    for entry in _sql_dir("schema").iterdir():
        m = _MIGRATION_NAME.match(entry.name)
        if m:
            found.append(Migration(int(m.group(1)), entry.name, entry.read_text(encoding="utf-8")))
    found.sort(key=lambda mig: mig.version)
    versions = [mig.version for mig in found]
    if versions != list(range(1, len(found) + 1)):
        raise RuntimeError(f"biaslab/sql/schema migrations are not numbered 001..N: {versions}")
    return found


def current_version() -> int:
    """Schema version this package writes."""
    return len(migrations())


_REQUIRES = re.compile(r"^--\s*requires:\s*(.*)$", re.M | re.I)
_CREATES = re.compile(r"\bCREATE\s+(?:OR\s+REPLACE\s+)?(?:TEMP(?:ORARY)?\s+)?(VIEW|MACRO)\s+(\w+)", re.I)


@dataclass(frozen=True)
class ViewFile:
    """One file of `sql/views/`: its name, SQL, the objects it creates and the objects of other files it reads."""

    name: str
    sql: str
    provides: tuple[tuple[str, str], ...]  # (object name, 'view' | 'macro') in written order
    requires: tuple[str, ...]


def parse_view_file(name: str, sql: str) -> ViewFile:
    """The declarations of one view file (see the module docstring).

    Parameters
    ----------
    name : the file name (for messages).
    sql : its text.

    Returns
    -------
    ViewFile with the created objects (``CREATE ... VIEW|MACRO name``) and the ``-- requires:`` names.
    """
    provides = tuple((m.group(2), m.group(1).lower()) for m in _CREATES.finditer(sql))
    requires = tuple(dict.fromkeys(n.strip() for line in _REQUIRES.findall(sql) for n in line.split(",")
                                   if n.strip()))
    return ViewFile(name, sql, provides, requires)


def order_view_files(files: list[ViewFile]) -> list[ViewFile]:
    """The files in dependency order: each after the files providing what it requires; name order otherwise.

    Parameters
    ----------
    files : parsed view files (any order).

    Returns
    -------
    The same files, ordered. Raises RuntimeError for a requirement no other file provides, or for a cycle.
    """
    provider = {obj: f.name for f in files for obj, _ in f.provides}
    needs: dict[str, set[str]] = {}
    for f in files:
        own = {obj for obj, _ in f.provides}
        for req in f.requires:
            if req not in provider:
                raise RuntimeError(f"view file {f.name} requires {req!r}, which no file of biaslab/sql/views creates")
        needs[f.name] = {provider[r] for r in f.requires if r not in own}
    by_name = {f.name: f for f in files}
    ordered: list[ViewFile] = []
    done: set[str] = set()
    while len(done) < len(files):
        ready = sorted(n for n in by_name if n not in done and needs[n] <= done)
        if not ready:
            cycle = sorted(n for n in by_name if n not in done)
            raise RuntimeError(f"view files require each other in a cycle: {', '.join(cycle)}")
        done.add(ready[0])
        ordered.append(by_name[ready[0]])
    return ordered


def view_files() -> list[ViewFile]:
    """Every view file shipped with the package, in dependency order (see `order_view_files`)."""
    files = [e for e in _sql_dir("views").iterdir() if e.name.endswith(".sql")]
    return order_view_files([parse_view_file(e.name, e.read_text(encoding="utf-8")) for e in files])


def view_sql() -> list[tuple[str, str]]:
    """(file name, SQL) of every view file, in dependency order (declared with ``-- requires:``)."""
    return [(f.name, f.sql) for f in view_files()]


def view_objects() -> list[tuple[str, str]]:
    """(name, 'view' | 'macro') of every object the view files create, in creation order."""
    return [obj for f in view_files() for obj in f.provides]
