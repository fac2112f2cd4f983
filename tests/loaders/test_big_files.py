"""Issue 45, item 1: a file of stimuli cannot exhaust the machine. A file is counted before any row is read and
refused above `--max-stimuli` rows; a header (or JSON line, or Parquet schema) wider than MAX_COLUMNS and a line
longer than MAX_LINE are refused in one line; what is loaded is read, checked and stored a block at a time (staged
on disk), and stores exactly what reading the file whole stored (same rows, same version)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from biaslab.cli import data_cmd
from biaslab.cli.main import biaslab as cli
from biaslab.loaders import readers
from biaslab.loaders.user.dataset import from_file
from biaslab.loaders.user.files import MAX_COLUMNS, MAX_LINE, count_rows, read_stimuli
from biaslab.warehouse import Warehouse

HEADER = ["item_id", "text", "slot", "options", "option_labels", "prime", "rating"]


def _rows(n: int) -> list[dict]:
    return [{"item_id": f"n{i // 2}", "text": f"Name{i // 2} said that BLANK called.", "slot": "BLANK",
             "options": "she|he", "option_labels": "female|male", "prime": f"Prime {i % 2}.", "rating": i % 7}
            for i in range(n)]


def _write(path, rows: list[dict]) -> None:
    if path.suffix == ".csv":
        path.write_text("\n".join([",".join(HEADER)] + [",".join(str(r[c]) for c in HEADER) for r in rows]) + "\n")
    elif path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        pq.write_table(pa.Table.from_pylist(rows), path)


def _digest(path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None


@pytest.fixture
def db(tmp_path):
    """A warehouse holding one small user dataset, so a refusal must leave existing bytes as they are."""
    path, small = tmp_path / "w.duckdb", tmp_path / "small.csv"
    _write(small, _rows(4))
    result = CliRunner().invoke(cli, ["data", "load", "--file", str(small), "--name", "small", "--db", str(path)])
    assert result.exit_code == 0, result.output
    return path


def _refused(db, args, *fragments) -> str:
    before = _digest(db)
    result = CliRunner().invoke(cli, [str(a) for a in args] + ["--db", str(db)])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 1 and len(lines) == 1 and lines[0].startswith("Error: "), result.output
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    assert _digest(db) == before
    return lines[0]


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_a_file_above_the_bound_is_refused_before_any_row_is_read(tmp_path, db, suffix, monkeypatch):
    path = tmp_path / f"big{suffix}"
    _write(path, _rows(11))
    read: list = []
    monkeypatch.setattr("biaslab.loaders.user.files.table_rows", lambda *a: read.append(a) or iter(()))
    _refused(db, ["data", "load", "--file", path, "--name", "big", "--max-stimuli", 10],
             f"big{suffix}: holds 11 rows of stimuli, above the bound of 10", "--max-stimuli")
    assert read == []  # refused by counting, before the reading pass
    monkeypatch.undo()
    result = CliRunner().invoke(cli, ["data", "load", "--file", str(path), "--name", "big", "--max-stimuli", "11",
                                      "--db", str(db)])
    assert result.exit_code == 0 and "big: 11 stimuli read, 11 new" in result.output, result.output


def test_rows_are_counted_exactly_when_quoted_fields_span_lines(tmp_path):
    path = tmp_path / "multi.csv"
    path.write_text('item_id,text\n' + "".join(f'i{k},"line one\nline two BLANK"\n' for k in range(10)) + "\n\n")
    assert count_rows(path) == 20  # non-blank lines: an upper bound
    with from_file(path, "multi", max_stimuli=10) as dataset:
        assert len(dataset.stimuli) == 10  # csv counts 10 rows: within
    with pytest.raises(Exception, match=r"holds more than 9 rows of stimuli \(20 non-blank lines\), above the bound"):
        from_file(path, "multi", max_stimuli=9)


def test_wide_files_are_refused_in_one_line(tmp_path, db):
    wide = tmp_path / "wide.csv"
    columns = ["item_id", "text"] + [f"c{k}" for k in range(100_000)]
    wide.write_text(",".join(columns) + "\n" + ",".join(["i1", "t"] + ["1"] * 100_000) + "\n")
    _refused(db, ["data", "load", "--file", wide, "--name", "wide"],
             "wide.csv:1: the header has 100,002 columns; a file of stimuli has at most 1,000")
    jsonl = tmp_path / "wide.jsonl"
    jsonl.write_text(json.dumps({"item_id": "i1", "text": "t", **{f"c{k}": k for k in range(MAX_COLUMNS)}}) + "\n")
    _refused(db, ["data", "load", "--file", jsonl, "--name", "wide"], "wide.jsonl:1: 1,002 fields")
    parquet = tmp_path / "wide.parquet"
    pq.write_table(pa.table({f"c{k}": [k] for k in range(MAX_COLUMNS + 1)}), parquet)
    _refused(db, ["data", "load", "--file", parquet, "--name", "wide"], "1,001 columns")


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_a_line_without_end_is_refused_before_it_is_read_whole(tmp_path, db, suffix):
    path = tmp_path / f"long{suffix}"
    head = "item_id,text\n" if suffix == ".csv" else '{"item_id": "i1", "text": "t"}\n'
    path.write_bytes(head.encode() + b"x" * (4 * MAX_LINE + 10))
    _refused(db, ["data", "load", "--file", path, "--name", "long"], f"long{suffix}:2: line longer than")


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_streamed_load_stores_what_reading_whole_stores(tmp_path, suffix, monkeypatch):
    rows = _rows(50)
    rows.insert(20, dict(rows[3]))  # a row repeated: one stimulus, its id twice in the version
    path = tmp_path / f"s{suffix}"
    if suffix == ".csv":
        rows[20]["rating"] = 99  # an exact repeat is refused in CSV; a different attribute is another condition
        rows[20]["prime"] = "Another prime."
    _write(path, rows)
    whole = read_stimuli(path, "s")  # every stimulus in memory, as loading did before
    monkeypatch.setattr(readers, "BLOCK_BYTES", 97)  # many blocks; rows cut at their ends
    monkeypatch.setattr("biaslab.loaders.user.staged.BATCH_ROWS", 7)
    with from_file(path, "s") as dataset:
        assert dataset.ids == [s.stimulus_id for s in whole]
        assert dataset.version == dataset.declaration.version([s.stimulus_id for s in whole])
        assert [s.to_row() for s in dataset.stimuli] == list({s.stimulus_id: s.to_row() for s in whole}.values())
    db = tmp_path / "w.duckdb"
    result = CliRunner().invoke(cli, ["data", "load", "--file", str(path), "--name", "s", "--db", str(db)])
    assert result.exit_code == 0, result.output
    with Warehouse.open(db, read_only=True) as wh:
        stored = wh.rows("SELECT stimulus_id, text, attrs FROM stimuli ORDER BY stimulus_id")
        version, ids = wh.rows("SELECT version, stimulus_ids FROM user_datasets")[0]
    expected = sorted({(s.stimulus_id, s.text, s.to_row()["attrs"]) for s in whole})
    assert stored == expected and len(stored) == len(whole) - (suffix != ".csv")
    assert (version, list(ids)) == (dataset.version, dataset.ids)
    assert f"version {version}" in result.output


def test_a_big_load_shows_progress(tmp_path, monkeypatch):
    path = tmp_path / "p.csv"
    _write(path, _rows(30))
    monkeypatch.setattr(data_cmd, "PROGRESS_ROWS", 10)
    monkeypatch.setattr("biaslab.loaders.user.staged.BATCH_ROWS", 10)
    result = CliRunner().invoke(cli, ["data", "load", "--file", str(path), "--name", "p", "--db",
                                      str(tmp_path / "w.duckdb")])
    assert result.exit_code == 0, result.output
    assert "reading " in result.output and "30/30 (100%)" in result.output, result.output


def test_a_million_rows_over_the_bound_are_refused_in_bounded_memory(tmp_path):
    """The held-out case of a 2.6 M-row CSV (past 6 GB on the old main), at 1,000,001 rows: refused in one line by
    the counting pass, the process's peak memory far under 1 GB, nothing written."""
    path = tmp_path / "million.csv"
    with open(path, "w") as f:
        f.write("item_id,text\n")
        for start in range(0, 1_000_001, 100_000):
            f.write("".join(f"i{k},Text {k} with BLANK.\n" for k in range(start, min(start + 100_000, 1_000_001))))
    db = tmp_path / "w.duckdb"
    script = ("import resource, subprocess, sys; p = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
              "print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); "
              "print(p.stdout + p.stderr)")
    done = subprocess.run([sys.executable, "-c", script, sys.executable, "-m", "biaslab.cli.biaslab_entry", "data",
                           "load", "--file", str(path), "--name", "million", "--db", str(db)],
                          capture_output=True, text=True, check=True)
    status, output = done.stdout.split("\n", 1)
    code, peak_kib = map(int, status.split())
    lines = output.strip().splitlines()
    assert code == 1 and len(lines) == 1, output
    assert "holds 1,000,001 rows of stimuli, above the bound of 1,000,000" in lines[0]
    assert peak_kib / 1024 < 500, peak_kib  # Python, duckdb and pyarrow imported: about 200 MB
    assert not db.exists()
