"""Errors raised by the warehouse layer, each with a message fit for a one-line CLI error."""

from ..errors import WarehouseError  # re-exported: the class is `biaslab.errors.WarehouseError`

__all__ = ["WarehouseError", "SchemaVersionError"]


class SchemaVersionError(WarehouseError):
    """The warehouse was written by a newer biaslab than the one installed."""
