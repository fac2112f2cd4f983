"""The error every loader raises for bad input: one line naming the file, the line and the field."""

from __future__ import annotations

from pathlib import Path

from .. import errors


class DataError(errors.DataError):
    """Bad or missing dataset input, located as precisely as the format allows: the loaders' `biaslab.errors.DataError`
    (``DataError(file, message, line=, field=)``)."""

    def __init__(self, file: str | Path, message: str, *, line: int | None = None, field: str | None = None):
        self.file = str(file)
        self.line = line
        self.field = field
        self.message = message
        where = self.file + (f":{line}" if line is not None else "")
        what = f"field '{field}': " if field else ""
        super().__init__(f"{where}: {what}{message}")
