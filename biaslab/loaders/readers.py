"""Strict readers for the delimited upstream files: every problem becomes a `DataError` with file, line, field.

What every reader here refuses (each error names the file and the line, and the field where there is one):

* a file that is missing, not a regular file (a directory, FIFO or device: never opened), empty or not UTF-8 (a
  UTF-8 BOM is dropped); `load_text` reads a name ending in .gz decompressed, by the same rules, and names a damaged
  gzip file;
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
import gzip
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

    def lines(self, allow_nul: bool = False) -> tuple[list[str], bool]:
        """The physical lines (without terminators) and whether the last one ends with a line break; a NUL
        character (unless `allow_nul`) or a line longer than MAX_LINE characters is refused (`check_lines`)."""
        lines = self.text.split("\n")
        terminated = lines[-1] == ""
        if terminated:
            lines.pop()
        check_lines(self.path, lines, 1, MAX_LINE, allow_nul)
        return lines, terminated

    def unterminated_ok(self) -> bool:
        """A missing final line break is accepted only in a file that is exactly a pinned upstream file."""
        return pinned_upstream(self.sha256)


#: the longest line any loader reads (characters): a dataset row is far shorter (BBQ's longest is about 2,000)
MAX_LINE = 1 << 20


def check_lines(path: Path, lines: Sequence[str], first: int, max_line: int | None, allow_nul: bool = False) -> None:
    """The one rule of every loader for what a line may hold: no NUL character (no text of a stimulus has one, and
    DuckDB, terminals and tokenizers treat it differently), and at most `max_line` characters. DataError naming
    the file and the line otherwise; `first` is the number of `lines[0]`. `allow_nul` is for files that are not
    stimuli: an annotation sheet quotes a model's raw continuations, which may hold one, and checks its own cells."""
    for index, line in enumerate(lines):
        if max_line is not None and len(line) > max_line:
            raise LineStream.too_long(path, max_line, first + index)
        if not allow_nul and "\x00" in line:
            raise DataError(path, f"a NUL character (\\x00) at column {line.index(chr(0)) + 1}; a text file "
                                  f"holds none (a binary file, or a damaged one?)", line=first + index)


def _openable(path: Path) -> Path:
    """`path`, when it is a regular file; `DataError` otherwise (never opened: a FIFO would wait forever, a device
    never ends)."""
    path = Path(path)
    if not path.exists():
        raise DataError(path, "file not found")
    if not path.is_file():
        raise DataError(path, f"not a regular file ({_kind(path)}); give the path of a file")
    return path


def _not_utf8(path: Path, raw: bytes, exc: UnicodeDecodeError, line: int = 1, offset: int = 0) -> DataError:
    """The error for bytes `raw` (starting on `line`, at byte `offset` of the file) that are not UTF-8."""
    return DataError(path, f"not valid UTF-8 (byte 0x{raw[exc.start]:02x} at offset {offset + exc.start})",
                     line=line + raw[: exc.start].count(b"\n"))


def load_text(path: Path) -> Text:
    """The file's text and sha256 (of its bytes as stored); see `read_text`. A name ending in .gz is gzip's:
    decompressed first, then read by the same rules."""
    path = _openable(path)
    raw = path.read_bytes()
    sha, _ = observe(path, raw)  # the checksum comes first: a damaged pinned file is named as such
    if path.suffix == ".gz":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as exc:
            raise DataError(path, f"cannot be read as gzip ({exc})") from None
    if not raw.strip():
        raise DataError(path, "file is empty", line=1)  # line 1: where the header or first record should be
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise _not_utf8(path, raw, exc) from None
    return Text(path, text.replace("\r\n", "\n"), sha)


#: bytes a `LineStream` reads at a time
BLOCK_BYTES = 1 << 22
BOM = b"\xef\xbb\xbf"


