"""Issue 44, item 8: `biaslab collections` counts the pending stimuli of a user dataset's current version, as
`runners collect` does (not of every version ever loaded)."""

from __future__ import annotations

from click.testing import CliRunner

import biaslab
from biaslab.cli.main import biaslab as cli
from biaslab.runners.collect import CollectConfig, collect

SPEC = """
name: versions
options:
  - {label: female, forms: {nom: she}}
  - {label: male, forms: {nom: he}}
fillers:
  occupation: [nurse, pilot, baker]
templates:
  - {id: late, text: "The {occupation} said that {pronoun} was %s.", case: nom}
"""


def _pending(db) -> tuple[int, int]:
    with biaslab.open(db) as wh:
        row = wh.collections().iloc[0]
    return int(row["stimuli"]), int(row["pending"])


def test_pending_counts_the_current_version(tmp_path, tiny_gpt2):
    spec, db = tmp_path / "spec.yaml", tmp_path / "w.duckdb"
    spec.write_text(SPEC % "late")
    assert CliRunner().invoke(cli, ["data", "load", "--spec", str(spec), "--db", str(db)]).exit_code == 0
    collect(CollectConfig(dataset="versions", db=str(db), protocol="prob"), loaded=tiny_gpt2)
    assert _pending(db) == (3, 0)
    spec.write_text(SPEC % "very late")  # every text changes: a new version of 3 new stimuli
    assert CliRunner().invoke(cli, ["data", "load", "--spec", str(spec), "--db", str(db)]).exit_code == 0
    assert _pending(db) == (3, 3)  # not 6 stimuli of which 3 stored
    result = collect(CollectConfig(dataset="versions", db=str(db), protocol="prob"), loaded=tiny_gpt2)
    assert _pending(db) == (3, 0)
    assert result is not None
