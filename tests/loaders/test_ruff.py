import csv
import re
from collections import Counter

import pytest

from biaslab.loaders import DataError, datasets
from biaslab.loaders.ruff import INFO, load_ruff
from loader_files import table_writer

SETS = ("he", "she", "they", "xe")
# RUFF's paradigm written out independently of the loader (xe/xem/xyr, as the meta-evaluation's RUFF/pronouns.csv).
OPTIONS = {"nom": ("he", "she", "they", "xe"), "acc": ("him", "her", "them", "xem"),
           "poss_dep": ("his", "her", "their", "xyr")}
CASE = {"$NOM_PRONOUN": "nom", "$ACC_PRONOUN": "acc", "$POSS_PRONOUN": "poss_dep"}


@pytest.fixture(scope="module")
def raw(folder):
    with open(folder / "eo_task.tsv", encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f, delimiter="\t"))


def test_counts_ids_and_gold(stimuli):
    assert len(stimuli) == 7200
    assert len({s.stimulus_id for s in stimuli}) == 7200
    assert Counter(s.pronoun_set for s in stimuli) == {p: 1800 for p in SETS}
    assert Counter(s.grammatical_case for s in stimuli) == {c: 2400 for c in OPTIONS}
    assert Counter(s.attrs["uid"] for s in stimuli) == {f"eo{i}": 720 for i in range(10)}
    for s in stimuli:
        assert s.options == OPTIONS[s.grammatical_case]  # no sentence-initial slot in RUFF
        assert s.option_labels == SETS
        assert s.gold in s.options and s.gold == s.options[SETS.index(s.pronoun_set)]
        assert s.option_texts is None  # past-tense / modal task sentences: "they" needs no other verb form
        assert s.referent_role == "occupation"


def test_stimuli_reproduce_the_raw_rows(stimuli, raw):
    assert len(raw) == 7200
    for s, row in zip(stimuli, raw):
        placeholder = row["pronoun_type"]
        assert s.text == row["sentence"].replace(placeholder, "BLANK")
        assert s.grammatical_case == CASE[placeholder]
        # Filling gold gives the raw sentence with the declared pronoun in the placeholder.
        assert s.gold == row["pronoun"]
        assert s.fill(s.gold) == row["sentence"].replace(placeholder, row["pronoun"])
        # ... and the context sentence (before the slot) declares that same pronoun.
        context = row["sentence"].split(placeholder)[0]
        assert row["pronoun"] in re.findall(r"[A-Za-z]+", context)
        assert s.pronoun_set == SETS[OPTIONS[s.grammatical_case].index(row["pronoun"])]
        assert (s.occupation, s.participant) == (row["occupation"], row["participant"])
        assert s.attrs["uid"] == row["uid"] and s.attrs["word"] == row["word"]
        assert s.template == row["sentence"]


def test_xe_spelling_is_derived_from_the_xe_rows(stimuli, raw):
    # The rows declaring xe spell it xe / xem / xyr in their context sentences; the options follow that spelling.
    xe_forms = {CASE[r["pronoun_type"]]: r["pronoun"] for r in raw if r["pronoun"].startswith("x")}
    assert xe_forms == {"nom": "xe", "acc": "xem", "poss_dep": "xyr"}
    for s in stimuli:
        assert s.options[3] == xe_forms[s.grammatical_case]


def test_pinned_checksums_and_registration(folder, data_dir):
    assert INFO.verify(data_dir) == {"eo_task.tsv": "ok"}
    assert datasets()["ruff"] is INFO


# -- capitalization, agreement and strictness on invented files --------------------------------------------------------

HEADER = "occupation\tparticipant\tsentence\tpronoun_type\tword\tpronoun\tuid\tconfuse_pronoun"


def invented(task: str = "$NOM_PRONOUN was tired.") -> list[str]:
    """One nominative item declared with he, she, they and a fourth set "ze"; the slot starts the task sentence."""
    return [f"baker\tclient\tThe baker said that {nom} left. {task}\t$NOM_PRONOUN\tbaker\t{nom}\teo0\t"
            for nom in ("he", "she", "they", "ze")]


write = table_writer("eo_task.tsv", HEADER)


def test_invented_sentence_initial_slot_and_agreement(tmp_path):
    with pytest.raises(DataError, match="not xe"):  # the fourth set must be xe
        load_ruff(write(tmp_path / "ze", invented()))
    rows = [r.replace("ze", "xe") for r in invented()]
    out = load_ruff(write(tmp_path / "xe", rows))
    assert [s.pronoun_set for s in out] == list(SETS)
    s = out[2]
    assert s.options == ("He", "She", "They", "Xe") and s.gold == "They"
    assert s.fill("They").endswith("They were tired.") and s.fill("Xe").endswith("Xe was tired.")


@pytest.mark.parametrize("edit, line, field", [
    (lambda r: r.replace("\t$NOM_PRONOUN\t", "\t$DAT_PRONOUN\t"), 3, "pronoun_type"),
    (lambda r: r.replace("\tbaker\the\t", "\tbaker\t\t"), 3, "pronoun"),
    (lambda r: r.replace("\tbaker\the\t", "\tcook\the\t"), 3, "word"),
    (lambda r: r.replace("said that he left", "said that it left"), 3, "sentence"),
    (lambda r: r.replace("$NOM_PRONOUN was", "$NOM_PRONOUN or $NOM_PRONOUN was"), 3, "sentence"),
])
def test_bad_rows_raise_data_error_naming_line_and_field(tmp_path, edit, line, field):
    valid = [r.replace("ze", "xe") for r in invented()]
    rows = [valid[0], edit(valid[0].replace("eo0", "eo1")), *valid[1:]]  # the defective row is on line 3
    with pytest.raises(DataError) as err:
        load_ruff(write(tmp_path / "bad", rows))
    assert err.value.line == line and err.value.field == field
