"""Algorithmic expansion of negation-bias root items (synonyms x four sentence structures), on invented items."""

from __future__ import annotations

import csv

import pytest

from biaslab.loaders import DataError, get
from biaslab.loaders.negation import COLUMNS
from biaslab.loaders.negation_expand import (OUTPUT_COLUMNS, STRUCTURES, expand, expand_files, lower_first,
                                             read_synonyms, replace_noun, split_end, strip_subject)

# Two invented root items (not from any dataset). Root 1 names a different group in each context; root 2 has an
# indefinite article and a two-word group.
ROOTS = [
    ("1", "SA", "stereo", "aff", "nurse", "The nurse comforts the crying child.", "The nurse is very caring."),
    ("1", "SN", "stereo", "neg", "nurse", "The nurse comforts the crying child.", "The nurse is not cold."),
    ("1", "NA", "nonstereo", "aff", "banker", "The banker comforts the crying child.", "The banker is very caring."),
    ("1", "NN", "nonstereo", "neg", "banker", "The banker comforts the crying child.", "The banker is not cold."),
    ("2", "SA", "stereo", "aff", "tax collector", "A tax collector checks every receipt twice!",
     "The tax collector is extremely strict."),
    ("2", "SN", "stereo", "neg", "tax collector", "A tax collector checks every receipt twice!",
     "The tax collector is not lenient."),
    ("2", "NA", "nonstereo", "aff", "poet", "A poet checks every receipt twice.", "The poet is extremely strict."),
    ("2", "NN", "nonstereo", "neg", "poet", "A poet checks every receipt twice.", "The poet is not lenient."),
]
SYNONYMS = "noun,synonym\nnurse,caregiver\nbanker,financier\nbanker,investment banker\ntax collector,inspector\n"


def root_rows() -> list[dict[str, str]]:
    return [dict(zip(COLUMNS, (*r, f"{r[5]} {r[6]}"))) for r in ROOTS]


def write_roots(path, rows=None):
    rows = root_rows() if rows is None else rows
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(COLUMNS), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    return path


def write_syn(tmp_path, text=SYNONYMS):
    path = tmp_path / "syn.csv"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def files(tmp_path):
    return write_roots(tmp_path / "roots.csv"), write_syn(tmp_path)


