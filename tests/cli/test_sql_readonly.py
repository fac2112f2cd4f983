"""`biaslab sql` cannot write anything anywhere (issue from the user audit).

Every hostile statement below must exit non-zero with exactly one line of output (no traceback), leave the warehouse
file (and its .wal, if any) byte-identical, and create no file under the test's folder, the working directory or
~/.duckdb. Reading is allowed only under --allow-path folders.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from biaslab.cli.main import biaslab
from biaslab.warehouse import Warehouse

# --------------------------------------------------------------------------------------------- fixtures / helpers


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict:
    """A warehouse with a few stimuli, an --allow-path folder with a CSV (and an import_database schema that writes),
    a file outside it, and a working directory; all under one root folder."""
    root = tmp_path_factory.mktemp("sqlro")
    db = root / "w.duckdb"
    with Warehouse.open(db) as wh:
        wh.append("stimuli", [
            {"stimulus_id": f"s{i}", "dataset": "winobias", "upstream_version": "1", "item_id": str(i),
             "text": f"[the tailor] asked [him] :x: {i}"} for i in range(3)
        ])
    allowed = root / "allowed"
    allowed.mkdir()
    (allowed / "x.csv").write_text("a,b\n1,[the tailor]\n2,:x:\n", encoding="utf-8")
    (allowed / "schema.sql").write_text("CREATE TABLE imported (a INTEGER);\n", encoding="utf-8")
    (allowed / "load.sql").write_text(f"COPY imported TO '{allowed}/imported.csv';\n", encoding="utf-8")
    sibling = root / "allowedx"  # same prefix as `allowed` without the separator: must stay out of reach
    sibling.mkdir()
    (sibling / "x.csv").write_text("a\n1\n", encoding="utf-8")
    (root / "outside.csv").write_text("a\n1\n", encoding="utf-8")
    (root / "cwd").mkdir()
    return {"root": root, "db": db, "allowed": allowed, "sibling": sibling, "cwd": root / "cwd"}


def file_hash(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None


def tree(*folders: Path) -> dict[str, tuple]:
    """Every path under `folders` with its size and hash (files) so that any created or changed file shows."""
    out: dict[str, tuple] = {}
    for folder in folders:
        if not folder.exists():
            continue
        for dirpath, dirnames, filenames in os.walk(folder):
            for d in dirnames:
                out[os.path.join(dirpath, d)] = ("dir",)
            for f in filenames:
                p = Path(dirpath, f)
                out[str(p)] = ("file", p.stat().st_size, file_hash(p))
    return out


def snapshot(env: dict) -> tuple:
    db = env["db"]
    duckdb_home = Path.home() / ".duckdb"
    return (file_hash(db), file_hash(db.with_name(db.name + ".wal")), tree(env["root"], Path.cwd()),
            tree(duckdb_home) if duckdb_home.exists() else None)


def run(*args: str, input: str | None = None):
    return CliRunner().invoke(biaslab, list(args), input=input, catch_exceptions=False)


def assert_refused(result, before: tuple, env: dict) -> str:
    """Non-zero exit, exactly one line of output starting with "Error:", no traceback, nothing changed."""
    lines = result.output.strip().splitlines()
    assert result.exit_code != 0, result.output
    assert len(lines) == 1, result.output
    assert lines[0].startswith("Error: ") and "Traceback" not in result.output
    assert snapshot(env) == before, "a file was created or changed"
    return lines[0]


# --------------------------------------------------------------------------------------------- the hostile list
#: {db}: the warehouse file, {allowed}: the --allow-path folder, {root}: the test's folder, {sibling}: a folder
#: whose name extends the allowed one's. Each must be refused both without and with --allow-path {allowed}.
HOSTILE = [
    # COPY / EXPORT: the warehouse itself, the cwd, the allowed folder, escapes from it, devices
    "COPY (select 'x') TO '{db}'",
    "COPY (select 'x') TO '{db}' (FORMAT parquet)",
    "COPY (select 'x') TO 'any.csv'",
    "COPY stimuli TO '{allowed}/stimuli.csv'",
    "COPY (select 42) TO '{allowed}/out.parquet' (FORMAT parquet)",
    "COPY (select 1) TO '{allowed}/../escape.csv'",
    "COPY (select 1) TO '{sibling}/x.csv'",
    "COPY (select 1) TO '/dev/stdout'",
    "COPY (select 1) TO '/dev/stderr' (FORMAT json)",
    "copy stimuli from '{allowed}/x.csv'",
    "/* comment */ CoPy (select 1) To 'commented.csv'",
    "-- line comment\ncopy (select 1) to 'after_comment.csv'",
    "EXPORT DATABASE '{root}/dump'",
    "EXPORT DATABASE '{allowed}/dump' (FORMAT parquet)",
    # ATTACH in every mode, DETACH, USE, COPY FROM DATABASE
    "ATTACH '{root}/other.duckdb' AS o (READ_WRITE); CREATE TABLE o.t AS SELECT 42",
    "ATTACH '{root}/other.duckdb' AS o",
    "ATTACH '{allowed}/other.duckdb' AS o",
    "ATTACH '{db}' AS again (READ_ONLY)",
    "ATTACH ':memory:' AS m",
    "ATTACH 'sqlite:{allowed}/x.sqlite' AS s",
    "ATTACH 'https://example.com/x.duckdb' AS r",
    "DETACH DATABASE IF EXISTS o",
    "USE memory",
    "COPY FROM DATABASE w TO memory",
    # CREATE of every kind (TEMP objects are allowed by DuckDB on a read-only file and would shadow the views)
    "CREATE OR REPLACE TEMP VIEW sequence_metrics AS SELECT 42",
    "CREATE TABLE t AS SELECT 42",
    "CREATE TEMP TABLE t AS SELECT 42",
    "CREATE VIEW v AS SELECT 1",
    "CREATE TEMP MACRO m(x) AS x + 1",
    "CREATE OR REPLACE TEMP MACRO read_csv(x) AS x",
    "CREATE MACRO tm() AS TABLE SELECT 1",
    "CREATE TEMP SEQUENCE seq",
    "CREATE TYPE mood AS ENUM ('a', 'b')",
    "CREATE SCHEMA s",
    "CREATE INDEX i ON stimuli (dataset)",
    "CREATE SECRET (TYPE s3, KEY_ID 'k', SECRET 's')",
    "CREATE PERSISTENT SECRET ps (TYPE s3, KEY_ID 'k', SECRET 's')",
    "pivot (select 1 a) on a",  # creates an ENUM type first
    # settings: SET / RESET / PRAGMA that change them
    "SET threads = 1",
    "SET enable_external_access = true",
    "SET lock_configuration = false",
    "SET allowed_directories = ['/']",
    "SET autoinstall_known_extensions = true",
    "RESET enable_external_access",
    "SET VARIABLE v = 1",
    "PRAGMA enable_profiling",
    "PRAGMA enable_profiling = 'json'",
    "PRAGMA profiling_output = '{allowed}/profile.json'",
    "PRAGMA threads = 2",
    "PRAGMA disable_optimizer",
    "PRAGMA import_database('{allowed}')",
    "PRAGMA force_checkpoint",
    # extensions
    "LOAD httpfs",
    "INSTALL httpfs",
    "INSTALL httpfs FROM community",
    "FORCE INSTALL json",
    "UPDATE EXTENSIONS",
    # maintenance and data changes
    "CHECKPOINT",
    "FORCE CHECKPOINT",
    "VACUUM",
    "ANALYZE",
    "UPDATE stimuli SET text = 'x'",
    "DELETE FROM stimuli",
    "TRUNCATE stimuli",
    "DROP TABLE stimuli",
    "DROP VIEW sequence_metrics",
    "INSERT INTO meta VALUES ('a', 'b')",
    "INSERT INTO stimuli SELECT * FROM stimuli",
    "ALTER TABLE stimuli ADD COLUMN z INTEGER",
    "MERGE INTO meta USING (SELECT 'k' AS key, 'v' AS value) src ON meta.key = src.key "
    "WHEN NOT MATCHED THEN INSERT VALUES (src.key, src.value)",
    "BEGIN TRANSACTION",
    "PREPARE p AS COPY (select 1) TO '{allowed}/prepared.csv'; EXECUTE p",
    # reading outside the allowed folders (also the network)
    "select * from read_csv('/etc/passwd')",
    "select * from read_text('{root}/outside.csv')",
    "select * from '{root}/outside.csv'",
    "select * from read_csv('{allowed}/../outside.csv')",
    "select * from read_csv('{sibling}/x.csv')",
    "select * from glob('/*')",
    "select * from read_duckdb('{db}')",
    "select * from read_csv('https://example.com/x.csv')",
    "select * from read_parquet('s3://bucket/x.parquet')",
    # several statements mixing reads and writes: nothing runs
    "select 1; COPY (select 2) TO '{allowed}/mixed.csv'",
    "COPY (select 2) TO '{allowed}/mixed.csv'; select 1",
    "select 1; CREATE OR REPLACE TEMP VIEW sequence_metrics AS SELECT 42; select * from sequence_metrics",
    # CALL, and table functions that write or change state even inside a SELECT
    "CALL enable_logging(storage='file', storage_path='{allowed}/logs')",
    "CALL checkpoint()",
    "CALL pragma_version()",
    "select * from enable_logging(storage='file', storage_path='{allowed}/logs')",
    "select * from Enable_Logging(storage='file', storage_path='{allowed}/logs2')",
    "select * from system.main.enable_logging(storage='file', storage_path='{root}/logs')",
    "with x as (select * from \"enable_logging\"()) select * from x",
    "select 1 where exists (select * from enable_profiling(save_location='{allowed}/p.json'))",
    "select * from checkpoint()",
    "select * from query('select * from enable_logging()')",
    "select write_log('x')",
    # EXPLAIN ANALYZE runs its statement
    "EXPLAIN ANALYZE COPY (select 1) TO '{allowed}/ea.csv'",
    "EXPLAIN (ANALYZE) COPY (select 1) TO '{allowed}/ea2.csv'",
    "explain /* c */ analyze create temp view sequence_metrics as select 42",
    "EXPLAIN ANALYZE select * from enable_logging(storage='file', storage_path='{allowed}/logs3')",
    "EXPLAIN COPY (select 1) TO 'x.csv'",
    # IMPORT DATABASE (DuckDB's parser reads the folder's schema.sql / load.sql to expand it)
    "IMPORT DATABASE '{allowed}'",
    "select 1; /* c */ import database '{allowed}'",
    # table functions that read a Python object from a memory address (a NULL one crashes the process)
    "select * from pandas_scan(NULL)",
    "select * from arrow_scan(NULL, NULL, NULL)",
    "select * from arrow_scan_dumb(NULL, NULL, NULL)",
    "select * from python_map_function((select 1), NULL, NULL)",
    "with t as (select * from PANDAS_SCAN(0)) select * from t",
]


def fill(sql: str, env: dict) -> str:
    return sql.format(db=env["db"], allowed=env["allowed"], root=env["root"], sibling=env["sibling"])


def test_the_hostile_list_is_long_enough():
    assert len(HOSTILE) >= 20 and len(set(HOSTILE)) == len(HOSTILE)


@pytest.mark.parametrize("allow", [False, True], ids=["no-allow-path", "allow-path"])
@pytest.mark.parametrize("sql", HOSTILE)
def test_hostile_statement_is_refused_and_changes_nothing(env, monkeypatch, sql, allow):
    monkeypatch.chdir(env["cwd"])
    before = snapshot(env)
    extra = ["--allow-path", str(env["allowed"])] if allow else []
    result = run("sql", "--db", str(env["db"]), *extra, "--", fill(sql, env))  # "--": SQL may start with "--"
    assert_refused(result, before, env)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(hostile=st.sampled_from(HOSTILE),
       reads=st.lists(st.sampled_from(["select 1", "from stimuli", "select count(*) from sequence_metrics",
                                       "show tables", "describe stimuli", "pragma version"]), max_size=3),
       position=st.integers(min_value=0, max_value=3),
       upper=st.booleans(), allow=st.booleans(), fmt=st.sampled_from(["table", "csv", "json"]))
def test_a_write_anywhere_in_a_script_refuses_the_whole_script(env, monkeypatch, hostile, reads, position, upper,
                                                               allow, fmt):
    """Property: a script of reads with one hostile statement at any place, in any case and format, prints one
    error line and no result (nothing ran), and changes no file."""
    monkeypatch.chdir(env["cwd"])
    statements = list(reads)
    statements.insert(min(position, len(statements)), fill(hostile, env))
    script = ";\n".join(statements)
    if upper:  # keywords are case-insensitive; paths in the test folder contain no letters that matter
        script = script.replace("select", "SELECT").replace("copy", "COPY").replace("from", "FROM")
    before = snapshot(env)
    extra = ["--allow-path", str(env["allowed"])] if allow else []
    result = run("sql", "--db", str(env["db"]), "--format", fmt, *extra, "--", script)
    assert_refused(result, before, env)


def test_copy_onto_the_warehouse_leaves_it_byte_identical(env, monkeypatch):
    """Through the installed console script: stderr has one line, stdout nothing, the file is unchanged."""
    monkeypatch.chdir(env["cwd"])
    exe = Path(sys.executable).with_name("biaslab")
    command = [str(exe)] if exe.exists() else [sys.executable, "-c", "from biaslab.cli.main import biaslab; biaslab()"]
    before = snapshot(env)
    digest = file_hash(env["db"])
    proc = subprocess.run([*command, "sql", f"COPY (select 1) TO '{env['db']}'", "--db", str(env["db"])],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("Error: biaslab sql is read-only")
    assert "(statement type COPY)" in proc.stderr
    assert file_hash(env["db"]) == digest and snapshot(env) == before
    # and the warehouse still reads
    out = run("sql", "select count(*) as n from stimuli", "--db", str(env["db"]), "--format", "csv")
    assert out.exit_code == 0 and out.output.splitlines() == ["n", "3"]


def test_refusal_names_the_statement_type(env, monkeypatch):
    monkeypatch.chdir(env["cwd"])
    before = snapshot(env)
    cases = {
        "COPY (select 1) TO 'x.csv'": "(statement type COPY)",
        "EXPORT DATABASE 'd'": "(statement type EXPORT)",
        "ATTACH 'o.duckdb' AS o": "(statement type ATTACH)",
        "CREATE TEMP VIEW v AS SELECT 1": "(statement type CREATE)",
        "SET threads = 1": "(statement type SET)",
        "PRAGMA enable_profiling": "(statement type PRAGMA)",
        "INSTALL httpfs": "(statement type LOAD)",
        "CALL pragma_version()": "(statement type CALL)",
        "UPDATE EXTENSIONS": "(statement type UPDATE EXTENSIONS)",
        "select * from enable_logging()": "(it calls enable_logging()",
        "EXPLAIN ANALYZE COPY (select 1) TO 'x.csv'": "(EXPLAIN of a statement of type COPY",
        "pivot (select 1 a) on a": "statement of type CREATE for it: a PIVOT without an IN (...) list",
        "IMPORT DATABASE 'd'": "refused a statement of type IMPORT DATABASE",
        "select * from pandas_scan(NULL)": "(it calls pandas_scan(), which reads a Python object from a memory",
    }
    for sql, reason in cases.items():
        line = assert_refused(run("sql", sql, "--db", str(env["db"])), before, env)
        assert "read-only" in line and reason in line, line
    line = assert_refused(run("sql", "select 1; select 2; drop table stimuli", "--db", str(env["db"])), before, env)
    assert "refused statement 3 (drop table stimuli) (statement type DROP); nothing was run" in line


def test_duckdb_settings_are_locked_down(env, monkeypatch):
    monkeypatch.chdir(env["cwd"])
    sql = ("select current_setting('enable_external_access') AS ext, current_setting('lock_configuration') AS lck, "
           "current_setting('autoinstall_known_extensions') AS ai, current_setting('autoload_known_extensions') AS al, "
           "current_setting('allow_community_extensions') AS ce, current_setting('allow_persistent_secrets') AS ps, "
           "current_setting('allowed_directories') AS dirs")
    plain = json.loads(run("sql", sql, "--db", str(env["db"]), "--format", "json").output)
    assert plain[0]["ext"] is False and plain[0]["lck"] is True
    assert plain[0]["ai"] is False and plain[0]["al"] is False and plain[0]["ce"] is False and plain[0]["ps"] is False
    assert not any(d.startswith(str(env["allowed"])) for d in plain[0]["dirs"])
    allowed = json.loads(run("sql", sql, "--db", str(env["db"]), "--format", "json", "--allow-path",
                             str(env["allowed"])).output)
    assert allowed[0]["ext"] is False and allowed[0]["lck"] is True and allowed[0]["al"] is False
    assert str(env["allowed"]) + os.sep in allowed[0]["dirs"]


# --------------------------------------------------------------------------------------------- reading files
def test_read_csv_under_allow_path_works_and_outside_is_refused(env, monkeypatch):
    monkeypatch.chdir(env["cwd"])
    db, allowed = str(env["db"]), env["allowed"]
    before = snapshot(env)
    ok = run("sql", f"select * from read_csv('{allowed}/x.csv') order by a", "--db", db, "--format", "csv",
             "--allow-path", str(allowed))
    assert ok.exit_code == 0, ok.output
    assert ok.output.splitlines() == ["a,b", "1,[the tailor]", "2,:x:"]
    # a relative --allow-path and a relative file name, from the working directory
    monkeypatch.chdir(env["root"])
    rel = run("sql", "select sum(a) as s from 'allowed/x.csv'", "--db", db, "--format", "json", "--allow-path",
              "allowed")
    assert rel.exit_code == 0, rel.output
    assert json.loads(rel.output) == [{"s": 3}]
    monkeypatch.chdir(env["cwd"])
    glob = run("sql", f"select file from glob('{allowed}/*.csv')", "--db", db, "--format", "csv", "--allow-path",
               str(allowed))
    assert glob.output.splitlines() == ["file", f"{allowed}/x.csv"]
    # the same file without --allow-path, and other files with it
    denied = run("sql", f"select * from read_csv('{allowed}/x.csv')", "--db", db)
    line = assert_refused(denied, before, env)
    assert "Permission Error" in line and "--allow-path" in line
    for outside in (env["root"] / "outside.csv", env["sibling"] / "x.csv", f"{allowed}/../outside.csv"):
        result = run("sql", f"select * from read_csv('{outside}')", "--db", db, "--allow-path", str(allowed))
        assert "Permission Error" in assert_refused(result, before, env)
    assert snapshot(env) == before


def test_allow_path_must_be_an_existing_folder(env, monkeypatch):
    monkeypatch.chdir(env["cwd"])
    before = snapshot(env)
    for bad in (env["root"] / "missing", env["allowed"] / "x.csv"):
        line = assert_refused(run("sql", "select 1", "--db", str(env["db"]), "--allow-path", str(bad)), before, env)
        assert "--allow-path" in line and "not an existing folder" in line


# --------------------------------------------------------------------------------------------- reads still run
READS = [
    ("select 42 as x", [{"x": 42}]),
    ("from stimuli select count(*) as n", [{"n": 3}]),
    ("with a as (select 2 as y) select y from a", [{"y": 2}]),
    ("values (1, 'a')", [{"col0": 1, "col1": "a"}]),
    ("select count(*) as n from (table stimuli)", [{"n": 3}]),
    ("select count(*) as n from sequence_metrics", [{"n": 0}]),
    ("pragma version", None),
    ("pragma table_info('meta')", None),
    ("pragma show_tables", None),
    ("show tables", None),
    ("describe stimuli", None),
    ("summarize select 1 as a", None),
    ("explain select 1", None),
    ("explain analyze select count(*) from stimuli", None),
    ("explain (format json) select 1", None),
    ("pivot (select 'a' as k, 1 as v) on k in ('a') using sum(v)", [{"a": 1}]),
    ("unpivot (select 1 as a, 2 as b) on a, b into name k value v order by k", [{"k": "a", "v": 1},
                                                                                 {"k": "b", "v": 2}]),
    ("select count(*) as n from query_table('stimuli')", [{"n": 3}]),
    ("select name from duckdb_settings() where name = 'threads'", [{"name": "threads"}]),
    ("select 1 as checkpoint, 'query' as query", [{"checkpoint": 1, "query": "query"}]),
]


@pytest.mark.parametrize("sql,expected", READS, ids=[r[0][:40] for r in READS])
def test_read_statements_still_run(env, monkeypatch, sql, expected):
    monkeypatch.chdir(env["cwd"])
    before = snapshot(env)
    result = run("sql", sql, "--db", str(env["db"]), "--format", "json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert isinstance(rows, list) and rows
    if expected is not None:
        assert rows == expected
    assert snapshot(env) == before


def test_no_duckdb_tmp_folder_or_wal_appears(env, monkeypatch):
    monkeypatch.chdir(env["cwd"])
    run("sql", "select * from range(200000) order by random()", "--db", str(env["db"]), "--format", "csv")
    assert not env["db"].with_name(env["db"].name + ".wal").exists()
    assert not env["db"].with_name(env["db"].name + ".tmp").exists()


def test_script_from_file_is_checked_like_an_argument(env, monkeypatch):
    monkeypatch.chdir(env["cwd"])
    script = env["root"] / "evil.sql"
    script.write_text("select 1;\nCOPY (select 1) TO 'from_file.csv';\n", encoding="utf-8")
    before = snapshot(env)
    line = assert_refused(run("sql", "-f", str(script), "--db", str(env["db"])), before, env)
    assert "statement 2" in line and "COPY" in line
    line = assert_refused(run("sql", "-f", "-", "--db", str(env["db"]), input="DROP TABLE stimuli"), before, env)
    assert "DROP" in line


def test_function_calls_are_found_without_the_json_parse_tree(env, monkeypatch):
    """Where DuckDB cannot serialize a SELECT to JSON, the names before "(" from DuckDB's tokenizer are checked."""
    import biaslab.warehouse.readonly as sql_cmd

    names = sql_cmd._function_names_from_tokens(
        'select "Enable_Logging"(1), count(*) from system.main.checkpoint /* c */ (), query_table(\'t\') q')
    assert names == {"enable_logging", "count", "checkpoint", "query_table"}

    class NoTree:
        @staticmethod
        def loads(*args, **kwargs):
            return {"error": True}

    monkeypatch.setattr(sql_cmd, "json", NoTree)
    monkeypatch.chdir(env["cwd"])
    before = snapshot(env)
    line = assert_refused(run("sql", f"select * from enable_logging(storage='file', storage_path='{env['allowed']}/l')",
                              "--db", str(env["db"]), "--allow-path", str(env["allowed"])), before, env)
    assert "(it calls enable_logging()" in line
    ok = run("sql", "select 1 as query", "--db", str(env["db"]), "--format", "csv")
    assert ok.exit_code == 0 and ok.output.splitlines() == ["query", "1"]


