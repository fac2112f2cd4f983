"""Helpers that write small invented upstream files for the loader tests."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path


def write_rows(folder: Path, file: str, header: str, rows: Iterable[str]) -> Path:
    """Write `header` and `rows` (one line each) to `folder/file` (folders created as needed); returns `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / file).write_text(header + "\n" + "\n".join(rows) + "\n", encoding="utf-8")
    return folder


def table_writer(file: str, header: str) -> Callable[[Path, Iterable[str]], Path]:
    """`write(folder, rows)` for one dataset's file name and header line."""
    def write(folder: Path, rows: Iterable[str]) -> Path:
        return write_rows(folder, file, header, rows)

    return write
