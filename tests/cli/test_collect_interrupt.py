"""Ctrl-C during `runners collect` (issue 46, item 5): exit 130 and one line saying what the interrupted run kept
and the command that resumes; the rerun computes only what is missing. A slow chat stub (tests/chat_stub.py) makes
the moment of the interruption easy to reach without a model."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("openai")

from biaslab.warehouse import Warehouse  # noqa: E402
from chat_stub import ChatStub  # noqa: E402


def _stored(db) -> int:
    try:
        with Warehouse.open(db, read_only=True) as wh:
            return wh.count("samples")
    except Exception:  # not created yet, or being created
        return 0


def test_ctrl_c_says_what_was_kept_and_how_to_resume(tmp_path, data_dir):
    stub = ChatStub()
    stub.delay_s = 0.2  # a chunk of 64 replies takes ~3 s at 4 in flight: time to interrupt it under load
    db = tmp_path / "w.duckdb"
    command = [sys.executable, "-c", "from biaslab.cli.runners_cli import runners; runners()", "collect",
               "--backend", "openai-chat", "--base-url", stub.url, "--model", "stub-model", "--db", str(db),
               "--dataset", "winopron", "--data-dir", str(data_dir), "--limit", "4", "--mode", "sample",
               "--samples", "4", "--max-concurrency", "4", "--yes"]
    try:
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "COLUMNS": "100"})
        deadline = time.time() + 120
        while _stored(db) == 0 and proc.poll() is None and time.time() < deadline:
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        kept = _stored(db)
        assert proc.returncode == 130, err
        line = err.strip().splitlines()[-1]
        assert line.startswith("interrupted (Ctrl-C): run ") and f"kept {kept} samples (whole chunks)" in line
        assert "run the same command again to resume" in line and "runners collect --dataset winopron" in line
        assert 0 < kept < 160 and kept % 64 == 0  # whole chunks of 64 replies
        with Warehouse.open(db, read_only=True) as wh:
            assert wh.rows("SELECT status, rows_added FROM runs") == [("interrupted", kept)]
        stub.delay_s = 0.0
        again = subprocess.run(command, capture_output=True, text=True, timeout=300)
        assert again.returncode == 0, again.stderr
        assert f"{160 - kept} samples added" in again.stdout and _stored(db) == 160
    finally:
        stub.close()
