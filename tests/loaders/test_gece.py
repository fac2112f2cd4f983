import csv

import pytest

from biaslab.loaders import DataError, get
from biaslab.loaders.gece import load_gece_file

COUNTS = {"gece-winobias": ("winobias.csv", 771), "gece-winogender": ("winogender.csv", 178),
          "genderlex": ("genderLex.csv", 837), "genderlex-person": ("genderLex_person.csv", 837),
          "genderlex-someone": ("genderLex_someone.csv", 837)}


def raw_rows(folder, file):
    """The upstream rows read independently with the csv module (blank lines skipped)."""
    with open(folder / "gece_data" / file, encoding="utf-8", newline="") as f:
        return [row for row in csv.DictReader(f) if any(v.strip() for v in row.values() if v)]


@pytest.mark.parametrize("name", sorted(COUNTS))
def test_counts_gold_and_fill_back_to_both_sentences(name, dataset_folder, data_dir):
    folder = dataset_folder("genderlex_gece")
    file, count = COUNTS[name]
    stimuli = get(name).load(data_dir)
    rows = raw_rows(folder, file)
    assert len(stimuli) == len(rows) == count
    assert len({s.stimulus_id for s in stimuli}) == count
    assert all(s.dataset == name for s in stimuli)
    for s, row in zip(stimuli, rows):
        male, female = s.options
        assert s.option_labels == ("male", "female")
        assert s.text.count("BLANK") == 1
        assert s.fill(male) == row["sent_more"]
        assert s.fill(female) == row["sent_less"]
        assert s.gold in s.options
        assert s.gold == (male if row["y"] == "1" else female)
        assert s.attrs["y"] == int(row["y"]) and s.attrs["bias_type"] == row.get("bias_type")
    assert sum(s.attrs["y"] for s in stimuli) == sum(row["y"] == "1" for row in rows)


def test_label_balance_and_options_match_provenance(data_dir, dataset_folder):
    dataset_folder("genderlex_gece")
    genderlex = get("genderlex").load(data_dir)
    assert sum(s.gold == "him" for s in genderlex) == 506 and sum(s.gold == "her" for s in genderlex) == 331
    assert {s.options for s in genderlex} == {("him", "her")}
    assert {s.grammatical_case for s in genderlex} == {"acc"}
    winobias = get("gece-winobias").load(data_dir)
    assert {s.options for s in winobias} == {("him", "her"), ("his", "her"), ("he", "she")}
    assert [s.attrs["index"] for s in winobias] == list(range(771))
    # three rows repeat the pronoun swap later in the sentence; both sentences come back via option_texts
    assert sorted(s.item_id for s in winobias if s.attrs["n_differences"] > 1) == ["300", "465", "699"]
    assert all((s.option_texts is not None) == (s.attrs["n_differences"] > 1) for s in winobias)
    assert {s.options for s in get("gece-winogender").load(data_dir)} == {("he", "she")}


def write(tmp_path, body, header="sent_more,sent_less,y"):
    (tmp_path / "gece_data").mkdir(exist_ok=True)
    (tmp_path / "gece_data" / "t.csv").write_text(header + "\n" + body, encoding="utf-8")
    return lambda: load_gece_file(tmp_path, dataset="t", file="t.csv")


def test_synthetic_rows_keep_capitals_and_bad_pairs_name_file_line_field(tmp_path):
    load = write(tmp_path, "He sang.,She sang.,0\nThe cat saw him.,The cat saw her.,1\n")
    first, second = load()
    assert first.options == ("He", "She") and first.gold == "She" and first.text == "BLANK sang."
    assert second.options == ("him", "her") and second.gold == "him" and second.grammatical_case == "acc"
    assert second.attrs["bias_type"] is None and "index" not in second.attrs

    cases = [
        ("He sang.,He sang.,1\n", r"t\.csv:2: field 'sent_less': .*identical"),
        ("He sang.,She wept.,1\n", r"t\.csv:2: field 'sent_less': .*differ in 2 places"),
        ("He saw him.,She saw her.,1\n", r"t\.csv:2: field 'sent_less': .*differ in 2 places"),
        ("He sang.,She sang loudly.,1\n", r"t\.csv:2: field 'sent_less': .*token by token"),
        ("He sang.,She sang.,2\n", r"t\.csv:2: field 'y'"),
        ("She sang.,He sang.,1\n", r"t\.csv:2: field 'sent_more': .*'She' is not a male pronoun"),
        ("He sang.,They sang.,1\n", r"t\.csv:2: field 'sent_less': .*'They' is not a female pronoun"),
        ("The cat sang.,The dog sang.,1\n", r"t\.csv:2: field 'sent_more': .*'cat' is not a male pronoun"),
    ]
    for body, pattern in cases:
        with pytest.raises(DataError, match=pattern):
            write(tmp_path, body)()
    with pytest.raises(DataError, match=r"field 'y': missing column"):
        write(tmp_path, "He sang.,She sang.\n", header="sent_more,sent_less")()


def test_repeated_swap_is_one_slot_with_option_texts(tmp_path):
    load = write(tmp_path, '0,"He said he sang.","She said she sang.",gender,1\n',
                 header=",sent_more,sent_less,bias_type,y")
    (s,) = load()
    assert s.text == "BLANK said he sang." and s.options == ("He", "She") and s.gold == "He"
    assert s.fill("He") == "He said he sang." and s.fill("She") == "She said she sang."
    assert s.attrs == {"y": 1, "bias_type": "gender", "row": 0, "line": 2, "n_differences": 2, "index": 0}
