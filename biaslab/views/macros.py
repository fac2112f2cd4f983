"""The SQL table macros of `biaslab/sql/macros/` (DuckDB only, e.g. ``choice_probs_at(T, k)``).

A macro file may read views (`biaslab.views.VIEWS`, always created first) and macros of other files; it names the
ones it reads in a header comment line ``-- requires: name, name``. `macro_files` orders the files so that every
file comes after the files providing what it requires (name order among independent files), and refuses a
requirement that nothing provides, or a cycle. Inside a file, statements run in their written order.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

_REQUIRES = re.compile(r"^--\s*requires:\s*(.*)$", re.M | re.I)
_CREATES = re.compile(r"\bCREATE\s+(?:OR\s+REPLACE\s+)?(?:TEMP(?:ORARY)?\s+)?(VIEW|MACRO)\s+(\w+)", re.I)
_TEMP = re.compile(r"\bCREATE\s+OR\s+REPLACE\s+TEMP(?:ORARY)?\s+(VIEW|MACRO)\b", re.I)


@dataclass(frozen=True)
class SqlFile:
    """One file of `sql/macros/`: its name, SQL, the objects it creates and the objects it reads from others."""

    name: str
    sql: str
    provides: tuple[tuple[str, str], ...]  # (object name, 'view' | 'macro') in written order
    requires: tuple[str, ...]


def parse_file(name: str, sql: str) -> SqlFile:
    """The declarations of one file: the objects it creates (``CREATE ... VIEW|MACRO name``) and the
    ``-- requires:`` names."""
    provides = tuple((m.group(2), m.group(1).lower()) for m in _CREATES.finditer(sql))
    requires = tuple(dict.fromkeys(n.strip() for line in _REQUIRES.findall(sql) for n in line.split(",")
                                   if n.strip()))
    return SqlFile(name, sql, provides, requires)


def order_files(files: list[SqlFile], given: frozenset[str] = frozenset()) -> list[SqlFile]:
    """The files in dependency order: each after the files providing what it requires; name order otherwise.

    Parameters
    ----------
    files : parsed files (any order).
    given : names that exist before any file runs (the views).

    Returns
    -------
    The same files, ordered. Raises RuntimeError for a requirement nothing provides, or for a cycle.
    """
    provider = {obj: f.name for f in files for obj, _ in f.provides}
    needs: dict[str, set[str]] = {}
    for f in files:
        own = {obj for obj, _ in f.provides}
        for req in f.requires:
            if req not in provider and req not in given:
                raise RuntimeError(f"SQL file {f.name} requires {req!r}, which no view or SQL file creates")
        needs[f.name] = {provider[r] for r in f.requires if r not in own and r in provider}
    by_name = {f.name: f for f in files}
    ordered: list[SqlFile] = []
    done: set[str] = set()
    while len(done) < len(files):
        ready = sorted(n for n in by_name if n not in done and needs[n] <= done)
        if not ready:
            raise RuntimeError(f"SQL files require each other in a cycle: {', '.join(sorted(set(by_name) - done))}")
        done.add(ready[0])
        ordered.append(by_name[ready[0]])
    return ordered


def macro_files() -> list[SqlFile]:
    """Every macro file shipped with the package, in dependency order (views given)."""
    from .registry import VIEWS

    folder = resources.files("biaslab").joinpath("sql", "macros")
    files = [parse_file(e.name, e.read_text(encoding="utf-8")) for e in folder.iterdir() if e.name.endswith(".sql")]
    return order_files(files, frozenset(VIEWS))


def without_temp(sql: str) -> str:
    """The file's statements creating plain (not TEMP) objects, for an export's views.sql."""
    return _TEMP.sub(lambda m: "CREATE OR REPLACE " + m.group(1).upper(), sql).strip()
