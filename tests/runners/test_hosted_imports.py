"""A hosted model's run imports neither torch nor transformers (issue 72, item 2: importing torch was 8.5 s of a
hosted run under load, for a thread count the run never uses). pandas is not asserted: DuckDB's Python binding
imports it whenever a statement binds a parameter (it checks whether a value is a DataFrame)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = """
import json, sys
sys.path.insert(0, {tests!r})
from chat_stub import ChatStub, WINOPRON
from click.testing import CliRunner
from biaslab.cli.runners_cli import runners
stub = ChatStub()
result = CliRunner().invoke(runners, ["collect", "--backend", "openai-chat", "--base-url", stub.url, "--model",
    "stub-model", "--db", {db!r}, "--yes", *WINOPRON, "--data-dir", {data!r}, "--limit", "2", "--mode", "sample",
    "--samples", "2"])
print(json.dumps({{"exit": result.exit_code, "output": result.output,
                  "modules": [m for m in ("torch", "transformers") if m in sys.modules]}}))
"""


def test_a_hosted_run_imports_no_torch(tmp_path, data_dir):
    tests = str(Path(__file__).resolve().parents[1])
    code = SCRIPT.format(tests=tests, db=str(tmp_path / "w.duckdb"), data=str(data_dir))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["exit"] == 0 and "4 samples added" in found["output"], found["output"]
    assert found["modules"] == []
