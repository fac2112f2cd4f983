"""BBQ (issue 54, item 1): every example of every category present, its answers' roles, the target position derived
by the paper's rule (checked against the authors' R script's stored output on every example), the metadata
file's precedence, and bad input refused in one line with nothing stored."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from biaslab.cli.main import biaslab
from biaslab.loaders import get
from biaslab.loaders.bbq import CATEGORIES, METADATA, data_file, derive_target_loc, option_labels

#: per category: the dataset card's example count (PROVENANCE.md), for the categories this copy holds
PRESENT = ("Age", "Disability_status", "Nationality", "Physical_appearance", "Religion", "Sexual_orientation")


@pytest.fixture(scope="module")
def bbq(data_dir):
    if not (data_dir / "bbq" / "data" / "Age.jsonl").is_file():
        pytest.skip(f"dataset folder {data_dir / 'bbq'} is absent")
    return get("bbq").load_verified(data_dir)


def test_every_example_is_one_stimulus_with_its_answers_roles(bbq, data_dir):
    stimuli = bbq.stimuli
    folder = data_dir / "bbq"
    present = [c for c in CATEGORIES if (folder / data_file(c)).is_file()]
    assert set(PRESENT) <= set(present)
    counts = {c: sum(s.attrs["category"] == c for s in stimuli) for c in present}
    assert counts == {c: CATEGORIES[c][1] for c in present}
    assert len({s.stimulus_id for s in stimuli}) == len({s.item_id for s in stimuli}) == len(stimuli)
    first = json.loads((folder / "data/Age.jsonl").read_text(encoding="utf-8").splitlines()[0])
    s = next(x for x in stimuli if x.item_id == "Age.0")
    assert s.text == f"{first['context']}\n\nQ: {first['question']}\nA: BLANK"
    assert s.fill(s.options[0]) == f"{first['context']}\n\nQ: {first['question']}\nA: {first['ans0']}"
    assert s.options == (first["ans0"], first["ans1"], first["ans2"]) and s.gold == first[f"ans{first['label']}"]
    assert s.attrs["question_polarity"] == "neg" and s.attrs["stereotyped_groups"] == ["old"]
    # the grandfather is the old group: the biased answer to "who was not comfortable using the phone?"
    assert s.option_labels == ("biased", "other", "unknown") and s.attrs["target_loc"] == 0
    for x in stimuli:  # every example: one unknown answer, gold among the options, ambiguous gold = unknown
        labels = x.option_labels
        assert labels.count("unknown") == 1 and labels[x.attrs["unknown_loc"]] == "unknown"
        unknown = x.options[x.attrs["unknown_loc"]]
        assert (x.gold == unknown) == (x.attrs["context_condition"] == "ambig")
    assert {x.attrs["context_condition"] for x in stimuli} == {"ambig", "disambig"}
    assert any("optional file" in note for note in bbq.notes()) == (len(present) < len(CATEGORIES))


def test_target_position_equals_the_authors_r_script_on_every_example(bbq):
    """The loader derives target_loc by the paper's rule: the script's own output on these files, run once outside
    the project and stored (fixtures/bbq_target_loc_R.json, how in fixtures/README.md), gives the same position (and
    label type) for every one of the examples present."""
    fixture = json.loads((Path(__file__).parent / "fixtures" / "bbq_target_loc_R.json").read_text(encoding="utf-8"))
    r = {(c, e): (int(t), fixture["label_type"])
         for c, locs in fixture["target_loc"].items() for e, t in enumerate(locs)}
    mine = {(s.attrs["category"], s.attrs["example_id"]): (s.attrs["target_loc"], s.attrs["label_type"])
            for s in bbq.stimuli}
    present = {k: v for k, v in r.items() if k[0] in {c for c, _ in mine}}
    assert len(mine) == len(bbq.stimuli) == len(present) and mine == present
    assert len(r) == 11956  # all six categories of the shared copy are in the fixture


def test_derivation_follows_the_scripts_special_cases():
    # Age: old / nonOld matched exactly (a regular expression "old" would find "nonOld" too)
    assert derive_target_loc("Age", "1", "neg", ["nonOld", "old", "unknown"], ["grandson", "grandfather", "?"],
                             '["old"]') == 1
    # non-negative question: the target moves to the other group's answer
    assert derive_target_loc("Age", "1", "nonneg", ["nonOld", "old", "unknown"], ["a", "b", "?"], '["old"]') == 0
    # man / woman become M / F on both sides (before "M-" / "F-" prefixes are removed: "F-woman" stays "woman")
    assert derive_target_loc("Gender_identity", "3", "neg", ["unknown", "man", "woman"], ["?", "x", "y"],
                             '["women"]') == 2
    assert derive_target_loc("Gender_identity", "3", "neg", ["unknown", "M-man", "F-woman"], ["?", "x", "y"],
                             '["women"]') is None
    # the transgender groups become "trans"; a group starting with "trans" is the target
    assert derive_target_loc("Gender_identity", "12", "neg", ["nonTrans", "trans_F", "unknown"], ["a", "b", "?"],
                             '["transgender women"]') == 1
    assert derive_target_loc("Gender_identity", "12", "neg", ["nonTrans", "trans_F", "unknown"], ["a", "b", "?"],
                             '["transgender women", "trans"]') is None  # not one of the script's "trans" lists
    # two answers matching the stereotyped groups: no single target (NA)
    assert derive_target_loc("Religion", "1", "neg", ["Muslim", "Muslim", "unknown"], ["a", "b", "?"],
                             '["Muslim"]') is None
    assert option_labels(None, 2) == ("group", "group", "unknown")
    assert option_labels(1, 0) == ("unknown", "biased", "other")


def _copy(data_dir: Path, tmp_path: Path, categories=("Age",)) -> Path:
    """A data folder with the templates and the first 40 lines of each category file given (modified copies)."""
    folder = tmp_path / "data" / "bbq"
    (folder / "data").mkdir(parents=True)
    shutil.copytree(data_dir / "bbq" / "templates", folder / "templates")
    for category in categories:
        lines = (data_dir / "bbq" / data_file(category)).read_text(encoding="utf-8").splitlines(keepends=True)
        (folder / data_file(category)).write_text("".join(lines[:40]), encoding="utf-8")
    return folder


def test_the_metadata_file_gives_the_target_where_present(data_dir, tmp_path):
    if not (data_dir / "bbq" / "data" / "Age.jsonl").is_file():
        pytest.skip("bbq absent")
    folder = _copy(data_dir, tmp_path)
    (folder / METADATA).parent.mkdir()
    (folder / METADATA).write_text(
        '"category","question_index","example_id","target_loc","label_type"\n'
        '"Age","1",0,1,"label"\n'          # the file says the grandson (derived: the grandfather)
        '"Age","1",1,0,"label"\n"Age","1",1,1,"label"\n'  # two positions: no single target
        '"Gender_identity","1",NA,NA,"label"\n', encoding="utf-8")
    stimuli = {s.item_id: s for s in get("bbq").load(folder.parent, accept_modified=True)}
    assert stimuli["Age.0"].attrs["target_loc"] == 1 and stimuli["Age.0"].option_labels[1] == "biased"
    assert stimuli["Age.1"].attrs["target_loc"] is None
    assert stimuli["Age.1"].option_labels == ("group", "group", "unknown")
    assert stimuli["Age.2"].attrs["target_loc"] == 1  # not in the file: derived (non-negative: the grandson)


@pytest.mark.parametrize("edit,line,field,message", [
    (lambda ex: ex.pop("question"), 3, "question", "missing field"),
    (lambda ex: ex.update(label=3), 5, "label", "must be 0, 1 or 2"),
    (lambda ex: ex.update(context_condition="vague"), 2, "context_condition", "must be ambig or disambig"),
    (lambda ex: ex["answer_info"].update(ans1=["x"]), 7, "answer_info.ans1", "expected [text, group]"),
])
def test_bad_example_is_one_line_naming_file_line_and_field_and_nothing_is_stored(data_dir, tmp_path, edit, line,
                                                                                    field, message):
    if not (data_dir / "bbq" / "data" / "Age.jsonl").is_file():
        pytest.skip("bbq absent")
    folder = _copy(data_dir, tmp_path)
    path = folder / data_file("Age")
    lines = path.read_text(encoding="utf-8").splitlines()
    example = json.loads(lines[line - 1])
    edit(example)
    lines[line - 1] = json.dumps(example)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    db = tmp_path / "w.duckdb"
    result = CliRunner().invoke(biaslab, ["data", "load", "bbq", "--db", str(db), "--data-dir",
                                          str(folder.parent), "--accept-modified"])
    output = result.output.strip()
    assert result.exit_code == 1, output
    errors = [x for x in output.splitlines() if x.startswith("Error:")]
    assert errors == [f"Error: {path}:{line}: field '{field}': " + errors[0].split(f"field '{field}': ", 1)[1]]
    assert message in errors[0] and "Traceback" not in output
    assert not db.exists()


@pytest.mark.parametrize("line_text,line,field,message", [
    ('{"example_id": 4, "label": ' + "9" * 5000 + "}", 4, None, "invalid JSON: Exceeds the limit"),
    ("[" * 200_000 + "]" * 200_000, 4, None, "nested too deeply"),
    ("x" * (1 << 20 + 1), 4, None, "line longer than 1,048,576 characters"),
    ("NUL\x00", 4, None, "a NUL character"),
])
def test_hostile_lines_are_one_line_and_nothing_is_stored(data_dir, tmp_path, line_text, line, field, message):
    """A 5,000-digit label, JSON nested 200,000 deep, a line of 1 MiB and a NUL byte (issue 67, items 9-10): the
    same one-line refusal naming file and line as any bad example, from the one rule every loader shares."""
    if not (data_dir / "bbq" / "data" / "Age.jsonl").is_file():
        pytest.skip("bbq absent")
    folder = _copy(data_dir, tmp_path)
    path = folder / data_file("Age")
    lines = path.read_text(encoding="utf-8").splitlines()
    lines[line - 1] = line_text
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    db = tmp_path / "w.duckdb"
    result = CliRunner().invoke(biaslab, ["data", "load", "bbq", "--db", str(db), "--data-dir",
                                          str(folder.parent), "--accept-modified"])
    output = result.output.strip()
    assert result.exit_code == 1 and "Traceback" not in output, output[-500:]
    errors = [x for x in output.splitlines() if x.startswith("Error:")]
    assert len(errors) == 1 and errors[0].startswith(f"Error: {path}:{line}: ") and message in errors[0], errors
    assert len(errors[0]) < 400 and not db.exists()


def test_a_nul_escaped_in_json_is_refused_naming_the_field(data_dir, tmp_path):
    if not (data_dir / "bbq" / "data" / "Age.jsonl").is_file():
        pytest.skip("bbq absent")
    folder = _copy(data_dir, tmp_path)
    path = folder / data_file("Age")
    lines = path.read_text(encoding="utf-8").splitlines()
    example = json.loads(lines[2])
    example["context"] += "\x00"
    lines[2] = json.dumps(example)  # "\u0000" in the file, a NUL once parsed
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = CliRunner().invoke(biaslab, ["data", "load", "bbq", "--db", str(tmp_path / "w.duckdb"), "--data-dir",
                                          str(folder.parent), "--accept-modified"])
    assert result.exit_code == 1 and f"{path}:3: field 'context': a NUL character" in result.output
