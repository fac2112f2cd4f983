"""A user's own dataset from a table file or a template spec (biaslab.loaders.user): what is read, and every
refusal in one line naming the file, the line (or row, or key) and the field."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from biaslab.loaders.errors import DataError
from biaslab.loaders.user.dataset import from_file, from_spec
from biaslab.loaders.user.files import read_stimuli, write_rows

CSV = ("item_id,text,slot,options,option_labels,context,rating\n"
       "i1,The nurse said that BLANK was late.,BLANK,she|he,female|male,unprimed,0.9\n"
       "i2,The pilot said that BLANK was late.,BLANK,\"[\"\"she\"\", \"\"he\"\"]\",female|male,primed_f,0.1\n")

SPEC = """
name: demo
protocols: [choice, prob]
options:
  - {label: female, forms: {nom: she, acc: her}}
  - {label: male, forms: {nom: he, acc: him}}
orders: [[female, male], [male, female]]
fillers:
  occupation: [{value: nurse, rating: 0.9}, pilot]
optional: [rating]   # pilot has no rating (issue 44: an attribute on some fillers only must be declared)
templates:
  - {id: late, text: "The {occupation} said that {pronoun} was late.", case: nom}
contexts:
  - {name: unprimed}
  - {name: primed_f, prime: "{pronoun:female} works as a {occupation}."}
  - {name: my_own, prime: "It rained."}
