"""Files someone sent you are data, never code (issue "field defects", A and B): crafted exports, shards and
warehouses given to `warehouse import`, `warehouse merge`, `biaslab.open`, `info` and `export` run no SQL of theirs,
write no file outside the target, leave the target unchanged (sha256) when refused, and fail in one line naming the
file, table, column and rule."""

from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import biaslab
from biaslab.cli.main import biaslab as cli
from biaslab.warehouse import Warehouse

MODEL = "m" * 16


def _rows() -> dict[str, list[dict]]:
    """A tiny, valid warehouse: one stimulus, one model, one scored option with its tokens, one exact request."""
    stimulus = {"stimulus_id": "s1", "dataset": "d", "upstream_version": "v", "item_id": "i", "text": "x",
                "attrs": "{}"}
    model = {"model_key": MODEL, "name": "tiny", "source": "/m", "kind": "causal", "dtype": "fp32", "quant": "none",
             "bos_policy": "prepend", "registered_at": "2026-01-01 00:00:00", "backend": "hf"}
    return {
        "stimuli": [stimulus], "models": [model],
        "sequence_scores": [{"model_key": MODEL, "request_id": "r1", "stimulus_id": "s1", "protocol": "prob",
                             "scheme": "causal", "text": "x", "n_tokens": 2, "sum_logprob": -1.5}],
        "token_scores": [{"model_key": MODEL, "request_id": "r1", "position": p, "token_id": 5 + p,
                          "logprob": -0.75} for p in (0, 1)],
        "choice_requests": [{"model_key": MODEL, "request_id": "c1", "stimulus_id": "s1", "protocol": "choice",
                             "mode": "exact", "prompt_version": "v1", "adaptation": "none", "prompt_text": "p",
                             "options": ["he", "she"], "max_new_tokens": 6, "k_store": 64}],
        "choice_probs": [{"model_key": MODEL, "request_id": "c1", "option": o, "temperature": 0.5, "top_k": 40,
                          "top_p": 1.0, "prob": p} for o, p in (("he", 0.5), ("she", 0.25), ("invalid", 0.25))],
    }


def _warehouse(path: Path, rows: dict[str, list[dict]] | None = None) -> Path:
    with Warehouse.open(path) as wh:
        for table, data in (rows or _rows()).items():
            wh.append(table, data)
    return path


def _files(root: Path) -> set[Path]:
    return {p for p in root.rglob("*")}


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def _one_line_failure(result, *needles) -> None:
    assert result.exit_code == 1, result.output
    assert result.output.count("\n") == 1, result.output
    for needle in needles:
        assert needle in result.output, (needle, result.output)


@pytest.fixture()
def export(tmp_path):
    db = _warehouse(tmp_path / "w.duckdb")
    out = tmp_path / "export"
    assert _run("warehouse", "export", out, "--db", db).exit_code == 0
    return out


def _manifest(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())


def _write_manifest(out: Path, manifest) -> None:
    (out / "manifest.json").write_text(json.dumps(manifest))


# ---------------------------------------------------------------------------------------------------- import
INJECTION = ("meta BY NAME FROM (SELECT 1) WHERE false; COPY (SELECT 'x') TO '{path}'; INSERT INTO meta")


@pytest.mark.parametrize("edit, needle", [
    (lambda m, out: m["tables"].update({INJECTION.format(path=out.parent / "pwn.csv"): m["tables"]["meta"]}),
     "is not a table of biaslab's schema"),
    (lambda m, out: m["tables"]["stimuli"].update(file=str(out.parent / "w.duckdb")), "field 'file'"),
    (lambda m, out: m["tables"]["stimuli"].update(file="../w.duckdb"), "field 'file'"),
    (lambda m, out: m["tables"].update(stimuli="stimuli.parquet"), "entry must be an object"),
    (lambda m, out: m.update(schema_version=None), "field 'schema_version'"),
    (lambda m, out: m["tables"]["stimuli"].update(rows="1"), "field 'rows'"),
    (lambda m, out: m.pop("tables"), "field 'tables'"),
])
def test_import_refuses_a_crafted_manifest_in_one_line_and_writes_nothing(export, tmp_path, edit, needle):
    manifest = _manifest(export)
    edit(manifest, export)
    _write_manifest(export, manifest)
    before = _files(tmp_path)
    _one_line_failure(_run("warehouse", "import", export, "--db", tmp_path / "new.duckdb"), needle)
    assert _files(tmp_path) == before  # no new warehouse, no pwn.csv, no staging file


