"""`biaslab sql` output: literal tables with a row cap, streamed csv, strict json, several statements, -f."""

from __future__ import annotations

import base64
import csv
import io
import json
import time

import pytest
from click.testing import CliRunner

from biaslab.cli.common import emit, json_value, table_text
from biaslab.cli.main import biaslab
from biaslab.warehouse import Warehouse

WINOBIAS = "The tailor asked [the tailor] whether [him] :x: :smile: [bold red]x[/] She said [/INST]"


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("sqlout") / "w.duckdb"
    with Warehouse.open(path) as wh:
        wh.append("stimuli", [{"stimulus_id": "s1", "dataset": "winobias", "upstream_version": "1", "item_id": "1",
                               "text": WINOBIAS, "attrs": '{"type": 1, "pro": [true, null], "r": 0.5}'}])
    return str(path)


def run(*args: str, input: str | None = None):
    return CliRunner().invoke(biaslab, list(args), input=input, catch_exceptions=False)


def strict_json(text: str):
    def refuse(name):
        raise AssertionError(f"non-standard JSON constant {name}")

    return json.loads(text, parse_constant=refuse)


def table_rows(output: str) -> list[list[str]]:
    """Data rows of a rich table (the lines between the header rule and the bottom border)."""
    rows = []
    for line in output.splitlines():
        if line.startswith("│"):
            rows.append([cell.strip() for cell in line.strip("│").split("│")])
    return rows


# --------------------------------------------------------------------------------------------- table: literal text
def test_table_shows_markup_emoji_codes_and_brackets_literally(db):
    result = run("sql", "select text from stimuli", "--db", db)
    assert result.exit_code == 0, result.output
    assert table_rows(result.output) == [[WINOBIAS]]


def test_table_literal_for_inst_tags_headers_and_control_characters(db):
    sql = ("select 'She said [/INST]' as \"[b]col[/b]\", ':x:' as \":smile:\", "
           "chr(27) || '[31mred' as esc, 'a[/]b' as closing")
    result = run("sql", sql, "--db", db)
    assert result.exit_code == 0, result.output
    header = next(line for line in result.output.splitlines() if line.startswith("┃"))
    assert [c.strip() for c in header.strip("┃").split("┃")] == ["[b]col[/b]", ":smile:", "esc", "closing"]
    assert table_rows(result.output) == [["She said [/INST]", ":x:", "\\x1b[31mred", "a[/]b"]]
    assert "\x1b" not in result.output  # an escape sequence from the data cannot reach the terminal


def test_table_text_values():
    assert table_text(None) == "" and table_text(1 / 3) == "0.333333" and table_text("[him]") == "[him]"
    assert table_text("a\tb\nc") == "a\tb\nc" and table_text("\x07\x1b\x9b") == "\\x07\\x1b\\x9b"


# --------------------------------------------------------------------------------------------- table: row cap
def test_table_is_capped_at_1000_rows_by_default_with_one_line_saying_so(db):
    result = run("sql", "select range as i from range(50000)", "--db", db)
    assert result.exit_code == 0
    rows = table_rows(result.output)
    assert [r[0] for r in rows] == [str(i) for i in range(1000)]
    lines = result.output.rstrip("\n").splitlines()
    assert lines[-1] == ("... more rows not shown (the first 1,000 shown); use --format csv for all rows "
                         "(or --max-rows 0)")
    assert sum("more rows not shown" in line for line in lines) == 1


@pytest.mark.parametrize("cap,total,shown", [(10, 25, 10), (25, 25, 25), (0, 1500, 1500), (1, 0, 0)])
def test_max_rows_option(db, cap, total, shown):
    result = run("sql", f"select range as i from range({total})", "--db", db, "--max-rows", str(cap))
    assert result.exit_code == 0
    assert [r[0] for r in table_rows(result.output)] == [str(i) for i in range(shown)]
    hidden = total - shown
    if hidden:
        assert f"... more rows not shown (the first {shown:,} shown)" in result.output
    else:
        assert "not shown" not in result.output


def test_max_rows_must_not_be_negative(db):
    result = run("sql", "select 1", "--db", db, "--max-rows", "-1")
    assert result.exit_code != 0


