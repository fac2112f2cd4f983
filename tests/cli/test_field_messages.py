"""Field defects (issue 34, section D): each mistake ends in one line naming what is wrong, exit status 1, and the
files involved unchanged (or never created)."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from biaslab.cli.main import biaslab
from biaslab.cli.runners_cli import runners
from biaslab.warehouse import Warehouse


def one_line_error(result, *fragments: str) -> str:
    assert result.exit_code == 1, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def invoke(group, *args: str):
    return CliRunner().invoke(group, list(args))


# ------------------------------------------------------------------------------------------------ model files
@pytest.mark.parametrize("content, fragment", [
    (b"GGUF\x03\x00\x00\x00", "GGUF file cut short (8 bytes; its header alone is 24)"),
    (b"\x00" * 100, "not a GGUF file (it starts with b'\\x00\\x00\\x00\\x00'"),
    (b"", "GGUF"),
])
def test_a_damaged_gguf_file_is_one_line_and_creates_no_warehouse(tmp_path, data_dir, content, fragment):
    model = tmp_path / "tiny.gguf"
    model.write_bytes(content)
    db = tmp_path / "w.duckdb"
    result = invoke(runners, "collect", "--dataset", "winogender", "--model", str(model), "--db", str(db),
                    "--data-dir", str(data_dir))
    one_line_error(result, fragment)
    assert not db.exists()


def test_an_unknown_alias_fails_fast_when_the_hub_cannot_be_reached(tmp_path, monkeypatch, data_dir):
    """No HF_HUB_OFFLINE, hub unreachable (a closed local port): one line within seconds, not five retries."""
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # an empty cache
    db = tmp_path / "w.duckdb"
    started = time.monotonic()
    result = invoke(runners, "collect", "--dataset", "winogender", "--model", "smollm3", "--db", str(db),
                    "--data-dir", str(data_dir))
    one_line_error(result, "--model smollm3: not a built-in alias", "cannot be reached", "did you mean smollm2-135m?")
    assert time.monotonic() - started < 20 and not db.exists()


def test_hub_access_reads_the_cache_when_the_hub_is_unreachable(tmp_path, monkeypatch):
    from biaslab.engines import hub

    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(hub, "hub_reachable", lambda timeout=hub.CONNECT_SECONDS: False)
    monkeypatch.setattr(hub, "cached", lambda name, revision=None: name == "org/cached")
    assert hub.hub_access("org/cached") == {"local_files_only": True}
    with pytest.raises(ValueError, match="org/absent: not a built-in alias"):
        hub.hub_access("org/absent")
    monkeypatch.setattr(hub, "hub_reachable", lambda timeout=hub.CONNECT_SECONDS: True)
    assert hub.hub_access("org/absent") == {}  # reachable: transformers downloads it
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hub, "hub_reachable", lambda timeout=0: pytest.fail("offline: no network probe"))
    assert hub.hub_access("org/cached") == {}  # cached: transformers reads it offline
    # not cached, the hub switched off: one line that says so, not transformers' "couldn't connect to huggingface.co"
    with pytest.raises(ValueError, match=r"org/absent: .*the hub is switched off here \(HF_HUB_OFFLINE"):
        hub.hub_access("org/absent")


# ------------------------------------------------------------------------------------------------ --db paths
LONG = "a" * 300 + ".duckdb"


@pytest.mark.parametrize("group, args", [
    (biaslab, ["info"]), (biaslab, ["sql", "select 1"]), (biaslab, ["data", "load", "winogender"]),
    (biaslab, ["metrics", "contextuality"]),
    (runners, ["collect", "--dataset", "winogender", "--model", "smollm2-135m"]),
])
def test_a_db_name_too_long_for_the_file_system(tmp_path, monkeypatch, data_dir, group, args):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("BIASLAB_DATA", str(data_dir))
    line = one_line_error(invoke(group, *args, "--db", LONG), "File name too long")
    assert "..." in line and len(line) < 200  # the path shortened
    assert os.listdir(tmp_path) == []


@pytest.fixture()
def sqlite_file(tmp_path) -> Path:
    path = tmp_path / "s.db"
    with sqlite3.connect(path) as con:
        con.execute("create table t (a)")
    return path


@pytest.mark.parametrize("args", [["info"], ["sql", "select 1"], ["data", "load", "winogender"],
                                  ["metrics", "contextuality"], ["warehouse", "check"], ["collections"],
                                  ["warehouse", "export", "OUT"]])
def test_a_sqlite_file_as_db_is_named_and_left_alone(tmp_path, monkeypatch, data_dir, sqlite_file, args):
    monkeypatch.setenv("BIASLAB_DATA", str(data_dir))
    before = sha(sqlite_file)
    args = [str(tmp_path / "out") if a == "OUT" else a for a in args]
    line = one_line_error(invoke(biaslab, *args, "--db", str(sqlite_file)),
                          "s.db: not a biaslab warehouse (SQLite file)")
    assert "extension" not in line and "download" not in line  # DuckDB never reached for its sqlite extension
    assert sha(sqlite_file) == before and sorted(p.name for p in tmp_path.iterdir()) == ["s.db"]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_as_db_is_refused_without_opening_it(tmp_path):
    fifo = tmp_path / "w.duckdb"
    os.mkfifo(fifo)
    one_line_error(invoke(biaslab, "info", "--db", str(fifo)), "not a regular file (a FIFO")  # no hang


def test_data_load_into_a_corrupt_warehouse_fails_and_changes_nothing(tmp_path, data_dir):
    db = tmp_path / "w.duckdb"
    assert invoke(biaslab, "data", "load", "winopron", "--db", str(db), "--data-dir", str(data_dir)).exit_code == 0
    with Warehouse.open(db, read_only=True) as wh:  # the first block of the stimuli's text
        block = wh.rows("SELECT block_id FROM pragma_storage_info('stimuli') WHERE column_name = 'stimulus_id' "
                        "AND block_id >= 0 ORDER BY row_group_id LIMIT 1")[0][0]
    offset = 3 * 4096 + block * 262144 + 1000  # DuckDB: 3 header blocks of 4 KiB, then blocks of 256 KiB
    with open(db, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0xFF]))
    before = sha(db)
    # a read-only command that reads the damaged column (`info` reads counts and, without evidence, no stimuli)
    one_line_error(invoke(biaslab, "sql", "--db", str(db), "SELECT count(DISTINCT stimulus_id) FROM stimuli"),
                   "Corrupt database file")
    one_line_error(invoke(biaslab, "data", "load", "winobias", "--db", str(db), "--data-dir", str(data_dir)),
                   "Corrupt database file")
    assert sha(db) == before and sorted(p.name for p in tmp_path.iterdir()) == ["w.duckdb"]


# ------------------------------------------------------------------------------------------------ annotate files
@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_annotate_import_of_a_fifo_or_a_folder_names_it(tmp_path):
    db = tmp_path / "w.duckdb"
    Warehouse.open(db).close()
    fifo = tmp_path / "labels.csv"
    os.mkfifo(fifo)
    one_line_error(invoke(biaslab, "annotate", "import", str(fifo), "--db", str(db)), "not a regular file (a FIFO)")
    result = invoke(biaslab, "annotate", "import", str(tmp_path), "--db", str(db))  # click's own check
    assert result.exit_code == 2 and "is a directory" in result.output