class LineStream:
    """A file's physical lines read a block at a time, so memory stays bounded whatever the file's size: the same
    lines as `load_text(path).lines()` (UTF-8, a BOM dropped, CRLF normalized to LF, the same refusals of a
    missing, irregular, empty or non-UTF-8 file), in blocks of whole lines.

    `max_line` (characters) refuses a longer line in one line naming it, before it is decoded whole: a file
    without line breaks is never read into memory. Once `blocks()` is exhausted, `sha256` is the file's sha256 and
    `terminated` says whether its last line ends with a line break.
    """

    def __init__(self, path: Path, *, max_line: int | None = None, block_bytes: int | None = None):
        self.path = _openable(path)
        self.max_line = max_line
        self.block_bytes = block_bytes or BLOCK_BYTES
        self.sha256: str | None = None
        self.terminated = True

    @staticmethod
    def too_long(path: Path, max_line: int, line: int) -> DataError:
        """The refusal of line `line`, longer than `max_line` characters."""
        return DataError(path, f"line longer than {max_line:,} characters; a row is far shorter (a file without "
                               "line breaks?)", line=line)

    def _long(self, line: int) -> DataError:
        return self.too_long(self.path, self.max_line, line)

    def _decode(self, raw: bytes, line: int, offset: int) -> list[str]:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _not_utf8(self.path, raw, exc, line, offset) from None
        lines = text.split("\n")
        last = lines.pop()  # "" after a final line break, else the unterminated last line
        lines = [part[:-1] if part.endswith("\r") else part for part in lines]  # CRLF: the CR goes
        if last:
            lines.append(last)
        check_lines(self.path, lines, line, self.max_line)
        return lines

    def blocks(self):
        """Lists of whole lines (without their line breaks), in file order."""
        with open(self.path, "rb") as f:  # any byte but white space? (a file of blanks is refused as empty)
            while (raw := f.read(self.block_bytes)) and not raw.strip():
                pass
        if not raw:
            raise DataError(self.path, "file is empty", line=1)
        digest = hashlib.sha256()
        line = 1
        with open(self.path, "rb") as f:
            carry = f.read(len(BOM))
            digest.update(carry)
            carry, offset = (b"", len(BOM)) if carry == BOM else (carry, 0)
            while raw := f.read(self.block_bytes):
                digest.update(raw)
                data = carry + raw
                cut = data.rfind(b"\n") + 1
                part, carry = data[:cut], data[cut:]
                if self.max_line is not None and len(carry) > 4 * self.max_line:  # UTF-8: at most 4 bytes a char
                    raise self._long(line + part.count(b"\n"))
                if part:
                    yield self._decode(part, line, offset)
                    line, offset = line + part.count(b"\n"), offset + cut
        self.sha256, self.terminated = digest.hexdigest(), not carry
        if carry:
            yield self._decode(carry, line, offset)


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

    A name ending in .gz is decompressed first. Missing, empty or non-UTF-8 files (or a damaged gzip file) and,
    inside `DatasetInfo.load`, a pinned file whose bytes differ from the pinned sha256 raise `DataError`. A bare
    CR is left in place (`read_lines` and `read_table` refuse it outside quoted fields).
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
                 *, multiline: bool, before: int = 0) -> tuple[list[str], int]:
    """The cells of the record starting at `lines[k]` (line `before` + k + 1: `lines` may start `before` lines into
    the file) and the index of the line after it.

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
        raise _csv_error(path, text, before + k + 1, refusal, delimiter, header, multiline=multiline)
    if error := _stray_quote(path, text, before + k + 1, cells, header):
        raise error
    if text.endswith("\r\n"):
        raise _bare_cr(path, before + end)
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


#: records a streamed table may hold back waiting for a quoted field to close before it is refused as unterminated
MAX_PENDING_LINES = 10_000


def _records(path: Path, blocks, delimiter: str, multiline: bool):
    """(first line, cells, header, is the file's last record) of every record of `blocks` (lists of whole lines),
    the header first (`header` None), read with `_read_record`. A record is taken once the lines after it are
    read, so one that spans two blocks is read whole; one still open after `MAX_PENDING_LINES` lines is refused
    where it opens."""
    buffer: list[str] = []
    before, k, header, exhausted = 0, 0, None, False
    blocks = iter(blocks)
    while True:
        if k >= len(buffer) and exhausted:
            return
        try:
            cells, end = _read_record(path, buffer, k, delimiter, header, multiline=multiline, before=before) \
                if k < len(buffer) else (None, k)
            problem = None
        except DataError as error:
            cells, end, problem = None, k, error
        if cells is None or (end == len(buffer) and not exhausted):
            if exhausted or (problem is not None and len(buffer) - k > MAX_PENDING_LINES):
                raise problem
            del buffer[:k]
            before, k = before + k, 0
            block = next(blocks, None)
            exhausted = block is None
            buffer.extend(block or ())
            continue
        yield before + k + 1, cells, header, exhausted and end == len(buffer)
        if header is None:
            header = _header_of(cells)
        k = end


def _header_of(cells: Sequence[str]) -> list[str]:
    """The column names of a header record (a blank first line: one unnamed column)."""
    return [h.strip() for h in cells] or [""]


def _row_key(cells: Sequence[str]) -> int:
    """A 64-bit digest of a row's cells: what an exact repeat is found by, in about 100 bytes a row (two rows that
    differ share one with a chance of 2^-64 a pair: 3e-8 in a file of a million rows)."""
    digest = hashlib.blake2b(digest_size=8)
    for cell in cells:
        digest.update(len(cell).to_bytes(8, "little"))
        digest.update(cell.encode("utf-8", "surrogatepass"))
    return int.from_bytes(digest.digest(), "little")


def _table(path: Path, blocks, required: Sequence[str], *, delimiter: str, allow_extra_cells: bool,
           allow_duplicates: bool, multiline: bool, cut_at_end, max_columns: int | None = None):
    """The `Record`s of a delimited file given as `blocks` of lines (see `read_table`); `cut_at_end()`, asked at
    the file's last record, says whether the file lacks a final line break that it needs (it may be cut short)."""
    header: list[str] = []
    seen: dict[int, int] = {}
    for line, cells, known, last in _records(path, blocks, delimiter, multiline):
        if known is None:
            header = _header_of(cells)
            if max_columns is not None and len(header) > max_columns:
                raise DataError(path, f"the header has {len(header):,} columns; a file of stimuli has at most "
                                      f"{max_columns:,}", line=1)
            _check_header(path, header, required)
            continue
        if all(c.strip() == "" for c in cells):
            continue
        if last and cut_at_end():
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
            first = seen.setdefault(_row_key(cells), line)
            if first != line:
                raise DataError(path, f"duplicate row: exact repeat of line {first}", line=line)
        yield Record(path, line, dict(zip(header, cells)))
    if not header:
        raise DataError(path, "file is empty", line=1)


