"""A user's template spec loaded into a fresh warehouse and collected with a given (tiny) model, as the option,
compare and view tests need it."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from click.testing import CliRunner

from biaslab.cli.main import biaslab as cli
from biaslab.runners.collect import CollectConfig, collect


def spec_warehouse(folder: Path, spec_text: str, dataset: str, loaded, collections: Iterable[dict]) -> Path:
    """folder/w.duckdb holding the spec `spec_text` (loaded with `biaslab data load --spec`) and one collection per
    mapping of `collections` (the `runners collect` options, e.g. {"protocol": "choice", "mode": "sample"})."""
    spec, path = folder / "spec.yaml", folder / "w.duckdb"
    spec.write_text(spec_text)
    result = CliRunner().invoke(cli, ["data", "load", "--spec", str(spec), "--db", str(path)])
    assert result.exit_code == 0, result.output
    for options in collections:
        collect(CollectConfig(dataset=dataset, db=str(path), **options), loaded=loaded)
    return path


#: a two-option study (she / he) in two orders, four occupations, two templates with gold options and two contexts:
#: 32 stimuli (templates x occupations x contexts x orders); the comparisons' tests collect it in two settings
COMPARE_SPEC = """
name: demo-compare
protocols: [choice, prob]
options:
  - {label: female, forms: {nom: she}}
  - {label: male, forms: {nom: he}}
orders: [[female, male], [male, female]]
fillers:
  occupation: [{value: nurse}, {value: pilot}, {value: baker}, {value: judge}]
templates:
  - {id: late, text: "The {occupation} said that {pronoun} was late.", case: nom, gold: female}
  - {id: home, text: "The {occupation} went home because {pronoun} was tired.", case: nom, gold: male}
contexts:
  - {name: unprimed}
  - {name: primed_f, prime: "{pronoun:female} is kind."}
"""
