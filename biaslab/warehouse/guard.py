"""Stop a DuckDB query on Ctrl-C or after a time limit, with one line instead of a traceback or a hang.

DuckDB runs a query in C++ without returning to Python, so a Python SIGINT handler (which runs only between Python
bytecodes of the main thread) cannot stop it, and DuckDB has no statement timeout setting. `Guard.call` therefore
runs each blocking DuckDB call (execute, fetchmany) on a daemon worker thread while the main thread waits on an
event: that wait is interrupted by Ctrl-C (POSIX) and times out at the deadline, and either way the main thread
calls DuckDB's own `interrupt()` on the connection, waits briefly for the worker to return, and raises `Stopped`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import duckdb

from .errors import WarehouseError

#: seconds to wait for DuckDB to honour an interrupt before giving up on the worker (a daemon thread)
GRACE_SECONDS = 5.0


class Stopped(WarehouseError):
    """A query stopped by its time limit or by Ctrl-C; `exit_code` is what the command exits with."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class Guard:
    """Runs DuckDB calls under one deadline for the whole session and stops them on Ctrl-C.

    Parameters
    ----------
    con : the DuckDB connection the calls use (interrupted on a stop).
    timeout : seconds for everything run through `call` together (None or 0: no limit).
    """

    def __init__(self, con: duckdb.DuckDBPyConnection, timeout: float | None) -> None:
        self.con, self.timeout = con, timeout or None
        self.deadline = None if self.timeout is None else time.monotonic() + self.timeout

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """`fn(*args)` on a worker thread; raises `Stopped` on the deadline or Ctrl-C, else returns or raises what
        `fn` did."""
        done, box = threading.Event(), {}

        def work() -> None:
            try:
                box["value"] = fn(*args)
            except BaseException as exc:  # handed to the main thread
                box["error"] = exc
            finally:
                done.set()

        threading.Thread(target=work, name="biaslab-query", daemon=True).start()
        try:
            left = None if self.deadline is None else max(0.0, self.deadline - time.monotonic())
            finished = done.wait(left)
        except KeyboardInterrupt:
            self.stop(done)
            raise Stopped("interrupted (Ctrl-C); nothing was written", exit_code=130) from None
        if not finished:
            self.stop(done)
            raise Stopped(f"query stopped after {self.timeout:g} s (--timeout); give a larger --timeout, or "
                          f"--timeout 0 for no limit")
        if "error" in box:
            if isinstance(box["error"], duckdb.InterruptException):
                raise Stopped("query interrupted", exit_code=130) from None
            raise box["error"]
        return box["value"]

    def stop(self, done: threading.Event | None = None) -> None:
        """Interrupt the connection's running query and wait up to `GRACE_SECONDS` for the worker to return."""
        self.con.interrupt()
        if done is not None:
            try:
                done.wait(GRACE_SECONDS)
            except KeyboardInterrupt:  # a second Ctrl-C: do not wait any longer
                pass
