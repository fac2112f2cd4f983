"""Negation and calibration studies end to end: tiny model evidence -> `biaslab metrics` / `biaslab report`."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest
from click.testing import CliRunner

from biaslab.cli.main import biaslab
from biaslab.runners.collect import CollectConfig, collect
from biaslab.runners.loading import load_model
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
            "cc_ece_top_label_equal_width", "brier_gold_label", "human_alignment"} <= set(metrics)
    assert all(row["n"] == 178 and row["ci_low"] <= row["value"] <= row["ci_high"] for row in metrics.values())
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
    browser = shutil.which("chromium")
    for study in ("calibration", "negation"):
        out = tmp_path / study
        args = ["report", study, "--db", str(scored_warehouse), "--out", str(out)]
        result = run(*args, *(["--bootstrap", "20"] if study == "calibration" else []))
        assert result.exit_code == 0, result.output
        images = re.findall(r"<img src=['\"]([^'\"]+)['\"]", (out / "index.html").read_text())
        assert images and all((out / name).is_file() for name in images)
        if browser is None:
            continue
        dom = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                              "--no-first-run", f"--user-data-dir={tmp_path / 'p'}", "--virtual-time-budget=5000",
                              "--dump-dom", (out / "index.html").as_uri()], capture_output=True, text=True,
                             timeout=120).stdout
        assert f'data-images-loaded="{len(images)}/{len(images)}"' in dom
