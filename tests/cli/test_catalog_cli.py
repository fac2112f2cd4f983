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
    return build(tmp_path_factory.mktemp("catalog") / "w.duckdb", data_dir)


def run(*args):
    result = CliRunner().invoke(biaslab, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_models_names_dtype_backend_key(db):
    rows = json.loads(run("models", "--db", str(db), "--format", "json"))
    assert rows == [{"model_name": "synthetic-a", "dtype": "fp32", "quantization": "none", "converted_from": None,
                     "backend": "hf", "kind": "causal", "model_key": MODEL_A}]


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
    assert by[(MODEL_B, "winoqueer", "prob", "scheme=causal")]["stored"] == 12
    assert all(r["last_run"] is None for r in rows)  # synthetic evidence has no runs
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before


def test_the_collections_table_says_what_each_count_counts(db):
    """Issue 71, item 8: a row counts stimuli (stored, pending) beside requests (ruff gen: 80 requests, 40 stimuli
    stored); the table says which is which under it, and CSV stays plain rows."""
    from biaslab.cli.catalog_cmd import UNITS

    assert " ".join(run("collections", "--db", str(db)).split()).endswith(UNITS)
    assert UNITS not in run("collections", "--db", str(db), "--format", "csv")


def test_info_shows_models_and_collections_briefly(db):
    info = json.loads(run("info", "--db", str(db), "--format", "json"))
    assert [m["model_name"] for m in info["models"]] == ["synthetic-a"]
    assert len(info["collections"]) == 15 and set(info["collections"][0]) == {
        "model_name", "dataset", "protocol", "settings", "stored", "pending", "last_status"}


def _runner_params(temperature: float, mode: str = "exact", seed: int = 0) -> dict:
    """Run parameters as `runners collect` records them (runs.params), for a choice collection of dataset 'toy'."""
    return {"dataset": "toy", "protocol": "choice", "mode": mode, "temperature": temperature, "top_k": 40,
            "top_p": 1.0, "max_new_tokens": 6, "min_new_tokens": 0, "seed": seed, "pll": "original",
            "prompt": "forced_choice_v1", "samples": 3}


def test_last_run_is_matched_on_the_collection_settings(tmp_path):
    """Two exact collections of one model and dataset that differ only in temperature each show their own run; a
    sample collection shows the run whose seed wrote its samples, not a later run of the same settings and another
    seed."""
    from datetime import datetime

    from biaslab.schema import Stimulus
    from biaslab.warehouse import Warehouse

    db = tmp_path / "w.duckdb"
    stimuli = [Stimulus(dataset="toy", upstream_version="v", item_id=str(i), text=f"Item {i}: BLANK left.",
                        slot="BLANK", options=("he", "she"), option_labels=("male", "female")) for i in range(3)]
    with Warehouse.open(db) as wh:
        wh.append("stimuli", [s.to_row() for s in stimuli])
        runs = {}
        for name, (temperature, mode, seed) in {"t05": (0.5, "exact", 0), "t07": (0.7, "exact", 0),
                                                "seed1": (1.0, "sample", 1), "seed2": (1.0, "sample", 2)}.items():
            runs[name] = wh.start_run("runners collect --dataset toy", _runner_params(temperature, mode, seed),
                                      generation_config={"prompt_version": "v1"}, model_key="m" * 16)
            wh.finish_run(runs[name], "finished" if name != "seed2" else "interrupted", 0)
        for hour, name in enumerate(("t05", "t07", "seed1", "seed2")):  # started in this order
            wh.con.execute("UPDATE runs SET started_at = ? WHERE run_id = ?", [datetime(2026, 1, 1, hour), runs[name]])
        requests, probs = [], []
        for temperature, run_id in ((0.5, runs["t05"]), (0.7, runs["t07"])):
            for s in stimuli:
                rid = f"{temperature}-{s.stimulus_id}"
                requests.append({"model_key": "m" * 16, "request_id": rid, "stimulus_id": s.stimulus_id,
                                 "protocol": "choice", "mode": "exact", "prompt_version": "v1", "adaptation": "-",
                                 "prompt_text": "-", "options": ["he", "she"], "max_new_tokens": 6, "k_store": 64,
                                 "run_id": run_id})
                probs += [{"model_key": "m" * 16, "request_id": rid, "option": o, "prob": 0.5,
                           "temperature": temperature, "top_k": 40, "top_p": 1.0} for o in ("he", "she")]
        wh.append_with_children("choice_requests", requests, {"choice_probs": probs})
        sample_requests = [{"model_key": "m" * 16, "request_id": f"sample-{s.stimulus_id}",
                            "stimulus_id": s.stimulus_id, "protocol": "choice", "mode": "sample",
                            "prompt_version": "v1", "adaptation": "-",
                            "prompt_text": "-", "options": ["he", "she"], "max_new_tokens": 6, "k_store": None,
                            "run_id": runs["seed1"]} for s in stimuli]
        samples = [{"model_key": "m" * 16, "request_id": f"sample-{s.stimulus_id}", "sample_index": k,
                    "seed": 100 + k, "temperature": 1.0, "top_k": 40, "top_p": 1.0, "max_new_tokens": 6,
                    "stimulus_id": s.stimulus_id, "text": "he", "token_ids": [1], "token_logprobs": [-1.0],
                    "finish_reason": "stop", "answer": "he", "valid": True, "run_id": runs["seed1"]}
                   for s in stimuli for k in range(3)]
        wh.append_many({"choice_requests": sample_requests, "samples": samples})
    rows = json.loads(run("collections", "--db", str(db), "--format", "json"))
    last = {r["settings"]: (r["last_run"], r["last_status"]) for r in rows}
    assert last == {"exact T=0.5 top_k=40 top_p=1 new=6 prompt=v1": (runs["t05"][:8], "finished"),
                    "exact T=0.7 top_k=40 top_p=1 new=6 prompt=v1": (runs["t07"][:8], "finished"),
                    "sample T=1 top_k=40 top_p=1 new=6 prompt=v1": (runs["seed1"][:8], "finished")}


def _columns(out: str, border: str) -> list[str]:
    """Each column of a rich table's lines starting with `border` ("┃" header, "│" body), its pieces concatenated
    down the lines without whitespace: a folded or wrapped cell reads back whole."""
    cols: list[str] = []
    for line in out.splitlines():
        if line.startswith(border):
            for j, piece in enumerate(line.strip(border).split(border)):
                cols += [""] * (j + 1 - len(cols))
                cols[j] += "".join(piece.split())
    return cols


def _flat(value) -> str:
    return "".join(str("" if value is None else value).split())


@pytest.mark.parametrize("args", [
    ("collections",), ("collections", "--all-columns"), ("models",),
    ("sql", "select model_key, name, 'x' || repeat('long-unbroken-token', 12) as long_text, "
            "'{\"params\": {\"a\": 1, \"b\": [1, 2, 3]}, \"note\": \"a json value that runs past the column\"}' "
            "as params from models"),
])
def test_tables_fit_100_columns_without_cutting_a_cell(db, monkeypatch, args):
    """Issue 46, item 7: at COLUMNS=100 (honoured when the output is not a terminal, as here) every line fits and no
    cell is cut with an ellipsis: a value wider than its column folds onto the next lines, and each column read
    down the table equals its values in --format json, character for character."""
    monkeypatch.setenv("COLUMNS", "100")
    out = run(*args, "--db", str(db))
    lines = out.splitlines()
    assert lines and max(len(line) for line in lines) <= 100, max(lines, key=len)
    assert "…" not in out
    records = json.loads(run(*args, "--db", str(db), "--format", "json"))
    names = {_flat(k): k for k in records[0]}
    header, body = _columns(out, "┃"), _columns(out, "│")
    assert len(header) == len(body) >= 2
    for name, column in zip(header, body):
        assert column == "".join(_flat(r[names[name]]) for r in records), name
    if args[0] == "sql":
        assert "x" + "long-unbroken-token" * 12 in body[header.index("long_text")]


def test_info_fits_100_columns_and_tables_are_200_wide_when_piped(db, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    out = run("info", "--db", str(db))
    assert max(len(line) for line in out.splitlines()) <= 100 and "…" not in out
    monkeypatch.delenv("COLUMNS", raising=False)
    out = run("collections", "--db", str(db), "--all-columns")
    assert 100 < max(len(line) for line in out.splitlines()) <= 200 and "…" not in out


def test_the_plain_sql_listings_equal_the_python_apis_frames(db):
    """`biaslab models`, `collections` and `info` read plain SQL (`catalog.model_records`, `collection_records`: no
    Ibis or pandas at start-up, issue 57); the Python API builds frames with Ibis and pandas. Same rows."""
    import biaslab
    from biaslab.warehouse import Warehouse
    from biaslab.warehouse.catalog import COLLECTION_COLUMNS, collection_records, model_records

    with biaslab.open(db) as handle:
        frames = handle.collections(), handle.models()
    with Warehouse.open(db, read_only=True) as wh:
        _, collections = collection_records(wh, COLLECTION_COLUMNS)
        columns, models = model_records(wh, list(frames[1].columns))

    def plain(frame, names):
        frame = frame[list(names)].astype(object)
        return [tuple(None if v is None or v != v else v for v in row) for row in frame.itertuples(index=False)]

    assert len(collections) == 15 and [tuple(None if v != v else v for v in r) for r in collections] == \
        plain(frames[0], COLLECTION_COLUMNS)
    assert models == plain(frames[1], columns)
