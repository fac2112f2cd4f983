"""Every run ends 'finished', 'failed' or 'interrupted', whatever stops it: out of memory, a full disk, SIGTERM."""

from __future__ import annotations

import errno
import signal
import subprocess
import sys
import time

import duckdb
import pytest

from biaslab.runners.protocols import prob as score_collect
from biaslab.runners.collect import CollectConfig, collect
from biaslab.warehouse import Warehouse


def _runs(db) -> list[tuple]:
    with Warehouse.open(db, read_only=True) as wh:
        return wh.con.execute("SELECT status, rows_added FROM runs ORDER BY started_at").fetchall()


@pytest.mark.parametrize("error", [MemoryError(), OSError(errno.ENOSPC, "No space left on device"),
                                   RuntimeError("a bug")], ids=["oom", "disk-full", "bug"])
def test_an_exception_in_the_middle_marks_the_run_failed(error, tmp_path, tiny_gpt2, data_dir, dataset_folder,
                                                         monkeypatch):
    dataset_folder("winogender")
    db = tmp_path / "w.duckdb"
    real = score_collect.score_chunk
    calls = {"n": 0}

    def failing(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise error
        return real(*args, **kwargs)

    monkeypatch.setattr(score_collect, "score_chunk", failing)
    config = CollectConfig(dataset="winogender", db=str(db), data_dir=str(data_dir), limit=6, chunk_size=6)
    with pytest.raises(type(error)):
        collect(config, loaded=tiny_gpt2)
    assert _runs(db) == [("failed", 6)]  # the first chunk is stored, the second rolled back
    monkeypatch.setattr(score_collect, "score_chunk", real)
    assert collect(config, loaded=tiny_gpt2).added == 12
    assert _runs(db)[-1] == ("finished", 12)


def test_keyboard_interrupt_marks_the_run_interrupted(tmp_path, tiny_gpt2, data_dir, dataset_folder, monkeypatch):
    dataset_folder("winogender")
    db = tmp_path / "w.duckdb"
    monkeypatch.setattr(score_collect, "score_chunk", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        collect(CollectConfig(dataset="winogender", db=str(db), data_dir=str(data_dir), limit=2), loaded=tiny_gpt2)
    assert _runs(db) == [("interrupted", 0)]


@pytest.mark.parametrize("error", [duckdb.InterruptException("INTERRUPT Error: Interrupted!"),
                                   RuntimeError("Query interrupted")], ids=["duckdb", "runtime"])
def test_a_signal_during_a_duckdb_statement_marks_the_run_interrupted(error, tmp_path, tiny_gpt2, data_dir,
                                                                       dataset_folder, monkeypatch):
    """A SIGTERM (or Ctrl-C) that lands while DuckDB runs a statement reaches the run as DuckDB's own exception, not
    as a KeyboardInterrupt; the run is still 'interrupted', not 'failed' (a CI run once met this)."""
    dataset_folder("winogender")
    db = tmp_path / "w.duckdb"
    real = score_collect.score_chunk
    calls = {"n": 0}

    def interrupted(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise error
        return real(*args, **kwargs)

    monkeypatch.setattr(score_collect, "score_chunk", interrupted)
    with pytest.raises(type(error)):
        collect(CollectConfig(dataset="winogender", db=str(db), data_dir=str(data_dir), limit=6, chunk_size=6),
                loaded=tiny_gpt2)
    assert _runs(db) == [("interrupted", 6)]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_termination_signal_marks_the_run_interrupted_and_a_rerun_completes(sig, tmp_path, tiny_gpt2_dir, data_dir,
                                                                            dataset_folder):
    dataset_folder("winogender")
    db = tmp_path / "w.duckdb"
    args = [sys.executable, "-m", "biaslab.cli.runners_entry", "collect", "--dataset", "winogender", "--limit", "240",
            "--chunk-size", "3", "--model", str(tiny_gpt2_dir), "--dtype", "fp32", "--db", str(db),
            "--data-dir", str(data_dir)]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        stored = 0
        while stored == 0 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
            try:
                with Warehouse.open(db, read_only=True, wait=5) as wh:
                    stored = wh.count("sequence_scores")
            except Exception:
                continue
        assert proc.poll() is None, "the collection ended before it could be signalled"
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0
    [(status, added)] = _runs(db)
    # 720 rows in 240 chunks: the signal lands mid-run (with 60 stimuli a fast machine could finish first)
    assert status == "interrupted" and 0 < added < 720 and added % 3 == 0, err
    assert "run the same command again to resume" in err, err  # the resume line, whatever the signal landed in
    with Warehouse.open(db, read_only=True) as wh:
        assert wh.count("sequence_scores") == added  # whole chunks only
    at = args.index("--chunk-size")  # the rest in chunks of 60: the counts are checked, not the values
    subprocess.run([*args[:at], "--chunk-size", "60", *args[at + 2:]], check=True, capture_output=True)
    assert _runs(db)[-1] == ("finished", 720 - added)
