"""The study registry (`biaslab.metrics.registry`) drives `biaslab metrics`, `biaslab report` and the Python API."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

import biaslab
from biaslab.cli.main import biaslab as cli
from biaslab.errors import UsageError
from biaslab.metrics.registry import Study, StudyOption, get_study, register_study, studies, unregister_study
from biaslab.warehouse import Warehouse


def _toy_metrics(handle, *, limit: int = 5) -> dict:
    """Count the warehouse's models (a small table read from the warehouse)."""
    models = handle.fetch(handle.table("models"))
    return {"toy_counts": pd.DataFrame({"models": [len(models)], "limit": [limit]})}


def _toy_report(tables, out: Path, db, names) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    index = out / "index.html"
    index.write_text(f"<p>{int(tables['toy_counts']['models'].iloc[0])} models</p>")
    return index


@pytest.fixture()
def toy():
    study = register_study(Study("toy-study", _toy_metrics, "A toy study counting models.", report=_toy_report,
                                 datasets=(), options=(StudyOption("limit", 5, "A limit.", int),)))
    yield study
    unregister_study("toy-study")


@pytest.fixture()
def warehouse(tmp_path):
    db = tmp_path / "w.duckdb"
    Warehouse.open(str(db)).close()
    return db


def run(*args):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_a_registered_study_is_a_subcommand_of_metrics_and_report(toy, warehouse, tmp_path):
    assert "toy-study" in run("metrics", "--help").output
    assert "toy-study" in run("report", "--help").output
    help_text = run("metrics", "toy-study", "--help").output
    assert "A toy study counting models." in help_text and "--limit" in help_text
    result = run("metrics", "toy-study", "--db", str(warehouse), "--format", "json", "--limit", "3")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == {"toy_counts": [{"models": 0, "limit": 3}]}
    result = run("report", "toy-study", "--db", str(warehouse), "--out", str(tmp_path / "r"))
    assert result.exit_code == 0, result.output
    assert (tmp_path / "r" / "index.html").read_text() == "<p>0 models</p>"


def test_a_registered_study_is_in_the_python_api(toy, warehouse):
    with biaslab.open(str(warehouse)) as handle:
        tables = getattr(biaslab, "toy-study")(handle, limit=2)
    assert tables["toy_counts"]["models"].tolist() == [0]


def test_unregistered_study_is_gone(warehouse):
    assert "toy-study" not in run("metrics", "--help").output
    assert run("metrics", "toy-study").exit_code != 0


def test_builtin_studies_match_the_commands_and_the_python_api():
    builtin = {n for n, s in studies().items() if s.builtin}
    assert builtin == {"contextuality", "misgendering", "negation", "calibration", "metaprompt", "options"}
    lazy = {n for n, (module, _) in biaslab._LAZY.items() if module == "biaslab.metrics.studies"}
    # biaslab.compare(handle, study) compares any study with comparisons; the benchmarks are registered studies
    # with generated commands (no special case in the CLI), `biaslab.bbq` and `biaslab.crows_pairs` in Python
    registered = {"bbq": "bbq", "crows_pairs": "crows-pairs", "decodingtrust": "decodingtrust",
                  "holistic_bias": "holistic-bias", "counterfactual": "counterfactual"}
    assert lazy == builtin | {"compare"} | set(registered)
    assert all(getattr(biaslab, n) is studies()[n].function for n in builtin)
    assert all(getattr(biaslab, n) is studies()[s].function and not studies()[s].builtin
               for n, s in registered.items())
    from biaslab.cli.metrics_cmd import metrics_group, report_group

    assert set(registered.values()) <= set(metrics_group.list_commands(None))
    assert set(registered.values()) <= set(report_group.list_commands(None))
    assert set(metrics_group.commands) == builtin
    assert set(report_group.commands) == {n for n in builtin if studies()[n].report is not None}
    with pytest.raises(UsageError):
        register_study(Study("negation", _toy_metrics, "taken"))


def test_study_datasets_come_from_the_loaders():
    assert get_study("misgendering").dataset_names == ("misgendered", "ruff", "tango")
    assert get_study("negation").dataset_names == ("negation-examples", "negation")
    assert get_study("contextuality").dataset_names == ("winopron",)
    assert "winoqueer" in get_study("calibration").dataset_names


def test_no_list_of_builtin_dataset_names_in_the_cli():
    from biaslab.loaders.registry import MODULES

    root = Path(biaslab.__file__).parent
    for rel in ("cli/metrics_cmd.py",):
        text = re.sub(r"_results_artifact\(handle, \"[a-z-]+\"", "", (root / rel).read_text())  # a study name
        for name in MODULES:
            q = rf"[\"']{re.escape(name)}[\"']"  # a list or tuple of names: [name], [name, ...], (name, ...)
            quoted = re.findall(rf"(?<![\w\])])\[\s*{q}\s*[,\]]|\(\s*{q}\s*,|,\s*{q}\s*[,\])]", text)
            assert not quoted, f"{rel} lists the dataset {name!r}: {quoted}"
        assert "misgendered, ruff, tango" not in text
