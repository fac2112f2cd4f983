"""Strict readers for the delimited upstream files: every problem becomes a `DataError` with file, line, field.

What every reader here refuses (each error names the file and the line, and the field where there is one):

* a file that is missing, not a regular file (a directory, FIFO or device: never opened), empty or not UTF-8 (a
  UTF-8 BOM is dropped);
* a header that names a column twice (which cell holds the value would be a guess);
* a pinned upstream file whose bytes differ from the pinned sha256, when read inside `DatasetInfo.load` (see
  `verify`; `accept_modified` loads it as a modified copy instead);
* a bare carriage return (CR not followed by LF) outside a quoted field;
* a file whose last row (or line) has no line break after it, named at that row: `head -c N` cuts a file mid-row,
  and a row cut inside its last field still has all its cells, so the missing line break is the only sign of the
  cut. Exception: a file that is byte for byte a pinned upstream file (three upstream files lack the final line
  break: WinoPron's new_templates.tsv and WinoBias's two occupation lists);
* in delimited files: a row with fewer cells than the header (or more, unless `allow_extra_cells`), a row that
  repeats an earlier data row exactly (unless `allow_duplicates`), an unterminated quoted field (named at the line
  where its quote opens, not at the end of the file), text after the closing quote of a field, a `"` inside an
  unquoted field (RFC 4180: such a field must be quoted and the `"` doubled), and with `multiline=False` (what the
  dataset loaders use) a quoted field that runs over a line break. Where a row has several problems, the error
  names the leftmost.

Delimited files are tokenized by the `csv` module (default dialect, `strict=True`, the given delimiter: a field
that starts with `"` is quoted, `""` inside it is one `"`). What csv accepts but is refused here, a `"` inside an
unquoted field and a CR ending a line, is found from csv's cells, and csv's own errors are placed at the line
where the quote opens (see `_stray_quote` and `_csv_error`).

Line ends (decided here): LF and CRLF both end a line, also mixed in one file; CRLF is normalized to LF before
parsing, so a CRLF copy of a file yields exactly the same rows and texts as the LF original. (Its bytes differ, so
a pinned file saved with CRLF is still refused by its checksum; accepted as modified, its stimuli have the same
content, stamped with the copy's own sha256 as `upstream_version`.) Upstream WinoPron and negation-examples files
are CRLF.
"""

from __future__ import annotations

import csv
import hashlib
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from .errors import DataError
from .verify import observe, pinned_upstream

QUOTE = '"'


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


@dataclass(frozen=True)
class Text:
    """A file's text (CRLF normalized to LF) and the sha256 of its bytes."""

    path: Path
    text: str
    sha256: str

    def lines(self) -> tuple[list[str], bool]:
        """The physical lines (without terminators) and whether the last one ends with a line break."""
        lines = self.text.split("\n")
        terminated = lines[-1] == ""
        if terminated:
            lines.pop()
        return lines, terminated

    def unterminated_ok(self) -> bool:
        """A missing final line break is accepted only in a file that is exactly a pinned upstream file."""
        return pinned_upstream(self.sha256)


def load_text(path: Path) -> Text:
    """The file's text and sha256; see `read_text`."""
    path = Path(path)
    if not path.exists():
        raise DataError(path, "file not found")
    if not path.is_file():  # checked before opening: reading a FIFO would wait forever, a device never ends
        raise DataError(path, f"not a regular file ({_kind(path)}); give the path of a file")
    raw = path.read_bytes()
    sha, _ = observe(path, raw)  # the checksum comes first: a damaged pinned file is named as such
    if not raw.strip():
        raise DataError(path, "file is empty", line=1)  # line 1: where the header or first record should be
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise DataError(path, f"not valid UTF-8 (byte 0x{raw[exc.start]:02x} at offset {exc.start})",
                        line=line) from None
    return Text(path, text.replace("\r\n", "\n"), sha)


