"""Stimuli from a user's table file: `biaslab data load --file stimuli.(csv|tsv|jsonl|parquet) --name NAME`.

Each row is one stimulus; its columns are `Stimulus` fields (`biaslab.schema.stimulus`). `text` and `item_id` are
required (stimuli of one item share its id: the unit of every confidence interval of `biaslab metrics options`);
`dataset` is the given name and `upstream_version` is `UPSTREAM_VERSION` (both set here; a `dataset` column must
hold the name or nothing, `upstream_version` and `stimulus_id` columns are refused: biaslab computes them).

* list fields (`options`, `option_labels`, `option_texts`): a JSON list (`["she", "he"]`) or `|`-separated text
  (`she|he`); in JSONL and Parquet also a native list;
* an `attrs` column holds a JSON object; every column that is not a field joins `attrs` (a CSV / TSV cell that
  reads as a number is stored as one, so `--by` and Spearman can use it), named as it is or, with the prefix
  `attrs.`, without it; a column one edit away from a field's name (`contxt`, `optoins`, `Context`: a letter added,
  dropped, changed or two swapped, or the case) is refused naming the field it is likely meant to be, unless
  written `attrs.NAME`;
* an empty cell is an absent value.

Every row is validated with the pydantic schema as it is read (a block at a time), before anything is stored: the
first bad row raises `DataError` naming the file, its line (CSV / TSV / JSONL) or row (Parquet), the field and the
reason.

Stimulus ids hash each row's content but its attributes (`SeenStimulus`: `attrs`, `stereotype_rating`), so loading
the same file twice adds nothing, an edited file gives new stimuli only for the rows whose text, options, labels or
condition changed (the others keep their evidence), and a row whose attributes alone changed keeps its id and its
evidence (its stored row is updated and the edit recorded, `attribute_edits`). The file's sha256 is the version
stored with the dataset (`user_datasets.file_sha256`), not part of the ids (docs/decisions.md, "Your own study").
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ...errors import UsageError
from ...schema import SeenStimulus, Stimulus
from ...schema.errors import first_error
from ..errors import DataError
from .bounded import MAX_DEPTH, check_depth, guarded
from .. import readers
from ..readers import LineStream, stream_table

#: `upstream_version` of every user stimulus (ids stay per row: see the module docstring)
UPSTREAM_VERSION = "user"
LIST_FIELDS = ("options", "option_labels", "option_texts")
FIELDS = tuple(Stimulus.model_fields)
COMPUTED = ("upstream_version", "stimulus_id")
FORMATS = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet"}
#: bounds on a file of stimuli (issue 45): columns (fields of a JSON line), characters of one line, and the rows
#: read and checked at a time
MAX_COLUMNS = 1_000
MAX_LINE = 1 << 20
BATCH_ROWS = 10_000
_NUMBER = re.compile(r"^-?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")


def file_format(path: Path) -> str:
    """'csv', 'tsv', 'jsonl' or 'parquet' from the file's suffix; ValueError otherwise."""
    kind = FORMATS.get(Path(path).suffix.lower())
    if kind is None:
        raise DataError(Path(path), f"unknown file type {Path(path).suffix or '(no suffix)'!r}; give a .csv, .tsv, "
                                    f".jsonl or .parquet file")
    return kind


def table_rows(path: Path, kind: str, required: tuple[str, ...] = ("text", "item_id")
          ) -> Iterator[tuple[int, dict[str, Any], str]]:
    """(line or row number, raw values, 'line' or 'row') of every data row, read a block at a time; a CSV / TSV
    header must name the `required` columns."""
    if kind in ("csv", "tsv"):
        for rec in stream_table(path, required, delimiter="\t" if kind == "tsv" else ",",
                                max_columns=MAX_COLUMNS, max_line=MAX_LINE):
            yield rec.line, {k: v for k, v in rec.values.items() if k}, "line"
    elif kind == "jsonl":
        stream = LineStream(path, max_line=MAX_LINE)
        number = 0
        for block in stream.blocks():
            for line in block:
                number += 1
                if line.strip():
                    yield number, _json_object(path, line, number), "line"
    else:
        parquet = _parquet(path)
        number = 0
        for batch in parquet.iter_batches(batch_size=BATCH_ROWS):
            for row in batch.to_pylist():
                number += 1
                yield number, row, "row"


