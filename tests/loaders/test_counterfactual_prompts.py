"""A counterfactual audit's prompt file (`biaslab data load --file --kind counterfactual`): variants as stimuli (one
item per prompt and attribute), prompts without an attribute word counted, given variants taking precedence, and
every kind of bad input refused in one line naming file, line and field, with nothing stored."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from biaslab.cli.main import biaslab as cli
from biaslab.errors import DataError
from biaslab.loaders.user.counterfactual import MAX_PROMPT, from_prompts
from biaslab.warehouse import Warehouse

EXAMPLE = Path(__file__).parents[2] / "examples" / "counterfactual-prompts.csv"


def _write(tmp_path: Path, text: str, name: str = "p.csv") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_each_variant_is_a_stimulus_and_a_prompts_variants_are_one_item(tmp_path):
    path = _write(tmp_path, "id,prompt,topic\na,My sister is a nurse. Is she paid fairly?,work\n"
                            "b,How do I bake bread?,food\n")
    data = from_prompts(path, "audit")
    rows = [(s.item_id, s.attrs["group"], s.text) for s in data.stimuli]
    assert rows == [("a.gender", "female", "My sister is a nurse. Is she paid fairly?"),
                    ("a.gender", "male", "My brother is a nurse. Is he paid fairly?"),
                    ("a.gender", "neutral", "My sibling is a nurse. Are they paid fairly?")]
    s = data.stimuli[0]
    assert s.template == "My sister is a nurse. Is she paid fairly?" and s.options is None
    assert s.attrs == {"topic": "work", "prompt_id": "a", "attribute": "gender", "group": "female",
                       "variants": "detected"}
    audit = data.declaration.counterfactual
    assert data.declaration.kind == "counterfactual" and data.declaration.protocols == ("gen",)
    assert audit["counts"]["gender"] == {"with": 1, "without": 1, "given": 0, "without_ids": ["b"]}
    assert audit["counts"]["race"]["without"] == 2 and audit["prompts"] == 2
    assert len({s.stimulus_id for s in data.stimuli}) == 3


def test_identical_variants_of_two_groups_stay_two_stimuli(tmp_path):
    # "actor" is both the male and the neutral form: the two texts read alike, the stimuli differ (identity "all")
    data = from_prompts(_write(tmp_path, "prompt\nThe actress gave a great interview.\n"), "a", attributes=("gender",))
    texts = {s.attrs["group"]: s for s in data.stimuli}
    assert texts["male"].text == texts["neutral"].text == "The actor gave a great interview."
    assert texts["male"].stimulus_id != texts["neutral"].stimulus_id and texts["male"].item_id == "2.gender"  # the line


def test_given_variants_replace_detection_and_name_their_groups(tmp_path):
    text = ("id,prompt,dialect:aave,dialect:sae,gender:female,gender:male\n"
            "x,Is he coming?,He finna come?,Is he about to come?,Is she coming?,Is he coming?\n"
            "y,She said hi.,,,,\n")
    data = from_prompts(_write(tmp_path, text), "a", attributes=("gender", "dialect"))
    by = {(s.item_id, s.attrs["group"]): (s.text, s.attrs["variants"]) for s in data.stimuli}
    assert by == {("x.gender", "female"): ("Is she coming?", "given"), ("x.gender", "male"): ("Is he coming?", "given"),
                  ("x.dialect", "aave"): ("He finna come?", "given"),
                  ("x.dialect", "sae"): ("Is he about to come?", "given")}
    counts = data.declaration.counterfactual["counts"]
    assert counts["gender"]["without_ids"] == ["y"] and counts["dialect"]["without_ids"] == ["y"]
    assert data.declaration.counterfactual["groups"] == {"gender": ["female", "male"], "dialect": ["aave", "sae"]}


@pytest.mark.parametrize("text, message", [
    ("", "file is empty"),
    ("prompt\n", "holds no prompt"),
    ("question\nIs she ok?\n", "'prompt'"),
    ("id,prompt\na,\"  \"\n", "p.csv:2: field 'prompt': empty prompt"),
    ("id,prompt\na,She is here.\na,He is here.\n", "p.csv:3: field 'id': repeats the id of line 2"),
    ("prompt,gender:female,gender:male\nShe is here.,She is here.,\n", "field 'gender:male': fills 1 of the 2"),
    ("prompt\nHow do I bake bread?\nWhat is rain?\n", "the word lists swap nothing"),
    ("prompt,gender:female\nShe is here.,She is here.\n", "one variant column"),
])
def test_bad_prompt_files_are_one_line_naming_the_field(tmp_path, text, message):
    with pytest.raises(DataError) as info:
        from_prompts(_write(tmp_path, text), "a")
    assert message in str(info.value) and "p.csv" in str(info.value) and "\n" not in str(info.value)


def test_a_nul_byte_and_a_huge_prompt_are_refused_naming_the_line(tmp_path):
    with pytest.raises(DataError, match="NUL"):
        from_prompts(_write(tmp_path, "prompt\nShe is\x00 here.\n"), "a")
    big = "She " + "x" * MAX_PROMPT
    with pytest.raises(DataError, match=r"p.csv:2: field 'prompt': 100,004 characters; a prompt is at most 100,000"):
        from_prompts(_write(tmp_path, f"prompt\n{big}\n"), "a")
    with pytest.raises(DataError, match="longer than"):  # a 50 MB line: refused by the reader's line bound, unread
        from_prompts(_write(tmp_path, "prompt\n" + "x" * (50 << 20) + "\n"), "a")


def test_data_load_stores_the_variants_says_what_has_none_and_a_bad_file_stores_nothing(tmp_path):
    db = tmp_path / "w.duckdb"
    result = CliRunner().invoke(cli, ["data", "load", "--file", str(EXAMPLE), "--kind", "counterfactual", "--name",
                                      "audit", "--db", str(db)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("audit: 219 stimuli read, 219 new;") and "protocols gen" in lines[0]
    assert lines[1].startswith("gender: 43 of 54 prompts varied over female / male / neutral; 11 hold no gender word")
    assert lines[2].startswith("race: 9 of 54 prompts varied over Black / White / Asian / Hispanic; 45 hold no")
    with Warehouse.open(db, read_only=True) as wh:
        decl = json.loads(wh.rows("SELECT declaration FROM user_datasets")[0][0])
        assert decl["kind"] == "counterfactual" and decl["identity"] == "all"
        assert wh.rows("SELECT count(*) FROM stimuli")[0][0] == 219
    bad = _write(tmp_path, "prompt\nShe is here.\n\"unterminated\n", "bad.csv")
    fresh = tmp_path / "fresh.duckdb"
    result = CliRunner().invoke(cli, ["data", "load", "--file", str(bad), "--kind", "counterfactual", "--name", "b",
                                      "--db", str(fresh)])
    assert result.exit_code != 0 and "bad.csv" in result.output and not fresh.exists()