def _kind(path: Path) -> str:
    """What a path that is not a regular file is, in words."""
    mode = path.stat().st_mode
    for test, word in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a device"),
                       (stat.S_ISBLK, "a device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return word
    return "not a plain file"


def read_text(path: Path) -> str:
    """Whole file as UTF-8 (a BOM is dropped) with CRLF line ends normalized to LF (see the module docstring).

    Missing, empty or non-UTF-8 files and, inside `DatasetInfo.load`, a pinned file whose bytes differ from the
    pinned sha256 raise `DataError`. A bare CR is left in place (`read_lines` and `read_table` refuse it outside
    quoted fields).
    """
    return load_text(path).text


def truncated_error(path: Path, line: int, what: str) -> DataError:
    return DataError(path, f"the file ends without a line break after this {what}, so it may be cut short "
                           f"(truncated file?); if the {what} is complete, end the file with a line break",
                     line=line)


def read_lines(path: Path, *, allow_duplicates: bool = False) -> list[tuple[int, str]]:
    """(1-based line number, line) for every physical line, blank ones included (line ends as in `read_text`).

    A non-blank line that repeats an earlier line exactly is an error naming both lines (unless
    `allow_duplicates`); so is a last line without a line break after it (see the module docstring).
    """
    text = load_text(path)
    lines, terminated = text.lines()
    for number, line in enumerate(lines, start=1):
        if "\r" in line:
            raise _bare_cr(text.path, number)
    if not terminated and lines and lines[-1].strip() and not text.unterminated_ok():
        raise truncated_error(text.path, len(lines), "line")
    if not allow_duplicates:
        seen: dict[str, int] = {}
        for number, line in enumerate(lines, start=1):
            if line.strip():
                first = seen.setdefault(line, number)
                if first != number:
                    raise DataError(text.path, f"duplicate line: exact repeat of line {first}", line=number)
    return list(enumerate(lines, start=1))


def _cell_name(header: Sequence[str] | None, index: int) -> str | None:
    return header[index] if header is not None and index < len(header) else None


def _bare_cr(path: Path, number: int) -> DataError:
    return DataError(path, "bare carriage return (CR without LF); lines must end in LF or CRLF", line=number)


def _quoted(cell: str) -> str:
    """A quoted cell as it stands in the file: in '"', each '"' doubled."""
    return QUOTE + cell.replace(QUOTE, 2 * QUOTE) + QUOTE


def _read_record(path: Path, lines: Sequence[str], k: int, delimiter: str, header: Sequence[str] | None,
                 *, multiline: bool) -> tuple[list[str], int]:
    """The cells of the record starting at `lines[k]` (line k + 1) and the index of the line after it.

    `csv.reader` (default dialect, `strict=True`) reads it from `lines[k]` alone with `multiline=False`, else from
    `lines[k:]`; its `line_num` counts the lines the record took. Refused besides what csv refuses (`_csv_error`):
    a `"` inside an unquoted field (`_stray_quote`) and a CR ending the line (csv ends the record there).
    """
    reader = csv.reader((lines[i] + "\n" for i in range(k, len(lines) if multiline else k + 1)),
                        delimiter=delimiter, strict=True)
    try:
        cells, refusal = next(reader), None
    except csv.Error as exc:
        cells, refusal = [], str(exc)
    end = k + reader.line_num
    text = "".join(line + "\n" for line in lines[k:end])  # what csv read
    if refusal is not None:
        raise _csv_error(path, text, k + 1, refusal, delimiter, header, multiline=multiline)
    if error := _stray_quote(path, text, k + 1, cells, header):
        raise error
    if text.endswith("\r\n"):
        raise _bare_cr(path, end)
    return cells, end


def _stray_quote(path: Path, text: str, first: int, cells: Sequence[str],
                 header: Sequence[str] | None) -> DataError | None:
    """The error for the first of csv's `cells`, read from `text` (starting on line `first`), that holds a `"`
    but was not quoted.

    No second tokenizer: csv quotes a field exactly when its first character is '"', and then its text is
    `_quoted(cell)`, else the cell itself; a delimiter comes before every cell but the first. So csv's cells, taken
    in order, say where each one stands in `text` and whether it was quoted.
    """
    if QUOTE not in text:
        return None
    pos = 0
    for index, cell in enumerate(cells):
        if index:
            pos += 1  # the delimiter
        if text.startswith(QUOTE, pos):
            pos += len(_quoted(cell))
        elif QUOTE in cell:
            return DataError(path, "stray '\"' inside an unquoted field (quote the whole field and double the "
                                   "'\"', or remove it)", line=first + text.count("\n", 0, pos),
                             field=_cell_name(header, index))
        else:
            pos += len(cell)
    return None


def _csv_error(path: Path, text: str, first: int, refusal: str, delimiter: str, header: Sequence[str] | None,
               *, multiline: bool) -> DataError:
    """The error for csv's `refusal` of the record `text` (starting on line `first`), placed with csv's help.

    * "unexpected end of data": a quoted field never closed. Read without `strict`, csv keeps it as the last cell;
      its text, `_quoted(cell)` without the closing '"', ends `text`, which places the opening '"'.
    * "'<delimiter>' expected after '\"'" and "new-line character seen in unquoted field": csv stops at the
      offending character, on the last line of `text`; the shortest prefix of `text` that csv refuses the same way
      ends with it. Before it stands the closing '"' of the field csv reads last from the prefix before it, or a
      bare CR (a run of them).
    A stray quote in a cell before the problem is reported instead: the error names the leftmost problem.
    """
    def read(prefix: str, strict: bool = True) -> list[str]:
        return next(csv.reader([prefix], delimiter=delimiter, strict=strict))

    def refused(prefix: str) -> bool:
        try:
            read(prefix)
        except csv.Error as exc:
            return str(exc) == refusal
        return False

    last = first + text.count("\n") - 1
    if "unexpected end of data" in refusal:
        cells = read(text, strict=False)
        at = len(text) - len(_quoted(cells[-1])) + 1  # the opening '"'
        why = "never closed" if multiline else "not closed on this line (a field may not span lines)"
        error = DataError(path, f"unterminated quoted field: the '\"' opening it here is {why}",
                          line=first + text.count("\n", 0, at), field=_cell_name(header, len(cells) - 1))
        cells.pop()
    elif "expected after" in refusal or "new-line character" in refusal:
        at = next(i for i in range(text.rfind("\n", 0, -1) + 1, len(text)) if refused(text[: i + 1]))
        if "new-line character" in refusal:
            at = len(text[:at].rstrip("\r"))  # the bare CR
            cells, error = read(text[:at]), _bare_cr(path, last)
        else:
            cells = read(text[:at])
            opened = first + text.count("\n", 0, at - len(_quoted(cells[-1])))
            closed = f" (it closes on line {last})" if last != opened else ""
            error = DataError(path, f"unexpected {text[at]!r} after the closing '\"' of the quoted field opened "
                                    f"here{closed}; a '\"' inside a quoted field must be doubled",
                              line=opened, field=_cell_name(header, len(cells) - 1))
    else:
        return DataError(path, f"unreadable record: {refusal}", line=last)
    return _stray_quote(path, text[:at], first, cells, header) or error


def read_table(path: Path, required: Sequence[str], *, delimiter: str = ",", allow_extra_cells: bool = False,
               allow_duplicates: bool = False, multiline: bool = True) -> list[Record]:
    """Rows of a delimited file with a header, checked against the `required` columns.

    See the module docstring for line ends, quoting and what is refused. A row with fewer cells than the header is
    an error naming the first missing field; more cells than the header is an error unless `allow_extra_cells`
    (some upstream TSVs carry trailing empty cells). A data row that repeats an earlier one exactly is an error
    naming both lines, unless `allow_duplicates`. Blank lines are skipped. Quoted fields may hold line breaks
    (`Record.line` is the line where the row starts) unless `multiline=False`: the dataset loaders pass that, as
    every upstream dataset file has one row per line, so a stray quote cannot swallow the lines after it.
    """
    text = load_text(path)
    path = text.path
    lines, terminated = text.lines()
    cells, k = _read_record(path, lines, 0, delimiter, None, multiline=multiline)
    header = [h.strip() for h in cells] or [""]  # a blank first line: one unnamed column
    for index, name in enumerate(header):
        if name and name in header[:index]:
            raise DataError(path, f"column {name!r} appears twice in the header (columns {header.index(name) + 1} "
                                  f"and {index + 1}); which one holds the value would be a guess", line=1, field=name)
    for column in required:
        if column not in header:
            raise DataError(path, f"missing column (header has {header})", line=1, field=column)
    cut_at_end = not terminated and not text.unterminated_ok()
    records: list[Record] = []
    seen: dict[tuple[str, ...], int] = {}
    while k < len(lines):
        line = k + 1
        cells, k = _read_record(path, lines, k, delimiter, header, multiline=multiline)
        if all(c.strip() == "" for c in cells):
            continue
        if cut_at_end and k == len(lines):
            if len(cells) < len(header):
                raise DataError(path, f"the file ends in the middle of this row: {len(cells)} of {len(header)} "
                                      "cells and no line break after it (truncated file?)",
                                line=line, field=header[len(cells)])
            raise truncated_error(path, line, "row")
        if len(cells) < len(header):
            raise DataError(path, f"short row: {len(cells)} of {len(header)} cells", line=line,
                            field=header[len(cells)])
        if len(cells) > len(header) and not allow_extra_cells:
            extra = [c for c in cells[len(header):] if c.strip()]
            if extra:
                raise DataError(path, f"row has {len(cells)} cells, header has {len(header)}", line=line)
        if not allow_duplicates:
            first = seen.setdefault(tuple(cells), line)
            if first != line:
                raise DataError(path, f"duplicate row: exact repeat of line {first}", line=line)
        records.append(Record(path, line, dict(zip(header, cells))))
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
