"""Coverage beside every score (issue 43, item 2): a WinoPron warehouse where one model answers nothing valid on 30%
of its templates and another puts 30% of its mass on invalid answers everywhere; a third is clean. The marks appear
in the JSON (a field), the terminal (a line under the tables) and the report (marked rows); counts by hand."""

from __future__ import annotations

import json
from datetime import datetime

import pandas as pd
import pytest
from click.testing import CliRunner

import biaslab
from biaslab.cli.main import biaslab as cli
from biaslab.metrics.coverage import annotate
from biaslab.warehouse import Warehouse
from open_warehouse_evidence import exact_choice_rows, winopron_stimuli

HOLES, SHARE, CLEAN = "h0" * 8, "s0" * 8, "c0" * 8
NAMES = {HOLES: "holes", SHARE: "thirty-invalid", CLEAN: "clean"}


@pytest.fixture(scope="module")
def db(tmp_path_factory, data_dir):
    path = tmp_path_factory.mktemp("coverage") / "w.duckdb"
    stimuli = winopron_stimuli(data_dir)
    templates = sorted({s.item_id for s in stimuli})
    dropped = set(templates[: round(0.3 * len(templates))])  # 4 of 12 templates: 33% without a valid answer
    with Warehouse.open(path) as wh:
        wh.append("stimuli", [s.to_row() for s in stimuli])
        wh.append("models", [{"model_key": k, "name": n, "source": "synthetic", "revision": None, "kind": "causal",
                              "dtype": "fp32", "quant": "none", "tokenizer": None, "bos_policy": "prepend",
                              "registered_at": datetime(2026, 1, 1)} for k, n in NAMES.items()])
        for key in NAMES:
            valid = [0.0 if key == HOLES and s.item_id in dropped else 0.7 if key == SHARE else 1.0 for s in stimuli]
            requests, probs = exact_choice_rows(key, stimuli, [0.3 + 0.4 * (i % 2) for i in range(len(stimuli))],
                                                valid, prompt_version="test", temperature=0.5, top_k=40)
            wh.append_with_children("choice_requests", requests, {"choice_probs": probs})
    return path, len(templates), len(dropped)


def test_json_marks_thirty_percent_invalid(db):
    path, templates, dropped = db
    result = CliRunner().invoke(cli, ["metrics", "contextuality", "--db", str(path), "--format", "json",
                                      "--bootstrap", "3"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    pf = pd.DataFrame(json.loads(result.output)["pf"])
    for _, row in pf.iterrows():
        assert row["n_loaded"] == templates
        if row["model_name"] == "holes":
            assert (row["n_used"], row["n_invalid"], row["n_missing"]) == (templates - dropped, dropped, 0)
            assert row["coverage"] == pytest.approx((templates - dropped) / templates) and row["low_coverage"]
        elif row["model_name"] == "thirty-invalid":
            assert row["coverage"] == 1 and row["valid_share"] == pytest.approx(0.7) and row["low_coverage"]
        else:
            assert row["coverage"] == 1 and row["valid_share"] == pytest.approx(1.0) and not row["low_coverage"]
    # a lower threshold lifts both marks
    result = CliRunner().invoke(cli, ["metrics", "contextuality", "--db", str(path), "--format", "json",
                                      "--bootstrap", "3", "--min-coverage", "0.6"], catch_exceptions=False)
    assert not any(r["low_coverage"] for r in json.loads(result.output)["pf"])


def test_terminal_line_and_report_rows(db, tmp_path, monkeypatch):
    path, _, _ = db
    monkeypatch.setenv("COLUMNS", "100")
    shown = CliRunner().invoke(cli, ["metrics", "contextuality", "--db", str(path), "--bootstrap", "3"],
                               catch_exceptions=False)
    assert shown.exit_code == 0, shown.output
    text = " ".join(shown.output.split())
    assert "low coverage (fewer than 80% of the loaded units used, or a valid share below it): pf (10 rows)" in text
    out = tmp_path / "report"
    result = CliRunner().invoke(cli, ["report", "contextuality", "--db", str(path), "--out", str(out)],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    page = (out / "index.html").read_text()
    assert page.count('<tr class="low-coverage">') >= 10 and "marked <b>low coverage</b>" in page


def test_options_means_carry_coverage(db):
    path, templates, dropped = db
    with biaslab.open(path) as wh:
        means = biaslab.options(wh, "winopron", bootstrap=100)["means"]
    holes = means[means["model_name"] == "holes"]
    assert set(holes["n_used"]) == {templates - dropped} and set(holes["n_invalid"]) == {dropped}
    assert holes["low_coverage"].all()
    share = means[means["model_name"] == "thirty-invalid"]
    assert share["valid_share"].to_numpy() == pytest.approx([0.7] * len(share)) and share["low_coverage"].all()
    assert not means[means["model_name"] == "clean"]["low_coverage"].any()


def test_annotate_by_hand():
    table = pd.DataFrame({"k": ["a", "b", "c"], "used": [8, 5, 0], "share": [0.9, 0.95, float("nan")]})
    loaded = pd.DataFrame({"k": ["a", "b", "c"], "n_loaded": [10, 5, 4]})
    evidence = pd.DataFrame({"k": ["a", "b"], "n_evidence": [9, 5]})
    out = annotate(table, used="used", loaded=loaded, evidence=evidence, keys=["k"], valid_share="share",
                   min_coverage=0.8)
    assert out["n_invalid"].tolist() == [1, 0, 0] and out["n_missing"].tolist() == [1, 0, 4]
    assert out["coverage"].tolist() == [0.8, 1.0, 0.0] and out["low_coverage"].tolist() == [False, False, True]
