"""Start-up stays light (issue 57): `biaslab --help`, `runners --help`, `biaslab sql` and `biaslab info` import
none of the heavy libraries a model run or a study needs, checked on `sys.modules` in a fresh interpreter, so the
speed measured by benchmarks/bench_startup.py cannot silently regress."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

#: never imported by the commands below
HEAVY = ("torch", "transformers", "pandas", "ibis", "sqlglot", "matplotlib", "scipy", "statsmodels", "sklearn",
         "vllm")
#: runs a command in-process, then prints which heavy modules were imported
PROBE = """
import json, sys
from biaslab.cli.{module} import {name} as command
ok = True
try:
    command({args!r}, standalone_mode=False)
except SystemExit as exc:
    ok = not exc.code
except Exception:  # a command that ends in an error has imported what it imported
    ok = False
print("\\nOK" if ok else "\\nFAILED")
print("IMPORTED " + json.dumps(sorted(m for m in {heavy!r} if m in sys.modules)))
"""


def imported(module: str, name: str, args: list[str], succeeds: bool = True,
             heavy: tuple[str, ...] = HEAVY) -> list[str]:
    """The `heavy` modules imported by running the command (which must succeed, unless `succeeds` is False)."""
    code = PROBE.format(module=module, name=name, args=args, heavy=heavy)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "IMPORTED " in done.stdout, done.stderr[-2000:]
    assert not succeeds or "\nOK\n" in done.stdout, done.stdout[-2000:] + done.stderr[-2000:]
    return json.loads(done.stdout.rsplit("IMPORTED ", 1)[1])


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    from biaslab.warehouse import Warehouse

    path = tmp_path_factory.mktemp("startup") / "w.duckdb"
    with Warehouse.open(path):
        pass
    return str(path)


@pytest.mark.parametrize("module,name,args", [
    ("main", "biaslab", ["--help"]),
    ("runners_cli", "runners", ["--help"]),
    ("main", "biaslab", ["sql", "--db", "DB", "select 42 AS answer"]),
    ("main", "biaslab", ["info", "--db", "DB"]),
    ("main", "biaslab", ["models", "--db", "DB"]),
])
def test_a_command_imports_nothing_heavy(db, module, name, args):
    assert imported(module, name, [db if a == "DB" else a for a in args]) == []


def test_the_probe_sees_a_heavy_import(db):
    # the check itself can fail: `biaslab metrics` builds frames with pandas
    assert "pandas" in imported("main", "biaslab", ["metrics", "contextuality", "--db", db], succeeds=False)


def test_runners_lists_its_commands_with_their_own_help_without_importing_them():
    from biaslab.cli.runners_cli import COMMANDS, SHORT_HELP, runners

    assert set(SHORT_HELP) == set(COMMANDS)
    for name, text in SHORT_HELP.items():  # the help `runners --help` shows is each command's own
        assert runners.get_command(None, name).get_short_help_str(300) == text


@pytest.fixture(scope="module")
def stored_plan(tmp_path_factory, data_dir, tiny_gpt2_dir):
    """A plan of one tiny model x two datasets (a scored and an asked one), every unit stored."""
    from click.testing import CliRunner

    from biaslab.cli.main import biaslab

    folder = tmp_path_factory.mktemp("startup-audit")
    plan = folder / "plan.yaml"
    plan.write_text(f"name: p\ndb: w.duckdb\ndata_dir: {data_dir}\ncollect: {{threads: 1}}\nmodels:\n"
                    f"  - {{name: a, model: {tiny_gpt2_dir}, dtype: fp32}}\ndatasets:\n"
                    "  - {dataset: crows-pairs, limit: 2}\n  - {dataset: winopron, limit: 1}\n", encoding="utf-8")
    result = CliRunner().invoke(biaslab, ["audit", "run", str(plan)], catch_exceptions=False)
    assert "2 units, 2 computed" in result.output, result.output
    return str(plan)


@pytest.mark.parametrize("args", [["audit", "status", "PLAN"], ["audit", "run", "PLAN", "--dry-run"]])
def test_audit_status_and_dry_run_read_a_stored_plan_without_arrow_or_numpy(stored_plan, args):
    # issue 72: these commands answer from the warehouse; NumPy and Arrow (through the protocols' evidence schemas)
    # are for writing rows, and took most of what status spent over `biaslab collections`
    args = [stored_plan if a == "PLAN" else a for a in args]
    assert imported("main", "biaslab", args, heavy=(*HEAVY, "numpy", "pyarrow")) == []