# --------------------------------------------------------------------------------------------- limits and stops
def console_script() -> list[str]:
    exe = Path(sys.executable).with_name("biaslab")
    return [str(exe)] if exe.exists() else [sys.executable, "-c", "from biaslab.cli.main import biaslab; biaslab()"]


def test_nul_byte_in_a_script_file_is_refused(env, monkeypatch):
    monkeypatch.chdir(env["cwd"])
    script = env["root"] / "nul.sql"
    script.write_bytes(b"select 1;\nselect 2;\x00 select 3")
    before = snapshot(env)
    line = assert_refused(run("sql", "-f", str(script), "--db", str(env["db"])), before, env)
    assert "NUL byte (line 2)" in line and "nothing was run" in line
    line = assert_refused(run("sql", "-f", "-", "--db", str(env["db"]), input="select 1;\x00"), before, env)
    assert "NUL byte" in line
    script.unlink()


def test_a_huge_result_prints_its_first_rows_without_reading_the_rest(env, monkeypatch):
    """10^12 rows: the table shows --max-rows of them and says more were not shown; --timeout 60 turns a full
    read (minutes) into a failure instead of a hang."""
    monkeypatch.chdir(env["cwd"])
    result = run("sql", "select range as i from range(1000000000000)", "--db", str(env["db"]), "--max-rows", "3",
                 "--timeout", "60")
    assert result.exit_code == 0, result.output
    assert "... more rows not shown (the first 3 shown)" in result.output
    assert [line.split("│")[1].strip() for line in result.output.splitlines() if line.count("│") == 2] == \
        ["0", "1", "2"]


