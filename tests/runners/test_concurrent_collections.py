"""Issue 46, item 4: two `runners collect` of the same work on one warehouse at once. The second waits for the
first, says so in one line, and then computes only what the first did not store: here nothing.

The first collection is paused (SIGSTOP) once its run is registered, at a moment it does not hold the warehouse's
lock, so the second certainly starts while the first is alive and mid-way; it is resumed (SIGCONT) once the second
has said it waits."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time

import pytest

from biaslab.warehouse import Warehouse
from biaslab.warehouse.errors import WarehouseError

LIMIT = 60  # prompts: 6 templates of 10


def _args(db, model_dir, data_dir) -> list[str]:
    return [sys.executable, "-m", "biaslab.cli.runners_entry", "collect", "--dataset", "winopron", "--model",
            str(model_dir), "--dtype", "fp32", "--device", "cpu", "--limit", str(LIMIT // 10), "--prompt-batch", "4",
            "--chunk-size", "4", "--top-k", "5", "--db", str(db), "--data-dir", str(data_dir)]


def _runs(db, wait: float = 60.0) -> list[tuple]:
    with Warehouse.open(db, read_only=True, wait=wait) as wh:
        return wh.rows("SELECT status, rows_added, pid FROM runs ORDER BY started_at")


def _pause_outside_a_write(proc, db) -> None:
    """SIGSTOP `proc` at a moment its warehouse lock is free (a read-only open succeeds at once)."""
    for _ in range(200):
        proc.send_signal(signal.SIGSTOP)
        try:
            _runs(db, wait=0.0)
            return
        except (WarehouseError, OSError, Exception):  # locked mid-append: let it finish that write
            proc.send_signal(signal.SIGCONT)
            time.sleep(0.05)
    raise AssertionError("the first collection never released the warehouse")


@pytest.mark.skipif(not hasattr(signal, "SIGSTOP"), reason="POSIX signals")
def test_a_second_collection_of_the_same_work_waits_and_computes_nothing(tmp_path, tiny_gpt2_dir, data_dir,
                                                                         dataset_folder):
    dataset_folder("winopron")
    db = tmp_path / "w.duckdb"
    first = subprocess.Popen(_args(db, tiny_gpt2_dir, data_dir), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    second = None
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:  # the first run registered and some of its work stored
            try:
                if db.exists() and any(s == "running" and (n or 0) == 0 for s, n, _ in _runs(db, wait=5.0)):
                    with Warehouse.open(db, read_only=True, wait=5.0) as wh:
                        if wh.count("choice_requests") > 0:
                            break
            except Exception:  # noqa: BLE001 - locked or being created: look again
                pass
            assert first.poll() is None, first.communicate()
            time.sleep(0.1)
        _pause_outside_a_write(first, db)
        assert first.poll() is None, "the first collection ended before it could be paused"
        second = subprocess.Popen(_args(db, tiny_gpt2_dir, data_dir), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        said = ""
        while "is collecting the same work" not in said:
            ready, _, _ = select.select([second.stderr], [], [], 300)
            assert ready and second.poll() is None, (said, second.communicate())
            said += second.stderr.readline()
        first.send_signal(signal.SIGCONT)
        out1, err1 = first.communicate(timeout=600)
        out2, err2 = second.communicate(timeout=600)
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
    assert first.returncode == 0 and second.returncode == 0, (err1, err2)
    [line] = [ln for ln in said.splitlines() if "is collecting the same work" in ln]
    assert f"(PID {first.pid}," in line and "waiting for it to end" in line
    assert f"{LIMIT} pending, {LIMIT} requests added" in out1
    assert f"{LIMIT} requests, 0 pending, 0 requests added" in out2  # computed nothing, loaded no model
    assert [(s, n) for s, n, _ in _runs(db)] == [("finished", LIMIT), ("finished", 0)]
    assert os.path.exists(db)
