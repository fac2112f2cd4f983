"""`biaslab warehouse export`: Parquet + views.sql seen by a plain DuckDB (no biaslab), versioned, re-importable;
`biaslab.open` on the warehouse and on the export."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys

import duckdb
import pytest
from click.testing import CliRunner

import biaslab
from biaslab.cli.main import biaslab as cli
from biaslab.warehouse import Warehouse
from biaslab.views import objects as view_objects
from biaslab.warehouse.migrations import current_version
from open_warehouse_evidence import build

PLAIN_DUCKDB = """
import duckdb, json, sys
con = duckdb.connect()
con.execute(open(sys.argv[1]).read())
names = json.loads(sys.argv[2])
print(json.dumps({n: con.execute(f"SELECT count(*) FROM {n}").fetchone()[0] for n in names}))
"""


@pytest.fixture(scope="module")
def exported(tmp_path_factory, data_dir):
    root = tmp_path_factory.mktemp("export")
    db = build(root / "w.duckdb", data_dir)
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    result = CliRunner().invoke(cli, ["warehouse", "export", str(root / "out"), "--db", str(db)],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before  # export never writes to the warehouse
    return db, root / "out"


def _counts(db, names):
    with Warehouse.open(db, read_only=True) as wh:
        return {n: wh.con.execute(f"SELECT count(*) FROM {n}").fetchone()[0] for n in names}


def test_plain_duckdb_sees_every_table_and_view_with_the_warehouse_counts(exported):
    db, out = exported
    views = [n for n, kind in view_objects() if kind == "view"]
    with Warehouse.open(db, read_only=True) as wh:
        names = wh.tables() + views
    expected = _counts(db, names)
    assert expected["winopron_pf"] > 0 and expected["misgendering_prob"] > 0
    # a separate interpreter that never imports biaslab
    done = subprocess.run([sys.executable, "-c", PLAIN_DUCKDB, "views.sql", json.dumps(names)],
                          capture_output=True, text=True, check=True, cwd=out)
    assert json.loads(done.stdout) == expected
    macro = subprocess.run([sys.executable, "-c", "import duckdb, sys; c = duckdb.connect(); "
                            "c.execute(open(sys.argv[1]).read()); "
                            "print(c.execute('SELECT count(*) FROM choice_probs_at(0.3, 20)').fetchone()[0])",
                            "views.sql"], capture_output=True, text=True, check=True, cwd=out)
    with Warehouse.open(db, read_only=True) as wh:
        assert int(macro.stdout) == wh.con.execute("SELECT count(*) FROM choice_probs_at(0.3, 20)").fetchone()[0]


def test_the_duckdb_cli_reads_a_moved_export(exported, tmp_path):
    """views.sql names its Parquet files relative to its folder: after the folder is moved (here: copied elsewhere
    and the original renamed away), the duckdb shell reads it from inside the folder, and from any other folder with
    file_search_path; the absolute paths of the old location appear nowhere in it."""
    duckdb_cli = shutil.which("duckdb")
    if duckdb_cli is None:
        pytest.skip("no duckdb CLI on PATH (pip install duckdb-cli)")
    db, out = exported
    expected = _counts(db, ["winopron_pf", "stimuli"])
    moved = tmp_path / "sent" / "export copy"
    shutil.copytree(out, moved)
    assert str(out) not in (moved / "views.sql").read_text()
    parked = out.with_name("away")
    out.rename(parked)  # nothing may still point at the old folder
    try:
        query = ["-c", "SELECT count(*) FROM winopron_pf", "-c", "SELECT count(*) FROM stimuli"]
        inside = subprocess.run([duckdb_cli, "-csv", "-noheader", "-c", ".read views.sql", *query],
                                capture_output=True, text=True, check=True, cwd=moved)
        elsewhere = subprocess.run([duckdb_cli, "-csv", "-noheader", "-c", f"SET file_search_path = '{moved}'",
                                    "-c", f".read '{moved / 'views.sql'}'", *query],
                                   capture_output=True, text=True, check=True, cwd=tmp_path)
    finally:
        parked.rename(out)
    for done in (inside, elsewhere):
        counts = [int(line) for line in done.stdout.split()]
        assert counts == [expected["winopron_pf"], expected["stimuli"]], done.stdout + done.stderr


def test_manifest_is_versioned(exported):
    db, out = exported
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["format"] == "biaslab-export" and manifest["export_format"] == 1
    assert manifest["schema_version"] == current_version()
    assert manifest["biaslab_version"] == biaslab.__version__
    assert {t: v["rows"] for t, v in manifest["tables"].items()} == _counts(db, list(manifest["tables"]))
    assert {v["name"] for v in manifest["views"]} == {n for n, _ in view_objects()}


def test_export_refuses_a_non_empty_folder_unless_forced(exported, tmp_path):
    db, _ = exported
    target = tmp_path / "busy"
    target.mkdir()
    (target / "keep.txt").write_text("mine")
    result = CliRunner().invoke(cli, ["warehouse", "export", str(target), "--db", str(db)])
    assert result.exit_code == 1 and "not empty" in result.output and "--force" in result.output
    assert result.output.count("\n") == 1 and sorted(p.name for p in target.iterdir()) == ["keep.txt"]
    forced = CliRunner().invoke(cli, ["warehouse", "export", str(target), "--db", str(db), "--force"])
    assert forced.exit_code == 0 and (target / "views.sql").is_file() and (target / "keep.txt").is_file()


def test_import_refuses_evidence_of_a_model_without_a_record_and_leaves_no_file(exported, tmp_path):
    db, out = exported  # the synthetic warehouse stores rows of MODEL_B without its `models` record
    new = tmp_path / "refused.duckdb"
    result = CliRunner().invoke(cli, ["warehouse", "import", str(out), "--db", str(new)])
    assert result.exit_code == 1
    assert result.output.count("\n") == 1 and "column model_key" in result.output and "must be a row of models" in \
        result.output and "nothing was imported" in result.output
    assert list(tmp_path.iterdir()) == []


def test_import_round_trip_equals_the_warehouse(exported, tmp_path):
    from open_warehouse_evidence import MODEL_A, MODEL_B

    original, _ = exported
    db = tmp_path / "complete.duckdb"
    shutil.copy(original, db)
    with Warehouse.open(db) as wh:  # every model has its record (an import refuses rows of unknown models)
        wh.con.execute("INSERT INTO models SELECT * REPLACE (? AS model_key, 'synthetic-b' AS name) FROM models "
                       "WHERE model_key = ?", [MODEL_B, MODEL_A])
    out = tmp_path / "out"
    assert CliRunner().invoke(cli, ["warehouse", "export", str(out), "--db", str(db)]).exit_code == 0
    new = tmp_path / "again.duckdb"
    result = CliRunner().invoke(cli, ["warehouse", "import", str(out), "--db", str(new)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    with Warehouse.open(db, read_only=True) as a, Warehouse.open(new, read_only=True) as b:
        assert a.tables() == b.tables()
        for table in a.tables():
            assert a.con.execute(f"SELECT * FROM {table} ORDER BY ALL").fetchall() == \
                b.con.execute(f"SELECT * FROM {table} ORDER BY ALL").fetchall(), table
    again = CliRunner().invoke(cli, ["warehouse", "import", str(out), "--db", str(new)])
    assert again.exit_code == 1 and "exists" in again.output


def test_open_lists_tables_and_views_and_queries_with_ibis(exported, tmp_path):
    db, out = exported
    with biaslab.open(db) as wh:
        assert {"stimuli", "choice_probs", "winopron_pf", "pronoun_pair_probs"} <= set(wh.tables())
        n = wh.table("winopron_pf").count().execute()
        assert n == _counts(db, ["winopron_pf"])["winopron_pf"]
        assert wh.sql("SELECT count(*) AS n FROM choice_probs_at(0.3, 20)").execute()["n"][0] > 0
        with pytest.raises(Exception, match="no table or view"):
            wh.table("nope")
    moved = tmp_path / "moved"
    shutil.copytree(out, moved)
    shutil.rmtree(out.parent / "gone", ignore_errors=True)
    for engine in ("duckdb", "datafusion"):
        with biaslab.open(moved, engine=engine) as wh:  # a moved export reads its own files
            assert wh.table("winopron_pf").count().execute() == n
            assert wh.table("stimuli").count().execute() == _counts(db, ["stimuli"])["stimuli"]


def test_open_is_read_only_by_default(exported):
    db, _ = exported
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    with biaslab.open(db) as wh:
        with pytest.raises(duckdb.InvalidInputException):
            wh.warehouse.con.execute("DELETE FROM stimuli")
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before


@pytest.mark.parametrize("engine", ["duckdb", "datafusion"])
def test_an_export_without_a_later_table_reads_it_as_empty(tmp_path, engine):
    """An export of an older schema has no file for a table added since (here `imported_answers`, schema 12, which
    `option_probs` reads): both engines read it as an empty table, so every view still answers."""
    db, folder = tmp_path / "w.duckdb", tmp_path / "export"
    with Warehouse.open(db) as wh:
        wh.append("stimuli", [{"stimulus_id": "s1", "dataset": "d", "upstream_version": "v", "item_id": "i",
                               "text": "t", "options": ["a", "b"], "option_labels": ["x", "y"], "gold": "a"}])
    with biaslab.open(str(db)) as handle:
        handle.export(folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    (folder / manifest["tables"].pop("imported_answers")["file"]).unlink()
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with biaslab.open(str(folder), engine=engine) as handle:
        assert handle.fetch(handle.table("option_probs")).empty
        assert len(handle.fetch(handle.table("stimuli"))) == 1
