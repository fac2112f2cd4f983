"""The schema migrations shipped as package data in `biaslab/sql/schema/`.

`NNN_name.sql` are applied in order; the schema version of a warehouse is the number of the last one applied,
kept in `meta`. The columns they create are those of `biaslab.schema.evidence` (a test diffs the two). The views
and macros are not migrations: every connection defines them afresh from `biaslab.views`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
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


@cache
def current_version() -> int:
    """Schema version this package writes: the number of migration files (their names only: reading every file's
    SQL, as `migrations` does, costs each start a few milliseconds; counted once per process, as the package's
    files do not change under it). `migrations` checks they are numbered 1..N."""
    return sum(1 for entry in _sql_dir("schema").iterdir() if _MIGRATION_NAME.match(entry.name))
