"""The statements every warehouse connection runs to define biaslab's views and macros, shipped compiled
(`views.json`) so that opening a warehouse imports neither Ibis nor sqlglot (issue 57: `biaslab sql` starts within
2x of a plain DuckDB script).

The file holds `biaslab.views.statements(temp=True)` (each view's Ibis expression compiled to DuckDB SQL, then the
macros) and a fingerprint of the sources they come from (`SOURCES`: the view definitions, the macros, the stored
schema). A process uses the file only when the fingerprint matches the installed sources (checked on its first
connection, `shipped`); a source edited since (a developer's checkout) falls back to compiling with Ibis, so a
stale file is never used. `python -m
biaslab.views.prepare` writes it; tests/sql/test_prepared_views.py checks that it equals the Ibis compilation.
"""

from __future__ import annotations

import functools
import hashlib
import json
from importlib import resources

__all__ = ["FILE", "SOURCES", "fingerprint", "read", "shipped"]

#: the shipped file, beside this module
FILE = "views.json"
#: the sources the statements are compiled from: (folder inside the package, file suffix)
SOURCES = (("views", ".py"), ("sql/macros", ".sql"), ("schema", "evidence.py"))


def fingerprint() -> str:
    """sha256 over the names and bytes of every source file of the statements, in name order."""
    root = resources.files("biaslab")
    digest = hashlib.sha256()
    for folder, suffix in SOURCES:
        place = root.joinpath(*folder.split("/"))
        for entry in sorted(place.iterdir(), key=lambda e: e.name):
            if entry.is_file() and entry.name.endswith(suffix):
                digest.update(f"{folder}/{entry.name}\0".encode())
                digest.update(entry.read_bytes())
    return digest.hexdigest()


def read() -> tuple[tuple[str, str], ...] | None:
    """The (object name, SQL statement) pairs of the shipped file when it was compiled from the installed sources;
    None when it is absent or stale (the caller compiles with Ibis instead)."""
    place = resources.files("biaslab").joinpath("sql", FILE)
    try:
        data = json.loads(place.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("fingerprint") != fingerprint():
        return None
    return tuple((str(name), str(sql)) for name, sql in data["statements"])


@functools.lru_cache(maxsize=1)
def shipped() -> tuple[tuple[str, str], ...] | None:
    """`read()`, once per process: a shared writer reconnects for every chunk it stores, and the sources do not
    change under a running process (as Ibis's compilation, `views.compile.compiled`, is cached too)."""
    return read()