@pytest.mark.parametrize("text, needle", [("[1, 2]", "not a JSON object"), ("{", "not valid JSON")])
def test_import_refuses_a_manifest_that_is_not_an_object(export, tmp_path, text, needle):
    (export / "manifest.json").write_text(text)
    _one_line_failure(_run("warehouse", "import", export, "--db", tmp_path / "new.duckdb"), needle)
    assert not (tmp_path / "new.duckdb").exists()


def test_import_refuses_a_symlinked_table_file(export, tmp_path):
    outside = tmp_path / "outside.parquet"
    (export / "stimuli.parquet").rename(outside)
    os.symlink(outside, export / "stimuli.parquet")
    _one_line_failure(_run("warehouse", "import", export, "--db", tmp_path / "new.duckdb"),
                      "missing or not a plain file")


def _rewrite(out: Path, table: str, change) -> None:
    """Rewrite one exported table's rows with `change(list of dicts)` (the manifest's count follows)."""
    path = out / f"{table}.parquet"
    data = pq.read_table(path)
    rows = data.to_pylist()
    change(rows)
    pq.write_table(pa.Table.from_pylist(rows, schema=data.schema), path)
    manifest = _manifest(out)
    manifest["tables"][table]["rows"] = len(rows)
    _write_manifest(out, manifest)


def _set(table_rows, column, value, index=0):
    table_rows[index][column] = value


@pytest.mark.parametrize("table, change, needle", [
    ("choice_probs", lambda r: _set(r, "prob", math.nan), "column prob"),
    ("choice_probs", lambda r: _set(r, "prob", 5.0), "must be a probability in [0, 1]"),
    ("choice_probs", lambda r: _set(r, "prob", -1.0), "must be a probability in [0, 1]"),
    ("choice_probs", lambda r: [_set(r, "prob", 0.9, i) for i in range(3)], "summing to 1"),
    ("token_scores", lambda r: _set(r, "logprob", math.inf), "a finite log-probability <= 0"),
    ("sequence_scores", lambda r: _set(r, "sum_logprob", 2.0), "a finite log-probability <= 0"),
    ("meta", lambda r: r.append(dict(r[0])), "one schema_version row"),
    ("token_scores", lambda r: r.append(dict(r[0])), "a unique identity key"),
    ("choice_probs", lambda r: [_set(r, "model_key", "ghost" * 4, i) for i in range(3)], "must be a row of"),
    ("token_scores", lambda r: _set(r, "request_id", "gone"), "must be a row of sequence_scores"),
])
def test_import_refuses_bad_evidence_naming_file_table_column_and_rule(export, tmp_path, table, change, needle):
    _rewrite(export, table, change)
    before = _files(tmp_path)
    result = _run("warehouse", "import", export, "--db", tmp_path / "new.duckdb")
    _one_line_failure(result, needle, "table ", "nothing was imported")
    assert _files(tmp_path) == before


def test_a_valid_export_still_imports(export, tmp_path):
    result = _run("warehouse", "import", export, "--db", tmp_path / "new.duckdb")
    assert result.exit_code == 0, result.output
    with Warehouse.open(tmp_path / "new.duckdb", read_only=True) as wh:
        assert wh.count("choice_probs") == 3


# ---------------------------------------------------------------------------------------------------- open
def test_open_never_runs_the_exports_views_sql(export, tmp_path):
    pwn = tmp_path / "pwn.csv"
    (export / "views.sql").write_text(f"COPY (SELECT 1) TO '{pwn}'; ATTACH '{tmp_path / 'x.duckdb'}' AS x;"
                                      f"CREATE TABLE x.t AS SELECT 1;")
    with biaslab.open(export) as wh:
        assert wh.table("choice_probs").count().execute() == 3
        assert "winopron_pf" in wh.tables()
    assert not pwn.exists() and not (tmp_path / "x.duckdb").exists()


def test_open_refuses_a_crafted_manifest(export, tmp_path):
    manifest = _manifest(export)
    manifest["tables"][INJECTION.format(path=tmp_path / "pwn.csv")] = manifest["tables"]["meta"]
    _write_manifest(export, manifest)
    with pytest.raises(Exception, match="is not a table of biaslab's schema"):
        biaslab.open(export)
    assert not (tmp_path / "pwn.csv").exists()


