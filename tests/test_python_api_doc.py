"""Every ```python block of docs/python-api.md runs, in order, in one namespace, in a folder holding a warehouse
with evidence of every study (synthetic, no model); the values it prints are checked against the warehouse."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

from biaslab.warehouse import Warehouse
from open_warehouse_evidence import build

DOC = Path(__file__).resolve().parents[1] / "docs" / "python-api.md"


def blocks() -> list[str]:
    return [m.group(1) for m in re.finditer(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)]


def test_the_walk_through_runs(tmp_path, monkeypatch, data_dir):
    (tmp_path / "warehouse").mkdir()
    db = build(tmp_path / "warehouse" / "biaslab.duckdb", data_dir)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("BIASLAB_DATA", str(data_dir))  # where `biaslab.load` finds the datasets, as a user sets it
    code = blocks()
    assert len(code) >= 5
    namespace: dict = {}
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        for block in code:
            exec(compile(block, str(DOC), "exec"), namespace)  # noqa: S102 - the documentation's own examples
    with Warehouse.open(db, read_only=True) as wh:
        n = wh.con.execute("SELECT count(*) FROM winopron_pf").fetchone()[0]
    assert set(namespace["kl"]["model_name"]) == {"synthetic-a", "b" * 16}  # an unregistered model: its key
    assert set(namespace["named"]["model_key"]) == {"a" * 16, "b" * 16}
    comparison = namespace["comparison"]  # biaslab.compare: A is the registered model, B the unregistered key
    # A was collected in exact and sample mode, B in exact mode: the exact settings are paired
    assert set(comparison["setting_a"]) == {"synthetic-a · fp32 · hf [mode=exact temperature=0.5]"}
    assert set(comparison["setting_b"]) == {"b" * 16}
    assert {"p_f", "kl_bits", "spearman_rho", "cbd_contextual"} <= set(comparison["measure"])
    assert namespace["con"].execute("SELECT count(*) FROM winopron_pf").fetchone()[0] == n
    lines = printed.getvalue().splitlines()
    assert lines[-4] == "True"  # the DataFusion export gives the same KL table
    # load and collect from Python: 3600 WinoPron stimuli, one template's 10 requests collected with the default
    # model, then none
    with Warehouse.open(namespace["mine"], read_only=True) as mine:
        stimuli = mine.count("stimuli")
        requests = mine.con.execute("SELECT count(*) FROM choice_requests").fetchone()[0]
    assert lines[-3] == f"winopron {stimuli} {stimuli} {stimuli}" and stimuli > 3000
    assert lines[-2].split()[1:] == ["10", "10", "requests"] and requests == 10
    assert lines[-1] == "0"
    assert lines.count(str(n)) >= 3  # the warehouse, plain DuckDB on the export, DataFusion on the export