def test_counts_roots_x_synonyms_x_structures_and_the_output_loads(tmp_path, files):
    roots, synonyms = files
    out = tmp_path / "data" / "negation" / "negation_bias.csv"
    summary = expand_files(roots, synonyms, out)
    # root 1: nurse (1 synonym) + banker (2), root 2: tax collector (1) + poet (0) -> 4 synonyms x 4 structures
    assert summary["items_out"] == 4 * len(STRUCTURES) == 16
    assert summary["rows_out"] == 16 * 4 == 64 and summary["rows_in"] == 8 and summary["roots"] == 2
    assert summary["unused_nouns"] == [] and summary["roots_without_synonyms"] == []
    with open(out, encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        assert tuple(reader.fieldnames) == OUTPUT_COLUMNS
        written = list(reader)
    assert len(written) == 64

    stimuli = get("negation").load(tmp_path / "data")  # the loader's own checks pass on every expanded row
    assert len(stimuli) == 64 and len({s.stimulus_id for s in stimuli}) == 64
    by_item: dict[str, set[str]] = {}
    for s in stimuli:
        by_item.setdefault(s.attrs["item"], set()).add(s.attrs["condition"])
    assert all(conditions == {"SA", "SN", "NA", "NN"} for conditions in by_item.values())  # items stay complete
    assert sorted(by_item) == sorted(f"{root}-{syn}-{st}" for root, syn in
                                     (("1", "caregiver"), ("1", "financier"), ("1", "investment_banker"),
                                      ("2", "inspector")) for st in STRUCTURES)
    assert {s.text for s in stimuli if s.attrs["item"] == "1-caregiver-because"} == {
        "The caregiver comforts the crying child because the caregiver is very caring.",
        "The caregiver comforts the crying child because the caregiver is not cold.",
        "The banker comforts the crying child because the banker is very caring.",
        "The banker comforts the crying child because the banker is not cold.",
    }


def test_keep_and_rephrase_roots_add_their_rows(tmp_path):
    rows = expand(root_rows(), read_synonyms(write_syn(tmp_path)), keep_roots=True, rephrase_roots=True)
    # + 2 roots unchanged (8 rows) + 2 roots x 4 structures with the original nouns (32 rows)
    assert len(rows) == 64 + 8 + 32
    originals = [r for r in rows if r["structure"] == "original"]
    assert [(r["item_id"], r["sentence"]) for r in originals] == [(r["item_id"], r["sentence"]) for r in root_rows()]
    rephrased = [r for r in rows if r["item_id"] == "1-thats_why"]
    assert rephrased[0]["sentence"] == "The nurse is very caring, that's why the nurse comforts the crying child."
    assert rephrased[0]["synonym"] == "" and rephrased[0]["noun"] == ""


def test_exact_strings_of_one_hand_written_example():
    rows = expand(root_rows(), {"tax collector": ["inspector"]})
    got = {(r["item_id"], r["condition"]): r for r in rows}
    assert len(rows) == 4 * 4
    expected = {
        "because": ("An inspector checks every receipt twice",
                    "because the inspector is extremely strict."),
        "who": ("An inspector checks every receipt twice,", "who is extremely strict."),
        "which_means": ("An inspector checks every receipt twice,", "which means the inspector is extremely strict."),
        "thats_why": ("The inspector is extremely strict,", "that's why an inspector checks every receipt twice!"),
    }
    for structure, (lead, tail) in expected.items():
        row = got[(f"2-inspector-{structure}", "SA")]
        assert (row["context_sentence"], row["description"]) == (lead, tail), structure
        assert row["sentence"] == f"{lead} {tail}"
        assert row["group"] == "inspector" and row["noun"] == "tax collector" and row["synonym"] == "inspector"
        assert row["root_item"] == "2" and row["structure"] == structure
        assert row["clause_context"] == "An inspector checks every receipt twice!"
        assert row["clause_description"] == "The inspector is extremely strict."
        assert (row["condition"], row["context"], row["form"]) == ("SA", "stereo", "aff")
    # the other context's noun is left alone, so the item keeps all four conditions
    assert got[("2-inspector-who", "NN")]["sentence"] == "A poet checks every receipt twice, who is not lenient."
    assert got[("2-inspector-who", "NN")]["group"] == "poet"
    assert got[("2-inspector-thats_why", "SN")]["sentence"] == (
        "The inspector is not lenient, that's why an inspector checks every receipt twice!")


def test_text_helpers():
    assert split_end("The nurse is kind.") == ("The nurse is kind", ".")
    assert split_end("Really?!") == ("Really", "?!")
    assert split_end("no final mark ") == ("no final mark", ".")
    assert lower_first("The nurse") == "the nurse" and lower_first("An owl") == "an owl"
    assert lower_first("Snapchat is used") == "Snapchat is used" and lower_first("I am") == "I am"
    assert replace_noun("The nurse met a nurse's friend; nurses wait.", "nurse", "aide") == (
        "The aide met an aide's friend; nurses wait.", 2)
    assert replace_noun("A nurse. an Owl", "owl", "bird") == ("A nurse. a Bird", 1)
    assert replace_noun("An engineer", "engineer", "mechanic") == ("A mechanic", 1)
    assert strip_subject("The nurse is kind.", "nurse") == "is kind."
    assert strip_subject("Nurse is kind.", "nurse") == "is kind."
    assert strip_subject("She is kind.", "nurse") is None


def test_description_without_its_subject_names_file_line_and_field(tmp_path):
    rows = root_rows()
    rows[2] = {**rows[2], "description": "He is very caring.",
               "sentence": rows[2]["context_sentence"] + " He is very caring."}
    out = tmp_path / "out.csv"
    with pytest.raises(DataError, match=r"roots\.csv:4: field 'description': description must start with"):
        expand_files(write_roots(tmp_path / "roots.csv", rows), write_syn(tmp_path), out)
    assert not out.exists()  # nothing written on error


def test_noun_missing_from_the_context_sentence(tmp_path):
    rows = root_rows()
    rows[0] = {**rows[0], "context_sentence": "She comforts the crying child.",
               "sentence": "She comforts the crying child. " + rows[0]["description"]}
    with pytest.raises(DataError, match=r"roots\.csv:2: field 'context_sentence': group noun 'nurse' does not"):
        expand_files(write_roots(tmp_path / "roots.csv", rows), write_syn(tmp_path), tmp_path / "out.csv")


def test_invalid_root_rows_fail_with_the_loaders_checks(tmp_path):
    rows = root_rows()
    rows[1] = {**rows[1], "sentence": rows[1]["sentence"] + " Extra."}
    with pytest.raises(DataError, match=r"roots\.csv:3: field 'sentence'"):
        expand_files(write_roots(tmp_path / "roots.csv", rows), write_syn(tmp_path), tmp_path / "out.csv")
    rows = root_rows()
    rows[1] = {**rows[1], "condition": "SA"}
    with pytest.raises(DataError, match=r"roots\.csv:3: field 'condition'"):
        expand_files(write_roots(tmp_path / "roots.csv", rows), write_syn(tmp_path), tmp_path / "out.csv")
    with pytest.raises(DataError, match=r"<rows>:2: field 'condition'"):
        expand([{**root_rows()[0], "condition": "XX"}], {})


@pytest.mark.parametrize("text, pattern", [
    ("noun,synonym\nnurse,aide\nnurse,aide\n", r"syn\.csv:3: field 'synonym': 'nurse' -> 'aide' is listed twice"),
    ("noun,synonym\nnurse,Nurse\n", r"syn\.csv:2: field 'synonym': synonym 'Nurse' is the noun itself"),
    ("noun,synonym\nnurse,\n", r"syn\.csv:2: field 'synonym': empty value"),
    ("noun\nnurse\n", r"syn\.csv:1: field 'synonym': missing column"),
])
def test_bad_synonym_files(tmp_path, text, pattern):
    with pytest.raises(DataError, match=pattern):
        read_synonyms(write_syn(tmp_path, text))


def test_colliding_item_ids_are_an_error(tmp_path):
    text = "noun,synonym\nbanker,money man\nbanker,money-man\n"
    with pytest.raises(DataError, match=r"roots\.csv:4: field 'group': expanded item id '1-money_man-because'"):
        expand_files(write_roots(tmp_path / "roots.csv"), write_syn(tmp_path, text), tmp_path / "out.csv")


def test_unused_nouns_and_roots_without_synonyms_are_reported(tmp_path):
    summary = expand_files(write_roots(tmp_path / "roots.csv"), write_syn(tmp_path, "noun,synonym\nzebra,horse\n"),
                           tmp_path / "out.csv")
    assert summary["rows_out"] == 0 and summary["unused_nouns"] == ["zebra"]
    assert summary["roots_without_synonyms"] == ["1", "2"]