"""


def test_a_csv_row_becomes_a_stimulus_with_lists_and_typed_attrs(tmp_path):
    path = tmp_path / "s.csv"
    path.write_text(CSV)
    first, second = read_stimuli(path, "demo")
    assert (first.dataset, first.upstream_version, first.item_id) == ("demo", "user", "i1")
    assert first.options == ("she", "he") == second.options and first.option_labels == ("female", "male")
    assert first.attrs == {"rating": 0.9} and second.context == "primed_f"


@pytest.mark.parametrize("kind", ["jsonl", "parquet", "tsv", "csv"])
def test_every_format_reads_back_what_expand_writes(tmp_path, kind):
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    stimuli = from_spec(spec).stimuli
    out = tmp_path / f"rows.{kind}"
    if kind in ("jsonl", "csv"):
        write_rows(stimuli, out)
    elif kind == "parquet":
        records = [json.loads(json.dumps(s.model_dump(mode="json", exclude={"dataset", "upstream_version"})))
                   for s in stimuli]
        for r in records:
            r["attrs"] = json.dumps(r["attrs"])
        pq.write_table(pa.Table.from_pylist(records), out)
    else:
        write_rows(stimuli, tmp_path / "rows.csv")
        out.write_text(_tsv(tmp_path / "rows.csv"))
    again = read_stimuli(out, "demo")
    assert [s.stimulus_id for s in again] == [s.stimulus_id for s in stimuli]  # the same content, the same ids


def _tsv(csv_path) -> str:
    import csv
    import io

    buffer = io.StringIO()
    writer = csv.writer(buffer, delimiter="\t", lineterminator="\n")
    with open(csv_path, newline="") as f:
        writer.writerows(csv.reader(f))
    return buffer.getvalue()


def test_the_spec_expands_to_the_cross_product(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    data = from_spec(spec)
    stimuli = data.stimuli
    assert len(stimuli) == 2 * 3 * 2  # fillers x contexts x orders
    assert data.declaration.protocols == ("choice", "prob") and data.declaration.name == "demo"
    primed = [s for s in stimuli if s.context == "primed_f" and s.option_order == "MF"]
    assert [s.prime for s in primed] == ["She works as a nurse.", "She works as a pilot."]  # capitalized: starts it
    assert {s.item_id for s in stimuli} == {"late.nurse", "late.pilot"}  # shared across contexts and orders
    nurse = next(s for s in stimuli if s.occupation == "nurse")
    assert nurse.attrs["occupation_rating"] == 0.9 and nurse.attrs["occupation"] == "nurse"
    own = [s for s in stimuli if s.attrs.get("context") == "my_own"]
    assert len(own) == 4 and all(s.context is None and s.prime == "It rained." for s in own)
    assert data.version == from_spec(spec).version  # deterministic


@pytest.mark.parametrize("edit, needle", [
    (lambda s: s.replace("was late.", "was late and {pronoun} left."), "the option slot {pronoun} appears 2 times"),
    (lambda s: s.replace("said that {pronoun} was", "said that it was"), "the option slot {pronoun} appears 0 times"),
    (lambda s: s.replace("{label: male", "{label: female"), "options: label repeated"),
    (lambda s: s.replace("[{value: nurse, rating: 0.9}, pilot]", "[]"), "fillers.occupation: empty list"),
    (lambda s: s.replace("The {occupation}", "The {job}"), "slot {job} has no filler list"),
    (lambda s: s.replace("orders:", "order:"), "unknown key 'order'"),
    (lambda s: s.replace("[[female, male], [male, female]]", "[[female, other]]"), "is not an order of the labels"),
    (lambda s: s.replace("{pronoun:female} works", "{pronoun:nobody} works"), "names no option label"),
    (lambda s: s.replace("case: nom", "case: dative"), "unknown case 'dative'"),
    (lambda s: s.replace("case: nom", "case: refl"), "has no form for case 'refl'"),
    (lambda s: s.replace("name: demo", "name: winopron"), "is a built-in dataset's"),
    (lambda s: s.replace("name: demo", "name: My Study"), "use 1-64 lower-case letters"),
    (lambda s: s.replace("[choice, prob]", "[choice, probe]"), "unknown for user datasets"),
    (lambda s: s + "  - {nope", "invalid YAML"),
])
def test_a_bad_spec_is_one_line_naming_the_spec_and_key(tmp_path, edit, needle):
    spec = tmp_path / "spec.yaml"
    spec.write_text(edit(SPEC))
    with pytest.raises(DataError) as refused:
        from_spec(spec)
    message = str(refused.value)
    assert message.startswith(str(spec)) and needle in message and "\n" not in message


def test_a_spec_that_is_not_utf8(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_bytes(SPEC.encode("utf-8").replace(b"nurse", b"nurs\xe9", 1))
    with pytest.raises(DataError, match=r"spec.yaml:\d+: not valid UTF-8 \(byte 0xe9"):
        from_spec(spec)


@pytest.mark.parametrize("content, needle", [
    ("item_id,text,options,slot\ni1,The BLANK.,she|she,BLANK\n", "s.csv:2: field 'options': repeated option"),
    ("item_id,text,options,slot\ni1,The nurse.,she|he,BLANK\n", "s.csv:2: field 'text': slot marker 'BLANK' occurs 0"),
    ("item_id,text\n,The nurse.\n", "s.csv:2: field 'item_id': empty value"),
    ("text\nThe nurse.\n", "s.csv:1: field 'item_id': missing column"),
    ("item_id,text,stimulus_id\ni1,x,abc\n", "field 'stimulus_id': stimulus_id is computed by biaslab"),
    ("item_id,text,dataset\ni1,x,other\n", "field 'dataset': dataset 'other' differs from the name given"),
    ("item_id,text,context\ni1,x,primed\n", "s.csv:2: field 'context': Input should be"),
    ("item_id,text,stereotype_rating\ni1,x,high\n", "field 'stereotype_rating'"),
    ('item_id,text,options,slot\ni1,x BLANK,"[""she"",",BLANK\n', "s.csv:2: field 'options': not a JSON list"),
])
def test_a_bad_file_row_is_one_line_naming_file_line_and_field(tmp_path, content, needle):
    path = tmp_path / "s.csv"
    path.write_text(content)
    with pytest.raises(DataError) as refused:
        read_stimuli(path, "demo")
    assert needle in str(refused.value) and "\n" not in str(refused.value)


def test_file_formats_refused_in_one_line(tmp_path):
    bad = tmp_path / "s.csv"
    bad.write_bytes(b"item_id,text\ni1,caf\xe9\n")
    with pytest.raises(DataError, match=r"s.csv:2: not valid UTF-8"):
        read_stimuli(bad, "demo")
    lines = tmp_path / "s.jsonl"
    lines.write_text('{"item_id": "i1", "text": "x"}\n[1, 2]\n')
    with pytest.raises(DataError, match=r"s.jsonl:2: each line holds one JSON object, got list"):
        read_stimuli(lines, "demo")
    parquet = tmp_path / "s.parquet"
    parquet.write_bytes(b"not parquet at all")
    with pytest.raises(DataError, match=r"s.parquet: not a readable Parquet file"):
        read_stimuli(parquet, "demo")
    other = tmp_path / "s.xlsx"
    other.write_bytes(b"PK")
    with pytest.raises(DataError, match=r"unknown file type '.xlsx'"):
        read_stimuli(other, "demo")
    pq.write_table(pa.table({"item_id": ["i1"], "text": ["x BLANK"], "options": [["a"]], "slot": ["BLANK"]}),
                   parquet)
    with pytest.raises(DataError, match=r"s.parquet: field 'options': row 1: a choice needs at least two"):
        read_stimuli(parquet, "demo")


def test_protocol_needs_are_checked_before_anything_is_stored(tmp_path):
    path = tmp_path / "s.csv"
    path.write_text("item_id,text,options,slot\ni1,The BLANK.,she|he|they|xe|ze|e|fae|ve|ey,BLANK\n")
    with pytest.raises(DataError, match="the choice protocol shows 2 to 8 options, this stimulus has 9"):
        from_file(path, "demo", protocols="choice")
    with pytest.raises(DataError, match="the gen protocol needs a gold option"):
        from_file(path, "demo", protocols="gen")
    with from_file(path, "demo") as dataset:
        assert dataset.declaration.protocols == ("prob",)
    with pytest.raises(DataError, match=r"form 'Hen!' is not lower-case ASCII letters"):
        from_file(path, "demo", pronouns={"hen": {"nom": ("Hen!",)}})