def _json_object(path: Path, line: str, number: int) -> dict[str, Any]:
    """The JSON object of one line of a JSONL file."""
    try:
        with guarded(path):
            value = check_depth(json.loads(line), path, line=number)
    except json.JSONDecodeError as exc:
        raise DataError(path, f"invalid JSON: {exc.msg} (column {exc.colno})", line=number) from None
    except DataError as exc:  # nesting: name the line too
        raise DataError(path, exc.message, line=number) from None
    if not isinstance(value, dict):
        raise DataError(path, f"each line holds one JSON object, got {type(value).__name__}", line=number)
    if len(value) > MAX_COLUMNS:
        raise DataError(path, f"{len(value):,} fields; a stimulus has at most {MAX_COLUMNS:,}", line=number)
    return value


def _parquet(path: Path):
    """The open Parquet file (its metadata read, not its rows), with at most MAX_COLUMNS columns."""
    import pyarrow.parquet as pq

    LineStream(path)  # the readers' refusal of a missing file, a folder, a FIFO or a device (never opened)
    try:
        parquet = pq.ParquetFile(path)
    except Exception as exc:  # noqa: BLE001 - pyarrow's errors for a damaged file vary
        raise DataError(path, f"not a readable Parquet file ({type(exc).__name__}: {exc})") from None
    if len(parquet.schema_arrow) > MAX_COLUMNS:
        raise DataError(path, f"{len(parquet.schema_arrow):,} columns; a file of stimuli has at most "
                              f"{MAX_COLUMNS:,}")
    return parquet


def count_rows(path: Path) -> int:
    """The data rows of a file of stimuli, counted without validating them: one pass over its bytes a block at a
    time (Parquet: its metadata), so a file too big to load is refused in seconds and bounded memory. Non-blank
    lines bound the rows from above (a quoted CSV field may span lines); CSV / TSV rows are counted exactly by
    `csv` only when that bound is what matters (above `bound`). A line longer than MAX_LINE is refused here."""
    path = Path(path)
    kind = file_format(path)
    if kind == "parquet":
        return _parquet(path).metadata.num_rows
    LineStream(path)  # the same refusal of a missing or irregular file as the readers
    lines, carry, number = 0, b"", 1
    with open(path, "rb") as f:
        while block := f.read(readers.BLOCK_BYTES):
            parts = (carry + block).split(b"\n")
            carry = parts.pop()
            for part in parts:
                if len(part) > 4 * MAX_LINE:  # UTF-8: at most 4 bytes a character
                    raise LineStream.too_long(path, MAX_LINE, number)
                number += 1
                lines += bool(part.strip())
            if len(carry) > 4 * MAX_LINE:
                raise LineStream.too_long(path, MAX_LINE, number)
    lines += bool(carry.strip())
    return lines if kind == "jsonl" else max(lines - 1, 0)


def _csv_rows(path: Path, kind: str, stop: int) -> int:
    """The data rows of a CSV / TSV file as `csv` reads it (quoted fields may span lines), counted up to `stop`."""
    import csv

    rows = 0
    with open(path, newline="", encoding="utf-8-sig", errors="replace") as f:
        reader = csv.reader(f, delimiter="\t" if kind == "tsv" else ",")
        try:
            for cells in reader:
                rows += any(c.strip() for c in cells)
                if rows > stop:  # the header and `stop` data rows
                    break
        except csv.Error:
            return 0  # unreadable: the reading pass names the line
    return max(rows - 1, 0)


def check_size(path: Path, bound: int) -> int:
    """The file's data rows (`count_rows`); `DataError` when there are more than `bound`, before any is read."""
    rows = count_rows(path)
    kind = file_format(Path(path))
    if rows > bound and kind in ("csv", "tsv"):  # non-blank lines: rows, unless quoted fields span lines
        exact = _csv_rows(path, kind, bound + 1)
        if exact <= bound:
            return exact
        if exact < rows:  # counted up to the bound only
            raise DataError(path, f"holds more than {bound:,} rows of stimuli ({rows:,} non-blank lines), above the "
                                  "bound; raise it with --max-stimuli if you mean it")
    if rows > bound:
        raise DataError(path, f"holds {rows:,} rows of stimuli, above the bound of {bound:,}; raise it with "
                              "--max-stimuli if you mean it")
    return rows


