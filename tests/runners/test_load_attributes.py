"""Issue 44, item 4: what the model never sees is not a user stimulus's identity.

A file's extra columns and a spec's filler attributes (`attrs`) and `stereotype_rating` are data about a stimulus:
editing one keeps the stimulus id, its row is updated, the change is recorded in the dataset's version history
(`attribute_edits`, `biaslab data history`) and its evidence stays found (nothing pending). Changing what the model
sees (text, options) still makes a new stimulus. A dataset stored before (declaration without `identity`) keeps
keying every field, so its stored stimuli keep their ids."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from biaslab.cli.main import biaslab
from biaslab.cli.runners_cli import runners
from biaslab.schema import SeenStimulus, Stimulus
from biaslab.warehouse import Warehouse

HEADER = "item_id,text,slot,options,option_labels,context,rating,gender"


def write_csv(path, ratings=(0.2, 0.5, 0.9), texts=("The nurse", "The pilot", "The baker")) -> None:
    rows = [f"i{n},{t} said that BLANK was late.,BLANK,she|he,female|male,unprimed,{r},{g}"
            for n, (t, r, g) in enumerate(zip(texts, ratings, ("f", "m", "m")), start=1)]
    path.write_text("\n".join([HEADER, *rows]) + "\n")


def run(group, *args):
    result = CliRunner().invoke(group, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result.output


def current(db, name="ratings"):
    with Warehouse.open(db, read_only=True) as wh:
        ids = wh.rows("SELECT stimulus_ids FROM user_datasets WHERE dataset = ? ORDER BY loaded_at DESC LIMIT 1",
                      [name])[0][0]
        rows = {item: (sid, json.loads(attrs)) for sid, item, attrs in wh.rows(
            "SELECT stimulus_id, item_id, attrs FROM stimuli WHERE dataset = ?", [name])}
        evidence = (wh.count("sequence_scores"), wh.count("choice_requests"), wh.count("choice_probs"))
    return ids, rows, evidence


def test_editing_a_rating_keeps_the_stimulus_its_evidence_and_records_the_edit(tmp_path, tiny_gpt2_dir):
    data, db = tmp_path / "ratings.csv", tmp_path / "w.duckdb"
    write_csv(data)
    load = ["data", "load", "--file", data, "--name", "ratings", "--protocols", "prob,choice", "--db", db]
    assert "3 stimuli read, 3 new;" in run(biaslab, *load)
    collect = ["collect", "--dataset", "ratings", "--model", tiny_gpt2_dir, "--dtype", "fp32", "--db", db]
    assert "6 pending, 6 scored sequences added" in run(runners, *collect)
    assert "3 pending, 3 requests added" in run(runners, *collect, "--protocol", "choice")
    ids, rows, evidence = current(db)
    assert rows["i1"][1] == {"rating": 0.2, "gender": "f"} and evidence[:2] == (6, 3)

    write_csv(data, ratings=(0.7, 0.5, 0.9))  # one rating edited: the model sees the same
    out = run(biaslab, *load)
    assert "3 stimuli read, 0 new, 1 with edited attributes" in out and "now its current version" in out
    ids2, rows2, evidence2 = current(db)
    assert ids2 == ids and evidence2 == evidence                      # same stimuli, their evidence kept
    assert rows2["i1"] == (rows["i1"][0], {"rating": 0.7, "gender": "f"}) and len(rows2) == 3  # row updated
    assert "0 pending, 0 scored sequences added" in run(runners, *collect)
    assert "0 pending, 0 requests added" in run(runners, *collect, "--protocol", "choice")
    with Warehouse.open(db, read_only=True) as wh:
        [edit] = wh.rows("SELECT e.stimulus_id, e.attrs_before, e.attrs_after, u.stimulus_ids = ? FROM "
                         "attribute_edits e JOIN user_datasets u USING (dataset, version, loaded_at)", [ids])
    assert edit[0] == rows["i1"][0] and json.loads(edit[1])["rating"] == 0.2 and json.loads(edit[2])["rating"] == 0.7
    assert edit[3]                                                    # recorded against the version that made it

    versions = json.loads(run(biaslab, "data", "history", "ratings", "--db", db, "--format", "json"))
    assert [(v["stimuli"], v["new"], v["gone"], v["attributes edited"]) for v in versions] == [(3, 3, 0, 0),
                                                                                              (3, 0, 0, 1)]
    edits = json.loads(run(biaslab, "data", "history", "ratings", "--edits", "--db", db, "--format", "json"))
    assert [(e["item_id"], e["attribute"], e["before"], e["after"]) for e in edits] == [("i1", "rating", 0.2, 0.7)]

    write_csv(data, ratings=(0.7, 0.5, 0.9), texts=("The nurse", "The pilot", "The cook"))  # what the model sees
    assert "3 stimuli read, 1 new;" in run(biaslab, *load)
    ids3, rows3, _ = current(db)
    assert ids3[:2] == ids[:2] and ids3[2] != ids[2]
    assert "3 stimuli, 6 requests, 2 pending, 2 scored sequences added" in run(runners, *collect)


def test_a_dataset_stored_before_keeps_keying_every_field(tmp_path):
    """A dataset whose stored declaration has no `identity` (loaded before issue 44) keeps its ids: loading the
    same file again adds nothing and no version; an edited rating is a new stimulus, as it was."""
    from biaslab.loaders.user.dataset import from_file
    from biaslab.warehouse.user_datasets import store

    data, db = tmp_path / "ratings.csv", tmp_path / "w.duckdb"
    write_csv(data)
    old = from_file(data, "ratings", protocols="prob", identity=lambda name: "all")
    stored = json.loads(json.dumps(old.declaration.model_dump(mode="json")))
    with Warehouse.open(db) as wh:
        store(wh, old.declaration, old.ids, old.row_batches(), "before")
        # what biaslab wrote before: no `identity` in the stored declaration
        stored.pop("identity")
        wh.con.execute("UPDATE user_datasets SET declaration = ?", [json.dumps(stored, sort_keys=True)])
    full = [s.content_id for s in old.stimuli]
    old.close()
    assert old.ids == full
    load = ["data", "load", "--file", data, "--name", "ratings", "--db", db]
    assert "3 stimuli read, 0 new; version" in run(biaslab, *load) and current(db)[0] == full
    write_csv(data, ratings=(0.7, 0.5, 0.9))
    out = run(biaslab, *load)
    assert "3 stimuli read, 1 new;" in out and "edited" not in out


def test_the_seen_identity_leaves_out_the_attributes_only():
    base = dict(dataset="mine", upstream_version="user", item_id="i1", text="The nurse said that BLANK was late.",
                slot="BLANK", options=("she", "he"), option_labels=("female", "male"), gold="she")
    plain = SeenStimulus(**base)
    assert plain.stimulus_id == Stimulus(**base).stimulus_id                 # no attributes: the same id either way
    rated = SeenStimulus(**base, attrs={"rating": 0.2}, stereotype_rating=3.0)
    assert rated.stimulus_id == plain.stimulus_id != rated.content_id
    assert Stimulus(**base, attrs={"rating": 0.2}).stimulus_id != plain.stimulus_id  # built-ins key every field
    for change in ({"text": "The nurse said that BLANK was early."}, {"options": ("he", "she")},
                   {"gold": "he"}, {"option_labels": ("f", "m")}, {"context": "primed_f"}, {"item_id": "i2"}):
        assert SeenStimulus(**{**base, **change}).stimulus_id != plain.stimulus_id, change


@pytest.mark.parametrize("rows, fragment", [
    (["i1,The nurse said that BLANK was late.,BLANK,she|he,0.2", "i1,The nurse said that BLANK was late.,BLANK,"
      "she|he,0.3"], "with a different text or attribute"),
])
def test_two_rows_that_differ_only_in_an_attribute_are_refused(tmp_path, rows, fragment):
    data, db = tmp_path / "dup.csv", tmp_path / "w.duckdb"
    data.write_text("\n".join(["item_id,text,slot,options,rating", *rows]) + "\n")
    result = CliRunner().invoke(biaslab, ["data", "load", "--file", str(data), "--name", "dup", "--db", str(db)])
    assert result.exit_code != 0 and fragment in result.output and "dup.csv:3" in result.output
    assert not db.exists()


def test_a_spec_whose_two_stimuli_differ_only_in_attributes_is_refused(tmp_path):
    spec, db = tmp_path / "twins.yaml", tmp_path / "w.duckdb"
    spec.write_text("name: twins\noptions:\n  - {label: female, forms: {nom: she}}\n"
                    "  - {label: male, forms: {nom: he}}\nfillers:\n  name:\n"
                    "    - {value: Robin, rating: 0.55}\n    - {value: Robin, rating: 0.60}\n"
                    "templates:\n  - {id: late, text: \"{name} said that {pronoun} would be late.\", case: nom}\n")
    result = CliRunner().invoke(biaslab, ["data", "load", "--spec", str(spec), "--db", str(db)])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code != 0 and len(lines) == 1, result.output
    assert "twins.yaml" in lines[0] and "item 'late.Robin'" in lines[0] and "differ only in attributes" in lines[0]
    assert not db.exists()


def test_history_of_an_unknown_dataset_is_one_line_and_writes_nothing(tmp_path):
    data, db = tmp_path / "ratings.csv", tmp_path / "w.duckdb"
    write_csv(data)
    run(biaslab, "data", "load", "--file", data, "--name", "ratings", "--db", db)
    before = db.read_bytes()
    result = CliRunner().invoke(biaslab, ["data", "history", "other", "--db", str(db)])
    assert result.exit_code != 0 and result.output.count("\n") == 1 and "no dataset of yours named 'other'" in \
        result.output
    assert db.read_bytes() == before


def test_a_load_under_another_identity_than_the_stored_one_is_refused(tmp_path):
    """Two first loads at once cannot disagree (both "seen"), but `store` checks anyway: nothing is written."""
    from biaslab.errors import WarehouseError
    from biaslab.loaders.user.dataset import from_file
    from biaslab.warehouse.user_datasets import store

    data, db = tmp_path / "ratings.csv", tmp_path / "w.duckdb"
    write_csv(data)
    run(biaslab, "data", "load", "--file", data, "--name", "ratings", "--db", db)
    write_csv(data, ratings=(0.1, 0.2, 0.3))
    legacy = from_file(data, "ratings", identity=lambda name: "all")
    with Warehouse.open(db) as wh:
        rows = wh.count("stimuli")
        with pytest.raises(WarehouseError, match="stored with identity 'seen' meanwhile"):
            store(wh, legacy.declaration, legacy.ids, legacy.row_batches(), "test")
        assert wh.count("stimuli") == rows and wh.count("user_datasets") == 1
    legacy.close()
