"""A second writer gets a clear message naming the process that holds the warehouse; nothing is corrupted."""

from __future__ import annotations

import subprocess
import sys
import textwrap

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
        for read_only in (False, True):
            with pytest.raises(WarehouseError) as err:
                Warehouse.open(db, read_only=read_only)
            message = str(err.value)
            assert f"PID {holder.pid}" in message and "another process" in message and "\n" not in message
    finally:
        holder.communicate("done\n", timeout=60)
    assert holder.returncode == 0
    with Warehouse.open(db, read_only=True) as wh:
        assert wh.con.execute("SELECT run_id, status FROM runs ORDER BY run_id").fetchall() == [
            ("r1", "finished"), ("r2", "finished")]