def test_timeout_stops_a_long_query_with_one_line(env, monkeypatch):
    import time

    monkeypatch.chdir(env["cwd"])
    before = snapshot(env)
    started = time.monotonic()
    result = run("sql", "select count(*) from range(1000000000000) t(a), range(10) u(b) where a * b % 7 = 3",
                 "--db", str(env["db"]), "--timeout", "1.5")
    elapsed = time.monotonic() - started
    line = assert_refused(result, before, env)
    assert line == "Error: query stopped after 1.5 s (--timeout); give a larger --timeout, or --timeout 0 for no limit"
    assert elapsed < 30  # stopped, not run to the end (hours)


def test_memory_limit_default_and_option(env, monkeypatch):
    monkeypatch.chdir(env["cwd"])
    from biaslab.warehouse.readonly import default_memory_limit

    half = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2
    assert default_memory_limit() == f"{half // 2**20}MiB"
    sql = "select current_setting('memory_limit') as m, current_setting('temp_directory') as t"
    out = json.loads(run("sql", sql, "--db", str(env["db"]), "--format", "json").output)[0]
    value, unit = out["m"].split()
    assert unit == "GiB" and abs(float(value) * 2**30 - half) < 0.01 * half and out["t"] == ""
    out = json.loads(run("sql", sql, "--db", str(env["db"]), "--format", "json", "--memory-limit", "64MB").output)
    assert out[0]["m"] == "61.0 MiB"
    before = snapshot(env)
    line = assert_refused(run("sql", "select max(length(s)) from (select list(range) s from range(30000000))",
                              "--db", str(env["db"]), "--memory-limit", "64MB"), before, env)
    assert "out of memory" in line and "61 MiB for DuckDB" in line and "raise --memory-limit" in line


