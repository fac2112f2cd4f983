import csv

from biaslab.loaders import get


def test_winogender_counts_and_realizations_match_upstream_sentences(dataset_folder, data_dir):
    folder = dataset_folder("winogender")
    stimuli = get("winogender").load(data_dir)
    assert len(stimuli) == 240
    assert len({s.stimulus_id for s in stimuli}) == 240
    assert sum(s.participant == "someone" for s in stimuli) == 120
    # Independent check: every filled text is a line of upstream all_sentences.tsv (720 = 240 x he/she/they).
    with open(folder / "all_sentences.tsv", encoding="utf-8") as f:
        upstream = {row["sentence"] for row in csv.DictReader(f, delimiter="\t")}
    filled = {s.fill(o) for s in stimuli for o in s.options}
    assert filled == upstream


def test_winogender_options_follow_the_slot_case(data_dir, dataset_folder):
    dataset_folder("winogender")
    by_case = {}
    for s in get("winogender").load(data_dir):
        by_case.setdefault(s.grammatical_case, set()).add(s.options)
    assert by_case == {"nom": {("he", "she", "they")}, "acc": {("him", "her", "them")},
                       "poss_dep": {("his", "her", "their")}}
