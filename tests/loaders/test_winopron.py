import csv
from collections import Counter
from pathlib import Path

import pytest

from biaslab.loaders import DataError, get
from biaslab.loaders.misersky import match_noun, plural_candidates
from biaslab.loaders.winopron import misersky_matches
from biaslab.loaders.winopron import NULL_PRIME_1, NULL_PRIME_2, load_winopron

# Independent of the loader's pronoun tables: placeholder -> (feminine, masculine) and the expected case name.
FORMS = {"$NOM_PRONOUN": ("she", "he"), "$ACC_PRONOUN": ("her", "him"), "$POSS_PRONOUN": ("her", "his")}
CASE = {"$NOM_PRONOUN": "nom", "$ACC_PRONOUN": "acc", "$POSS_PRONOUN": "poss_dep"}
CONTEXTS = {"unprimed", "primed_f", "primed_m", "null_1", "null_2"}

# Obtained with the inflection rules + the 11-entry override table of biaslab.loaders.misersky (the paper: 279).
RATED_TEMPLATES = 234
UNMATCHED_NOUNS = [
    "administrator", "advisee", "advisor", "appraiser", "auditor", "buyer", "bystander", "dispatcher", "educator",
    "employee", "examiner", "guest", "homeowner", "inspector", "instructor", "intern", "investigator", "machinist",
    "onlooker", "painter", "paralegal", "paramedic", "passenger", "pathologist", "planner", "practitioner",
    "psychologist", "resident", "specialist", "taxpayer", "teacher", "therapist", "undergraduate", "visitor", "witness",
]


@pytest.fixture(scope="module")
def stimuli(data_dir):
    if not (data_dir / "winopron").is_dir() or not (data_dir / "misersky_norms").is_dir():
        pytest.skip(f"dataset folders winopron/ and misersky_norms/ are needed under {data_dir}")
    return get("winopron").load(data_dir)


def raw_rows(data_dir):
    with open(data_dir / "winopron" / "new_templates.tsv", encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f, delimiter="\t"))


def realize(row, pronoun):
    text = row["template"].replace("$OCCUPATION", row["occupation(0)"]).replace("$PARTICIPANT",
                                                                              row["other-participant(1)"])
    return text.replace(row["pronoun_type"], pronoun)


def test_counts_contexts_and_orders(stimuli):
    assert len(stimuli) == 3600
    assert len({s.stimulus_id for s in stimuli}) == 3600
    per_template = Counter(s.item_id for s in stimuli)
    assert len(per_template) == 360 and set(per_template.values()) == {10}
    settings = {}
    for s in stimuli:
        settings.setdefault(s.item_id, set()).add((s.context, s.option_order))
    expected = {(c, o) for c in CONTEXTS for o in ("MF", "FM")}
    assert all(v == expected for v in settings.values())
    assert len({s.attrs["pair_id"] for s in stimuli}) == 180
    assert Counter(s.referent_role for s in stimuli) == {"occupation": 1800, "participant": 1800}


def test_text_and_primes_match_the_raw_tsv(stimuli, data_dir):
    rows = raw_rows(data_dir)
    assert len(rows) == 360
    by_key = {(r["occupation(0)"], r["other-participant(1)"], r["pronoun_type"], r["answer"]): r for r in rows}
    assert len(by_key) == 360
    placeholder_of = {v: k for k, v in CASE.items()}
    primed = 0
    for s in stimuli:
        answer = str(s.attrs["answer"])
        row = by_key[(s.occupation, s.participant, placeholder_of[s.grammatical_case], answer)]
        assert s.template == row["template"]
        assert s.text == realize(row, "BLANK")
        assert s.referent_role == ("occupation" if answer == "0" else "participant")
        partner = by_key[(s.occupation, s.participant, row["pronoun_type"], "1" if answer == "0" else "0")]
        female, male = FORMS[partner["pronoun_type"]]
        if s.context == "primed_f":
            assert s.prime == realize(partner, female)
            primed += 1
        elif s.context == "primed_m":
            assert s.prime == realize(partner, male)
            primed += 1
        elif s.context == "unprimed":
            assert s.prime is None
        else:
            assert s.prime == {"null_1": NULL_PRIME_1, "null_2": NULL_PRIME_2}[s.context]
    assert primed == 1440
    assert NULL_PRIME_1 != NULL_PRIME_2
    for sentence in (NULL_PRIME_1, NULL_PRIME_2):
        words = set(sentence.lower().rstrip(".").split())
        assert not words & {"he", "she", "him", "her", "his", "they", "them", "their"}


def test_options_follow_case_and_order(stimuli):
    seen = {(s.grammatical_case, s.option_order, s.options, s.option_labels) for s in stimuli}
    assert seen == {
        ("nom", "MF", ("she", "he"), ("female", "male")), ("nom", "FM", ("he", "she"), ("male", "female")),
        ("acc", "MF", ("her", "him"), ("female", "male")), ("acc", "FM", ("him", "her"), ("male", "female")),
        ("poss_dep", "MF", ("her", "his"), ("female", "male")), ("poss_dep", "FM", ("his", "her"), ("male", "female")),
    }
    assert Counter(s.grammatical_case for s in stimuli) == {"nom": 1200, "acc": 1200, "poss_dep": 1200}
    assert all(s.gold is None for s in stimuli)