def test_50k_rows_are_fast_in_every_format(db):
    sql = "select range as i, 'sentence [the tailor] number ' || range as t, range / 7 as f from range(50000)"
    timings = {}
    outputs = {}
    for fmt in ("table", "csv", "json"):
        start = time.perf_counter()
        result = run("sql", sql, "--db", db, "--format", fmt)
        timings[fmt] = time.perf_counter() - start
        assert result.exit_code == 0
        outputs[fmt] = result.output
    assert timings["table"] < 5, timings  # was 14.5 s for the whole table before the cap and batch fetching
    assert timings["csv"] < 5 and timings["json"] < 5, timings
    rows = list(csv.reader(io.StringIO(outputs["csv"])))
    assert rows[0] == ["i", "t", "f"] and len(rows) == 50001
    assert rows[-1] == ["49999", "sentence [the tailor] number 49999", str(49999 / 7)]
    records = strict_json(outputs["json"])
    assert len(records) == 50000 and records[12345] == {"i": 12345, "t": "sentence [the tailor] number 12345",
                                                        "f": 12345 / 7}


# --------------------------------------------------------------------------------------------- several statements
def test_several_statements_table_prints_one_table_each(db):
    result = run("sql", "select 1 as a; select 'two' as b; select 3 as c where false", "--db", db)
    assert result.exit_code == 0
    headers = [line.strip("┃ ") for line in result.output.splitlines() if line.startswith("┃")]
    assert headers == ["a", "b", "c"]
    assert table_rows(result.output) == [["1"], ["two"]]


def test_several_statements_csv_separated_by_a_blank_line(db):
    result = run("sql", "select 1 as a, 'x' as b; select 2 as c; select 3 as d where false", "--db", db,
                 "--format", "csv")
    assert result.exit_code == 0
    assert result.output == "a,b\n1,x\n\nc\n2\n\nd\n"


def test_several_statements_json_is_a_list_of_result_lists(db):
    result = run("sql", "select 1 as a; select 2 as b union all select 3; select 4 as c where false", "--db", db,
                 "--format", "json")
    assert result.exit_code == 0
    assert strict_json(result.output) == [[{"a": 1}], [{"b": 2}, {"b": 3}], []]
    single = run("sql", "select 1 as a;", "--db", db, "--format", "json")
    assert strict_json(single.output) == [{"a": 1}]
    empty = run("sql", "select 1 as a where false", "--db", db, "--format", "json")
    assert strict_json(empty.output) == []


def test_empty_sql_is_a_one_line_error(db):
    for sql in ("", "  ;  ", "-- only a comment"):
        result = run("sql", "--db", db, "--", sql)
        assert result.exit_code != 0 and result.output.strip().splitlines() == [
            "Error: no SQL statement given"], result.output


# --------------------------------------------------------------------------------------------- strict JSON
def test_json_is_strict_and_typed(db):
    sql = """
    select 'nan'::double as nan, 'inf'::double as inf, '-inf'::double as ninf, 1.5::double as x,
           '\\xAA\\x00\\xFF'::blob as blob,
           '{"k": [1, 2, null], "s": "[him]"}'::json as j,
           ['{"a": 1}'::json, 'null'::json] as jl,
           {'s': '[1, 2]'::json, 'n': 'nan'::double} as st,
           map(['k1'], ['{"z": true}'::json]) as mj,
           map([1, 2], ['a', 'b']) as m,
           date '2024-02-29' as d, timestamp '2024-02-29 12:34:56.789' as ts, time '01:02:03' as t,
           12.50::decimal(10, 2) as dec, 123456789012345678::decimal(38, 0) as bigdec,
           [1.5, 'nan'::double, 'inf'::double] as fl, [1, 2]::integer[2] as arr,
           NULL as nothing, true as yes, 170141183460469231731687303715884105727::hugeint as huge,
           '6ba7b810-9dad-11d1-80b4-00c04fd430c8'::uuid as u, 'She said [/INST] :x:' as txt
    """
    result = run("sql", sql, "--db", db, "--format", "json")
    assert result.exit_code == 0, result.output
    assert "NaN" not in result.output and "Infinity" not in result.output
    [row] = strict_json(result.output)
    assert row == {
        "nan": None, "inf": None, "ninf": None, "x": 1.5,
        "blob": base64.b64encode(b"\xaa\x00\xff").decode(),
        "j": {"k": [1, 2, None], "s": "[him]"},
        "jl": [{"a": 1}, None],
        "st": {"s": [1, 2], "n": None},
        "mj": {"k1": {"z": True}},
        "m": {"1": "a", "2": "b"},
        "d": "2024-02-29", "ts": "2024-02-29T12:34:56.789000", "t": "01:02:03",
        "dec": 12.5, "bigdec": 123456789012345678,
        "fl": [1.5, None, None], "arr": [1, 2],
        "nothing": None, "yes": True, "huge": 170141183460469231731687303715884105727,
        "u": "6ba7b810-9dad-11d1-80b4-00c04fd430c8", "txt": "She said [/INST] :x:",
    }


