"""Issue 45, item 8: damaged warehouses are named, and writers refuse a file that is not a complete warehouse.

A query reads only the blocks it needs, so a warehouse with random bytes in a table's block still answers
`biaslab sql` about other data; `biaslab warehouse check` reads every block of every table (DuckDB verifies each
block's checksum) and names the damaged table. A DuckDB file that holds tables but no biaslab schema version is
refused by every command, reader or writer, in one line, byte-identical afterwards."""

from __future__ import annotations

import hashlib
import os
import random
import shutil

import duckdb
import pytest
from click.testing import CliRunner

from biaslab.cli.main import biaslab
from biaslab.cli.runners_cli import runners

BLOCK = 262_144  # DuckDB's block size; the file starts with three 4 KiB headers


def _sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _run(cli, *args):
    return CliRunner().invoke(cli, [str(a) for a in args])


@pytest.fixture(scope="module")
def good(tmp_path_factory, data_dir):
    folder = tmp_path_factory.mktemp("damaged")
    db = folder / "good.duckdb"
    for dataset in ("winopron", "winogender"):
        if not (data_dir / dataset).exists():
            pytest.skip(f"dataset folder {dataset} is absent")
        assert _run(biaslab, "data", "load", dataset, "--db", db, "--data-dir", data_dir).exit_code == 0
    return db


def _damaged(good, folder, block: int):
    path = folder / f"block{block}.duckdb"
    shutil.copy(good, path)
    with open(path, "r+b") as f:
        f.seek(3 * 4096 + block * BLOCK + 1000)
        f.write(random.Random(block).randbytes(512))
    return path


