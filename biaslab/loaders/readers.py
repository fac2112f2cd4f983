"""Strict readers for the delimited upstream files: every problem becomes a `DataError` with file, line, field."""

from __future__ import annotations

import csv
import hashlib
import io
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from .errors import DataError


@dataclass(frozen=True)
class Record:
    """One data row with its 1-based physical line number in the file."""

    file: Path
    line: int
    values: dict[str, str]

    def get(self, field: str, *, required: bool = True) -> str:
        """The field's value; empty values of required fields are an error naming the row."""
        value = self.values.get(field)
        if required and (value is None or value.strip() == ""):
            raise DataError(self.file, "empty value", line=self.line, field=field)
        return value if value is not None else ""

    def error(self, message: str, field: str | None = None) -> DataError:
        return DataError(self.file, message, line=self.line, field=field)


def read_text(path: Path) -> str:
    """Whole file as UTF-8 (a BOM is dropped); missing, empty or non-UTF-8 files raise `DataError`."""
    if not path.is_file():
        raise DataError(path, "file not found")
    raw = path.read_bytes()
    if not raw.strip():
        raise DataError(path, "file is empty", line=1)  # line 1: where the header or first record should be
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise DataError(path, f"not valid UTF-8 (byte 0x{raw[exc.start]:02x} at offset {exc.start})", line=line) from None


def read_table(path: Path, required: Sequence[str], *, delimiter: str = ",",
               allow_extra_cells: bool = False) -> list[Record]:
    """Rows of a delimited file with a header, checked against the `required` columns.

    A row with fewer cells than the header is an error naming the first missing field; more cells than the header
    is an error unless `allow_extra_cells` (some upstream TSVs carry trailing empty cells).
    """
    text = read_text(path)
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, strict=True)
    try:
        header = next(reader)
    except csv.Error as exc:
        raise DataError(path, f"unreadable header: {exc}", line=1) from None
    header = [h.strip() for h in header]
    for column in required:
        if column not in header:
            raise DataError(path, f"missing column (header has {header})", line=1, field=column)
    records: list[Record] = []
    line = reader.line_num
    try:
        for cells in reader:
            start, line = line + 1, reader.line_num
            if not cells or all(c.strip() == "" for c in cells):
                continue
            if len(cells) < len(header):
                raise DataError(path, f"short row: {len(cells)} of {len(header)} cells",
                                line=start, field=header[len(cells)])
            if len(cells) > len(header) and not allow_extra_cells:
                extra = [c for c in cells[len(header):] if c.strip()]
                if extra:
                    raise DataError(path, f"row has {len(cells)} cells, header has {len(header)}", line=start)
            records.append(Record(path, start, dict(zip(header, cells))))
    except csv.Error as exc:
        raise DataError(path, f"malformed row: {exc}", line=reader.line_num) from None
    if not records:
        raise DataError(path, "no data rows")
    return records


def unnamed_index(rec: Record) -> dict[str, int]:
    """{"index": n} from the row's unnamed pandas index column (header cell ""), or {} when the file has none.

    The value must be a non-negative integer; anything else is a `DataError` naming the row.
    """
    if "" not in rec.values:
        return {}
    index = rec.get("")
    if not index.strip().isdigit():
        raise rec.error(f"unnamed index column must be an integer, got {index!r}", "")
    return {"index": int(index)}


def files_digest(paths: Iterable[Path], length: int = 12) -> str:
    """sha256 over the bytes of the given files (in order): the upstream version stamped on stimuli."""
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return "sha256:" + digest.hexdigest()[:length]


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