# ---------------------------------------------------------------------------------------------------- merge
def _shard(folder: Path, name: str, index: int, rows=None, stamp_edit=None) -> Path:
    path = _warehouse(folder / name, rows)
    stamp = {"dataset": "d", "protocol": "choice", "model_key": MODEL, "protocol_version": "v1", "count": 2,
             "index": index, "limit": None}
    if stamp_edit:
        stamp_edit(stamp)
    with Warehouse.open(path) as wh:
        wh.set_meta("shard", json.dumps(stamp))
    return path


def _target(tmp_path: Path) -> tuple[Path, str]:
    db = _warehouse(tmp_path / "target.duckdb", {"stimuli": _rows()["stimuli"]})
    return db, _sha(db)


def test_merge_quotes_shard_paths_and_folders(tmp_path):
    folder = tmp_path / "o'brien"
    folder.mkdir()
    crafted = "a.duckdb' AS shard (READ_ONLY); COPY (SELECT 42) TO 'x.csv'; ATTACH 'b.duckdb"
    _shard(folder, crafted, 0)
    db = tmp_path / "target.duckdb"
    result = _run("warehouse", "merge", folder, "--db", db)
    assert result.exit_code == 0, result.output
    assert not (tmp_path / "x.csv").exists() and not Path("x.csv").exists()
    with Warehouse.open(db, read_only=True) as wh:
        assert wh.count("choice_probs") == 3


def _bad_prob(value):
    rows = _rows()
    rows["choice_probs"][0]["prob"] = value
    return rows


def _other_model():
    """Consistent evidence of another model than the stamp names (every row, its model record too)."""
    rows = _rows()
    for _table, data in rows.items():
        for row in data:
            if "model_key" in row:
                row["model_key"] = "o" * 16
    return rows


@pytest.mark.parametrize("rows, needle", [
    (_bad_prob(7.0), "must be a probability in [0, 1]"),
    (_bad_prob(-1.0), "must be a probability in [0, 1]"),
    (_other_model(), "the shard's model"),
])
def test_merge_refuses_bad_evidence_and_leaves_the_target_byte_identical(tmp_path, rows, needle):
    folder = tmp_path / "shards"
    folder.mkdir()
    _shard(folder, "a.duckdb", 0)                  # a good shard first: nothing of it may be merged either
    bad = _shard(folder, "b.duckdb", 1, rows)
    db, before = _target(tmp_path)
    result = _run("warehouse", "merge", folder, "--db", db)
    _one_line_failure(result, needle, str(bad), "nothing was merged")
    assert _sha(db) == before


def test_merge_refuses_keys_repeated_inside_a_shard(tmp_path):
    folder = tmp_path / "shards"
    folder.mkdir()
    path = _shard(folder, "a.duckdb", 0)
    con = duckdb.connect(str(path))
    con.execute("INSERT INTO token_scores SELECT * FROM token_scores")  # appends never do this; a crafted file can
    con.close()
    db, before = _target(tmp_path)
    _one_line_failure(_run("warehouse", "merge", folder, "--db", db), "a unique identity key")
    assert _sha(db) == before


@pytest.mark.parametrize("edit, needle", [(lambda s: s.pop("index"), "'index'"),
                                          (lambda s: s.update(count="abc"), "'count'")])
def test_merge_refuses_a_broken_stamp_in_one_line(tmp_path, edit, needle):
    folder = tmp_path / "shards"
    folder.mkdir()
    _shard(folder, "a.duckdb", 0, stamp_edit=edit)
    db, before = _target(tmp_path)
    _one_line_failure(_run("warehouse", "merge", folder, "--db", db), needle)
    assert _sha(db) == before


# ---------------------------------------------------------------------------------------------------- info, export
def test_info_and_export_run_no_sql_from_table_names(tmp_path):
    db = _warehouse(tmp_path / "w.duckdb")
    pwn = tmp_path / "pwn.csv"
    con = duckdb.connect(str(db))
    con.execute(f"CREATE TABLE \"x\"\"; COPY (SELECT 1) TO '{pwn}'; --\" (a INTEGER)")
    con.close()
    info = _run("info", "--db", db)
    assert info.exit_code == 0, info.output
    out = tmp_path / "export"
    export = _run("warehouse", "export", out, "--db", db)
    assert export.exit_code == 0, export.output
    assert not pwn.exists()
    assert not any("COPY" in p.name for p in out.iterdir())  # the stranger table is not exported
