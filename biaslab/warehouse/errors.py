"""Errors raised by the warehouse layer, each with a message fit for a one-line CLI error."""


class WarehouseError(RuntimeError):
    """A warehouse cannot be opened, read or written as asked."""


class SchemaVersionError(WarehouseError):
    """The warehouse was written by a newer biaslab than the one installed."""
