"""Misgendering study end to end on a tiny model: collect prob + gen -> `biaslab metrics misgendering`,
`biaslab annotate export / import`, `biaslab report misgendering` (rendered in headless Chromium when present)."""

from __future__ import annotations

import csv
import json
import re
import shutil

import pytest
from click.testing import CliRunner

from biaslab.cli.main import biaslab
from biaslab.runners.collect import CollectConfig, collect
from report_layout import chromium, dump_dom


@pytest.fixture(scope="module")
def misgendering_warehouse(tmp_path_factory, data_dir, tiny_gpt2):
    for folder in ("ruff", "misgendered"):
        if not (data_dir / folder).is_dir():
            pytest.skip(f"dataset folder {data_dir / folder} is absent")
    db = tmp_path_factory.mktemp("misgendering") / "w.duckdb"
    for dataset in ("ruff", "misgendered"):
        for protocol, options in (("prob", {}), ("gen", {"samples": 3, "max_new_tokens": 10})):
            collect(CollectConfig(dataset=dataset, protocol=protocol, db=str(db), data_dir=str(data_dir), limit=8,
                                  limit_order="file", **options), loaded=tiny_gpt2)
    return db


def run(*args):
    return CliRunner().invoke(biaslab, list(args), catch_exceptions=False)


def test_metrics_command_lists_every_table(misgendering_warehouse):
    result = run("metrics", "misgendering", "--db", str(misgendering_warehouse), "--format", "json")
    assert result.exit_code == 0, result.output
    tables = json.loads(result.output)
    assert set(tables) == {"correctness", "instance_std", "agreement", "agreement_first_sample", "disagreement_beta",
                           "generation_quality"}
    gen = [r for r in tables["correctness"] if r["method"] == "gen"]
    prob = [r for r in tables["correctness"] if r["method"] == "prob"]
    # 8 stimuli per dataset = 2 items x 4 declared sets; gen: 3 samples x 2 stimuli per (set, context)
    assert {(r["dataset"], r["n"]) for r in prob} == {("ruff", 2), ("misgendered", 2)}
    assert {r["n"] for r in gen} == {6} and {r["context"] for r in gen} == {"pre", "post"}
    for r in gen:
        assert r["correct_strict"] + r["misgendered"] + r["no_pronoun"] == pytest.approx(1.0)
    assert {r["n"] for r in tables["agreement"]} == {6}
    assert {(r["n"], r["instances"]) for r in tables["agreement"]} == {(6, 2)}
    assert {r["n"] for r in tables["agreement_first_sample"]} == {2}  # one continuation per instance
    assert {r["context"] for r in tables["disagreement_beta"]} == {"pre", "post"}
    upstream = json.loads(run("metrics", "misgendering", "--db", str(misgendering_warehouse), "--format", "json",
                              "--vocabulary", "upstream").output)
    assert [r["n"] for r in upstream["correctness"]] == [r["n"] for r in tables["correctness"]]
    help_text = run("metrics", "misgendering", "--help").output
    assert "--vocabulary [biaslab|upstream]" in help_text and "exact sets of the" in help_text


def test_annotation_round_trip(misgendering_warehouse, tmp_path):
    sheet = tmp_path / "sheet.csv"
    result = run("annotate", "export", "--db", str(misgendering_warehouse), "--out", str(sheet), "--n", "2")
    assert result.exit_code == 0, result.output
    with sheet.open(newline="") as f:
        rows = list(csv.DictReader(f))
    # 2 datasets x 4 pronouns x (pre, post) cells of 6 continuations: 2 each
    assert len(rows) == 32 and "outcome" not in rows[0] and "note" in rows[0]
    for row in rows:
        row.update(label="no_pronoun", extraneous_gendered="false", annotator="a1")
    with sheet.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    result = run("annotate", "import", str(sheet), "--db", str(misgendering_warehouse))
    assert result.exit_code == 0, result.output
    assert "32 annotations read, 32 new" in result.output
    rows[0]["label"] = "maybe"  # first data row: line 2 (later rows may span lines: texts hold newlines)
    bad = tmp_path / "bad.csv"
    with bad.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows([{**r, "annotator": "a2"} for r in rows])
    result = CliRunner().invoke(biaslab, ["annotate", "import", str(bad), "--db", str(misgendering_warehouse)])
    assert result.exit_code == 1 and "bad.csv:2" in result.output and "label" in result.output
    tables = json.loads(run("metrics", "misgendering", "--db", str(misgendering_warehouse), "--format",
                            "json").output)
    [row] = tables["annotation_vs_auto"]
    assert (row["annotator"], row["n"]) == ("a1", 32)  # the refused file wrote nothing
    assert len(tables["annotation_vs_auto_cells"]) == 16
    assert {r["n_no_pronoun"] for r in tables["annotation_labels"]} == {2}


