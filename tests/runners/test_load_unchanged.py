"""Loading what the warehouse already holds changes nothing, not even the file's bytes (issue 56, item 13): no run
row, no version row, the same sha256; a load that adds something is recorded as before."""

from __future__ import annotations

import hashlib

from click.testing import CliRunner

from biaslab.cli.main import biaslab
from biaslab.warehouse import Warehouse


def _sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _load(*args) -> str:
    result = CliRunner().invoke(biaslab, ["data", "load", *args])
    assert result.exit_code == 0, result.output
    return result.output


def test_a_second_load_of_the_same_file_leaves_the_warehouse_byte_identical(tmp_path, dataset_folder, data_dir):
    dataset_folder("winogender")
    db = tmp_path / "w.duckdb"
    rows = tmp_path / "mine.csv"
    rows.write_text("item_id,text,rating\ni1,The nurse said hello.,0.2\ni2,The doctor left.,0.7\n", encoding="utf-8")
    for args in (["--file", str(rows), "--name", "mine"], ["winogender", "--data-dir", str(data_dir)]):
        first = _load(*args, "--db", str(db))
        assert " 0 new" not in first
        before = _sha(db)
        with Warehouse.open(db, read_only=True) as wh:
            runs = wh.count("runs")
        again = _load(*args, "--db", str(db))
        assert " 0 new" in again
        assert _sha(db) == before
        with Warehouse.open(db, read_only=True) as wh:
            assert wh.count("runs") == runs
    # an edited attribute is a change: recorded, and the bytes differ
    rows.write_text("item_id,text,rating\ni1,The nurse said hello.,0.3\ni2,The doctor left.,0.7\n", encoding="utf-8")
    before = _sha(db)
    assert "1 with edited attributes" in _load("--file", str(rows), "--name", "mine", "--db", str(db))
    assert _sha(db) != before