def test_check_reads_every_block_and_names_the_damaged_table(good, tmp_path):
    found = None
    for block in reversed(range(1, os.path.getsize(good) // BLOCK)):  # the stimuli are written last
        path = _damaged(good, tmp_path, block)
        try:
            con = duckdb.connect(str(path), read_only=True)
        except duckdb.Error:
            continue  # a block the file's own catalog needs: opening fails (tested below with a truncated file)
        try:
            answered = con.execute("SELECT count(*) FROM stimuli").fetchone()[0]
        finally:
            con.close()
        before = _sha(path)
        result = _run(biaslab, "warehouse", "check", "--db", path)
        if result.exit_code == 1 and "PROBLEM blocks" in result.output:
            found = (path, answered, result, before)
            break
    assert found, "no block of a table could be damaged"
    path, answered, result, before = found
    assert answered == 3600 + 240  # a query that needs no damaged block answers as if nothing happened
    [line] = [ln for ln in result.output.splitlines() if ln.startswith("PROBLEM")]
    assert line.startswith("PROBLEM blocks ") and "cannot read every block" in line and "checksum" in line
    assert "Traceback" not in result.output and _sha(path) == before  # read-only
    assert _run(biaslab, "warehouse", "check", "--db", good).exit_code == 0


def test_a_truncated_warehouse_is_refused_in_one_line(good, tmp_path):
    path = tmp_path / "half.duckdb"
    shutil.copy(good, path)
    os.truncate(path, os.path.getsize(good) // 2)
    before = _sha(path)
    for args in (("warehouse", "check"), ("sql", "select count(*) from stimuli"), ("info",)):
        result = _run(biaslab, *args, "--db", path)
        assert result.exit_code == 1 and "Traceback" not in result.output, result.output
        assert result.output.count("\n") == 1 and str(path.name) in result.output
    assert _sha(path) == before


def test_a_duckdb_file_without_the_biaslab_schema_is_refused_by_readers_and_writers(tmp_path, data_dir, tiny_gpt2):
    path = tmp_path / "other.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE measurements AS SELECT range AS i FROM range(10)")
    con.close()
    before = _sha(path)
    for cli, args in ((biaslab, ("data", "load", "winogender", "--data-dir", data_dir)),
                      (biaslab, ("sql", "select 1")), (biaslab, ("info",)), (biaslab, ("warehouse", "check")),
                      (runners, ("collect", "--dataset", "winogender", "--limit", "2", "--model", "/no/such/model"))):
        result = _run(cli, *args, "--db", path)
        assert result.exit_code != 0 and "Traceback" not in result.output, result.output
        if args[0] != "collect":  # collect refuses the missing model first, before opening anything
            assert "not a complete biaslab warehouse" in result.output and "measurements" in result.output
    from biaslab.runners.collect import CollectConfig, collect
    from biaslab.warehouse.errors import WarehouseError

    with pytest.raises(WarehouseError, match="not a complete biaslab warehouse"):
        collect(CollectConfig(dataset="winogender", db=str(path), data_dir=str(data_dir), limit=2), loaded=tiny_gpt2)
    assert _sha(path) == before


def _with_wal(good, folder, name: str):
    """A copy of `good` whose last write (a meta row) is committed but only in the WAL: written by
    a process that ended before any checkpoint."""
    import subprocess
    import sys

    path = folder / f"{name}.duckdb"
    shutil.copy(good, path)
    code = ("import duckdb, os, sys; con = duckdb.connect(sys.argv[1]); "
            "con.execute(\"SET wal_autocheckpoint='1TB'\"); "
            "con.execute(\"INSERT INTO meta VALUES ('committed_in_wal', 'yes')\"); os._exit(0)")
    subprocess.run([sys.executable, "-c", code, str(path)], check=True)
    wal = path.with_name(path.name + ".wal")
    assert wal.stat().st_size > 0
    return path, wal


def test_a_warehouse_whose_wal_replays_keeps_its_committed_row(good, tmp_path):
    path, wal = _with_wal(good, tmp_path, "replays")
    result = _run(biaslab, "sql", "select value from meta where key = 'committed_in_wal'", "--db", path,
                  "--format", "csv")
    assert result.exit_code == 0 and "yes" in result.output, result.output


@pytest.mark.parametrize("damage", ["header", "random"])
def test_a_damaged_wal_is_refused_and_never_deleted(good, tmp_path, data_dir, damage):
    """Bytes 8-72 overwritten, or a log of random bytes: DuckDB fails to replay the first and skips the second
    without a word (its committed row gone, and the next write deleted the log). Every command now refuses the
    warehouse in one line, readers and writers alike, and the log is left as it was."""
    path, wal = _with_wal(good, tmp_path, damage)
    data = bytearray(wal.read_bytes())
    if damage == "header":
        data[8:72] = random.Random(1).randbytes(64)
    else:
        data = bytearray(random.Random(2).randbytes(len(data)))
    wal.write_bytes(bytes(data))
    before = (_sha(path), _sha(wal))
    for cli, args in ((biaslab, ("info", "--db", path)), (biaslab, ("warehouse", "check", "--db", path)),
                      (biaslab, ("sql", "select 1", "--db", path)),
                      (biaslab, ("data", "load", "negation-examples", "--db", path, "--data-dir", data_dir))):
        result = _run(cli, *args)
        lines = result.output.strip().splitlines()
        assert result.exit_code == 1, (args, result.output)
        assert "did not replay its write-ahead log" in lines[-1] and "biaslab never deletes it" in lines[-1], lines
        assert "Traceback" not in result.output
        assert (_sha(path), _sha(wal)) == before  # nothing written, the log kept


@pytest.mark.parametrize("value", ["six", "9" * 5000, "-1"])
def test_a_schema_version_that_is_not_a_number_is_one_line_everywhere(good, tmp_path, data_dir, value):
    path = tmp_path / "edited.duckdb"
    shutil.copy(good, path)
    con = duckdb.connect(str(path))
    con.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", [value])
    con.close()
    before = _sha(path)
    for args in (("info", "--db", path), ("sql", "select 1", "--db", path), ("collections", "--db", path),
                 ("models", "--db", path), ("metrics", "bbq", "--db", path),
                 ("warehouse", "export", tmp_path / "out", "--db", path),
                 ("data", "load", "negation-examples", "--db", path, "--data-dir", data_dir)):
        result = _run(biaslab, *args)
        assert result.exit_code == 1 and "Traceback" not in result.output, (args, result.output)
        assert "not a version number" in result.output.strip().splitlines()[-1], (args, result.output)
    check = _run(biaslab, "warehouse", "check", "--db", path)
    assert check.exit_code == 1 and "not a version number" in check.output and "Traceback" not in check.output
    assert _sha(path) == before