def _until_biaslab_imports(proc, timeout: float = 60.0) -> None:
    """Wait until the process is importing biaslab's own modules: DuckDB's extension is mapped into it
    (/proc/PID/maps), which happens only once the interpreter has started and biaslab's imports are under way;
    without /proc, a second's wait."""
    import time

    maps = f"/proc/{proc.pid}/maps"
    if not os.path.exists(maps):
        time.sleep(1.0)
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if "duckdb" in Path(maps).read_text():
                return
        except OSError:
            return
        time.sleep(0.002)


@pytest.mark.skipif(not hasattr(os, "killpg"), reason="POSIX signals")
@pytest.mark.parametrize("fmt, sql, when", [
    # the long query running: the script's first statement has printed, the second (the long one) has started
    ("table", "select 'started' as s; select count(*) from range(1000000000000) t(a), range(10) u(b) "
              "where a * b % 7 = 3", "running"),
    ("csv", "select range as i from range(1000000000000)", "running"),  # Ctrl-C while rows stream out
    # while the program imports its modules and opens and checks the warehouse (issue 46: a SIGINT during the
    # session's set-up gave a traceback and exit 1; issue 71: 0.05 s in, inside a C extension's initialization, an
    # ImportError traceback). Counted from the moment biaslab's imports are under way (DuckDB mapped): before, the
    # interpreter itself is starting, where a SIGINT ends any Python program alike (not a Ctrl-C case of biaslab's)
    ("table", "select 1", 0.05), ("table", "select 1", 0.5), ("table", "select 1", 1.0),
])
def test_ctrl_c_stops_the_query_at_once_with_one_line(env, fmt, sql, when):
    """A real SIGINT to the installed console script, wherever it lands: exit status 130 within seconds, one line
    on stderr. "running" waits for the query's first output (synchronized, not timed); a number of seconds lands
    during start-up (a process that had already finished by then is not a Ctrl-C case and is tried earlier)."""
    import signal
    import time

    proc = subprocess.Popen([*console_script(), "sql", sql, "--db", str(env["db"]), "--format", fmt],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=env["cwd"])
    if when == "running":
        first = proc.stdout.readline()  # the first printed line: the script's query is under way
        assert first, proc.stderr.read().decode()
        time.sleep(0.5)
    else:
        _until_biaslab_imports(proc)  # synchronized with biaslab's start, whatever the machine's load
        time.sleep(when)
    proc.send_signal(signal.SIGINT)
    started = time.monotonic()
    _, err = proc.communicate(timeout=60)
    assert time.monotonic() - started < 20
    text = err.decode()
    if proc.returncode == 0:  # `select 1` ended before the signal came: nothing to interrupt
        assert when != "running" and text == ""
        return
    assert proc.returncode == 130, text
    assert text.count("\n") == 1 and "Traceback" not in text
    assert text.startswith("Error: interrupted (Ctrl-C)"), text


def test_the_known_pointer_functions_are_duckdbs_own_answer(monkeypatch):
    """`biaslab sql` takes the installed DuckDB release's POINTER functions from a table (issue 57: asking DuckDB
    costs ~20 ms a start); the table's entry for this release equals DuckDB's own answer, and a release not in the
    table is asked."""
    import duckdb

    from biaslab.warehouse import readonly

    con = duckdb.connect(config=dict(readonly.CONNECT_CONFIG))
    asked = frozenset(r[0] for r in con.execute(readonly.POINTER_SQL).fetchall())
    assert duckdb.__version__ in readonly.KNOWN_POINTER_FUNCTIONS, "add this DuckDB release's entry"
    assert readonly.KNOWN_POINTER_FUNCTIONS[duckdb.__version__] == asked and "pandas_scan" in asked
    monkeypatch.setattr(readonly, "KNOWN_POINTER_FUNCTIONS", {})
    assert readonly.pointer_functions(con) == asked
