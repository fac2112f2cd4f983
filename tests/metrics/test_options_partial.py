"""Issue 44, item 5: partial evidence is said, not absorbed. `metrics options` says per collection how many loaded
stimuli have no evidence; an item with evidence for only part of its stimuli (one option order of two) is left out
of the means and contrasts and counted; a contrast says how many items it could not pair. Every number against a
hand computation from the base tables."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from click.testing import CliRunner

from biaslab.cli.main import biaslab as cli
from biaslab.warehouse import Warehouse
from test_options_metrics import SPEC
from user_specs import spec_warehouse


@pytest.fixture(scope="module")
def db(tmp_path_factory, tiny_gpt2):
    """The demo spec (2 templates x 3 occupations x 2 contexts x 2 orders = 24 stimuli) with prob evidence for every
    MF stimulus but for the FM stimuli of 3 items only (a limit takes whole items, so the partial items are made
    with --where): the others' second order has none."""
    return spec_warehouse(tmp_path_factory.mktemp("partial"), SPEC, "demo", tiny_gpt2,
                          [{"protocol": "prob", "where": {"option_order": "MF"}},
                           {"protocol": "prob", "where": {"option_order": "FM"}, "limit": 3},
                           {"protocol": "prob", "where": {"option_order": "FM", "context": "primed_f"}, "limit": 4}])


def _tables(db, *args):
    result = CliRunner().invoke(cli, ["metrics", "options", "--dataset", "demo", "--db", str(db), "--by", "context",
                                      "--format", "json", "--bootstrap", "100", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def _hand(db):
    with Warehouse.open(db, read_only=True) as wh:
        loaded = wh.query("SELECT stimulus_id, item_id, context FROM stimuli WHERE dataset = 'demo'")
        probs = wh.query("SELECT o.stimulus_id, o.option_label, o.p, s.item_id, s.context FROM option_probs o "
                         "JOIN stimuli s USING (stimulus_id) WHERE o.method = 'prob'")
    have = set(probs["stimulus_id"])
    loaded["has"] = loaded["stimulus_id"].isin(have)
    cells = loaded.groupby(["context", "item_id"])["has"].agg(["all", "any"])
    complete = {cell for cell, row in cells.iterrows() if row["all"]}
    partial = {cell for cell, row in cells.iterrows() if row["any"] and not row["all"]}
    return loaded, probs, complete, partial


def test_the_evidence_table_counts_what_has_none(db):
    loaded, probs, _, partial = _hand(db)
    [row] = _tables(db)["evidence"]
    assert row["stimuli_loaded"] == len(loaded) == 24
    assert row["stimuli_with_evidence"] == loaded["has"].sum() and 12 < row["stimuli_with_evidence"] < 24
    assert row["stimuli_without_evidence"] == 24 - loaded["has"].sum()
    assert row["partial_items"] == len(partial) >= 1
    left = probs[[(c, i) in partial for c, i in zip(probs["context"], probs["item_id"])]]["stimulus_id"].nunique()
    assert row["stimuli_left_out"] == left >= 1
    assert row["model_name"]  # named, as every table


def test_means_rest_on_complete_items_only(db):
    _, probs, complete, partial = _hand(db)
    means = _tables(db)["means"]
    for row in means:
        keep = pd.Series([(c, i) in complete and c == row["context"] for c, i in zip(probs["context"],
                                                                                      probs["item_id"])],
                         index=probs.index)
        part = probs[keep & (probs["option_label"] == row["option_label"])]
        per_item = part.groupby("item_id")["p"].mean()
        assert row["items"] == len(per_item)
        assert row["mean_p"] == pytest.approx(per_item.mean(), abs=1e-9)
    # the partial item's lone order would have moved its context's mean: it is not among the items
    [(context, item)] = sorted(partial)[:1]
    row = next(r for r in means if r["context"] == context and r["option_label"] == "female")
    with_partial = probs[(probs["context"] == context) & (probs["option_label"] == "female")]
    assert row["items"] == with_partial["item_id"].nunique() - sum(c == context for c, _ in partial) < 6


def test_a_contrast_pairs_complete_items_and_counts_the_rest(db):
    _, probs, complete, _ = _hand(db)
    tables = _tables(db, "--contrast", "context=primed_f:unprimed")
    female = probs[probs["option_label"] == "female"]
    item_p = {(c, i): g["p"].mean() for (c, i), g in female.groupby(["context", "item_id"]) if (c, i) in complete}
    items = {i for _, i in item_p}
    pairs = [item_p[("primed_f", i)] - item_p[("unprimed", i)] for i in sorted(items)
             if ("primed_f", i) in item_p and ("unprimed", i) in item_p]
    one_side = sum((("primed_f", i) in item_p) != (("unprimed", i) in item_p) for i in items)
    [row] = [r for r in tables["contrast"] if r["option_label"] == "female"]
    assert (row["pairs"], row["unpaired"]) == (len(pairs), one_side)
    assert row["unpaired"] >= 1
    assert row["mean_diff"] == pytest.approx(sum(pairs) / len(pairs), abs=1e-9)


def test_the_bars_say_the_valid_share_they_rest_on(tmp_path, monkeypatch):
    """A German study showed p(female) 1.000 [1, 1] with 99.95% of the mass invalid: the bar's group now says
    'valid 0.05%' under it (the share of the mass the probabilities are renormalized over)."""
    from biaslab.metrics.options import report

    shown = {}
    monkeypatch.setattr(report, "save_figure", lambda fig, out, name: shown.update(
        ticks=[t.get_text() for t in fig.axes[0].get_xticklabels()], ylabel=fig.axes[0].get_ylabel()) or "x.png")
    monkeypatch.setattr(report, "image_html", lambda path: "")
    means = pd.DataFrame({"model_key": "m", "method": "choice-exact", "setting": "s",
                          "context": ["unprimed", "unprimed", "primed_f", "primed_f"],
                          "option_label": ["female", "male"] * 2, "items": 3, "mean_p": [1.0, 0.0, 0.6, 0.4],
                          "ci_low": [1.0, 0.0, 0.5, 0.3], "ci_high": [1.0, 0.0, 0.7, 0.5],
                          "invalid_mass": [0.9995, 0.9995, 0.2, 0.2]})
    report.bars_figure(means, ["context"], tmp_path, "bars")
    assert shown["ticks"] == ["unprimed\nvalid 0.05%", "primed_f\nvalid 80.0%"]
    assert "valid answers" in shown["ylabel"]
    report.bars_figure(means.assign(invalid_mass=float("nan"), method="prob"), ["context"], tmp_path, "bars")
    assert shown["ticks"] == ["unprimed", "primed_f"]  # prob has no invalid answers: nothing to say
