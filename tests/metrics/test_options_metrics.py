"""`option_probs` and `biaslab metrics options` on stored evidence: every number against a hand computation from the
base tables, on a user spec collected with a tiny model (prob, choice exact, choice sample) and on a built-in
dataset; the refusals in one line."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

import biaslab
from biaslab.cli.main import biaslab as cli
from biaslab.runners.collect import CollectConfig, collect
from biaslab.warehouse import Warehouse
from user_specs import spec_warehouse

SPEC = """
name: demo
protocols: [choice, prob]
options:
  - {label: female, forms: {nom: she}}
  - {label: male, forms: {nom: he}}
orders: [[female, male], [male, female]]
fillers:
  occupation: [{value: nurse, rating: 0.9}, {value: pilot, rating: 0.2}, {value: baker, rating: 0.5}]
templates:
  - {id: late, text: "The {occupation} said that {pronoun} was late.", case: nom, gold: female}
  - {id: home, text: "The {occupation} went home because {pronoun} was tired.", case: nom}
contexts:
  - {name: unprimed}
  - {name: primed_f, prime: "{pronoun:female} is kind."}
"""


@pytest.fixture(scope="module")
def db(tmp_path_factory, tiny_gpt2):
    return spec_warehouse(tmp_path_factory.mktemp("options"), SPEC, "demo", tiny_gpt2,
                          [{"protocol": "prob"}, {"protocol": "choice"},
                           {"protocol": "choice", "mode": "sample", "samples": 6}])


def rows(db, sql):
    with Warehouse.open(db, read_only=True) as wh:
        return wh.query(sql)


def test_option_probs_equal_the_base_tables(db):
    view = rows(db, "SELECT * FROM option_probs").set_index(["method", "stimulus_id", "option"])
    scores = rows(db, "SELECT stimulus_id, option, sum_logprob FROM sequence_scores")
    for sid, group in scores.groupby("stimulus_id"):
        expected = np.exp(group["sum_logprob"] - group["sum_logprob"].max())
        expected /= expected.sum()
        for option, p in zip(group["option"], expected):
            assert view.loc[("prob", sid, option), "p"] == pytest.approx(p, abs=1e-12)
    exact = rows(db, "SELECT r.stimulus_id, p.option, p.prob FROM choice_probs p JOIN choice_requests r "
                     "USING (model_key, request_id) WHERE r.mode = 'exact'")
    for sid, group in exact.groupby("stimulus_id"):
        valid = group[~group["option"].isin(["unresolved", "invalid"])]
        for option, prob in zip(valid["option"], valid["prob"]):
            row = view.loc[("choice-exact", sid, option)]
            total = valid["prob"].sum()
            assert np.isnan(row["p"]) if total == 0 else row["p"] == pytest.approx(prob / total, abs=1e-12)
            assert row["valid_mass"] == pytest.approx(valid["prob"].sum(), abs=1e-12)
    samples = rows(db, "SELECT stimulus_id, answer, valid FROM samples")
    for sid, group in samples.groupby("stimulus_id"):
        n_valid = int(group["valid"].sum())
        for option in ("she", "he"):
            row = view.loc[("choice-sample", sid, option)]
            assert row["n"] == 6 and row["valid_mass"] == pytest.approx(n_valid / 6)
            hits = int((group["valid"] & (group["answer"] == option)).sum())
            assert (np.isnan(row["p"]) if n_valid == 0 else row["p"] == pytest.approx(hits / n_valid))
    gold = rows(db, "SELECT DISTINCT s.item_id, o.gold_label FROM option_probs o JOIN stimuli s USING (stimulus_id)")
    assert set(gold[gold["item_id"].str.startswith("late")]["gold_label"]) == {"female"}
    assert gold[gold["item_id"].str.startswith("home")]["gold_label"].isna().all()


def test_means_and_contrast_equal_a_hand_computation(db):
    result = CliRunner().invoke(cli, ["metrics", "options", "--dataset", "demo", "--db", str(db), "--by", "context",
                                      "--contrast", "context=primed_f:unprimed", "--spearman", "occupation_rating",
                                      "--reference", "unprimed", "--format", "json", "--bootstrap", "200"])
    assert result.exit_code == 0, result.output
    tables = json.loads(result.output)
    assert set(tables) == {"evidence", "means", "order", "contrast", "kl", "spearman", "calibration"}
    for row in tables["evidence"]:  # every stimulus collected under every method: nothing left out
        assert (row["stimuli_loaded"], row["stimuli_with_evidence"], row["stimuli_without_evidence"],
                row["partial_items"], row["stimuli_left_out"]) == (24, 24, 0, 0, 0), row
    probs = rows(db, "SELECT o.*, s.context FROM option_probs o JOIN stimuli s USING (stimulus_id)")
    items = probs.groupby(["method", "context", "item_id", "option_label"])["p"].mean()
    checked = 0
    for row in tables["means"]:
        part = items.loc[(row["method"], row["context"], slice(None), row["option_label"])].dropna()
        assert row["items"] == len(part) and row["model_name"]  # tables name the model
        if len(part):
            assert row["mean_p"] == pytest.approx(part.mean(), abs=1e-9)  # JSON keeps 10 digits
            assert row["ci_low"] - 1e-9 <= row["mean_p"] <= row["ci_high"] + 1e-9
            checked += 1
    assert checked >= 4  # prob: 2 contexts x 2 labels, 6 items each
    female = items.loc["prob"].xs("female", level="option_label").unstack("context")
    diff = (female["primed_f"] - female["unprimed"]).mean()
    [contrast] = [r for r in tables["contrast"] if r["method"] == "prob" and r["option_label"] == "female"]
    assert (contrast["pairs"], contrast["context"]) == (6, "primed_f - unprimed")
    assert contrast["mean_diff"] == pytest.approx(diff, abs=1e-9) and contrast["mean_diff"] != 0  # the prime counts
    assert 0 < contrast["p_value"] <= 1
    [cal] = [r for r in tables["calibration"] if r["method"] == "prob" and r["context"] == "unprimed"]
    assert cal["stimuli"] == 6  # the 'late' template's 3 items x 2 orders have a gold option
    api = biaslab.options(biaslab.open(str(db)), "demo", by=["context"], bootstrap=200)["means"]
    cli_means = pd.DataFrame(tables["means"])
    assert np.allclose(api["mean_p"].to_numpy(), cli_means["mean_p"].to_numpy(), equal_nan=True, atol=1e-9)


def test_a_builtin_dataset_too(tmp_path, data_dir, dataset_folder, tiny_gpt2):
    dataset_folder("winogender")
    db = tmp_path / "w.duckdb"
    collect(CollectConfig(dataset="winogender", db=str(db), data_dir=str(data_dir), limit=6), loaded=tiny_gpt2)
    tables = biaslab.options(biaslab.open(str(db)), "winogender", by=["grammatical_case"], bootstrap=100)
    means = tables["means"]
    assert set(means["option_label"]) == {"male", "female", "neutral"}
    assert means.groupby("grammatical_case")["mean_p"].sum().round(12).eq(1.0).all()  # the labels' shares sum to 1


@pytest.mark.parametrize("args, needle", [
    (["--by", "colour"], "'colour' is neither a stimuli column nor an attrs key of dataset demo"),
    (["--contrast", "context=primed_f"], "write COLUMN=A:B"),
    (["--contrast", "context=primed_f:primed_m"], "context has no value 'primed_m'"),
    (["--reference", "unprimed"], "give exactly one --by"),
    (["--dataset", "nothing"], "no dataset 'nothing' in this warehouse (its datasets: demo)"),
    (["--spearman", "occupation"], "'occupation' of dataset demo holds text (e.g. 'baker'), not numbers"),
])
def test_refusals_are_one_line(db, args, needle):
    args = args if "--dataset" in args else ["--dataset", "demo", *args]
    result = CliRunner().invoke(cli, ["metrics", "options", "--db", str(db), *args])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code != 0 and len(lines) == 1 and needle in lines[0], result.output