def _check_header(path: Path, header: Sequence[str], required: Sequence[str]) -> None:
    for index, name in enumerate(header):
        if name and name in header[:index]:
            raise DataError(path, f"column {name!r} appears twice in the header (columns {header.index(name) + 1} "
                                  f"and {index + 1}); which one holds the value would be a guess", line=1, field=name)
    for column in required:
        if column not in header:
            raise DataError(path, f"missing column (header has {header})", line=1, field=column)


def read_table(path: Path, required: Sequence[str], *, delimiter: str = ",", allow_extra_cells: bool = False,
               allow_duplicates: bool = False, multiline: bool = True, allow_nul: bool = False) -> list[Record]:
    """Rows of a delimited file with a header, checked against the `required` columns.

    See the module docstring for line ends, quoting and what is refused. A row with fewer cells than the header is
    an error naming the first missing field; more cells than the header is an error unless `allow_extra_cells`
    (some upstream TSVs carry trailing empty cells). A data row that repeats an earlier one exactly is an error
    naming both lines, unless `allow_duplicates`. Blank lines are skipped. Quoted fields may hold line breaks
    (`Record.line` is the line where the row starts) unless `multiline=False`: the dataset loaders pass that, as
    every upstream dataset file has one row per line, so a stray quote cannot swallow the lines after it.
    """
    text = load_text(path)
    lines, terminated = text.lines(allow_nul)
    records = list(_table(text.path, [lines], required, delimiter=delimiter, allow_extra_cells=allow_extra_cells,
                          allow_duplicates=allow_duplicates, multiline=multiline,
                          cut_at_end=lambda: not terminated and not text.unterminated_ok()))
    if not records:
        raise DataError(text.path, "no data rows")
    return records


def stream_table(path: Path, required: Sequence[str], *, delimiter: str = ",", max_columns: int | None = None,
                 max_line: int | None = None):
    """The `Record`s of `read_table(path, required, delimiter=delimiter)`, read a block at a time (`LineStream`):
    memory stays bounded whatever the file's size (an exact repeat of a row is found by a 64-bit digest of it).
    `max_columns` refuses a wider header, `max_line` a longer line, each in one line naming the file. A file
    without data rows yields nothing (the caller says so)."""
    stream = LineStream(path, max_line=max_line)
    yield from _table(stream.path, stream.blocks(), required, delimiter=delimiter, allow_extra_cells=False,
                      allow_duplicates=False, multiline=True, max_columns=max_columns,
                      cut_at_end=lambda: not stream.terminated and not pinned_upstream(stream.sha256 or ""))


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
