"""The `biaslab` CLI contract: data load, sql (read-only), info."""

from __future__ import annotations

import json
import re

import pytest

from click.testing import CliRunner

from biaslab.cli.main import biaslab
from biaslab.cli.runners_cli import runners


def run(*args: str):
    return CliRunner().invoke(biaslab, list(args), catch_exceptions=False)


def test_load_twice_then_count_with_sql(tmp_path, data_dir, dataset_folder):
    dataset_folder("winogender")
    db = str(tmp_path / "w.duckdb")
    first = run("data", "load", "winogender", "--db", db, "--data-dir", str(data_dir))
    assert first.exit_code == 0, first.output
    assert "240 new" in first.output
    second = run("data", "load", "winogender", "--db", db, "--data-dir", str(data_dir))
    assert "0 new" in second.output
    out = run("sql", "select count(*) as n from stimuli", "--db", db, "--format", "csv")
    assert out.output.splitlines() == ["n", "240"]
    as_json = run("sql", "select dataset, count(*) as n from stimuli group by 1", "--db", db, "--format", "json")
    assert json.loads(as_json.output) == [{"dataset": "winogender", "n": 240}]


def test_data_dir_from_environment(tmp_path, data_dir, dataset_folder, monkeypatch):
    dataset_folder("winogender")
    monkeypatch.setenv("BIASLAB_DATA", str(data_dir))
    result = run("data", "load", "winogender", "--db", str(tmp_path / "w.duckdb"))
    assert result.exit_code == 0 and "240 new" in result.output


def test_sql_refuses_writes_and_changes_nothing(tmp_path, data_dir, dataset_folder):
    dataset_folder("winogender")
    db = str(tmp_path / "w.duckdb")
    run("data", "load", "winogender", "--db", db, "--data-dir", str(data_dir))
    for statement in ("delete from stimuli", "drop table stimuli", "insert into meta values ('a', 'b')"):
        result = run("sql", statement, "--db", db)
        assert result.exit_code != 0
        assert len(result.output.strip().splitlines()) == 1 and "read-only" in result.output
    assert run("sql", "select count(*) from stimuli", "--db", db, "--format", "csv").output.splitlines()[1] == "240"


def test_sql_errors_are_one_line(tmp_path):
    missing = run("sql", "select 1", "--db", str(tmp_path / "nope.duckdb"))
    assert missing.exit_code != 0 and missing.output.strip().startswith("Error: no warehouse at")
    db = str(tmp_path / "w.duckdb")
    run("warehouse", "migrate", "--db", db)
    bad = run("sql", "selec 1", "--db", db)
    assert bad.exit_code != 0 and len(bad.output.strip().splitlines()) == 1 and "syntax error" in bad.output


def test_unknown_dataset_is_a_one_line_error(tmp_path):
    result = run("data", "load", "no-such-dataset", "--db", str(tmp_path / "w.duckdb"))
    assert result.exit_code != 0 and "unknown dataset 'no-such-dataset'" in result.output
    assert not (tmp_path / "w.duckdb").exists()


def test_info_lists_tables_with_counts(tmp_path, data_dir, dataset_folder):
    dataset_folder("winogender")
    db = str(tmp_path / "w.duckdb")
    run("data", "load", "winogender", "--db", db, "--data-dir", str(data_dir))
    info = json.loads(run("info", "--db", db, "--format", "json").output)
    assert {"table": "stimuli", "rows": 240} in info["tables"]
    assert info["runs"][0]["command"] == "biaslab data load winogender"
    assert info["runs"][0]["status"] == "finished" and info["runs"][0]["rows_added"] == 240


def test_every_command_has_help():
    for cli, path in ((biaslab, []), (biaslab, ["data"]), (biaslab, ["data", "load"]), (biaslab, ["sql"]),
                      (biaslab, ["info"]), (runners, [])):
        result = CliRunner().invoke(cli, [*path, "--help"])
        assert result.exit_code == 0 and "Usage:" in result.output


def test_compare_help_names_every_study_that_has_a_comparison():
    """`biaslab compare --help` omitted bbq and crows-pairs, which both work (issue 71, item 5): the help names every
    study of the registry with a comparison."""
    from biaslab.metrics.registry import studies

    text = " ".join(CliRunner().invoke(biaslab, ["compare", "--help"], terminal_width=200).output.split())
    compared = [name for name, study in studies().items() if study.compare is not None]
    assert {"bbq", "crows-pairs", "contextuality"} <= set(compared)
    for name in compared:
        assert f"{name} (" in text, name


def test_collect_help_says_what_the_run_does_with_threads_and_the_dtype():
    text = " ".join(CliRunner().invoke(runners, ["collect", "--help"], terminal_width=200).output.split())
    assert "measured once at the start and fixed for the run" in text and "re-measured" not in text
    assert "bf16 only where it measured faster on this CPU" in text


@pytest.mark.parametrize("group", ["biaslab", "biaslab metrics", "biaslab report", "biaslab data", "biaslab audit",
                                   "runners"])
def test_command_lists_are_one_line_each_and_never_cut_inside_a_parenthesis(group):
    """Issue 71, item 5: click cut "BBQ (Parrish et al. 2022): ..." to "BBQ (Parrish et al." in `biaslab metrics
    --help`; each listed command is now one line, its parentheses closed."""
    from biaslab.cli.runners_cli import runners

    root, *path = group.split()
    result = CliRunner().invoke(biaslab if root == "biaslab" else runners, [*path, "--help"], terminal_width=80)
    assert result.exit_code == 0, result.output
    listed = result.output.split("Commands:\n", 1)[1].splitlines()
    assert listed and all(re.match(r"^  \S+\s{2,}\S", line) for line in listed if line.strip()), listed
    for line in listed:
        text = line.split(None, 1)[1] if len(line.split(None, 1)) > 1 else ""
        assert text.count("(") == text.count(")") and len(line) <= 80, line
