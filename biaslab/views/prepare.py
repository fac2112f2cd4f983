"""Refresh the connection statements shipped compiled (`biaslab/sql/views.json`, `biaslab.sql.prepared_views`)
after a view, a macro or the stored schema is edited: ``python -m biaslab.views.prepare``."""

from __future__ import annotations

import json
from pathlib import Path

from ..sql import prepared_views
from .compile import statements

__all__ = ["write_prepared"]


def write_prepared(path: str | Path | None = None) -> Path:
    """Write the connection statements (`statements(temp=True)`) compiled with Ibis now and the fingerprint of
    their sources into `path` (default: the package's `sql/views.json`); returns the path written."""
    target = Path(path) if path else Path(__file__).resolve().parent.parent / "sql" / prepared_views.FILE
    data = {"fingerprint": prepared_views.fingerprint(), "statements": [list(s) for s in statements(temp=True)]}
    target.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    return target


if __name__ == "__main__":
    print(f"wrote {write_prepared()}")