def test_misersky_ratings(stimuli, data_dir):
    with open(data_dir / "misersky_norms" / "misersky_norms_clean.csv", encoding="utf-8", newline="") as f:
        english = {r["occupation"]: float(r["mean_gender_rating"]) for r in csv.DictReader(f)
                   if r["language"] == "english"}
    rated = {s.item_id for s in stimuli if s.stereotype_rating is not None}
    assert len(rated) == RATED_TEMPLATES
    for s in stimuli:
        antecedent = s.occupation if s.referent_role == "occupation" else s.participant
        assert s.attrs["antecedent"] == antecedent
        if s.stereotype_rating is not None:
            assert s.stereotype_rating == english[s.attrs["norm_key"]]
    # spot checks against the raw norms
    by_item = {s.item_id: s for s in stimuli}
    assert by_item["technician.customer.0.nom"].stereotype_rating == english["technicians"]
    assert by_item["technician.customer.1.nom"].stereotype_rating == english["customers"]
    assert by_item["secretary.visitor.0.nom"].stereotype_rating == english["secretaries"]
    matched, unmatched = misersky_matches(data_dir)
    assert unmatched == UNMATCHED_NOUNS
    assert len(matched) == 84 - len(UNMATCHED_NOUNS)
    assert matched["child"].key == "children" and matched["salesperson"].key == "salespersons"
    assert matched["counselor"].key == "counsellors" and matched["counselor"].rule == "override"


def test_plural_rules():
    assert plural_candidates("secretary")[0] == "secretaries"
    assert "witnesses" in plural_candidates("witness")
    assert plural_candidates("chairman")[0] == "chairmen"
    assert plural_candidates("salesperson")[:2] == ["salespeople", "salespersons"]
    assert plural_candidates("child") == ["children", "childs"]
    norms = {"nurses": 0.74, "medical doctors": 0.4}
    assert match_noun("nurse", norms).rating == 0.74
    assert match_noun("doctor", norms).key == "medical doctors"
    assert match_noun("plumber", norms) is None


HEADER = "occupation(0)\tother-participant(1)\tanswer\tpronoun_type\ttemplate\tsingle_version\t\t\r\n"
SYNTHETIC = [
    "gardener\tneighbor\t0\t$NOM_PRONOUN\tThe $OCCUPATION waved at the $PARTICIPANT. $NOM_PRONOUN was busy."
    "\tx\tcanary\t\r\n",
    "gardener\tneighbor\t1\t$NOM_PRONOUN\tThe $OCCUPATION waved at the $PARTICIPANT because $NOM_PRONOUN was near."
    "\tx\t\t\r\n",
    "gardener\tneighbor\t0\t$ACC_PRONOUN\tThe $PARTICIPANT paid the $OCCUPATION for $ACC_PRONOUN to mow.\tx\t\t\r\n",
    "gardener\tneighbor\t1\t$ACC_PRONOUN\tThe $OCCUPATION asked the $PARTICIPANT for $ACC_PRONOUN to pay.\tx\t\t\r\n",
]


def write_folder(tmp_path: Path, rows) -> Path:
    folder = tmp_path / "winopron"
    folder.mkdir()
    (folder / "new_templates.tsv").write_bytes((HEADER + "".join(rows)).encode("utf-8"))
    return folder


def test_synthetic_templates_load_and_capitalize_sentence_initial_primes(tmp_path):
    folder = write_folder(tmp_path, SYNTHETIC)
    stimuli = load_winopron(folder, norms="", null_primes="It rained.|The bridge is long.")
    assert len(stimuli) == 40
    assert {s.stereotype_rating for s in stimuli} == {None}
    by = {(s.item_id, s.context, s.option_order): s for s in stimuli}
    # the answer-1 nom template is primed by the answer-0 one, whose pronoun starts a sentence
    primed_f = by[("gardener.neighbor.1.nom", "primed_f", "MF")]
    assert primed_f.prime == "The gardener waved at the neighbor. She was busy."
    assert by[("gardener.neighbor.1.nom", "primed_m", "FM")].prime == "The gardener waved at the neighbor. He was busy."
    assert by[("gardener.neighbor.0.nom", "unprimed", "MF")].options == ("She", "He")
    assert by[("gardener.neighbor.0.acc", "primed_m", "MF")].prime == "The gardener asked the neighbor for him to pay."
    assert by[("gardener.neighbor.0.acc", "null_2", "MF")].prime == "The bridge is long."
    with pytest.raises(ValueError, match="no pronoun"):
        load_winopron(folder, norms="", null_primes="She left.|It rained.")
    with pytest.raises(ValueError, match="two non-empty"):
        load_winopron(folder, norms="", null_primes="It rained.")


def test_missing_partner_raises_naming_file_and_line(tmp_path):
    folder = write_folder(tmp_path, SYNTHETIC[:3])  # the acc template with answer 0 (line 4) loses its partner
    with pytest.raises(DataError) as err:
        load_winopron(folder, norms="")
    assert err.value.file.endswith("new_templates.tsv") and err.value.line == 4
    assert "new_templates.tsv:4" in str(err.value) and "gardener|neighbor|acc" in str(err.value)


def test_duplicate_answer_raises_naming_the_second_row(tmp_path):
    # the same template key (occupation, participant, answer, case) with another wording: WinoPron's own check
    folder = write_folder(tmp_path, SYNTHETIC + [SYNTHETIC[1].replace("was near", "stood near")])
    with pytest.raises(DataError) as err:
        load_winopron(folder, norms="")
    assert err.value.line == 6 and "first on line 3" in str(err.value)
    # an exact repeat of a row is refused by the reader first, naming both lines as well
    (tmp_path / "exact").mkdir()
    folder = write_folder(tmp_path / "exact", SYNTHETIC + [SYNTHETIC[1]])
    with pytest.raises(DataError) as err:
        load_winopron(folder, norms="")
    assert err.value.line == 6 and "exact repeat of line 3" in str(err.value)
