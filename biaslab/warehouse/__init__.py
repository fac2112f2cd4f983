"""The DuckDB evidence warehouse (docs/design.md sections 2-3)."""

from .errors import SchemaVersionError, WarehouseError
from .store import DEFAULT_DB, TABLE_KEYS, Rollback, Warehouse, schema_version

__all__ = ["DEFAULT_DB", "TABLE_KEYS", "Rollback", "SchemaVersionError", "Warehouse", "WarehouseError",
           "schema_version"]
