import csv
import re
from collections import Counter

import pytest

from biaslab.loaders import DataError, datasets
from biaslab.loaders.tango import INFO, load_tango
from loader_files import table_writer

CORE = ("he", "she", "they", "xe")
ALL = ("he", "she", "they", "xe", "ey", "fae")
# TANGO's own spellings (xe/xir, not xe/xem/xyr), written out independently of the loader.
EXPECTED_FORMS = {
    "he": {"nom": "he", "acc": "him", "poss_dep": "his", "poss_indep": "his", "refl": "himself"},
    "she": {"nom": "she", "acc": "her", "poss_dep": "her", "poss_indep": "hers", "refl": "herself"},
    "they": {"nom": "they", "acc": "them", "poss_dep": "their", "poss_indep": "theirs", "refl": "themself"},
    "xe": {"nom": "xe", "acc": "xir", "poss_dep": "xir", "poss_indep": "xirs", "refl": "xirself"},
    "ey": {"nom": "ey", "acc": "em", "poss_dep": "eir", "poss_indep": "eirs", "refl": "emself"},
    "fae": {"nom": "fae", "acc": "faer", "poss_dep": "faer", "poss_indep": "faers", "refl": "faerself"},
}


@pytest.fixture(scope="module")
def raw(folder):
    with open(folder / "misgendering_prompts.csv", encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    return {(int(r["template_idx"]), r["ante"], r["ante_type"], r["pronoun_family"]): r for r in rows}


@pytest.fixture(scope="module")
def everything(folder, data_dir):
    return INFO.load(data_dir, pronouns="all")


def key(s):
    return s.attrs["template_idx"], s.name, s.attrs["ante_type"], s.pronoun_set


def test_core_default_counts(data_dir, folder):
    core = INFO.load(data_dir)
    assert len(core) == 1920
    assert Counter(s.pronoun_set for s in core) == {p: 480 for p in CORE}
    assert len({s.stimulus_id for s in core}) == 1920
    assert [s.stimulus_id for s in INFO.load(data_dir, pronouns="core")] == [s.stimulus_id for s in core]


def test_all_families_match_the_raw_rows(everything, raw):
    assert len(raw) == 2880
    assert len(everything) == 2880
    assert Counter(s.pronoun_set for s in everything) == {p: 480 for p in ALL}
    assert len({s.stimulus_id for s in everything}) == 2880
    assert {key(s) for s in everything} == set(raw)
    for s in everything:
        row = raw[key(s)]
        assert s.text == row["template"]
        assert s.name == row["ante"]
        assert s.options is None and s.slot is None and s.gold is None and s.context is None
        assert s.referent_role == ("other" if row["ante_type"] == "distal" else "name")
    per_template = Counter((s.attrs["template_idx"], s.pronoun_set) for s in everything)
    assert set(per_template) == {(t, p) for t in range(12) for p in ALL} and set(per_template.values()) == {40}


def test_pronoun_forms_are_the_datasets_own(everything):
    forms = {}
    for s in everything:
        forms.setdefault(s.pronoun_set, []).append(s.attrs["pronoun_forms"])
    for family, seen in forms.items():
        assert all(f == EXPECTED_FORMS[family] for f in seen), family
    # Each prompt uses its own family's forms and no other family's (checked on the raw words).
    every_form = {w for fs in EXPECTED_FORMS.values() for w in fs.values()}
    other_forms = {f: every_form - set(EXPECTED_FORMS[f].values()) for f in ALL}
    for s in everything:
        prompt_words = set(re.findall(r"[a-z]+", s.text))
        assert prompt_words & set(EXPECTED_FORMS[s.pronoun_set].values()), s.text
        assert not prompt_words & other_forms[s.pronoun_set], s.text


def test_family_selection_option(data_dir, folder):
    some = INFO.load(data_dir, pronouns="ey, fae")
    assert Counter(s.pronoun_set for s in some) == {"ey": 480, "fae": 480}
    assert len(INFO.load(data_dir, pronouns=["xe"])) == 480
    for bad in ("zir", "", "core,all"):
        with pytest.raises(ValueError, match="pronouns"):
            INFO.load(data_dir, pronouns=bad)


def test_pinned_checksums_and_registration(folder, data_dir):
    assert INFO.verify(data_dir) == {"misgendering_prompts.csv": "ok"}
    assert datasets()["tango"] is INFO


# -- strictness on invented files --------------------------------------------------------------------------------------

HEADER = "template_idx,ante,ante_type,pronoun_family,template"


def invented_rows(xe_second_acc: str = "xir") -> list[str]:
    rows = []
    for fam, nom, acc in (("he", "he", "him"), ("she", "she", "her"), ("they", "they", "them"), ("xe", "xe", "xir"),
                          ("ey", "ey", "em"), ("fae", "fae", "faer")):
        rows.append(f"0,robin,ante_nongendered,{fam},robin said {nom} would come.")
        second = xe_second_acc if fam == "xe" else acc
        rows.append(f"1,robin,ante_nongendered,{fam},the fan asked {second} for an autograph.")
    return rows


write = table_writer("misgendering_prompts.csv", HEADER)


def test_invented_file_loads_and_derives_forms(tmp_path):
    out = load_tango(write(tmp_path / "ok", invented_rows()), pronouns="all")
    assert len(out) == 12
    xe = next(s for s in out if s.pronoun_set == "xe")
    assert xe.attrs["pronoun_forms"] == {"nom": "xe", "acc": "xir"}


def test_inconsistent_forms_and_bad_rows_raise_data_error(tmp_path):
    rows = invented_rows(xe_second_acc="xem") + ["2,robin,ante_nongendered,xe,the fan asked xir for help."]
    for fam in ("he", "she"):
        rows.append(f"2,robin,ante_nongendered,{fam},the fan asked {'him' if fam == 'he' else 'her'} for help.")
    with pytest.raises(DataError, match="two acc forms") as err:
        load_tango(write(tmp_path / "twoforms", rows), pronouns="all")
    assert err.value.field == "template"
    rows = invented_rows()
    rows[3] = rows[3].replace(",she,", ",zir,")
    with pytest.raises(DataError) as err:
        load_tango(write(tmp_path / "family", rows))
    assert err.value.line == 5 and err.value.field == "pronoun_family"
