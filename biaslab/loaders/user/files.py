"""Stimuli from a user's table file: `biaslab data load --file stimuli.(csv|tsv|jsonl|parquet) --name NAME`.

Each row is one stimulus; its columns are `Stimulus` fields (`biaslab.schema.stimulus`). `text` and `item_id` are
required (stimuli of one item share its id: the unit of every confidence interval of `biaslab metrics options`);
`dataset` is the given name and `upstream_version` is `UPSTREAM_VERSION` (both set here; a `dataset` column must
hold the name or nothing, `upstream_version` and `stimulus_id` columns are refused: biaslab computes them).

* list fields (`options`, `option_labels`, `option_texts`): a JSON list (`["she", "he"]`) or `|`-separated text
  (`she|he`); in JSONL and Parquet also a native list;
* an `attrs` column holds a JSON object; every column that is not a field joins `attrs` (a CSV / TSV cell that
  reads as a number is stored as one, so `--by` and Spearman can use it);
* an empty cell is an absent value.

Every row is validated with the pydantic schema before anything is returned: the first bad row raises `DataError`
naming the file, its line (CSV / TSV / JSONL) or row (Parquet), the field and the reason.

Stimulus ids hash each row's content, so loading the same file twice adds nothing, and an edited file gives new
stimuli only for the rows that changed (the old ones keep their evidence). The file's sha256 is the version stored
with the dataset (`user_datasets.file_sha256`), not part of the ids (docs/decisions.md, "Your own study").
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ...errors import UsageError
from ...schema import Stimulus
from ...schema.errors import first_error
from ..errors import DataError
from .bounded import MAX_DEPTH, check_depth, guarded
from ..readers import load_text, read_table

#: `upstream_version` of every user stimulus (ids stay per row: see the module docstring)
UPSTREAM_VERSION = "user"
LIST_FIELDS = ("options", "option_labels", "option_texts")
FIELDS = tuple(Stimulus.model_fields)
COMPUTED = ("upstream_version", "stimulus_id")
FORMATS = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet"}
_NUMBER = re.compile(r"^-?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")


def file_format(path: Path) -> str:
    """'csv', 'tsv', 'jsonl' or 'parquet' from the file's suffix; ValueError otherwise."""
    kind = FORMATS.get(Path(path).suffix.lower())
    if kind is None:
        raise DataError(Path(path), f"unknown file type {Path(path).suffix or '(no suffix)'!r}; give a .csv, .tsv, "
                                    f".jsonl or .parquet file")
    return kind


def _rows(path: Path, kind: str) -> Iterator[tuple[int, dict[str, Any], str]]:
    """(line or row number, raw values, 'line' or 'row') of every data row."""
    if kind in ("csv", "tsv"):
        for rec in read_table(path, ("text", "item_id"), delimiter="\t" if kind == "tsv" else ","):
            yield rec.line, {k: v for k, v in rec.values.items() if k}, "line"
    elif kind == "jsonl":
        for number, line in enumerate(load_text(path).text.split("\n"), start=1):
            if not line.strip():
                continue
            try:
                with guarded(path):
                    value = check_depth(json.loads(line), path, line=number)
            except json.JSONDecodeError as exc:
                raise DataError(path, f"invalid JSON: {exc.msg} (column {exc.colno})", line=number) from None
            except DataError as exc:  # nesting: name the line too
                raise DataError(path, exc.message, line=number) from None
            if not isinstance(value, dict):
                raise DataError(path, f"each line holds one JSON object, got {type(value).__name__}", line=number)
            yield number, value, "line"
    else:
        import pyarrow.parquet as pq

        try:
            table = pq.read_table(path)
        except Exception as exc:  # noqa: BLE001 - pyarrow's errors for a damaged file vary
            raise DataError(path, f"not a readable Parquet file ({type(exc).__name__}: {exc})") from None
        for number, row in enumerate(table.to_pylist(), start=1):
            yield number, row, "row"


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
    for key, value in raw.items():
        if key in ("dataset", "attrs", *COMPUTED) or value is None or value == "":
            continue
        if key in LIST_FIELDS:
            fields[key] = _list(value, key, error)
        elif key in FIELDS:
            fields[key] = value
        else:
            attrs[key] = _cell(value)
    fields["attrs"] = attrs
    return fields


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


def read_stimuli(path: Path, name: str) -> list[Stimulus]:
    """The stimuli of a user's file, in file order (see the module docstring); a bad row raises `DataError`."""
    path = Path(path)
    kind = file_format(path)
    if kind in ("jsonl", "parquet") and path.exists() and not path.is_file():
        load_text(path)  # the same refusal as the text readers (a folder, FIFO or device is never opened)
    if kind == "parquet" and not path.exists():
        raise DataError(path, "file not found")
    stimuli: list[Stimulus] = []
    seen: dict[tuple, tuple[int, str]] = {}
    for number, raw, unit in _rows(path, kind):
        def error(message: str, field: str | None = None, _n=number, _u=unit) -> DataError:
            return DataError(path, message, line=_n, field=field) if _u == "line" else \
                DataError(path, f"row {_n}: {message}", field=field)

        for required in ("text", "item_id"):
            if raw.get(required) in (None, ""):
                raise error("empty value" if required in raw else "missing column", required)
        fields = stimulus_fields(raw, name, error)
        try:
            stimulus = Stimulus(**fields)
        except ValidationError as exc:
            field, message = located(first_error(exc))
            raise error(message, field) from None
        key = tuple(getattr(stimulus, f) for f in CONDITION_FIELDS)
        earlier = seen.get(key)
        if earlier is not None and earlier[1] != stimulus.stimulus_id:
            where = "line" if unit == "line" else "row"
            raise error(f"item {stimulus.item_id!r} already has a stimulus for the same condition ({where} "
                        f"{earlier[0]}: same context, option order, form, prime and pronoun set) with a different "
                        f"text or attribute; give it another item_id or condition, or remove one", "item_id")
        seen.setdefault(key, (number, stimulus.stimulus_id))
        stimuli.append(stimulus)
    if not stimuli:
        raise DataError(path, "no data rows")
    return stimuli


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
