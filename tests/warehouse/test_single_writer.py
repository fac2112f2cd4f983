"""A second writer gets a clear message naming the process that holds the warehouse; nothing is corrupted."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest

from biaslab.warehouse import Warehouse, WarehouseError


def test_second_writer_and_reader_get_a_clear_message_and_the_warehouse_stays_intact(tmp_path):
    db = tmp_path / "w.duckdb"
    with Warehouse.open(db) as wh:
        wh.append("runs", [{"run_id": "r1", "command": "first", "started_at": "2026-01-01 00:00:00",
                            "status": "finished"}])
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        from biaslab.warehouse import Warehouse
        wh = Warehouse.open({str(db)!r})
        wh.append("runs", [{{"run_id": "r2", "command": "holder", "started_at": "2026-01-01 00:00:01",
                             "status": "running"}}])
        print("holding", flush=True)
        sys.stdin.readline()
        wh.finish_run("r2")
        wh.close()
        """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "holding"
        for read_only, wait in ((False, 0.0), (True, 1.0)):
            started = time.monotonic()
            with pytest.raises(WarehouseError) as err:
                Warehouse.open(db, read_only=read_only, wait=wait)
            waited = time.monotonic() - started
            assert wait <= waited < wait + 5  # a reader waits the bounded time, then gives up
            message = str(err.value)
            assert f"PID {holder.pid}" in message and "another process" in message and "\n" not in message
            assert ("after waiting 1 s" in message) == read_only
    finally:
        holder.communicate("done\n", timeout=60)
    assert holder.returncode == 0
    with Warehouse.open(db, read_only=True) as wh:
        assert wh.con.execute("SELECT run_id, status FROM runs ORDER BY run_id").fetchall() == [
            ("r1", "finished"), ("r2", "finished")]


def test_a_reader_waits_for_a_writer_that_releases_the_lock(tmp_path):
    db = tmp_path / "w.duckdb"
    Warehouse.open(db).close()
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import time
        from biaslab.warehouse import Warehouse
        wh = Warehouse.open({str(db)!r}, shared=True)
        wh.con  # hold the lock
        print("holding", flush=True)
        time.sleep(1.5)
        wh.append("runs", [{{"run_id": "r1", "command": "w", "started_at": "2026-01-01", "status": "finished"}}])
        time.sleep(30)  # released after the append: the reader gets in while this process still runs
        """)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "holding"
        started = time.monotonic()
        with Warehouse.open(db, read_only=True, wait=20) as wh:
            assert wh.con.execute("SELECT run_id FROM runs").fetchall() == [("r1",)]
        assert 0.5 < time.monotonic() - started < 15
        assert holder.poll() is None
    finally:
        holder.kill()
        holder.communicate()  # waits, and closes the pipe


def _reader(db, seconds: float) -> subprocess.Popen:
    """A process holding a read connection to `db` for `seconds` (what `biaslab sql` or a notebook's handle does
    while its query or handle is open)."""
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import time, duckdb
        con = duckdb.connect({str(db)!r}, read_only=True)
        print("reading", flush=True)
        time.sleep({seconds})
        con.close()
        time.sleep(30)
        """)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "reading"
    return holder


def test_a_collection_waits_for_a_reader_as_readers_wait_for_it(tmp_path):
    """Issue 56, item 11: a collection's first open of the warehouse (a shared writer) waits for a reader that holds
    it, saying so in one line, instead of failing at once."""
    db = tmp_path / "w.duckdb"
    Warehouse.open(db).close()
    holder = _reader(db, 2.0)
    lines = []
    try:
        started = time.monotonic()
        with Warehouse.open(db, shared=True, notify=lines.append) as wh:
            wh.append("runs", [{"run_id": "r1", "command": "w", "started_at": "2026-01-01", "status": "finished"}])
        assert 1.0 < time.monotonic() - started < 30
        assert len(lines) == 1 and f"held by PID {holder.pid}" in lines[0] and "waiting up to 60 s" in lines[0]
    finally:
        holder.kill()
        holder.communicate()  # waits, and closes the pipe


def test_a_writer_blocked_by_a_reader_is_told_so(tmp_path):
    db = tmp_path / "w.duckdb"
    Warehouse.open(db).close()
    holder = _reader(db, 60.0)
    try:
        with pytest.raises(WarehouseError) as err:
            Warehouse.open(db, shared=True, wait=1.0)
        message = str(err.value)
        assert f"PID {holder.pid}" in message and "after waiting 1 s" in message and "\n" not in message
        assert "cannot write to it now" in message and "a reader such as `biaslab sql`" in message
        assert "releases the lock between its chunks" not in message  # the reader's advice, not a writer's
    finally:
        holder.kill()
        holder.communicate()  # waits, and closes the pipe
