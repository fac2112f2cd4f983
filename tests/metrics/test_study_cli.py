"""Negation and calibration studies end to end: tiny model evidence -> `biaslab metrics` / `biaslab report`."""

from __future__ import annotations

import csv
import io
import json
import math
import re

import pytest
from click.testing import CliRunner

from biaslab.cli.main import biaslab
from biaslab.runners.collect import CollectConfig, collect
from biaslab.engines.hf.loading import load_model
from report_layout import chromium, dump_dom
from tiny_models import make_tiny_gpt2


@pytest.fixture(scope="module")
def scored_warehouse(tmp_path_factory, data_dir):
    for folder in ("genderlex_gece", "negation_bias_examples"):
        if not (data_dir / folder).is_dir():
            pytest.skip(f"dataset folder {data_dir / folder} is absent")
    root = tmp_path_factory.mktemp("studies")
    model = load_model(str(make_tiny_gpt2(root / "m")), dtype="fp32", device="cpu")
    db = root / "w.duckdb"
    for dataset in ("gece-winogender", "negation-examples"):
        collect(CollectConfig(dataset=dataset, db=str(db), data_dir=str(data_dir)), loaded=model)
    return db


def run(*args):
    return CliRunner().invoke(biaslab, list(args), catch_exceptions=False)


def test_calibration_metrics_from_the_warehouse(scored_warehouse):
    result = run("metrics", "calibration", "--db", str(scored_warehouse), "--format", "json", "--bootstrap", "50")
    assert result.exit_code == 0, result.output
    tables = json.loads(result.output)
    metrics = {row["name"]: row for row in tables["metrics"]}
    assert {"ece_top_label_equal_width", "ece_male_class_equal_mass", "gender_ece_top_label_equal_width",
            "cc_ece_top_label_equal_width", "brier_gold_label", "human_alignment", "brier_upstream_convention",
            "ece_top_label_equal_width_predicted_male", "ece_top_label_equal_width_gold_female"} <= set(metrics)
    parts = {name for name in metrics if "_predicted_" in name or "_gold_" in name}
    assert all(row["n"] == 178 and row["ci_low"] <= row["value"] <= row["ci_high"]
               for name, row in metrics.items() if name not in parts and "gap" not in name)
    assert metrics["ece_top_label_equal_width_gold_male"]["n"] == 104  # y = 1 in GECE's winogender.csv
    assert metrics["ece_top_label_equal_width_gold_female"]["n"] == 74
    assert {row["calibrator"] for row in tables["post_hoc"]} == {"beta_abm", "isotonic", "platt", "temperature"}
    assert {row["size"] for row in tables["ablation"]} == {50, 100, 150}


def test_negation_mixed_model_from_the_warehouse(scored_warehouse):
    result = run("metrics", "negation", "--db", str(scored_warehouse), "--format", "json")
    assert result.exit_code == 0, result.output
    tables = json.loads(result.output)
    terms = [row["term"] for row in tables["mixed_model"]]
    assert terms == ["Intercept", "context", "form", "context:form"]
    assert len(tables["condition_means"]) == 4 and all(row["n"] == 6 for row in tables["condition_means"])


def test_reports_render_in_headless_chromium(scored_warehouse, tmp_path):
    browser = chromium()
    for study in ("calibration", "negation"):
        out = tmp_path / study
        args = ["report", study, "--db", str(scored_warehouse), "--out", str(out)]
        result = run(*args, *(["--bootstrap", "20"] if study == "calibration" else []))
        assert result.exit_code == 0, result.output
        images = re.findall(r"<img src=['\"]([^'\"]+)['\"]", (out / "index.html").read_text())
        assert images and all((out / name).is_file() for name in images)
        if browser is None:
            continue
        dom = dump_dom(out / "index.html", tmp_path / "p")
        assert f'data-images-loaded="{len(images)}/{len(images)}"' in dom


# ------------------------------------------------------------------------------------------------------------
# calibration CLI on synthetic evidence with hand-computed values
# ------------------------------------------------------------------------------------------------------------

