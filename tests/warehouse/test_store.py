"""Warehouse: migrations, version refusal, idempotent and atomic appends."""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pytest

from biaslab.warehouse import SchemaVersionError, Warehouse, WarehouseError, schema_version
from biaslab.warehouse import migrations


def _seq(n: int, model: str = "m1") -> pa.Table:
    return pa.table({
        "model_key": [model] * n, "request_id": [f"r{i}" for i in range(n)], "stimulus_id": ["s"] * n,
        "protocol": ["p"] * n, "scheme": ["causal"] * n, "text": ["t"] * n,
        "n_tokens": [3] * n, "sum_logprob": [-1.5] * n,
    })


def _tok(n: int, model: str = "m1") -> pa.Table:
    return pa.table({
        "model_key": [model] * (3 * n), "request_id": [f"r{i // 3}" for i in range(3 * n)],
        "position": [i % 3 for i in range(3 * n)], "token_id": list(range(3 * n)),
        "logprob": [-0.5] * (3 * n),
    })


def test_new_warehouse_has_current_schema_version(tmp_path):
    with Warehouse.open(tmp_path / "w.duckdb") as wh:
        assert schema_version(wh.con) == migrations.current_version()
        assert {"stimuli", "models", "runs", "sequence_scores", "token_scores", "meta"} <= set(wh.tables())


def test_older_warehouse_is_migrated(tmp_path):
    path = tmp_path / "old.duckdb"
    con = duckdb.connect(str(path))
    first = migrations.migrations()[0]
    con.execute(first.sql)
    con.execute("INSERT INTO meta VALUES ('schema_version', '1')")
    con.execute("INSERT INTO stimuli (stimulus_id, dataset, upstream_version, item_id, text) "
                "VALUES ('a','d','v','i','t')")
    con.close()
    with Warehouse.open(path) as wh:
        assert schema_version(wh.con) == migrations.current_version()
        assert wh.count("stimuli") == 1


def test_reader_refuses_unmigrated_and_writer_refuses_newer(tmp_path):
    path = tmp_path / "w.duckdb"
    Warehouse.open(path).close()
    con = duckdb.connect(str(path))
    con.execute("UPDATE meta SET value = '999' WHERE key = 'schema_version'")
    con.close()
    with pytest.raises(SchemaVersionError, match="schema version 999"):
        Warehouse.open(path)
    with pytest.raises(SchemaVersionError):
        Warehouse.open(path, read_only=True)


def test_reader_of_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(WarehouseError, match="no warehouse at"):
        Warehouse.open(tmp_path / "missing.duckdb", read_only=True)


def test_append_is_idempotent_and_deduplicates_inside_a_batch(warehouse):
    assert warehouse.append("sequence_scores", _seq(5)) == 5
    assert warehouse.append("sequence_scores", _seq(7)) == 2
    doubled = pa.concat_tables([_seq(3, "m2"), _seq(3, "m2")])
    assert warehouse.append("sequence_scores", doubled) == 3
    assert warehouse.count("sequence_scores") == 10


def test_children_written_only_for_new_parents(warehouse):
    assert warehouse.append_with_children("sequence_scores", _seq(4), {"token_scores": _tok(4)}) == 4
    assert warehouse.count("token_scores") == 12
    assert warehouse.append_with_children("sequence_scores", _seq(6), {"token_scores": _tok(6)}) == 2
    assert warehouse.count("token_scores") == 18
    # a different model never shares results
    assert warehouse.append_with_children("sequence_scores", _seq(6, "m2"), {"token_scores": _tok(6, "m2")}) == 6
    assert warehouse.count("token_scores") == 36


def test_failure_in_the_middle_of_an_append_leaves_tables_unchanged(warehouse, monkeypatch):
    warehouse.append_with_children("sequence_scores", _seq(2), {"token_scores": _tok(2)})
    before = (warehouse.count("sequence_scores"), warehouse.count("token_scores"))
    real = warehouse._insert_new
    calls = []

    def failing(table, *args, **kwargs):
        calls.append(table)
        if table == "token_scores":  # parent rows already inserted inside the transaction
            raise RuntimeError("injected failure")
        return real(table, *args, **kwargs)

    monkeypatch.setattr(warehouse, "_insert_new", failing)
    with pytest.raises(RuntimeError, match="injected"):
        warehouse.append_with_children("sequence_scores", _seq(5), {"token_scores": _tok(5)})
    assert calls == ["sequence_scores", "token_scores"]
    assert (warehouse.count("sequence_scores"), warehouse.count("token_scores")) == before
    monkeypatch.undo()
    # the warehouse stays usable and the retry completes the work
    assert warehouse.append_with_children("sequence_scores", _seq(5), {"token_scores": _tok(5)}) == 3
    assert warehouse.count("token_scores") == 15


def test_bad_rows_abort_the_whole_batch(warehouse):
    bad = _seq(3).set_column(7, "sum_logprob", pa.array([-1.0, None, -2.0]))  # NOT NULL violated by row 2
    with pytest.raises(duckdb.Error):
        warehouse.append("sequence_scores", bad)
    assert warehouse.count("sequence_scores") == 0


def test_runs_record_provenance(warehouse):
    run_id = warehouse.start_run("runners collect", {"dataset": "x"}, device="cpu")
    status, = warehouse.con.execute("SELECT status FROM runs WHERE run_id = ?", [run_id]).fetchone()
    assert status == "running"
    warehouse.finish_run(run_id, rows_added=7)
    row = warehouse.con.execute(
        "SELECT status, rows_added, finished_at IS NOT NULL, versions->>'duckdb' FROM runs WHERE run_id = ?", [run_id]
    ).fetchone()
    assert row == ("finished", 7, True, duckdb.__version__)


def test_read_only_handle_refuses_writes_and_serves_ibis(tmp_path):
    path = tmp_path / "w.duckdb"
    with Warehouse.open(path) as wh:
        wh.append("sequence_scores", _seq(3))
    with Warehouse.open(path, read_only=True) as ro:
        with pytest.raises(WarehouseError, match="read-only"):
            ro.append("sequence_scores", _seq(4))
        with pytest.raises(duckdb.Error, match="read-only"):
            ro.con.execute("DELETE FROM sequence_scores")
        t = ro.ibis().table("sequence_metrics")
        assert t.count().execute() == 3
        assert t.perplexity.mean().execute() == pytest.approx(2.718281828 ** 0.5)


def test_a_shared_writer_reopens_for_appends_without_the_views_and_makes_them_at_first_use(tmp_path, monkeypatch):
    # a chat collection reopens once per stored chunk: making the views took most of each reopen
    made = []
    original = Warehouse._create_views
    monkeypatch.setattr(Warehouse, "_create_views", lambda self: (made.append(1), original(self))[1])
    with Warehouse.open(tmp_path / "w.duckdb", shared=True) as wh:
        assert len(made) == 1  # the first open makes them
        for start in range(0, 6, 2):
            assert wh.append("sequence_scores", _seq(6).slice(start, 2)) == 2
            assert wh._con is None  # released after each commit
        assert wh.get_meta("schema_version") == str(migrations.current_version())
        assert len(made) == 1  # three reopens for appends (and one for meta) made no views
        assert wh.con.execute("SELECT count(*) FROM sequence_metrics").fetchone()[0] == 6  # a view, made on demand
        assert len(made) == 2
        wh.con.execute("SELECT count(*) FROM sequence_metrics")
        assert len(made) == 2
