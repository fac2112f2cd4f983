"""The DuckDB evidence warehouse (docs/design.md sections 2-3)."""

from .errors import SchemaVersionError, WarehouseError
from .store import DEFAULT_DB, Rollback, Warehouse, schema_version

__all__ = ["DEFAULT_DB", "TABLE_KEYS", "Rollback", "SchemaVersionError", "Warehouse", "WarehouseError",
           "schema_version"]


def __getattr__(name: str):
    if name == "TABLE_KEYS":  # read on first use (`store.table_keys`): the schema module needs pyarrow
        from .store import table_keys

        return table_keys()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