#: p_male and gold (1 = male) of six synthetic pairs; no confidence lies near a bin edge k / 10.
SYNTHETIC_P = [0.92, 0.73, 0.64, 0.18, 0.36, 0.04]
SYNTHETIC_GOLD = [1, 0, 1, 0, 1, 0]
# predicted label: male, male, male, female, female, female; top-label confidence .92 .73 .64 .82 .64 .96;
# correct: 1 0 1 1 0 1. Ten equal-width bins, top-label confidence:
#   predicted male   (.92 c, .73 w, .64 c: one item per bin): (.08 + .73 + .36) / 3 = 0.39
#   predicted female (.82 c, .64 w, .96 c: one item per bin): (.18 + .64 + .04) / 3 = 0.28666..
#   Gender-ECE = (0.39 + 0.28666..) / 2 = 0.338333..; gap = 0.39 - 0.28666.. = 0.103333..
#   gold male   (.92 c in bin 9; .64 c and .64 w share bin 6: acc .5, conf .64): 1/3 * .08 + 2/3 * .14 = 0.12
#   gold female (.73 w, .82 c, .96 c, one per bin): (.73 + .18 + .04) / 3 = 0.316666..
#   cc-ECE = (0.12 + 0.316666..) / 2 = 0.218333..
# Brier (gold label): p_gold .92 .27 .64 .82 .36 .96 -> mean (1 - p_gold)^2 = 1.1125 / 6 = 0.1854166..
# upstream convention (p_female against y = 1 for male): mean p_gold^2 = 3.0525 / 6 = 0.50875
SYNTHETIC_EXPECTED = {
    "ece_top_label_equal_width_predicted_male": (0.39, 3),
    "ece_top_label_equal_width_predicted_female": (0.86 / 3, 3),
    "gender_ece_top_label_equal_width": ((0.39 + 0.86 / 3) / 2, 6),
    "gender_ece_gap_top_label_equal_width": (0.39 - 0.86 / 3, 6),
    "ece_top_label_equal_width_gold_male": (0.12, 3),
    "ece_top_label_equal_width_gold_female": (0.95 / 3, 3),
    "cc_ece_top_label_equal_width": ((0.12 + 0.95 / 3) / 2, 6),
    "brier_gold_label": (1.1125 / 6, 6),
    "brier_upstream_convention": (0.50875, 6),
}


@pytest.fixture(scope="module")
def synthetic_pairs_warehouse(tmp_path_factory):
    """Six male / female sentence pairs with joint log-probabilities chosen so that p_male = SYNTHETIC_P, written
    through the warehouse's own append path (no model, no dataset files)."""
    from biaslab.warehouse import Warehouse

    db = tmp_path_factory.mktemp("cal") / "w.duckdb"
    stimuli, scores = [], []
    for i, (p, y) in enumerate(zip(SYNTHETIC_P, SYNTHETIC_GOLD)):
        sid = f"syn{i}"
        stimuli.append({"stimulus_id": sid, "dataset": "synthetic-pairs", "upstream_version": "test",
                        "item_id": str(i), "text": "The nurse said that BLANK was tired.", "options": ["he", "she"],
                        "option_labels": ["male", "female"], "gold": "he" if y == 1 else "she"})
        for option, lp in (("he", math.log(p)), ("she", math.log(1 - p))):
            scores.append({"model_key": "m", "request_id": f"{sid}-{option}", "stimulus_id": sid, "protocol": "prob",
                           "option": option, "scheme": "causal", "text": f"The nurse said that {option} was tired.",
                           "n_tokens": 8, "sum_logprob": lp})
    with Warehouse.open(db) as wh:
        wh.append("stimuli", stimuli)
        wh.append("sequence_scores", scores)
    return db


def test_calibration_cli_outputs_gender_parts_and_both_brier_conventions(synthetic_pairs_warehouse):
    db = str(synthetic_pairs_warehouse)
    result = run("metrics", "calibration", "--db", db, "--format", "json", "--bootstrap", "20")
    assert result.exit_code == 0, result.output
    metrics = {row["name"]: row for row in json.loads(result.output)["metrics"]}
    for name, (value, n) in SYNTHETIC_EXPECTED.items():
        assert metrics[name]["value"] == pytest.approx(value, abs=1e-9), name
        assert metrics[name]["n"] == n, name
    assert "GECE" in metrics["brier_upstream_convention"]["note"]
    assert metrics["brier_upstream_convention"]["confidence"] == "female_vs_male_label"

    result = run("metrics", "calibration", "--db", db, "--format", "csv", "--bootstrap", "20")
    assert result.exit_code == 0, result.output
    text = result.output.split("# metrics\n", 1)[1].split("\n# ", 1)[0]
    rows = {row["name"]: row for row in csv.DictReader(io.StringIO(text))}
    for name, (value, n) in SYNTHETIC_EXPECTED.items():
        assert float(rows[name]["value"]) == pytest.approx(value, abs=1e-9), name
        assert int(rows[name]["n"]) == n

    result = run("metrics", "calibration", "--db", db, "--format", "table", "--bootstrap", "20", "--wide")
    assert result.exit_code == 0, result.output
    for name in SYNTHETIC_EXPECTED:  # --wide: no label wrapped to fit a terminal
        assert name in result.output
    assert "note: brier_upstream_convention: GECE code's Brier" in result.output


def test_calibration_report_shows_gender_parts_and_the_brier_note(synthetic_pairs_warehouse, tmp_path):
    out = tmp_path / "report"
    result = run("report", "calibration", "--db", str(synthetic_pairs_warehouse), "--out", str(out),
                 "--bootstrap", "20")
    assert result.exit_code == 0, result.output
    page = (out / "index.html").read_text()
    assert "Calibration by gender" in page
    for name in SYNTHETIC_EXPECTED:
        assert name in page
    # values as the report prints them (4 significant digits)
    for value in ("0.39", "0.2867", "0.12", "0.3167", "0.1854", "0.5088"):
        assert f">{value}<" in page, value
    assert "<b>brier_upstream_convention</b>: GECE code&#x27;s Brier" in page