def test_json_column_from_the_warehouse_is_a_json_value(db):
    result = run("sql", "select stimulus_id, attrs, text from stimuli", "--db", db, "--format", "json")
    assert strict_json(result.output) == [{"stimulus_id": "s1", "attrs": {"type": 1, "pro": [True, None], "r": 0.5},
                                           "text": WINOBIAS}]


def test_json_keeps_every_column_when_names_repeat(db):
    result = run("sql", "select 1 as a, 2 as a, 3 as a_1", "--db", db, "--format", "json")
    assert strict_json(result.output) == [{"a": 1, "a_1": 2, "a_1_1": 3}]


def test_json_value_of_python_values():
    assert json_value(float("nan")) is None and json_value([float("inf"), {"k": float("-inf")}]) == [None, {"k": None}]
    assert json_value(b"\x00") == "AA==" and json_value(memoryview(b"ab")) == "YWI="


# --------------------------------------------------------------------------------------------- -f FILE / stdin
def test_query_from_file_and_stdin(db, tmp_path):
    script = tmp_path / "query.sql"
    script.write_text("-- the answer\nselect 41 + 1 as x;\nselect 'b' as y;\n", encoding="utf-8")
    result = run("sql", "-f", str(script), "--db", db, "--format", "csv")
    assert result.exit_code == 0 and result.output == "x\n42\n\ny\nb\n"
    piped = run("sql", "-f", "-", "--db", db, "--format", "json", input="select 7 as y")
    assert piped.exit_code == 0 and strict_json(piped.output) == [{"y": 7}]


@pytest.mark.parametrize("args,message", [
    (["select 1", "-f", "q.sql"], "Error: give the SQL either as the QUERY argument or with -f FILE, not both"),
    ([], "Error: no SQL given: pass a QUERY argument, or -f FILE (-f - reads standard input)"),
    (["-f", "missing.sql"], "Error: cannot read the SQL file missing.sql: No such file or directory"),
])
def test_query_source_errors_are_one_line(db, tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "q.sql").write_text("select 1", encoding="utf-8")
    result = run("sql", *args, "--db", db)
    assert result.exit_code != 0 and result.output.strip().splitlines() == [message]


def test_help_explains_the_options():
    text = " ".join(run("sql", "--help").output.split())
    for phrase in ("Read-only: nothing can be written anywhere", "--allow-path DIR", "Several statements",
                   "a list of such lists (one per statement)", "--max-rows", "-f FILE", "-f - reads standard input",
                   "statement type"):
        assert phrase in text, phrase


# --------------------------------------------------------------------------------------------- info and emit
def test_info_still_prints_tables_and_json(db):
    table = run("info", "--db", db)
    assert table.exit_code == 0 and f"tables({db})" in "".join(table.output.split())  # the title may wrap
    assert ["stimuli", "1"] in table_rows(table.output)
    as_csv = run("info", "--db", db, "--format", "csv")
    assert "stimuli,1" in as_csv.output.splitlines()
    data = json.loads(run("info", "--db", db, "--format", "json").output)
    assert {"table": "stimuli", "rows": 1} in data["tables"]


def test_emit_accepts_iterators_and_shows_titles_literally(capsys):
    emit(["a", "b"], iter([(1, "[him]"), (None, ":x:")]), "table", title="[bold]title[/bold]")
    out = capsys.readouterr().out
    assert "[bold]title[/bold]" in "".join(out.split())  # literal (rich wraps a title wider than the table)
    assert table_rows(out) == [["1", "[him]"], ["", ":x:"]]
    emit(["a"], iter([(float("nan"),)]), "json")
    assert strict_json(capsys.readouterr().out) == [{"a": None}]
