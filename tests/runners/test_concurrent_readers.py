"""Readers during a real collection: `biaslab sql` and `biaslab info` in a loop while `runners collect` writes.

The collection runs the default model in a subprocess; it holds DuckDB's write lock only while it appends a chunk,
so the reader loop must get in between every two chunks (it sees every intermediate row count), and the stored
rows must equal those of the same collection run without readers.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

from click.testing import CliRunner

from biaslab.cli.main import biaslab
from biaslab.warehouse import Warehouse

LIMIT, CHUNK = 40, 10  # winogender: 3 options per stimulus -> 120 requests in 12 chunks


def _collect_args(db, data_dir) -> list[str]:
    return [sys.executable, "-m", "biaslab.cli.runners_entry", "collect", "--dataset", "winogender", "--limit",
            str(LIMIT), "--chunk-size", str(CHUNK), "--dtype", "fp32", "--db", str(db), "--data-dir", str(data_dir)]


def _rows(db) -> tuple[int, int, list]:
    with Warehouse.open(db, read_only=True) as wh:
        seq = wh.count("sequence_scores")
        tok = wh.count("token_scores")
        ids = wh.con.execute("SELECT request_id, n_tokens FROM sequence_scores ORDER BY ALL").fetchall()
    return seq, tok, ids


def test_readers_get_in_between_every_chunk_and_nothing_is_lost(tmp_path, data_dir, dataset_folder):
    dataset_folder("winogender")
    db = tmp_path / "w.duckdb"
    writer = subprocess.Popen(_collect_args(db, data_dir), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen: list[int] = []
    reads = failures = 0
    saw_running = False
    try:
        deadline = time.monotonic() + 600
        while writer.poll() is None and time.monotonic() < deadline:
            if not db.exists():
                time.sleep(0.05)
                continue
            result = CliRunner().invoke(biaslab, ["sql", "select count(*) as n from sequence_scores", "--db", str(db),
                                                  "--format", "json"])
            if result.exit_code != 0:
                failures += 1
                assert "locked by another process" in result.output or "no warehouse" in result.output, result.output
                continue
            reads += 1
            seen.append(json.loads(result.output)[0]["n"])
            if reads % 5 == 0:
                info = CliRunner().invoke(biaslab, ["info", "--db", str(db), "--format", "json"])
                assert info.exit_code == 0, info.output
                saw_running |= any(r["status"] == "running" for r in json.loads(info.output)["runs"])
            time.sleep(0.02)
        out, err = writer.communicate(timeout=600)
    finally:
        if writer.poll() is None:
            writer.kill()
    assert writer.returncode == 0, err
    assert "120 pending, 120 scored sequences added" in out
    expected_counts = set(range(0, LIMIT * 3 + 1, CHUNK))
    # every intermediate state was read at least once: the reader got in between every two appends
    assert expected_counts - {LIMIT * 3} <= set(seen), (sorted(set(seen)), reads, failures)
    assert seen == sorted(seen)  # counts only grow
    assert saw_running  # `biaslab info` showed the run in progress
    with_readers = _rows(db)
    alone = tmp_path / "alone.duckdb"
    subprocess.run(_collect_args(alone, data_dir), check=True, capture_output=True)
    assert with_readers[:2] == _rows(alone)[:2] and with_readers[2] == _rows(alone)[2]
    with Warehouse.open(db, read_only=True) as wh:
        assert wh.con.execute("SELECT status, rows_added FROM runs").fetchall() == [("finished", LIMIT * 3)]