def test_report_renders_in_headless_chromium(misgendering_warehouse, tmp_path):
    out = tmp_path / "report"
    result = run("report", "misgendering", "--db", str(misgendering_warehouse), "--out", str(out))
    assert result.exit_code == 0, result.output
    page = (out / "index.html").read_text()
    images = re.findall(r"<img src=['\"]([^'\"]+)['\"]", page)
    assert all((out / name).is_file() for name in images)
    assert sorted(i for i in images if i.startswith("beta_all_")) == ["beta_all_misgendered.png", "beta_all_ruff.png"]
    annotated = "label breakdown (the paper's Figure 7)" in page  # when test_annotation_round_trip ran first
    assert len(images) == 4 + annotated and ("annotation_labels.png" in images) == annotated
    assert "the paper's tables (first continuation per instance)" in page
    assert "Agreement between methods" in page
    if chromium() is None:
        pytest.skip("chromium is not installed (.ci/run installs Debian's chromium)")
    dom = dump_dom(out / "index.html", tmp_path / "p")
    assert f'data-images-loaded="{len(images)}/{len(images)}"' in dom


def test_annotation_sheet_has_no_formula_cells_and_round_trips(misgendering_warehouse, tmp_path):
    """A continuation or note starting with =, +, -, @ is written with a leading ' (no spreadsheet formula) and read
    back as it was (OWASP CSV injection)."""
    import duckdb

    db = tmp_path / "w.duckdb"
    shutil.copy(misgendering_warehouse, db)
    with duckdb.connect(str(db)) as con:  # continuations a model could write
        con.execute("UPDATE samples SET text = '=HYPERLINK(\"http://evil\",\"x\")' WHERE sample_index = 0")
        con.execute("UPDATE samples SET text = '-1+2' WHERE sample_index = 1")
    sheet = tmp_path / "sheet.csv"
    assert run("annotate", "export", "--db", str(db), "--out", str(sheet), "--n", "6").exit_code == 0
    with sheet.open(newline="") as f:
        rows = list(csv.DictReader(f))
    texts = {r["text"] for r in rows}
    assert "'=HYPERLINK(\"http://evil\",\"x\")" in texts and "'-1+2" in texts
    cells = [v for r in rows for v in r.values()]
    assert not [v for v in cells if v[:1] in ("=", "+", "-", "@", "\t", "\r")]
    for row in rows:
        row.update(label="correct", extraneous_gendered="false", annotator="'@bob", note="'=2*3")
    with sheet.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    result = run("annotate", "import", str(sheet), "--db", str(db))
    assert result.exit_code == 0, result.output
    with duckdb.connect(str(db), read_only=True) as con:
        stored = con.execute("SELECT DISTINCT annotator, note FROM annotations WHERE annotator <> 'a1'").fetchall()
    assert stored == [("@bob", "=2*3")]  # (a1: the labels of the round-trip test, copied with the warehouse)


def test_an_annotation_cell_with_a_nul_byte_is_refused(misgendering_warehouse, tmp_path):
    """Issue 45, item 9: a NUL inside a cell is one line naming file, line and field; nothing is written."""
    import hashlib

    sheet = tmp_path / "sheet.csv"
    assert run("annotate", "export", "--db", str(misgendering_warehouse), "--out", str(sheet), "--n", "1"
               ).exit_code == 0
    with sheet.open(newline="") as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        row.update(label="correct", extraneous_gendered="false", annotator="nul-test")
    rows[0]["note"] = "fine\x00but not"
    with sheet.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    digest = hashlib.sha256(misgendering_warehouse.read_bytes()).hexdigest()
    result = CliRunner().invoke(biaslab, ["annotate", "import", str(sheet), "--db", str(misgendering_warehouse)])
    assert result.exit_code == 1 and "sheet.csv:2" in result.output and "'note'" in result.output
    assert "NUL character" in result.output and len(result.output.strip().splitlines()) == 1
    assert hashlib.sha256(misgendering_warehouse.read_bytes()).hexdigest() == digest
