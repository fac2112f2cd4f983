"""Errors raised by the warehouse layer, each with a message fit for a one-line CLI error."""

from ..errors import WarehouseError  # re-exported: the class is `biaslab.errors.WarehouseError`

__all__ = ["WarehouseError", "SchemaVersionError", "is_interrupt"]


class SchemaVersionError(WarehouseError):
    """The warehouse was written by a newer biaslab than the one installed."""


def is_interrupt(exc: BaseException) -> bool:
    """Whether `exc` is an interruption: Ctrl-C (KeyboardInterrupt, and a collection's SIGTERM or SIGHUP, which
    raise a KeyboardInterrupt subclass) or the same as DuckDB reports it: a signal that arrived while DuckDB ran a
    statement on the main thread ends that statement with InterruptException, which some versions raise as
    RuntimeError("Query interrupted").

    Parameters
    ----------
    exc : the exception that ended the work.

    Returns
    -------
    bool : True for an interruption, False for any other error.
    """
    import duckdb

    return isinstance(exc, KeyboardInterrupt | duckdb.InterruptException) or (
        isinstance(exc, RuntimeError) and str(exc).strip().lower().startswith("query interrupted"))