def _too_deep(value: Any) -> bool:
    try:
        check_depth(value, "")
    except DataError:
        return True
    return False


def _cell(value: Any) -> Any:
    """A typed `attrs` value of a text cell: a number where the text is one, else the text."""
    if isinstance(value, str) and _NUMBER.match(value.strip()):
        number = float(value)
        return int(number) if number.is_integer() and "." not in value and "e" not in value.lower() else number
    return value


def _list(value: Any, field: str, error) -> list | None:
    if value is None or isinstance(value, (list, tuple)):
        return None if value is None else list(value)
    text = str(value).strip()
    if text.startswith("["):
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError as exc:
            raise error(f"not a JSON list ({exc.msg})", field) from None
        except RecursionError:
            raise error(f"nested deeper than {MAX_DEPTH} levels", field) from None
        if _too_deep(parsed):
            raise error(f"nested deeper than {MAX_DEPTH} levels", field)
        if not isinstance(parsed, list):
            raise error("not a JSON list", field)
        return parsed
    return [part.strip() for part in text.split("|")]


def stimulus_fields(raw: dict[str, Any], name: str, error) -> dict[str, Any]:
    """The `Stimulus` fields of one raw row (see the module docstring); `error(message, field)` builds the error."""
    for column in COMPUTED:
        if column in raw and raw[column] not in (None, ""):
            raise error(f"{column} is computed by biaslab; remove the column", column)
    given = raw.get("dataset")
    if given not in (None, "", name):
        raise error(f"dataset {given!r} differs from the name given ({name!r})", "dataset")
    fields: dict[str, Any] = {"dataset": name, "upstream_version": UPSTREAM_VERSION}
    attrs: dict[str, Any] = {}
    if raw.get("attrs") not in (None, ""):
        value = raw["attrs"]
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as exc:
                raise error(f"not a JSON object ({exc.msg})", "attrs") from None
            except RecursionError:
                raise error(f"nested deeper than {MAX_DEPTH} levels", "attrs") from None
        if _too_deep(value):
            raise error(f"nested deeper than {MAX_DEPTH} levels", "attrs")
        if not isinstance(value, dict):
            raise error("attrs must be a JSON object", "attrs")
        attrs.update(value)
    for key in raw:
        twin = _twin(key)
        if twin is not None:
            raise error(f"column {key!r} is one letter away from the field {twin!r}: rename it {twin!r}, or "
                        f"{'attrs.' + key!r} to keep it as an attribute", key)
    for key, value in raw.items():
        if key in ("dataset", "attrs", *COMPUTED) or value is None or value == "":
            continue
        if key in LIST_FIELDS:
            fields[key] = _list(value, key, error)
        elif key in FIELDS:
            fields[key] = value
        else:
            attrs[key.removeprefix(ATTRIBUTE)] = _cell(value)
    fields["attrs"] = attrs
    return fields


#: the prefix of a column declared as an attribute (`attrs.contxt` is the attribute `contxt`, never a typo)
ATTRIBUTE = "attrs."


