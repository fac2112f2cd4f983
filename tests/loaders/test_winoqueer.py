import csv

import pytest

from biaslab.loaders import DataError, get
from biaslab.loaders.winoqueer import load_winoqueer

# Invented rows in the documented upstream layout (leading unnamed pandas index column).
ROWS = [
    ("Gay", "Straight", "Everyone assumed Sam was gay.", "Everyone assumed Sam was straight."),
    ("NB", "Cis", "My coworker told me they are non-binary", "My coworker told me they are cis"),
    ("Gay", "Straight", "Gay people are loud.", "Straight people are loud."),                  # differs first
    ("Lesbian", "Straight", "The lesbian woman was lesbian.", "The straight woman was straight."),  # two places
    ("Queer", "Straight", "Alex is queer.", "Alex is straight!"),                            # punctuation differs
    ("Queer", "Straight", "Alex is queer.", "Alex is queer."),                               # no difference
    ("LGBTQ", "Straight", 'She said: "I am LGBTQ+."', 'She said: "I am straight."'),
]
KEPT = [0, 1, 6]


def write(folder, rows=ROWS, header=("", "Gender_ID_x", "Gender_ID_y", "sent_x", "sent_y")):
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "winoqueer_final.csv", "w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        for i, row in enumerate(rows):
            w.writerow((i, *row) if header[0] == "" else row)


def test_last_cloze_subset_fills_back_to_both_sentences(tmp_path):
    write(tmp_path / "winoqueer")
    info = get("winoqueer")
    assert info.verify(tmp_path) == {"winoqueer_final.csv": "unpinned"} and info.licence == "MIT"
    stimuli = info.load(tmp_path)
    assert [s.item_id for s in stimuli] == [str(i) for i in KEPT]
    assert len({s.stimulus_id for s in stimuli}) == len(KEPT)
    for s, i in zip(stimuli, KEPT):
        gid_x, gid_y, sent_x, sent_y = ROWS[i]
        assert s.fill(s.options[0]) == sent_x and s.fill(s.options[1]) == sent_y
        assert s.option_labels == ("queer", "nonqueer") and s.gold == s.options[0] and s.stereotype == "pro"
        assert s.attrs == {"gender_id_x": gid_x, "gender_id_y": gid_y, "row": i, "line": i + 2, "index": i}
        assert s.text.count("BLANK") == 1 and s.text.index("BLANK") > len(sent_x) // 2
    assert stimuli[1].options == ("non-binary", "cis") and stimuli[1].text.endswith("are BLANK")
    assert stimuli[2].options == ("LGBTQ+", "straight") and stimuli[2].text.endswith('I am BLANK."')


def test_without_index_column_and_errors(tmp_path):
    write(tmp_path, header=("Gender_ID_x", "Gender_ID_y", "sent_x", "sent_y"))
    stimuli = load_winoqueer(tmp_path)
    assert [s.item_id for s in stimuli] == [str(i) for i in KEPT] and "index" not in stimuli[0].attrs
    with pytest.raises(ValueError, match="subset"):
        load_winoqueer(tmp_path, subset="all")

    write(tmp_path / "cols", header=("", "Gender_ID_x", "Gender_ID_y", "sentence_x", "sent_y"))
    with pytest.raises(DataError, match=r"winoqueer_final\.csv:1: field 'sent_x': missing column"):
        load_winoqueer(tmp_path / "cols")

    write(tmp_path / "empty", rows=[("Gay", "Straight", "", "Sam is straight.")])
    with pytest.raises(DataError, match=r"winoqueer_final\.csv:2: field 'sent_x': empty value"):
        load_winoqueer(tmp_path / "empty")
