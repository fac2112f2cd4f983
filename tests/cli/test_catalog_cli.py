"""`biaslab models`, `biaslab collections`, `biaslab info`: names, settings, stored / pending, read-only."""

from __future__ import annotations

import hashlib
import json

import pytest
from click.testing import CliRunner

from biaslab.cli.main import biaslab
from open_warehouse_evidence import MODEL_A, MODEL_B, build


@pytest.fixture(scope="module")
def db(tmp_path_factory, data_dir):
    if not (data_dir / "winopron").is_dir():
        pytest.skip(f"dataset folder {data_dir / 'winopron'} is absent")
    return build(tmp_path_factory.mktemp("catalog") / "w.duckdb", data_dir)


def run(*args):
    result = CliRunner().invoke(biaslab, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_models_names_dtype_backend_key(db):
    rows = json.loads(run("models", "--db", str(db), "--format", "json"))
    assert rows == [{"model_name": "synthetic-a", "dtype": "fp32", "quantization": "none", "backend": "hf",
                     "kind": "causal", "model_key": MODEL_A}]


def test_collections_count_stored_and_pending(db):
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    rows = json.loads(run("collections", "--db", str(db), "--format", "json", "--all-columns"))
    by = {(r["model_key"], r["dataset"], r["protocol"], r["settings"]): r for r in rows}
    exact = by[(MODEL_A, "winopron", "choice", "exact T=0.5 top_k=40 top_p=1 new=6 prompt=test")]
    assert (exact["stimuli"], exact["requests"], exact["stored"], exact["pending"], exact["rows"]) == \
        (120, 120, 120, 0, 480)
    sample = by[(MODEL_A, "winopron", "choice", "sample T=1 top_k=40 top_p=1 new=6 prompt=test")]
    assert (sample["stored"], sample["pending"], sample["rows"]) == (40, 80, 480)
    gen = by[(MODEL_B, "ruff", "gen", "T=1 top_k=50 top_p=0.95 new=50 min=50 prompt=gen-v1")]
    assert (gen["model_name"], gen["requests"], gen["stored"], gen["rows"]) == (MODEL_B, 80, 40, 320)
    assert by[(MODEL_A, "negation-examples", "prob", "scheme=causal")]["stored"] == 32
    assert all(r["last_run"] is None for r in rows)  # synthetic evidence has no runs
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before


def test_info_shows_models_and_collections_briefly(db):
    info = json.loads(run("info", "--db", str(db), "--format", "json"))
    assert [m["model_name"] for m in info["models"]] == ["synthetic-a"]
    assert len(info["collections"]) == 13 and set(info["collections"][0]) == {
        "model_name", "dataset", "protocol", "settings", "stored", "pending", "last_status"}
