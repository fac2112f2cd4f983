"""A warehouse with stimuli but no evidence is not a clean result (issue 36, item 3): every `biaslab metrics` study
exits 1 with one line saying what is missing and the command that collects it, and every `biaslab report` writes a
page that says so (and exits 1), instead of empty tables and "Flags: none raised"."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from biaslab.cli.main import biaslab

#: study -> (datasets whose stimuli are loaded, what the message names, the collect command it gives)
STUDIES = {
    "contextuality": (["winopron"], "WinoPron forced-choice evidence", "runners collect --dataset winopron"),
    "negation": (["negation-examples"], "negation-bias sentence score",
                 "runners collect --dataset negation-examples"),
    "calibration": (["gece-winobias"], "scored pronoun pair with a gold label",
                    "runners collect --dataset gece-winobias"),
    "misgendering": (["misgendered"], "misgendering evidence", "runners collect --dataset misgendered"),
    "metaprompt": (["winopron"], "metaprompt evidence", "runners collect --dataset winopron --protocol meta"),
}


@pytest.fixture(scope="module")
def stimuli_only(tmp_path_factory, data_dir) -> Path:
    db = tmp_path_factory.mktemp("no-evidence") / "w.duckdb"
    for name in ("winopron", "negation-examples", "gece-winobias", "misgendered"):
        result = CliRunner().invoke(biaslab, ["data", "load", name, "--db", str(db), "--data-dir", str(data_dir)])
        assert result.exit_code == 0, result.output
    return db


def _one_line(result) -> str:
    assert result.exit_code == 1, result.output
    lines = [line for line in result.output.splitlines() if line.strip() and not line.startswith("wrote ")]
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    return lines[0]


@pytest.mark.parametrize("study", sorted(STUDIES))
def test_metrics_without_evidence_exit_1_and_say_what_to_collect(stimuli_only, study):
    datasets, what, command = STUDIES[study]
    line = _one_line(CliRunner().invoke(biaslab, ["metrics", study, "--db", str(stimuli_only)]))
    assert f"are loaded but no {what} is stored" in line and "stimuli of " in line
    assert f"collect it with `{command}" in line
    assert all(d in line for d in datasets)


@pytest.mark.parametrize("study", ["contextuality", "negation", "calibration", "misgendering"])
def test_reports_without_evidence_write_a_page_that_says_so(stimuli_only, tmp_path, study):
    _, what, command = STUDIES[study]
    out = tmp_path / "report"
    result = CliRunner().invoke(biaslab, ["report", study, "--db", str(stimuli_only), "--out", str(out)])
    line = _one_line(result)
    assert what in line
    page = (out / "index.html").read_text(encoding="utf-8")
    assert "Nothing to report" in page and what in page and command in page.replace("&#x27;", "'")
    assert "Flags: none raised" not in page and "<img" not in page


def test_options_without_evidence(stimuli_only, tmp_path):
    line = _one_line(CliRunner().invoke(biaslab, ["metrics", "options", "--dataset", "winopron", "--db",
                                                  str(stimuli_only)]))
    assert "3600 stimuli of winopron are loaded but no option probability is stored" in line
    result = CliRunner().invoke(biaslab, ["report", "options", "--dataset", "winopron", "--db", str(stimuli_only),
                                          "--out", str(tmp_path / "r")])
    _one_line(result)
    assert "Nothing to report" in (tmp_path / "r" / "index.html").read_text(encoding="utf-8")


def test_an_empty_warehouse_says_no_stimuli_either(tmp_path, data_dir):
    db = tmp_path / "empty.duckdb"
    assert CliRunner().invoke(biaslab, ["data", "load", "winogender", "--db", str(db), "--data-dir",
                                        str(data_dir)]).exit_code == 0
    line = _one_line(CliRunner().invoke(biaslab, ["metrics", "contextuality", "--db", str(db)]))
    assert "no WinoPron forced-choice evidence is stored (and no stimuli of winopron are loaded)" in line
