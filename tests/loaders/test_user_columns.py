"""A typo in an optional column of a user's file is refused, not stored as an attribute (issue 56, item 8): a column
one edit away from a field names its likely twin; `attrs.NAME` declares an attribute of any name."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from biaslab.cli.main import biaslab
from biaslab.loaders.user.files import _one_edit, read_stimuli

ROW = "The nurse said BLANK was tired."


@pytest.mark.parametrize("column,twin", [("contxt", "context"), ("optoins", "options"), ("Context", "context"),
                                         ("primes", "prime"), ("goldd", "gold")])
def test_a_column_one_edit_from_a_field_is_refused_naming_it(tmp_path, column, twin):
    path = tmp_path / "rows.csv"
    path.write_text(f"item_id,text,{column}\ni1,{ROW},x\n", encoding="utf-8")
    db = tmp_path / "w.duckdb"
    result = CliRunner().invoke(biaslab, ["data", "load", "--file", str(path), "--name", "s", "--db", str(db)])
    output = result.output.strip()
    assert result.exit_code == 1 and len(output.splitlines()) == 1, output
    assert f"{path}:2: field '{column}': column '{column}' is one letter away from the field '{twin}'" in output
    assert f"'attrs.{column}'" in output and not db.exists()


def test_declared_and_distant_columns_are_attributes(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps({"item_id": "i1", "text": ROW, "attrs.contxt": "kept", "occupation_rating": 0.4,
                                "age": 3}) + "\n", encoding="utf-8")
    [stimulus] = read_stimuli(path, "s")
    assert stimulus.attrs == {"contxt": "kept", "occupation_rating": 0.4, "age": 3}
    assert stimulus.context is None


def test_one_edit_is_one_letter_added_dropped_changed_or_two_swapped():
    assert _one_edit("contxt", "context") and _one_edit("contexts", "context") and _one_edit("cantext", "context")
    assert _one_edit("cnotext", "context")
    assert not _one_edit("context", "context") and not _one_edit("cntxt", "context")
    assert not _one_edit("ctonext", "context")  # two changes
