"""The open warehouse: every study's tables are equal on the DuckDB warehouse and on its Parquet export through
DataFusion (the same view expressions on two engines), and the Python API equals the `biaslab metrics` path."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

import biaslab
from biaslab.metrics.results import records
from biaslab.cli.main import biaslab as cli
from biaslab.warehouse import Warehouse
from open_warehouse_evidence import MODEL_A, MODEL_B, build


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory, data_dir):
    root = tmp_path_factory.mktemp("open")
    db = build(root / "w.duckdb", data_dir)
    with biaslab.open(db) as wh:
        wh.export(root / "export")
    return db, root / "export"


def _canonical(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows sorted by every scalar column, nulls as None, for comparing results of two engines."""
    frame = frame.astype(object).where(frame.notna(), None)
    scalar = [c for c in frame.columns
              if not frame[c].map(lambda v: isinstance(v, (list, tuple, dict, np.ndarray))).any()]
    return frame.sort_values(scalar, key=lambda s: s.map(repr)).reset_index(drop=True)


def assert_same(a: pd.DataFrame, b: pd.DataFrame, what: str) -> None:
    assert list(a.columns) == list(b.columns), what
    assert len(a) == len(b), what
    left, right = _canonical(a), _canonical(b)
    for column in a.columns:
        for x, y in zip(left[column], right[column]):
            if isinstance(x, float) and isinstance(y, (int, float)):
                assert y == pytest.approx(x, rel=1e-9, abs=1e-12), f"{what}.{column}: {x} != {y}"
            elif isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
                assert list(x) == list(y), f"{what}.{column}"
            else:
                assert x == y, f"{what}.{column}: {x!r} != {y!r}"


STUDIES = {"contextuality": {}, "misgendering": {}, "negation": {}, "calibration": {"bootstrap": 40}}


@pytest.mark.parametrize("study", list(STUDIES))
def test_study_tables_equal_on_duckdb_and_on_the_export_with_datafusion(synthetic, study):
    db, export = synthetic
    with biaslab.open(db) as wh:
        on_duckdb = getattr(biaslab, study)(wh, **STUDIES[study])
    with biaslab.open(export, engine="datafusion") as wh:
        assert wh.engine == "datafusion"
        on_datafusion = getattr(biaslab, study)(wh, **STUDIES[study])
    assert set(on_duckdb) == set(on_datafusion)
    assert sum(len(t) for t in on_duckdb.values()) > 0
    for name in on_duckdb:
        assert_same(on_duckdb[name], on_datafusion[name], f"{study}.{name}")


COMMAND = {"contextuality": [], "misgendering": [], "negation": [], "calibration": ["--bootstrap", "40"]}


@pytest.mark.parametrize("study", list(STUDIES))
def test_python_api_equals_the_metrics_command_and_names_models(synthetic, study, tmp_path):
    db, _ = synthetic
    out = tmp_path / "results.json"
    result = CliRunner().invoke(cli, ["metrics", study, "--db", str(db), "--format", "json", "--out", str(out),
                                      *COMMAND[study]], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    printed = json.loads(result.output)
    with biaslab.open(db) as wh:
        api = getattr(biaslab, study)(wh, **STUDIES[study])
    for name, rows in printed.items():
        frame = pd.DataFrame(rows)
        assert_same(frame, pd.DataFrame(records(api[name])), f"{study}.{name}")  # every digit
        if "model_key" in frame.columns and len(frame):
            names = dict(zip(frame["model_key"], frame["model_name"]))
            assert names.get(MODEL_A, "synthetic-a") == "synthetic-a"
            assert names.get(MODEL_B, MODEL_B) == MODEL_B  # no model record: the key stands for the name
            assert set(frame["backend"]) == {"hf"}
            assert list(frame.columns).index("model_name") < list(frame.columns).index("model_key")
    document = json.loads(out.read_text())
    assert document["format"] == "biaslab-results" and document["study"] == study
    assert document["biaslab_version"] == biaslab.__version__ and document["schema_version"] >= 4
    assert document["tables"] == printed
    keys = {c["model_key"] for c in document["collections"]}
    assert keys == {MODEL_A, MODEL_B}
    assert all(c["stored"] > 0 for c in document["collections"])


def test_polars_output(synthetic):
    import polars as pl

    db, _ = synthetic
    with biaslab.open(db) as wh:
        tables = biaslab.negation(wh, output="polars")
        pandas_tables = biaslab.negation(wh)
    assert isinstance(tables["condition_means"], pl.DataFrame)
    assert tables["condition_means"].height == len(pandas_tables["condition_means"]) == 8


def test_calibration_pairs_and_winoqueer_through_the_python_api_equal_the_command(synthetic):
    db, _ = synthetic
    pair = f"size:synthetic-a={MODEL_B[:8]}"
    result = CliRunner().invoke(cli, ["metrics", "calibration", "--db", str(db), "--format", "json", "--bootstrap",
                                      "40", "--pair", pair], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    printed = json.loads(result.output)
    with biaslab.open(db) as wh:
        api = biaslab.calibration(wh, bootstrap=40, pairs=[pair])
    for name in ("pair_change", "winoqueer"):
        assert len(printed[name]) > 0, name
        assert_same(pd.DataFrame(printed[name]), pd.DataFrame(records(api[name])),
                    f"calibration.{name}")


def test_comprehension_questions_stay_out_of_the_contextuality_tables(synthetic, tmp_path):
    """Evidence of the `meta` protocol (questions about the same WinoPron stimuli, in the same choice tables) changes
    no contextuality table, through SQL (the command) or Ibis (the Python API)."""
    import shutil

    db, _ = synthetic
    copy = tmp_path / "with_meta.duckdb"
    shutil.copy(db, copy)
    with biaslab.open(db) as wh:
        before = biaslab.contextuality(wh)
    with Warehouse.open(copy) as wh:
        wh.con.execute("""
            INSERT INTO choice_requests SELECT model_key, 'meta:' || request_id, stimulus_id, 'meta', mode,
                   'metaprompt-v1:anaphora', adaptation, prompt_text, options, max_new_tokens, k_store, run_id
            FROM choice_requests""")
        wh.con.execute("""INSERT INTO choice_probs SELECT model_key, 'meta:' || request_id, option, temperature,
                          top_k, top_p, 1.0 - prob FROM choice_probs""")
        wh.con.execute("""INSERT INTO samples SELECT * REPLACE ('meta:' || request_id AS request_id)
                          FROM samples WHERE request_id IN (SELECT request_id FROM choice_requests)""")
        assert wh.con.execute("SELECT count(*) FROM choice_requests WHERE protocol = 'meta'").fetchone()[0] > 0
    with biaslab.open(copy) as wh:
        after = biaslab.contextuality(wh)
    assert set(before) == set(after)
    for name in before:
        assert_same(before[name], after[name], f"contextuality.{name}")
    sql = CliRunner().invoke(cli, ["metrics", "contextuality", "--db", str(copy), "--format", "json"],
                             catch_exceptions=False)
    plain = CliRunner().invoke(cli, ["metrics", "contextuality", "--db", str(db), "--format", "json"],
                               catch_exceptions=False)
    with_meta, without = json.loads(sql.output), json.loads(plain.output)
    assert set(with_meta) == set(without)
    for name in without:  # every digit is printed now: equal up to the order DuckDB sums in
        assert_same(pd.DataFrame(with_meta[name]), pd.DataFrame(without[name]), f"printed {name}")