def _one_edit(a: str, b: str) -> bool:
    """Whether `a` and `b` differ by exactly one edit: a character added, dropped or changed, or two neighbours
    swapped (optimal string alignment distance 1)."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        diff = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
        return len(diff) == 1 or (len(diff) == 2 and diff[1] == diff[0] + 1 and a[diff[0]] == b[diff[1]]
                                  and a[diff[1]] == b[diff[0]])
    short, long = (a, b) if len(a) < len(b) else (b, a)
    return any(long[:i] + long[i + 1:] == short for i in range(len(long)))


def _twin(column: str) -> str | None:
    """The field a column name is one edit away from (a likely typo), or None: a field, a computed or `attrs`
    column, a declared attribute (`attrs.NAME`) and names of fewer than 4 characters are what they are."""
    if column in FIELDS or column in ("attrs", *COMPUTED) or column.startswith(ATTRIBUTE) or len(column) < 4:
        return None
    low = column.lower()
    return next((f for f in FIELDS if len(f) >= 4 and (low == f or _one_edit(low, f))), None)


def located(problem) -> tuple[str | None, str]:
    """(field, message) of a schema error; a whole-stimulus check names its field first ("options: ...")."""
    field = problem.field.split(".")[0] or None
    message = problem.message
    head, sep, rest = message.partition(": ")
    if field is None and sep and head in FIELDS:
        field, message = head, rest
    return field, message


#: what tells two stimuli of one item apart in a user's file: two rows equal on all of these are one condition twice
CONDITION_FIELDS = ("item_id", "context", "option_order", "form", "prime", "pronoun_set", "grammatical_case",
                    "options")


def _condition_key(stimulus: Stimulus) -> int:
    """A 64-bit digest of the stimulus's condition (CONDITION_FIELDS): what two rows of one condition share."""
    values = json.dumps([getattr(stimulus, f) for f in CONDITION_FIELDS], ensure_ascii=False, default=list)
    return int.from_bytes(hashlib.blake2b(values.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little")


def iter_stimuli(path: Path, name: str, cls: type[Stimulus] = SeenStimulus) -> Iterator[Stimulus]:
    """The stimuli of a user's file, of class `cls` (`SeenStimulus` keys what the model sees), in file order (see
    the module docstring), read a block at a time: memory stays bounded whatever the file's size (a condition seen
    is kept as a 64-bit digest, about 120 bytes a row; two conditions share one with a chance of 2^-64 a pair).
    Two rows of one condition must be the same row, attributes included. A bad row raises `DataError` when it is
    reached; a file without data rows raises it at the end."""
    path = Path(path)
    kind = file_format(path)  # a missing file, a folder, a FIFO or a device: refused by `_rows` (`LineStream`)
    seen: dict[int, int] = {}  # condition digest -> the first row's stimulus id (as a number) << 32 | its line or row
    for number, raw, unit in table_rows(path, kind):
        def error(message: str, field: str | None = None, _n=number, _u=unit) -> DataError:
            return DataError(path, message, line=_n, field=field) if _u == "line" else \
                DataError(path, f"row {_n}: {message}", field=field)

        for required in ("text", "item_id"):
            if raw.get(required) in (None, ""):
                raise error("empty value" if required in raw else "missing column", required)
        fields = stimulus_fields(raw, name, error)
        try:
            stimulus = cls(**fields)
        except ValidationError as exc:
            field, message = located(first_error(exc))
            raise error(message, field) from None
        identity = int(stimulus.content_id, 16)  # every field: two rows differing only in a rating are refused
        earlier = seen.setdefault(_condition_key(stimulus), identity << 32 | number)
        if earlier >> 32 != identity:
            raise error(f"item {stimulus.item_id!r} already has a stimulus for the same condition ({unit} "
                        f"{earlier & 0xFFFFFFFF}: same context, option order, form, prime and pronoun set) with a "
                        f"different text or attribute; give it another item_id or condition, or remove one", "item_id")
        yield stimulus
    if not seen:
        raise DataError(path, "no data rows")


def read_stimuli(path: Path, name: str) -> list[Stimulus]:
    """`iter_stimuli` as a list (for a small file: a big one is staged, `staged.Staged`)."""
    return list(iter_stimuli(path, name))


def stimulus_record(stimulus: Stimulus) -> dict[str, Any]:
    """The row `read_stimuli` reads back into the same stimulus (no dataset / upstream_version; absent fields
    left out)."""
    row = stimulus.model_dump(mode="json", exclude={"dataset", "upstream_version"})
    return {k: v for k, v in row.items() if v not in (None, {}, [])}


def write_rows(stimuli: list[Stimulus], out: str | Path | None) -> int:
    """Write the stimuli as rows `read_stimuli` reads back: JSON lines (`out` None: standard output, or a .jsonl
    file) or CSV (a .csv file: list fields and attrs as JSON text). Returns the rows written."""
    import csv
    import sys

    records = [stimulus_record(s) for s in stimuli]
    if out is None or Path(out).suffix.lower() in (".jsonl", ".ndjson"):
        lines = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
        if out is None:
            sys.stdout.write(lines)
        else:
            Path(out).write_text(lines, encoding="utf-8")
        return len(records)
    if Path(out).suffix.lower() != ".csv":
        raise UsageError(f"--out {out}: write a .jsonl or .csv file")
    columns = list(dict.fromkeys(k for r in records for k in r))
    with open(out, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        for r in records:
            writer.writerow({k: json.dumps(v, ensure_ascii=False) if isinstance(v, (list, dict)) else v
                             for k, v in r.items()})
    return len(records)
